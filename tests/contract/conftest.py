"""The contract tier's shared fixtures: the real engines' parsers, one helper process per engine.

Tests here run in the real engines' and training frameworks' environments (tests/environments.py: exported
by `./dev test`, else built on first use). ``parsers`` starts tests/contract/engine_parsers.py once per
session per engine.
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

from tests import environments

HARNESS = Path(__file__).resolve().parent / "engine_parsers.py"
# Importing vLLM takes ~6 s on a quiet machine; at nice 19 beside a loaded end-to-end lane (load average 10 on
# 2 cores) it took over 180 s, and all 83 parser tests errored. A start-up limit, not a measured figure.
START_TIMEOUT = 600.0
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


def environment_python(environment: environments.Environment, config: pytest.Config) -> str:
    """The python of a cached environment (built first when missing); a path that is not one fails."""
    python = environments.built(environment, config)
    if not os.access(python, os.X_OK):
        pytest.fail(f"{environment.variable}={python!r} is not an executable: unset it, or rebuild it with "
                    f"{' '.join(environment.command)}", pytrace=False)
    return python


@pytest.fixture(scope="session")
def engine_python(pytestconfig) -> str:
    return environment_python(environments.ENGINES, pytestconfig)


@pytest.fixture(scope="session")
def training_python(pytestconfig) -> str:
    return environment_python(environments.TRAINING, pytestconfig)


@pytest.fixture(scope="session")
def clients_python(pytestconfig) -> str:
    return environment_python(environments.CLIENTS, pytestconfig)


@pytest.fixture(scope="session")
def parsers(engine_python: str):
    """The real vLLM and SGLang argument parsers, one long-lived process each. The modules that use them are in the
    xdist group "engine-parsers", so under the suite's two workers only one starts them."""
    helpers = {engine: EngineParser(engine_python, engine) for engine in ("vllm", "sglang")}  # start both at once
    try:
        for helper in helpers.values():
            helper.wait_ready()
        yield helpers
    finally:
        for helper in helpers.values():
            helper.close()


