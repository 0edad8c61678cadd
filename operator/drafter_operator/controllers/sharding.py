"""Which operator replica reconciles which object, as pure functions: `--shards N` splits the servings, trainings and
benchmarks into N shards by a stable hash of namespace and name, and each shard is led through a Lease of its own
(leadership.py decides who holds each one; leader_election.ShardElection takes the first one it can).

The anchors are kube-state-metrics (`--total-shards`: an object belongs to shard `hash % total`) and Argo CD's
application controller (a replica per shard; a replica lost, its shard goes to another). What holds it together:

- Ownership is a partition: every (namespace, name) belongs to exactly one of the N shards, decided by the object's
  key alone (never by the process, its start order or what else exists), so two replicas with the same N never both
  reconcile one object as long as no two hold the same shard's Lease, which the Lease guarantees.
- An object's children and references go to the shard of the object they belong to: a serving's pods, Deployments
  and gate benchmarks are watched by the serving's shard, a training's Jobs by the training's
  (handlers.py filters every handler by the key it dispatches to; tests/unit/controllers/test_sharding.py checks
  each registered handler).
- The shard count is part of each Lease's name (`<lease>-shard-1-of-2`): replicas started with different counts
  would own overlapping sets of objects under different Leases. The chart's Deployment stops every old replica
  before a new one starts (strategy Recreate), so an upgrade that changes the count never runs both.
- One shard (the default) is the whole: the Lease keeps its unsharded name and every object is owned.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

#: The suffix the shard Leases add to the operator's Lease name: "-shard-<index>-of-<count>" (at most 2 x 4 digits).
MAX_SHARDS = 1024
MAX_SUFFIX = len(f"-shard-{MAX_SHARDS - 1}-of-{MAX_SHARDS}")


def shard_of(namespace: str | None, name: str, count: int) -> int:
    """The shard (0 .. count-1) that owns the object ``namespace/name``: the first 8 bytes of its SHA-256, modulo
    the count. Stable across processes, Python versions and machines (never Python's own salted ``hash``)."""
    if count < 1:
        raise ValueError(f"a shard count is at least 1, got {count}")
    digest = hashlib.sha256(f"{namespace or ''}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


@dataclass(frozen=True)
class Shard:
    """This replica's shard: ``index`` of ``count``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"a shard count is 1 to {MAX_SHARDS}, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is outside 0..{self.count - 1}")

    def owns(self, namespace: str | None, name: str | None) -> bool:
        """Whether this shard reconciles the object ``namespace/name``. No name (an event that names no owner): no."""
        if name is None:
            return False
        return self.count == 1 or shard_of(namespace, name, self.count) == self.index

    def __str__(self) -> str:
        return f"shard {self.index} of {self.count}"


#: The whole: what an unsharded operator owns.
WHOLE = Shard(0, 1)


def lease_names(base: str, count: int) -> list[str]:
    """The Leases of ``count`` shards of the operator whose unsharded Lease is ``base``, shard 0 first. One shard
    keeps ``base`` itself, so an operator that never shards takes over from (and hands over to) one that says
    ``--shards 1``."""
    if count == 1:
        return [base]
    return [f"{base}-shard-{index}-of-{count}" for index in range(count)]
