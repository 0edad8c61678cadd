"""Who leads, as a pure function: the observed Lease and this candidate's memory in, one action out.

Two operator processes for the same scope (a `helm upgrade` whose new pod starts before the old one
stops, or someone running `drafter-operator run` by hand) must never both act. kopf's peering does not
give that (docs/reliability.md, "Two operators at once", says why from its code), so the operator holds a
coordination.k8s.io/v1 Lease the way client-go's leader election does, with the same default timings:

- A candidate never compares its clock with another process's clock. It remembers the Lease's
  resourceVersion and when (on its own clock) it first saw that version; the holder has lost the Lease
  only once that version stayed unchanged for `leaseDuration`. Taking it over is a PUT carrying that
  resourceVersion, so of two candidates that both decided to take over, the apiserver accepts one
  (the other gets 409 Conflict and keeps waiting).
- The leader renews every `retryPeriod` and counts its lease from the moment it SENT its last renewal
  that succeeded. Once `renewDeadline` has passed since then it has lost, whatever the Lease says.
  Any other candidate saw that renewal no earlier than it was sent and waits `leaseDuration` (>
  `renewDeadline`) after seeing it, so the old leader has stopped before anyone else starts; the
  margin (5 s by default) absorbs clock rate differences and the time it takes a process to exit.
- A leader that stops cleanly writes an empty holder: the next candidate takes over at its next
  retry instead of waiting `leaseDuration`.

`controllers/leader_election.py` runs this against the apiserver; tests/unit/controllers/test_leadership.py checks,
for any interleaving of two candidates' reads and writes, that at most one believes it leads.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import math
from dataclasses import dataclass, replace

from drafter_operator import timestamps

LEASE_API = "coordination.k8s.io/v1"
#: The Lease of an operator watching every namespace. Namespaced operators add a hash of their namespaces.
CLUSTER_WIDE_LEASE = "drafter-operator"


@dataclass(frozen=True)
class LeaseRef:
    """Which Lease: its namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Timings:
    """client-go's and controller-runtime's defaults (seconds)."""

    lease_duration: float = 15.0  # how long an unchanged Lease keeps other candidates waiting
    renew_deadline: float = 10.0  # how long the leader keeps acting without a successful renewal
    retry_period: float = 2.0  # how often candidates try and the leader renews

    def __post_init__(self) -> None:
        # The same constraints client-go enforces (leaderelection.NewLeaderElector), with its 1.2 jitter factor.
        if not self.retry_period > 0:
            raise ValueError(f"retry period {self.retry_period:g} s: must be above 0")
        if not self.renew_deadline > 1.2 * self.retry_period:
            raise ValueError(f"renew deadline {self.renew_deadline:g} s must exceed 1.2 x the retry period "
                             f"({self.retry_period:g} s), so a renewal can be retried before it is due")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(f"lease duration {self.lease_duration:g} s must exceed the renew deadline "
                             f"({self.renew_deadline:g} s), or a candidate could start before the leader stopped")


@dataclass(frozen=True)
class LeaseState:
    """What a Lease says, read from its manifest."""

    holder: str  # "" once released
    resource_version: str
    lease_duration: float  # spec.leaseDurationSeconds as its holder wrote it
    transitions: int = 0
    acquire_time: str | None = None

    @classmethod
    def from_manifest(cls, lease: dict) -> LeaseState:
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "", resource_version=lease["metadata"]["resourceVersion"],
                   lease_duration=float(spec.get("leaseDurationSeconds") or 0),
                   transitions=int(spec.get("leaseTransitions") or 0), acquire_time=spec.get("acquireTime"))


@dataclass(frozen=True)
class Memory:
    """What a candidate remembers between rounds. Times are its own monotonic clock's."""

    seen_version: str | None = None  # the Lease's resourceVersion when last read
    seen_since: float | None = None  # when that version was first read
    renewed_at: float | None = None  # leading: when the last write that succeeded was sent; None: not leading

    @property
    def leading(self) -> bool:
        return self.renewed_at is not None

    def written(self, sent_at: float) -> Memory:
        """After a create, take-over or renewal the apiserver accepted: leading, counted from `sent_at`."""
        return replace(self, renewed_at=sent_at)


def request_timeout(memory: Memory, now: float, timings: Timings) -> float:
    """How long one Lease request may take. A leader's may take until its renew deadline, as client-go
    bounds a renewal by the deadline rather than by the retry period: with a 2-s bound, an apiserver busy
    answering a cold start of 500 servings (3 s per request, on a loaded machine) made every renewal time
    out, and the operator ended itself 10 s after it started (bench/fleet_scale.py found it). A candidate's
    request takes at most one retry period: it tries again then anyway."""
    if not memory.leading:
        return timings.retry_period
    return max(0.1, timings.renew_deadline - (now - memory.renewed_at))


class Action(str, enum.Enum):
    CREATE = "create"  # no Lease yet: POST one naming us
    TAKE_OVER = "take over"  # released or expired: PUT our name with the observed resourceVersion
    RENEW = "renew"  # ours: PUT a new renewTime with the observed resourceVersion
    WAIT = "wait"  # someone else holds it and has renewed within leaseDuration
    LOST = "lost"  # we led and may no longer: stop acting at once


@dataclass(frozen=True)
class Decision:
    action: Action
    memory: Memory  # the memory after this observation (a write's success is recorded by `Memory.written`)
    reason: str


def decide(lease: LeaseState | None, memory: Memory, identity: str, now: float, timings: Timings) -> Decision:
    """The next step of a candidate (or leader) named `identity` that read `lease` (None: there is none) at `now`."""
    if memory.leading:
        since = now - memory.renewed_at
        if since >= timings.renew_deadline:
            return Decision(Action.LOST, memory, f"no renewal succeeded for {since:.1f} s "
                            f"(renew deadline {timings.renew_deadline:g} s)")
        if lease is None:
            return Decision(Action.LOST, memory, "the Lease was deleted")
        if lease.holder != identity:
            return Decision(Action.LOST, memory, f"the Lease names {lease.holder or 'nobody'}")
        return Decision(Action.RENEW, memory, "held by us")
    if lease is None:
        return Decision(Action.CREATE, memory, "no Lease")
    if lease.holder == identity:  # our write landed but its answer was lost: nobody else believes it leads
        return Decision(Action.RENEW, memory, "names us")
    if not lease.holder:
        return Decision(Action.TAKE_OVER, memory, "released")
    if lease.resource_version != memory.seen_version:
        return Decision(Action.WAIT, replace(memory, seen_version=lease.resource_version, seen_since=now),
                        f"held by {lease.holder}")
    duration = lease.lease_duration if lease.lease_duration > 0 else timings.lease_duration
    unchanged = now - memory.seen_since
    if unchanged >= duration:
        return Decision(Action.TAKE_OVER, memory, f"{lease.holder} has not renewed for {unchanged:.1f} s "
                        f"(lease duration {duration:g} s)")
    return Decision(Action.WAIT, memory, f"held by {lease.holder}, renewed {unchanged:.1f} s ago or less")


def micro_time(when: dt.datetime) -> str:
    """Kubernetes' MicroTime format (RFC 3339 with microseconds, UTC)."""
    return timestamps.format_micro(when)


def lease_manifest(action: Action, where: LeaseRef, identity: str, timings: Timings, wall_now: dt.datetime,
                   lease: LeaseState | None) -> dict:
    """The body of the write `action` makes: a POST for CREATE, else a PUT carrying the observed
    resourceVersion (optimistic concurrency: 409 when someone wrote in between)."""
    now = micro_time(wall_now)
    metadata = {"name": where.name, "namespace": where.namespace}
    if action is Action.CREATE:
        spec = {"acquireTime": now, "leaseTransitions": 0}
    elif action is Action.TAKE_OVER:
        spec = {"acquireTime": now, "leaseTransitions": lease.transitions + 1}
    elif action is Action.RENEW:
        spec = {"acquireTime": lease.acquire_time or now, "leaseTransitions": lease.transitions}
    else:
        raise ValueError(f"{action.value} writes nothing")
    if action is not Action.CREATE:
        metadata["resourceVersion"] = lease.resource_version
    spec.update(holderIdentity=identity, leaseDurationSeconds=math.ceil(timings.lease_duration), renewTime=now)
    return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": metadata, "spec": spec}


def released_manifest(where: LeaseRef, wall_now: dt.datetime, lease: LeaseState) -> dict:
    """Our Lease with no holder, so the next candidate takes over at once (client-go's ReleaseOnCancel)."""
    return {"apiVersion": LEASE_API, "kind": "Lease",
            "metadata": {"name": where.name, "namespace": where.namespace, "resourceVersion": lease.resource_version},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time(wall_now),
                     "acquireTime": lease.acquire_time or micro_time(wall_now), "leaseTransitions": lease.transitions}}


def lease_name(namespaces: list[str]) -> str:
    """The Lease of an operator's scope: operators for the same scope exclude each other, operators
    sharded by namespace do not. Cluster-wide: one fixed name; namespaced: a hash of the sorted namespace
    list (patterns as written), so `--namespace a --namespace b` and `--namespace b --namespace a` share one."""
    if not namespaces:
        return CLUSTER_WIDE_LEASE
    digest = hashlib.sha256("\n".join(sorted(set(namespaces))).encode()).hexdigest()[:10]
    return f"{CLUSTER_WIDE_LEASE}-{digest}"
