"""The prompts a benchmark sends: the built-in set (package data) or a file, cut to ``--num-prompts``.

A prompt may carry a traffic category (``traffic_categories.py``): the built-in set tags every prompt, and a
file's JSON list may hold ``{"text": ..., "category": ...}`` objects beside plain strings (no category).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from importlib import resources
from itertools import cycle, islice
from pathlib import Path
from typing import NamedTuple

import yaml

from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES, unknown_category_message

BUILTIN_RESOURCE = "bench-prompts.yaml"


class PromptsError(ValueError):
    """The prompts cannot be read; the message names the file and what is wrong."""


class Prompt(NamedTuple):
    """One prompt of a set and its traffic category (None: untagged)."""

    text: str
    category: str | None = None


def _prompt(entry: object, where: str) -> Prompt:
    """A plain string, or an object with ``text`` and an optional ``category`` of the vocabulary."""
    if isinstance(entry, str):
        return Prompt(entry)
    if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
        raise PromptsError(f"{where}: a prompt is a string or an object with a \"text\" string, "
                           f"e.g. {{\"text\": \"Write a function that ...\", \"category\": \"code\"}}")
    unknown = set(entry) - {"text", "category"}
    if unknown:
        raise PromptsError(f"{where}: unknown key(s) {sorted(unknown)}: a prompt object has \"text\" and \"category\"")
    category = entry.get("category")
    if category is not None and category not in TRAFFIC_CATEGORIES:
        raise PromptsError(unknown_category_message(category, f"{where}.category"))
    return Prompt(entry["text"], category)


@cache
def _builtin_lists() -> dict[str, tuple[Prompt, ...]]:
    text = resources.files("drafter_operator.data").joinpath(BUILTIN_RESOURCE).read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    return {key: tuple(_prompt({"text": entry["text"].strip(), "category": entry["category"]},
                               f"{BUILTIN_RESOURCE}: {key}: {entry['name']}")
                       for entry in document[key])
            for key in ("prompts", "categoryPrompts")}


def builtin_set() -> tuple[Prompt, ...]:
    """The built-in multi-domain prompts of the measured set, each tagged with its traffic category."""
    return _builtin_lists()["prompts"]


def category_set(measured: list[Prompt], path: str | None) -> list[Prompt]:
    """What the measurement by traffic category draws on: the measured set, and with the built-in set (no
    ``path``) its category prompts too, so that every category has several."""
    return [*measured, *_builtin_lists()["categoryPrompts"]] if path is None else list(measured)


def builtin() -> tuple[str, ...]:
    """The built-in prompts' texts."""
    return texts(builtin_set())


def texts(prompts: Iterable[Prompt]) -> tuple[str, ...]:
    return tuple(p.text for p in prompts)


def parse_set(text: str, source: str = "prompts") -> list[Prompt]:
    """A JSON list of strings and ``{text, category}`` objects, or else one untagged prompt per non-blank line
    (as the CRD's ConfigMap key says)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise PromptsError(f"{source}: starts with '[' but is not a JSON list: {exc}") from None
        if not isinstance(loaded, list):
            raise PromptsError(f"{source}: a JSON list must hold strings or {{\"text\", \"category\"}} objects only")
        prompts = [p for p in (_prompt(entry, f"{source}: [{i}]") for i, entry in enumerate(loaded)) if p.text.strip()]
    else:
        prompts = [Prompt(line.strip()) for line in text.splitlines() if line.strip()]
    if not prompts:
        raise PromptsError(f"{source}: no prompts")
    return prompts


def parse(text: str, source: str = "prompts") -> list[str]:
    """The prompts' texts of :func:`parse_set`."""
    return list(texts(parse_set(text, source)))


def load_set(path: str | None) -> list[Prompt]:
    if path is None:
        return list(builtin_set())
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"--prompts-file {path}: {exc}") from None
    return parse_set(text, f"--prompts-file {path}")


def load(path: str | None) -> list[str]:
    return list(texts(load_set(path)))


def select(prompts: list[str], count: int) -> list[str]:
    """The first ``count`` prompts, cycling through the set when it is shorter (the CRD's validation
    keeps inline prompts >= numPrompts; the built-in set is cycled rather than refused)."""
    if count < 1:
        raise PromptsError("--num-prompts must be at least 1")
    return list(islice(cycle(prompts), count))


def by_category(prompts: Iterable[Prompt]) -> dict[str, list[int]]:
    """The indices of each category's prompts in the set, categories in the vocabulary's order (untagged
    prompts and empty categories left out)."""
    indexed = list(enumerate(prompts))
    grouped = {category: [i for i, p in indexed if p.category == category] for category in TRAFFIC_CATEGORIES}
    return {category: members for category, members in grouped.items() if members}
