"""Known-bad drafter combinations (data/known-bad.yaml) checked when a revision is created."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

from drafter_operator.api import DrafterServingSpec


@dataclass(frozen=True)
class KnownBad:
    id: str
    engine: str
    engine_versions: str
    methods: tuple[str, ...]
    architectures: tuple[str, ...]
    model_patterns: tuple[str, ...]
    reason: str
    link: str
    observed: str


@lru_cache(maxsize=1)
def known_bad() -> tuple[KnownBad, ...]:
    text = resources.files("drafter_operator.data").joinpath("known-bad.yaml").read_text()
    return tuple(KnownBad(id=e["id"], engine=e["engine"], engine_versions=e.get("engineVersions") or "",
                          methods=tuple(e["methods"]), architectures=tuple(e.get("architectures") or ()),
                          model_patterns=tuple(e.get("modelPatterns") or ()), reason=" ".join(e["reason"].split()),
                          link=e.get("link", ""), observed=e.get("observed", ""))
                 for e in yaml.safe_load(text))


def image_version(image: str) -> tuple[int, ...] | None:
    """`vllm/vllm-openai:v0.33.0` -> (0, 33, 0); None when the tag is not a version (latest, a digest)."""
    tag = image.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    match = re.match(r"v?(\d+(?:\.\d+)*)", tag)
    return tuple(int(p) for p in match[1].split(".")) if match else None


def version_in_range(version: tuple[int, ...] | None, spec: str) -> bool:
    """`spec` is comma-separated bounds like ">=0.10,<0.40"; an unknown version matches any range."""
    if not spec.strip() or version is None:
        return True
    for bound in spec.split(","):
        match = re.fullmatch(r"\s*(>=|<=|>|<|==)\s*v?([\d.]+)\s*", bound)
        if not match:
            raise ValueError(f"bad version bound {bound!r} in known-bad.yaml")
        op, other = match[1], tuple(int(p) for p in match[2].split("."))
        ok = {">=": version >= other, "<=": version <= other, ">": version > other, "<": version < other,
              "==": version == other}[op]
        if not ok:
            return False
    return True


def matching_known_bad(spec: DrafterServingSpec, image: str, architecture: str | None = None) -> list[KnownBad]:
    """Entries that match this serving's engine, image version, drafter method and target."""
    matches = []
    for entry in known_bad():
        if entry.engine != spec.engine or spec.drafter.method not in entry.methods:
            continue
        if not version_in_range(image_version(image), entry.engine_versions):
            continue
        if architecture is not None:
            hit = architecture in entry.architectures
        else:
            hit = any(re.search(p, spec.target.model) for p in entry.model_patterns)
        if hit:
            matches.append(entry)
    return matches
