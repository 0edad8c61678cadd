"""Revisions: one immutable engine + target + drafter configuration, named by a stable hash.

Only what changes the engine process is hashed (engine, image, target, drafter, GPUs per replica):
changing replicas, placement or the startup timeout updates the running revision in place and
never starts a second 547 GB model load.
"""

from __future__ import annotations

import hashlib
import json

from drafter_operator.api import DrafterServingSpec

REVISION_HASH_LENGTH = 10


def revision_config(spec: DrafterServingSpec, image: str) -> dict:
    return {
        "engine": spec.engine,
        "image": image,
        "target": spec.target.model_dump(mode="json", by_alias=True, exclude_none=True),
        "drafter": spec.drafter.model_dump(mode="json", by_alias=True, exclude_none=True,
                                           exclude={"allow_known_bad"}),
        "gpusPerReplica": spec.resources.gpus_per_replica,
    }


def revision_hash(spec: DrafterServingSpec, image: str) -> str:
    canonical = json.dumps(revision_config(spec, image), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:REVISION_HASH_LENGTH]


def drafter_summary(spec: DrafterServingSpec) -> str:
    """A short human description of the drafter, e.g. "eagle3:/models/drafters/kimi-eagle3 k=5"."""
    drafter = spec.drafter
    if drafter.method == "none":
        return "none"
    parts = [drafter.method + (f":{drafter.model}" if drafter.model else "")]
    if drafter.num_speculative_tokens:
        parts.append(f"k={drafter.num_speculative_tokens}")
    if drafter.num_steps:
        parts.append(f"steps={drafter.num_steps}")
    return " ".join(parts)
