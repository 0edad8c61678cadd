"""What request capture costs: the engine's own request logging (in the emulator) and the capture sidecar.

For each engine and prompt size:
1. the engine emulator, in this process on a fast clock, serves --requests chat requests over HTTP, once with the
   capture flags and variables (`capture_flags`, `capture_environment` and vLLM's logging file, as the pod carries
   them) and once without; the CPU this process spends per request is compared. That is the emulator's logging,
   written in the engines' own formats (docs/emulator.md): an engine's cost differs, its logging being its own;
2. the real sidecar, `drafter-operator capture` as a subprocess, follows the spool that run wrote (sample rate 1,
   responses kept) until every record is on the claim, then stops on SIGTERM; its CPU seconds, less those of the same
   command over an empty spool for as long, are divided by the requests.

Usage: python bench/capture_overhead.py [--requests 400] [--sizes 1024,16384] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture.spool import CAPTURE_FILES_DIRECTORY, SPOOL_DIRECTORY
from drafter_operator.container_paths import PATH_MAP_ENV, remap
from drafter_operator.engines import engine as engine_module
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator.server import EmulatorServer, bind_host
from drafter_testbed.processes import free_port

MODEL = "/models/kimi-k2.5-int4"
FAST = 0.01  # the emulator's time scale: its model's steps take a hundredth of their time
CAPTURE = CaptureSpec(sample_rate="1", claim_name="captured", responses=True)


def argv(engine: str, extra: list[str]) -> list[str]:
    if engine == "vllm":
        return ["vllm", "serve", MODEL, "--port", str(free_port()), *extra]
    return ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--port", str(free_port()), *extra]


def capture_setup(engine: str, spool: Path) -> tuple[list[str], dict[str, str]]:
    """The engine's capture flags, variables and files with the pod's directories moved under ``spool``'s parent,
    mapped as the local process runner maps a pod's volumes (container_paths)."""
    module = engine_module(engine)
    paths = {SPOOL_DIRECTORY: str(spool), CAPTURE_FILES_DIRECTORY: str(spool.parent / "files")}
    for path, content in module.capture_files(CAPTURE).items():
        local = Path(remap(path, paths))
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(content)
    environment = {name: remap(value, paths) for name, value in module.capture_environment(CAPTURE).items()}
    return [remap(flag, paths) for flag in module.capture_flags(CAPTURE)], {**environment, PATH_MAP_ENV: json.dumps(paths)}


async def serve(engine: str, extra: list[str], environment: dict[str, str], requests: int, size: int) -> float:
    """CPU seconds of this process per request, serving ``requests`` chat requests of a ``size``-byte prompt."""
    emulated = EmulatedEngine(parse_command_line(argv(engine, extra)), Settings(host="127.0.0.1", time_scale=FAST, seed=1),
                              load_profile(), environment=environment)
    server = EmulatorServer(emulated, bind_host(emulated), emulated.config.port)
    await server.start()
    prompt = ("speculative decoding " * (size // 21 + 1))[:size]
    try:
        async with aiohttp.ClientSession(base_url=server.url) as session:
            before = time.process_time()
            for index in range(requests):
                body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 16,
                        "request_id": f"bench-{index}"} if engine == "vllm" else \
                    {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 16}
                async with session.post("/v1/chat/completions", json=body) as response:
                    assert response.status == 200, await response.text()
                    await response.read()
            return (time.process_time() - before) / requests
    finally:
        await server.stop()


def sidecar_cpu(engine: str, spool: Path, claim: Path, expected: int | None, seconds: float | None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `drafter-operator capture` over ``spool``: until ``expected`` records are on
    the claim, or for ``seconds``."""
    command = [sys.executable, "-m", "drafter_operator.cli", "capture", "--spool", str(spool), "--claim", str(claim),
               "--engine", engine, "--sample-rate", "1", "--responses", "--retention", "168h", "--max-size", "10Gi",
               "--writer", "bench", "--poll-seconds", "0.2"]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def records() -> int:
        return sum(len(p.read_text().splitlines()) for p in claim.glob("bench/capture-*.jsonl"))

    deadline = started + (seconds if seconds is not None else 300)
    while time.monotonic() < deadline and (expected is None or records() < expected):
        time.sleep(0.1)
    wall = time.monotonic() - started
    proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(proc.pid, 0)
    if expected is not None and records() < expected:
        raise SystemExit(f"the sidecar wrote {records()} of {expected} records: {proc.stderr.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def measure(engine: str, size: int, requests: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        spool, claim, empty, empty_claim = root / "spool", root / "claim", root / "empty", root / "empty-claim"
        for directory in (spool, claim, empty, empty_claim):
            directory.mkdir()
        flags, environment = capture_setup(engine, spool)
        asyncio.run(serve(engine, [], {}, max(requests // 4, 10), size))  # warm-up: imports, first-request paths
        plain = asyncio.run(serve(engine, [], {}, requests, size))
        logged = asyncio.run(serve(engine, flags, environment, requests, size))
        spool_bytes = sum(p.stat().st_size for p in spool.rglob("*") if p.is_file())
        cpu, wall = sidecar_cpu(engine, spool, claim, 2 * requests, None)
        idle, _ = sidecar_cpu(engine, empty, empty_claim, None, wall)
    return {"engine": engine, "prompt_bytes": size, "requests": requests,
            "emulator_cpu_ms_per_request": {"without": round(plain * 1000, 3), "with_capture": round(logged * 1000, 3)},
            "spool_bytes_per_request": round(spool_bytes / requests),
            "sidecar_cpu_ms_per_request": round(max(cpu - idle, 0.0) / requests * 1000, 3),
            "sidecar_cpu_s": round(cpu, 3), "sidecar_idle_cpu_s": round(idle, 3), "sidecar_wall_s": round(wall, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--sizes", default="1024,16384", help="prompt sizes in bytes, comma-separated")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    results = [measure(engine, int(size), args.requests) for engine in ("vllm", "sglang")
               for size in args.sizes.split(",")]
    for r in results:
        emulator = r["emulator_cpu_ms_per_request"]
        print(f"{r['engine']:>6} prompt {r['prompt_bytes']:>6} B: emulator {emulator['without']:.2f} -> "
              f"{emulator['with_capture']:.2f} ms CPU per request with capture; spool {r['spool_bytes_per_request']} B "
              f"per request; sidecar {r['sidecar_cpu_ms_per_request']:.3f} ms CPU per request "
              f"({r['sidecar_cpu_s']} s over {r['requests']} requests, {r['sidecar_idle_cpu_s']} s idle for as long)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
