"""What the engine-parser harness's modules share: the command-line prefixes, JSON-able values, short
errors, the fake checkpoints' temp dirs. Runs under the engine environment's python (engine_parsers.py)."""

from __future__ import annotations

VLLM_PREFIX = ["vllm", "serve"]
FAKE_ROOTS: list[str] = []  # temp dirs of fake checkpoints, removed when the helper ends
SGLANG_PREFIX = ["python3", "-m", "sglang.launch_server"]


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 2000 else text[:2000] + "..."

