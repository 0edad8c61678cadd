"""The engine emulator's HTTP API in process on 127.0.0.1, a free port and a fast clock."""
from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp

from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator.server import EmulatorServer, bind_host
from tests.processes import free_port

FAST = 0.01  # DRAFTER_EMULATOR_TIME_SCALE: a 12 ms step takes 0.12 ms
SPEC = json.dumps({"method": "eagle3", "model": "/models/kimi-k2.5-eagle3", "num_speculative_tokens": 5})


def vllm_argv(*extra: str, spec: bool = True) -> list[str]:
    return ["vllm", "serve", "/models/kimi-k2.5-int4", "--port", str(free_port()),
            *(["--speculative-config", SPEC] if spec else []), *extra]


def sglang_argv(*extra: str, metrics: bool = True) -> list[str]:
    return ["python3", "-m", "sglang.launch_server", "--model-path", "/models/kimi-k2.5-int4",
            "--port", str(free_port()), *(["--enable-metrics"] if metrics else []),
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "AQ-MedAI/Kimi-K2-Instruct-eagle3",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
            *extra]


@contextlib.asynccontextmanager


async def emulator(argv: list[str], environment: dict[str, str] | None = None,
                   **settings) -> AsyncIterator[tuple[str, EmulatedEngine, aiohttp.ClientSession]]:
    """``environment``: the engine's environment (what it reads of it: the request log's variables, ...)."""
    settings = {"host": "127.0.0.1", "time_scale": FAST, "seed": 1, **settings}
    engine = EmulatedEngine(parse_command_line(argv), Settings(**settings), load_profile(), environment=environment)
    server = EmulatorServer(engine, bind_host(engine), engine.config.port)
    await server.start()
    try:
        async with aiohttp.ClientSession(base_url=server.url) as session:
            yield server.url, engine, session
    finally:
        await server.stop()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))
