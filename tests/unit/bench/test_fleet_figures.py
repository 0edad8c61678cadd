"""The pure figures of bench/fleet_scale.py: the operator's requests counted from an audit log, and
nearest-rank percentiles."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from bench.fleet_figures import count_audit, percentiles, spread, swap_targets

T0 = dt.datetime(2026, 12, 1, 19, 0, tzinfo=dt.timezone.utc)


def event(audit_id: str, verb: str, resource: str, agent: str = "kopf/1.45.2", at: float = 10.0,
          stage: str = "ResponseComplete", subresource: str | None = None) -> dict:
    ref = {"resource": resource, **({"subresource": subresource} if subresource else {})}
    return {"auditID": audit_id, "stage": stage, "verb": verb, "userAgent": agent, "objectRef": ref,
            "requestReceivedTimestamp": (T0 + dt.timedelta(seconds=at)).isoformat().replace("+00:00", "Z")}


def test_a_watch_logged_at_two_stages_is_one_request():
    events = [event("w", "watch", "pods", stage="ResponseStarted"), event("w", "watch", "pods")]
    counted = count_audit(events, T0.timestamp(), T0.timestamp() + 60)
    assert counted["reads"] == 1 and counted["writes"] == 0


def test_only_the_operators_agents_count_and_lease_renewals_stand_apart():
    events = [
        event("a", "patch", "drafterservings", "drafter-operator/0.1.0", subresource="status"),
        event("b", "create", "events"),
        event("c", "update", "leases", "drafter-operator/0.1.0"),
        event("d", "get", "leases", "drafter-operator/0.1.0"),
        event("e", "patch", "drafterservings", "kubectl/v1.35.4 (linux/amd64)"),
        event("f", "list", "deployments", "fleet-scale-bench"),
    ]
    counted = count_audit(events, T0.timestamp(), T0.timestamp() + 60)
    assert (counted["reads"], counted["writes"], counted["leaderLeaseRequests"]) == (0, 2, 2)
    assert counted["byAgentVerbResource"]["drafter-operator patch drafterservings/status"] == 1
    assert counted["writesPerMinute"] == 2.0


@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["get", "list", "watch", "patch", "create", "delete"]),
                          st.sampled_from(["kopf/1", "drafter-operator/0", "kubectl/1"]), st.floats(0, 120)),
                max_size=60))
def test_every_operator_request_in_the_window_is_counted_once(rows):
    # One request may be logged at several stages: same auditID, verb, agent and received time.
    first = {}
    for i, verb, agent, at in rows:
        first.setdefault(str(i), (verb, agent, at))
    events = [event(i, *first[str(i)][:1], "pods", *first[str(i)][1:]) for i, *_ in rows]
    counted = count_audit(events, T0.timestamp() + 30, T0.timestamp() + 90)
    inside = [(verb, agent) for verb, agent, at in first.values() if 30 <= at < 90 and not agent.startswith("kubectl")]
    assert counted["reads"] + counted["writes"] == len(inside)
    assert counted["writes"] == sum(verb in ("patch", "create", "delete") for verb, _ in inside)


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=600))
def test_percentiles_are_ordered_members_of_the_sample(values):
    q = percentiles(values)
    assert q["min"] <= q["p50"] <= q["p90"] <= q["p99"] <= q["max"]
    assert all(any(abs(q[k] - round(v, 3)) < 1e-9 for v in values) for k in ("p50", "p90", "p99"))
    assert q["n"] == len(values)


def test_p99_is_the_nearest_rank():
    assert percentiles([float(i) for i in range(1, 41)])["p99"] == 40.0  # of 40 samples: the largest
    assert percentiles([float(i) for i in range(1, 501)])["p99"] == 495.0
    assert percentiles([float(i) for i in range(1, 501)])["p50"] == 250.0


def test_the_fleet_is_dealt_evenly_and_swaps_reach_every_namespace():
    keys = spread(500, 50)
    assert len(set(keys)) == 500 and len({ns for ns, _ in keys}) == 50
    assert {sum(1 for ns, _ in keys if ns == n) for n, _ in keys} == {10}
    targets = swap_targets(keys, 50)
    assert len(set(targets)) == 50 and len({ns for ns, _ in targets}) == 50
