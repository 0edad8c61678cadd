"""`--shards N` (controllers/sharding.py, leader_election.ShardElection, the handlers' filters): ownership is a
stable partition of (namespace, name); every registered handler acts only for its shard, by the key it dispatches
to; replicas contending for N shard Leases never lead one shard twice nor two shards at once, and once enough of
them live every shard is led again within the Lease duration. The real apiserver: tests/e2e/test_sharded_operators.py.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import kopf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.controllers import handlers, sharding
from drafter_operator.controllers import leader_election as election
from drafter_operator.controllers.leadership import LeaseRef, Timings
from drafter_operator.controllers.sharding import Shard, lease_names, shard_of
from drafter_operator.monitoring import operator_metrics
from tests.unit.controllers.test_leader_election import LeaseApi

NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


def test_the_hash_is_pinned():
    """The same object lands in the same shard in every process, version and machine: these values are SHA-256's,
    and a change here would move objects between the replicas of a running fleet during an upgrade."""
    assert [shard_of("team-a", f"kimi-{i}", 4) for i in range(8)] == [0, 0, 0, 1, 1, 0, 3, 1]
    assert (shard_of(None, "x", 7), shard_of("default", "kimi", 2), shard_of("default", "kimi", 3)) == (5, 0, 2)


@given(namespace=NAMES, name=NAMES, count=st.integers(1, 64))
def test_every_object_belongs_to_exactly_one_shard(namespace, name, count):
    owners = [index for index in range(count) if Shard(index, count).owns(namespace, name)]
    assert owners == [shard_of(namespace, name, count)]


def test_the_shards_share_a_fleet_evenly():
    """2,000 servings in 50 namespaces, as the fleet benchmark names them: each of 2, 3 or 8 shards within four
    standard deviations of an even share, as a uniform hash would put them (for 8 shards: 250 +- 59)."""
    keys = [(f"fleet-{i % 50}", f"serving-{i}") for i in range(2000)]
    for count in (2, 3, 8):
        shares = Counter(shard_of(ns, name, count) for ns, name in keys)
        assert sorted(shares) == list(range(count))
        spread = 4 * math.sqrt(2000 * (1 / count) * (1 - 1 / count))
        assert all(abs(n - 2000 / count) <= spread for n in shares.values()), (count, shares)


def test_shards_and_their_leases_are_checked_and_named():
    assert lease_names("drafter-operator", 1) == ["drafter-operator"]  # unsharded: the same Lease as before
    assert lease_names("drafter-operator", 3) == [f"drafter-operator-shard-{i}-of-3" for i in range(3)]
    longest = lease_names("x", sharding.MAX_SHARDS)[-1]
    assert len(longest) == 1 + sharding.MAX_SUFFIX
    for index, count in ((0, 0), (2, 2), (-1, 2), (0, sharding.MAX_SHARDS + 1)):
        with pytest.raises(ValueError):
            Shard(index, count)
    assert not Shard(0, 2).owns("ns", None) and not sharding.WHOLE.owns("ns", None)  # an event naming no owner
    assert sharding.WHOLE.owns("any", "thing")


# --------------------------------------------------------------------------------------------------
# Every handler is filtered by the shard of the object it acts for.


def registered_handlers() -> list:
    registry = kopf.get_default_registry()
    return [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]


#: Handlers that act for nobody: they only count events (drafter_watch_events, every event the watches bring).
COUNTERS = "count_watch_event_"


def event_for(handler, owner: str, own_name: str) -> dict:
    """The keyword arguments kopf passes a filter for an event of the handler's kind: an object named
    ``own_name`` carrying each label the handler selects on, with the owner ``owner`` as its value, and a
    spec.servingRef naming the owner too (a benchmark's target)."""
    labels = {key: owner for key in (handler.labels or {})}
    return {"namespace": "team-a", "name": own_name, "labels": labels, "spec": {"servingRef": {"name": owner}},
            "meta": {"name": own_name, "namespace": "team-a", "labels": labels}, "status": {}, "body": {},
            "type": None}


def test_every_handler_acts_for_its_own_shard_only():
    """For each handler kopf has registered (a new one without a shard filter fails here): of 5 shards exactly
    one matches an event, and it is the shard of the object the handler dispatches to, the owner its labels
    name or else the object itself."""
    found = [h for h in registered_handlers() if not str(h.id).startswith(COUNTERS)]
    assert len(found) >= 20, [h.id for h in found]
    count = 5
    for handler in found:
        assert handler.when is not None, f"{handler.id} acts for every shard: give it a shard filter (handlers.py)"
        for i in range(20):
            owner, own_name = f"owner-{i}", f"object-{i}"
            kwargs = event_for(handler, owner, own_name)
            matching = [index for index in range(count)
                        if handler.when(memo=kopf.Memo(shard=Shard(index, count)), **kwargs)]
            by_label = bool(handler.labels) or handler.when is handlers.benchmarked_serving_mine
            expected = shard_of("team-a", owner if by_label else own_name, count)
            assert matching == [expected], (handler.id, owner, own_name, matching, expected)


def test_an_unsharded_operator_acts_for_everything():
    for handler in registered_handlers():
        if handler.when is not None:
            assert handler.when(memo=kopf.Memo(shard=sharding.WHOLE), **event_for(handler, "o", "n"))
            assert handler.when(memo=kopf.Memo(), **event_for(handler, "o", "n"))  # before the runner set one


# --------------------------------------------------------------------------------------------------
# Replicas contending for the shards' Leases (leader_election.ShardElection against the in-memory Lease API).

T = Timings()


@dataclass
class Replica:
    election: election.ShardElection
    clock: list  # [now]: its own clock, read by its electors
    alive: bool = True
    shard: int | None = None

    def leads(self) -> int | None:
        """The shard it believes it leads: its elector's last successful write within the renew deadline."""
        if not self.alive or self.shard is None:
            return None
        memory = self.election.electors[self.shard].memory
        return self.shard if memory.leading and self.clock[0] - memory.renewed_at < T.renew_deadline else None


def replica(api: LeaseApi, identity: str, count: int, start: float) -> Replica:
    clock = [start]
    lost = []
    electors = [election.LeaderElector(api, LeaseRef("ns", name), identity, T, now=lambda: clock[0],
                                       on_lost=lost.append) for name in lease_names("op", count)]
    return Replica(election.ShardElection(electors), clock)


def act(r: Replica) -> None:
    """One retry period's work: a standby tries every shard once; a leader renews its own (a loss ends it)."""
    if not r.alive:
        return
    if r.shard is None:
        r.shard = r.election.try_once()
    else:
        decision = r.election.electors[r.shard].step()
        if decision.action.value == "lost":
            r.alive = False


def check(replicas: list[Replica]) -> None:
    leading = [r.leads() for r in replicas if r.leads() is not None]
    assert len(leading) == len(set(leading)), f"a shard led twice: {leading}"
    for r in replicas:
        held = [e.where for e in r.election.electors if e.memory.leading]
        assert not r.alive or len(held) <= 1, f"one replica holds {held}"


STEP = st.tuples(st.sampled_from(["round", "round", "round", "crash", "restart", "stall"]), st.integers(0, 3),
                 st.floats(0.0, 6.0))


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(STEP, max_size=40), skews=st.lists(st.floats(0.0, 500.0), min_size=4, max_size=4))
def test_no_shard_is_led_twice_and_every_shard_is_led_again_within_the_lease_duration(steps, skews):
    """4 replicas, 3 shards, clocks apart by up to 500 s: rounds, crashes (SIGKILL: the Lease stays until it
    expires), restarts and stalls (a replica that stops renewing but has not exited) in any order. Never two
    leaders of one shard, never a replica leading two; and once the trouble stops, every shard is led again
    within the Lease duration plus a few retries, as soon as three replicas live."""
    count, api, now = 3, LeaseApi(), 0.0
    replicas = [replica(api, f"r{i}-0", count, skews[i]) for i in range(4)]
    generation = [0] * 4
    stalled: set[int] = set()
    for kind, who, seconds in steps:
        r = replicas[who]
        if kind == "round" and who not in stalled:
            act(r)
        elif kind == "crash":
            r.alive = False
        elif kind == "restart" and not r.alive:
            generation[who] += 1
            replicas[who] = replica(api, f"r{who}-{generation[who]}", count, r.clock[0])
            stalled.discard(who)
        elif kind == "stall":
            stalled.add(who)
        now += seconds
        for each in replicas:
            each.clock[0] += seconds
        check(replicas)
    # The trouble stops: every replica is alive and acts each retry period.
    for who, r in enumerate(replicas):
        if not r.alive or who in stalled:
            generation[who] += 1
            replicas[who] = replica(api, f"r{who}-{generation[who]}", count, r.clock[0])
    settle = T.lease_duration + 4 * T.retry_period
    waited = 0.0
    while waited <= settle:
        for who, r in enumerate(replicas):
            if not r.alive:  # a leader that found its Lease lost exits (status 3), and its container restarts
                generation[who] += 1
                replicas[who] = r = replica(api, f"r{who}-{generation[who]}", count, r.clock[0])
            act(r)
        check(replicas)
        if sorted(filter(lambda s: s is not None, (r.leads() for r in replicas))) == list(range(count)):
            break
        for r in replicas:
            r.clock[0] += T.retry_period
        waited += T.retry_period
    led = sorted(s for s in (r.leads() for r in replicas) if s is not None)
    assert led == list(range(count)), f"after {waited:.0f} s only shards {led} are led"
    assert sum(r.leads() is None for r in replicas) == 1  # the fourth stands by


def test_replicas_starting_together_take_one_shard_each_and_a_standby_waits_for_any():
    api = LeaseApi()
    a, b, c = (replica(api, name, 2, 0.0) for name in ("a", "b", "c"))
    for r in (a, b, c):
        act(r)
    assert (a.shard, b.shard, c.shard) == (0, 1, None)
    assert operator_metrics.SHARD.labels("1", "2")._value.get() == 1.0  # the leader's gauge names its shard
    assert api.holder("op-shard-0-of-2") == "a" and api.holder("op-shard-1-of-2") == "b"
    b.alive = False  # SIGKILL: its Lease stays until it expires
    for _ in range(int(T.lease_duration / T.retry_period)):
        for r in (a, c):
            r.clock[0] += T.retry_period
            act(r)
        assert c.shard is None or c.clock[0] >= T.lease_duration  # never before the Lease expired on its clock
    for r in (a, c):
        r.clock[0] += T.retry_period
        act(r)
    assert c.shard == 1 and api.holder("op-shard-1-of-2") == "c" and a.leads() == 0
