"""The copies of watched objects the operator keeps between events (kopf indexes, each serving's latest body), pure.

Kept as compact JSON and decoded on each read, not as the dicts a watch event decodes to: a pod or Deployment's
body takes about 4.5 KiB as JSON and 21 to 26 KiB as Python dicts, lists and strings, and with 500 servings the
operator keeps 500 servings, Deployments, pods and Services (bench/fleet_scale.py: these copies were the bulk of
the steady-state heap). Each read decodes a fresh copy, so the reconciler, in another thread, never shares a
dict with kopf's live body or with another read, and decoding costs less than the deep copy it replaces.

metadata.managedFields is left out: it is the largest part of a child's body (one entry per field manager: the
operator, the controller manager, the node) and nothing in the operator reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True, slots=True)
class Kept:
    """A watched object as compact JSON, without metadata.managedFields."""

    encoded: bytes

    def thawed(self) -> dict:
        """A fresh copy of the object as the watch saw it (less managedFields)."""
        return json.loads(self.encoded)


def kept(body: Mapping) -> Kept:
    """What is kept of ``body`` (a watch event's object); ``body`` is left as it is."""
    metadata = body.get("metadata") or {}
    slim = {k: v for k, v in body.items() if k != "metadata"}
    slim["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return Kept(json.dumps(slim, separators=(",", ":"), ensure_ascii=False).encode())


def thawed_all(copies: Iterable[Kept]) -> list[dict]:
    """Fresh copies of every kept object, in order."""
    return [copy.thawed() for copy in copies]
