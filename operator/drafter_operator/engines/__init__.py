"""Per-engine knowledge: command rendering, ports, health paths, metric names and parsing."""

from __future__ import annotations

from types import ModuleType

from drafter_operator.engines import sglang, vllm

ENGINES: dict[str, ModuleType] = {"vllm": vllm, "sglang": sglang}
# The engines' upstream images, at the versions whose flags and metrics engines.md was checked against.
DEFAULT_IMAGES: dict[str, str] = {"vllm": "vllm/vllm-openai:v0.33.0", "sglang": "lmsysorg/sglang:v0.5.23"}


def engine(name: str) -> ModuleType:
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}: choose one of {sorted(ENGINES)}") from None
