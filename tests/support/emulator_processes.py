"""Engine emulator processes on loopback with a set acceptance, scraped as an engine's replicas are."""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from contextlib import contextmanager

from drafter_operator.acceptance.engine_source import Replica
from tests.processes import free_port, listening_process

VLLM = ["vllm", "serve", "/models/kimi-k2.5", "--speculative-config",
        '{"method":"eagle3","model":"/models/emulator-good-drafter","num_speculative_tokens":3}']


@contextmanager


def emulator(argv: list[str], acceptance: float):
    port = free_port()
    env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.01",
           "DRAFTER_EMULATOR_SEED": "3", "DRAFTER_EMULATOR_ACCEPTANCE": str(acceptance)}
    with listening_process([sys.executable, "-m", "drafter_operator.cli", "emulate", *argv, "--port", str(port)],
                           env, port):
        yield Replica(name=f"pod-{port}", ip="127.0.0.1", port=port)


def generate(replica: Replica, requests: int, max_tokens: int = 200) -> None:
    for _ in range(requests):
        body = json.dumps({"model": "/models/kimi-k2.5", "prompt": "hello", "max_tokens": max_tokens}).encode()
        req = urllib.request.Request(f"http://{replica.ip}:{replica.port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
