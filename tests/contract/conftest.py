"""The contract tier's shared fixtures: the real engines' parsers, one helper process per engine.

Tests here need DRAFTER_ENGINE_PYTHON (built by .ci/engine-contract-env); without it they skip with the
command to build it. ``parsers`` starts tests/contract/engine_parsers.py once per session per engine.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).resolve().parent / "engine_parsers.py"
START_TIMEOUT = 180.0  # importing vLLM takes ~6 s on a quiet machine; torch + CUDA libraries from a cold disk more
REQUEST_TIMEOUT = 300.0


class EngineParser:
    """engine_parsers.py serving one engine: send cases, get results."""

    def __init__(self, python: str, engine: str):
        self.engine = engine
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([python, str(HARNESS), "serve", engine], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._keep_stderr), daemon=True).start()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line)
        sink(None)

    def _keep_stderr(self, line: str | None) -> None:
        if line is not None:
            self.stderr.append(line)
            del self.stderr[:-200]

    def _read(self, timeout: float) -> Any:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.engine} parser helper gave no answer in {timeout:.0f}s; stderr:\n"
                                 + "".join(self.stderr[-40:])) from None
        if line is None:
            raise AssertionError(f"{self.engine} parser helper exited ({self.proc.wait()}); stderr:\n"
                                 + "".join(self.stderr[-40:]))
        return json.loads(line)

    def wait_ready(self) -> None:
        assert self._read(START_TIMEOUT) == {"ready": self.engine}

    def check(self, cases: list[dict]) -> list[dict]:
        self.proc.stdin.write(json.dumps(cases) + "\n")
        self.proc.stdin.flush()
        results = self._read(REQUEST_TIMEOUT)
        assert [r["id"] for r in results] == [c["id"] for c in cases]
        for result in results:
            assert result["status"] != "error", f"the helper itself failed on {result['id']}: {result}"
        return results

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def environment_python(variable: str, script: str, what: str) -> str:
    """The python of a cached environment named by ``variable``; skip with the command that builds it."""
    python = os.environ.get(variable)
    if not python:
        pytest.skip(f"contract tier: {variable} is not set; run `export {variable}=\"$({script})\"` ({what})")
    if not os.access(python, os.X_OK):
        pytest.skip(f"contract tier: {variable}={python!r} is not an executable; rebuild it with {script}")
    return python


@pytest.fixture(scope="session")
def engine_python() -> str:
    return environment_python("DRAFTER_ENGINE_PYTHON", ".ci/engine-contract-env",
                              "builds vLLM 0.33.0 + SGLang 0.5.23 once, ~7 GB")


@pytest.fixture(scope="session")
def training_python() -> str:
    return environment_python("DRAFTER_TRAINING_PYTHON", ".ci/training-env",
                              "SpecForge 0.2.0 + speculators 0.9.0 on the engines venv, ~310 MB beside it")


@pytest.fixture(scope="session")
def clients_python() -> str:
    return environment_python("DRAFTER_CLIENTS_PYTHON", ".ci/clients-env",
                              "vLLM, SGLang and GuideLLM benchmark clients")


@pytest.fixture(scope="session")
def parsers(engine_python: str):
    helpers = {engine: EngineParser(engine_python, engine) for engine in ("vllm", "sglang")}  # start both at once
    try:
        for helper in helpers.values():
            helper.wait_ready()
        yield helpers
    finally:
        for helper in helpers.values():
            helper.close()


