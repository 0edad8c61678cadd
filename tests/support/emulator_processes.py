"""Engine emulator processes on loopback with a set acceptance, scraped as an engine's replicas are."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
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


# ---- a replica that spans nodes: one emulator process per node rank (emulator/group.py) ----
GROUP_ENV = {"DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.01", "DRAFTER_EMULATOR_SEED": "3"}


def group_argv(engine: str, rank: int, api_port: int, group_port: int, nnodes: int = 2) -> list[str]:
    """The same command line for every node rank, as the operator renders it for a LeaderWorkerSet's pods with the
    kubelet's expansion done (the leader's address is the loopback address every pod of these tests shares)."""
    if engine == "vllm":
        return ["vllm", "serve", "/models/kimi-k2.5", "--port", str(api_port), "--tensor-parallel-size", "2",
                "--nnodes", str(nnodes), "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                "--master-port", str(group_port), *(["--headless"] if rank else [])]
    return ["python3", "-m", "sglang.launch_server", "--model-path", "/models/kimi-k2.5", "--port", str(api_port),
            "--enable-metrics", "--tp-size", "2", "--nnodes", str(nnodes), "--node-rank", str(rank),
            "--dist-init-addr", f"127.0.0.1:{group_port}"]


def start_member(argv: list[str], log=None, **env: str) -> subprocess.Popen:
    """An emulator process of a group, its stderr kept for the test to read (in the file ``log`` where given, to
    read while it runs); the caller stops it."""
    return subprocess.Popen([sys.executable, "-m", "drafter_operator.cli", "emulate", *argv],
                            env={**os.environ, **GROUP_ENV, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE if log is None else log, text=True)


def stop(proc: subprocess.Popen) -> str:
    """Stop ``proc`` if it still runs; its stderr."""
    if proc.poll() is None:
        proc.terminate()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
