"""`drafter-operator emulate` as a process on a free loopback port, for the bench client's runs."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from tests.processes import free_port, listening_process

MODEL = "/models/kimi-k2.5"

NO_SPECULATION = ["vllm", "serve", MODEL]


def _env() -> dict[str, str]:
    # A quarter of real time, not a tenth: at 10x the emulator's own CPU work per token shows in the ratios
    # when the machine is busy (CI measured 0.683x against E / (1 + k c) = 0.668x).
    return {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.25",
            "DRAFTER_EMULATOR_SEED": "3", "PYTHONPATH": os.pathsep.join(sys.path)}


@contextmanager


def emulator(argv: list[str]):
    port = free_port()
    with listening_process([sys.executable, "-m", "drafter_operator.cli", "emulate", *argv, "--port", str(port)],
                           _env(), port):
        yield f"http://127.0.0.1:{port}"
