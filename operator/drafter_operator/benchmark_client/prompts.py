"""The prompts a benchmark sends: the built-in set (package data) or a file, cut to ``--num-prompts``."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from itertools import cycle, islice
from pathlib import Path

import yaml

BUILTIN_RESOURCE = "bench-prompts.yaml"


class PromptsError(ValueError):
    """The prompts cannot be read; the message names the file and what is wrong."""


@cache
def builtin() -> tuple[str, ...]:
    """The built-in multi-domain prompts (reasoning, code, math, chat, summarisation, writing)."""
    text = resources.files("drafter_operator.data").joinpath(BUILTIN_RESOURCE).read_text(encoding="utf-8")
    return tuple(entry["text"].strip() for entry in yaml.safe_load(text)["prompts"])


def parse(text: str, source: str = "prompts") -> list[str]:
    """A JSON list of strings, or else one prompt per non-blank line (as the CRD's ConfigMap key says)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise PromptsError(f"{source}: starts with '[' but is not a JSON list: {exc}") from None
        if not isinstance(loaded, list) or not all(isinstance(p, str) for p in loaded):
            raise PromptsError(f"{source}: a JSON list must hold strings only")
        prompts = [p for p in loaded if p.strip()]
    else:
        prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise PromptsError(f"{source}: no prompts")
    return prompts


def load(path: str | None) -> list[str]:
    if path is None:
        return list(builtin())
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"--prompts-file {path}: {exc}") from None
    return parse(text, f"--prompts-file {path}")


def select(prompts: list[str], count: int) -> list[str]:
    """The first ``count`` prompts, cycling through the set when it is shorter (the CRD's validation
    keeps inline prompts >= numPrompts; the built-in set is cycled rather than refused)."""
    if count < 1:
        raise PromptsError("--num-prompts must be at least 1")
    return list(islice(cycle(prompts), count))
