"""The figures of bench/fleet_scale.py, pure: percentiles, the operator's requests counted from an
apiserver audit log, and how the fleet is laid out over its namespaces. Unit-tested in
tests/unit/bench/test_fleet_figures.py."""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from collections import Counter
from pathlib import Path

# kopf's own client (watches, annotation and finalizer patches, Events) and the reconciler's (kube.USER_AGENT).
OPERATOR_AGENTS = ("kopf/", "drafter-operator/")
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
NAMESPACE_PREFIX = "fleet-"


def percentiles(values: list[float]) -> dict:
    """Nearest-rank percentiles (no interpolation): p99 of 40 samples is the largest; of 500, the 495th."""
    if not values:
        return {}
    ordered = sorted(values)

    def rank(p: int) -> float:
        return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]
    return {"n": len(ordered), "min": round(ordered[0], 3), "p50": round(rank(50), 3), "p90": round(rank(90), 3),
            "p99": round(rank(99), 3), "max": round(ordered[-1], 3), "mean": round(statistics.fmean(ordered), 3)}


def count_audit(events: list[dict], since: float, until: float) -> dict:
    """The operator's requests received in [since, until) (epoch seconds): reads, writes, and apart from
    both the leader election's Lease traffic (a renewal every 2 s however many servings there are).

    One audit event per stage: a watch logs ResponseStarted and ResponseComplete, so requests are counted
    by auditID. A request is the operator's when its userAgent is kopf's or the reconciler client's."""
    seen: dict[str, dict] = {}
    for event in events:
        agent = event.get("userAgent", "")
        if not agent.startswith(OPERATOR_AGENTS) or event.get("auditID") in seen:
            continue
        received = parse_time(event["requestReceivedTimestamp"])
        if since <= received < until:
            seen[event["auditID"]] = event
    by_kind: Counter[str] = Counter()
    reads = writes = lease = 0
    for event in seen.values():
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", "?").split("?")[0])
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        agent = event["userAgent"].split("/")[0]
        by_kind[f"{agent} {event['verb']} {resource}"] += 1
        if resource == "leases":
            lease += 1
        elif event["verb"] in WRITE_VERBS:
            writes += 1
        else:
            reads += 1
    minutes = (until - since) / 60
    return {"seconds": round(until - since, 1), "reads": reads, "writes": writes, "leaderLeaseRequests": lease,
            "readsPerMinute": round(reads / minutes, 1) if minutes else None,
            "writesPerMinute": round(writes / minutes, 1) if minutes else None,
            "byAgentVerbResource": dict(by_kind.most_common())}


def parse_time(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def read_audit(path: Path) -> list[dict]:
    events = []
    with open(path, errors="replace") as handle:
        for line in handle:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # the line being written right now
    return events


def spread(servings: int, namespaces: int) -> list[tuple[str, str]]:
    """(namespace, name) of each serving, dealt round-robin over the namespaces."""
    return [(f"{NAMESPACE_PREFIX}{i % namespaces:02d}", f"kimi-{i:03d}") for i in range(servings)]


def swap_targets(keys: list[tuple[str, str]], count: int) -> list[tuple[str, str]]:
    """`count` servings taken across the namespaces (one from each first), so swaps hit every namespace."""
    by_namespace: dict[str, list] = {}
    for key in keys:
        by_namespace.setdefault(key[0], []).append(key)
    rounds = [list(group) for group in zip(*by_namespace.values())]
    return [key for group in rounds for key in group][:count]
