"""Who leads (controllers/leadership.py, pure): each decision, the Lease bodies, the scope's Lease name,
and, with hypothesis, that for any interleaving of two candidates' reads, decisions and writes (with
optimistic concurrency on resourceVersion, writes that land late, clocks that run at different rates,
crashes, restarts and releases) at most one process believes it leads at any moment."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from drafter_operator.controllers.leadership import (
    CLUSTER_WIDE_LEASE, Action, LeaseRef, LeaseState, Memory, Timings, decide, lease_manifest, lease_name,
    released_manifest)

T = Timings()  # 15 / 10 / 2 s
WALL = dt.datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)


def held(holder: str, version: str = "7", duration: float = 15, transitions: int = 0) -> LeaseState:
    return LeaseState(holder=holder, resource_version=version, lease_duration=duration, transitions=transitions,
                      acquire_time="2026-12-01T11:00:00.000000Z")


# --------------------------------------------------------------------------------------------------
# decisions


def test_no_lease_is_created():
    assert decide(None, Memory(), "me", 100.0, T).action is Action.CREATE


def test_a_released_lease_is_taken_at_once():
    assert decide(held(""), Memory(), "me", 100.0, T).action is Action.TAKE_OVER


def test_another_holder_is_waited_for_lease_duration_after_its_last_change_on_our_own_clock():
    first = decide(held("other", "7"), Memory(), "me", 100.0, T)
    assert first.action is Action.WAIT and first.memory.seen_since == 100.0
    assert decide(held("other", "7"), first.memory, "me", 114.9, T).action is Action.WAIT
    taken = decide(held("other", "7"), first.memory, "me", 115.0, T)
    assert taken.action is Action.TAKE_OVER and "has not renewed for 15.0 s" in taken.reason


def test_a_renewal_restarts_the_wait():
    memory = decide(held("other", "7"), Memory(), "me", 100.0, T).memory
    renewed = decide(held("other", "8"), memory, "me", 114.0, T)
    assert renewed.action is Action.WAIT and renewed.memory.seen_since == 114.0
    assert decide(held("other", "8"), renewed.memory, "me", 128.0, T).action is Action.WAIT
    assert decide(held("other", "8"), renewed.memory, "me", 129.0, T).action is Action.TAKE_OVER


def test_the_holders_own_lease_duration_counts():
    memory = decide(held("other", duration=60), Memory(), "me", 0.0, T).memory
    assert decide(held("other", duration=60), memory, "me", 59.0, T).action is Action.WAIT
    assert decide(held("other", duration=60), memory, "me", 60.0, T).action is Action.TAKE_OVER


def test_the_leader_renews_until_the_deadline_then_has_lost_whatever_the_lease_says():
    leading = Memory(renewed_at=100.0)
    assert decide(held("me"), leading, "me", 109.9, T).action is Action.RENEW
    lost = decide(held("me"), leading, "me", 110.0, T)
    assert lost.action is Action.LOST and "renew deadline 10 s" in lost.reason


@pytest.mark.parametrize("lease, says", [(None, "deleted"), (held("other"), "names other"), (held(""), "names nobody")])
def test_a_leader_that_finds_the_lease_elsewhere_has_lost(lease, says):
    decision = decide(lease, Memory(renewed_at=100.0), "me", 101.0, T)
    assert decision.action is Action.LOST and says in decision.reason


def test_a_lease_naming_us_whose_answer_was_lost_is_renewed():
    assert decide(held("me"), Memory(), "me", 1.0, T).action is Action.RENEW


@pytest.mark.parametrize("kwargs, says", [
    ({"retry_period": 0}, "above 0"),
    ({"renew_deadline": 2.0}, "1.2 x the retry period"),
    ({"lease_duration": 10.0}, "must exceed the renew deadline"),
])
def test_timings_that_could_give_two_leaders_are_refused(kwargs, says):
    with pytest.raises(ValueError, match=says):
        Timings(**kwargs)


# --------------------------------------------------------------------------------------------------
# Lease bodies and names


def test_create_take_over_and_renew_bodies():
    created = lease_manifest(Action.CREATE, LeaseRef("ns", "l"), "me", T, WALL, None)
    assert created["metadata"] == {"name": "l", "namespace": "ns"}  # no resourceVersion on a create
    assert created["spec"] == {"holderIdentity": "me", "leaseDurationSeconds": 15, "acquireTime": "2026-12-01T12:00:00.123456Z",
                               "renewTime": "2026-12-01T12:00:00.123456Z", "leaseTransitions": 0}
    taken = lease_manifest(Action.TAKE_OVER, LeaseRef("ns", "l"), "me", T, WALL, held("other", "9", transitions=4))
    assert taken["metadata"]["resourceVersion"] == "9" and taken["spec"]["leaseTransitions"] == 5
    assert taken["spec"]["acquireTime"] == "2026-12-01T12:00:00.123456Z"
    renewed = lease_manifest(Action.RENEW, LeaseRef("ns", "l"), "me", T, WALL, held("me", "10", transitions=5))
    assert renewed["spec"]["acquireTime"] == "2026-12-01T11:00:00.000000Z"  # kept: when this holder took it
    assert (renewed["spec"]["leaseTransitions"], renewed["metadata"]["resourceVersion"]) == (5, "10")
    with pytest.raises(ValueError):
        lease_manifest(Action.WAIT, LeaseRef("ns", "l"), "me", T, WALL, None)


def test_released_body_clears_the_holder_and_carries_the_version():
    released = released_manifest(LeaseRef("ns", "l"), WALL, held("me", "12", transitions=3))
    assert released["spec"]["holderIdentity"] == "" and released["spec"]["leaseTransitions"] == 3
    assert released["metadata"]["resourceVersion"] == "12"
    assert LeaseState.from_manifest({**released, "metadata": {**released["metadata"]}}).holder == ""


def test_lease_names_follow_the_scope():
    assert lease_name([]) == CLUSTER_WIDE_LEASE
    assert lease_name(["b", "a"]) == lease_name(["a", "b", "a"])  # same scope: the same Lease
    assert lease_name(["a"]) != lease_name(["a", "b"]) != lease_name(["b"])  # shards do not exclude each other
    assert lease_name(["team-*"]).startswith("drafter-operator-") and len(lease_name(["x"] * 3)) == 27


# --------------------------------------------------------------------------------------------------
# Never two leaders: a simulated apiserver and two candidates, every interleaving hypothesis finds.


class Apiserver:
    """One Lease with the apiserver's optimistic concurrency: a PUT must carry the current resourceVersion."""

    def __init__(self):
        self.lease: dict | None = None
        self.version = 0

    def read(self) -> LeaseState | None:
        return LeaseState.from_manifest(self.lease) if self.lease else None

    def write(self, body: dict, create: bool) -> bool:
        if create and self.lease is not None:
            return False  # 409 AlreadyExists
        if not create and (self.lease is None or body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]):
            return False  # 409 Conflict (or 404)
        self.version += 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return True


@dataclass
class Candidate:
    identity: str
    rate: float  # how fast its clock runs against true time
    offset: float
    memory: Memory = field(default_factory=Memory)
    snapshot: tuple | None = None  # (LeaseState | None,) once read, until decided on
    in_flight: tuple | None = None  # (body, create, sent_at) until it lands
    alive: bool = True
    cut_off: bool = False  # partitioned from the apiserver: its requests time out

    def clock(self, true_now: float) -> float:
        return self.offset + self.rate * true_now

    def believes_it_leads(self, true_now: float, timings: Timings) -> bool:
        # Its watchdog ends the process at the deadline; LOST ends it at once (alive False).
        return (self.alive and self.memory.leading
                and self.clock(true_now) - self.memory.renewed_at < timings.renew_deadline)

    def deadline(self, timings: Timings) -> float:
        """When (true time) its watchdog will end it unless it renews."""
        return (self.memory.renewed_at + timings.renew_deadline - self.offset) / self.rate


@dataclass
class History:
    leaders: list[str] = field(default_factory=list)  # who led, in turn
    #: Of all handovers from a leader that did not crash or release (its renewals stopped landing), the
    #: least time between its end and the new leader's start, negated (positive would be an overlap, which
    #: the simulation refuses). Hypothesis is steered to make it large: to hunt for the edge.
    closest: float = -1e9


#: One action of one candidate, then time passes. A round is read, decide and land back to back; the single
#: steps interleave the two candidates' reads and writes (a decision on a stale read, a write landing late).
#: "alone": only this candidate runs, a round every 0.5 to 2 s for up to 24 s, while the other is silent
#: (stalled, or cut off): the handovers by expiry, which random single steps rarely reach.
ACTION = st.tuples(st.sampled_from(["read", "decide", "land", "round", "round", "alone", "crash", "restart", "release",
                                    "cut off", "reconnect"]),
                   st.integers(0, 1), st.floats(0.0, 6.0))


def expand(actions) -> list:
    steps = []
    for kind, who, seconds in actions:
        if kind == "alone":
            steps += rounds(who, times=int(seconds * 2) + 1, every=0.5 + seconds / 4)
        else:
            steps += [("read", who), ("decide", who), ("land", who)] if kind == "round" else [(kind, who)]
        steps.append(("tick", seconds))
    return steps


def simulate(steps, rates=(1.0, 1.0), offsets=(0.0, 0.0), timings: Timings = T) -> History:
    """Run the steps; fail at the first moment two candidates believe they lead.

    read: GET the Lease. decide: decide on the last read and send the write it asks for. land: the
    apiserver applies that write (409 unless the resourceVersion still matches) and the sender learns the
    answer. A process that crashed or restarted may still have a write on the wire: it lands too. A
    process cut off from the apiserver reads nothing and its writes are lost, while it keeps running."""
    apiserver = Apiserver()
    generation = [0, 0]
    candidates = [Candidate(f"c{i}-0", rates[i], offsets[i]) for i in range(2)]
    stray: list[list[tuple]] = [[], []]  # writes sent by processes that have since been replaced
    now, history = 0.0, History()
    ends: dict[str, float] = {}  # when each leader that neither crashed nor released stops believing it leads
    for kind, arg in steps:
        if kind == "tick":
            now += arg
        else:
            c = candidates[arg]
            if kind == "read" and c.alive and not c.cut_off:
                c.snapshot = (apiserver.read(),)
            elif kind == "decide" and c.alive and c.snapshot is not None and c.in_flight is None:
                (lease,), c.snapshot = c.snapshot, None
                believed = c.believes_it_leads(now, timings)
                decision = decide(lease, c.memory, c.identity, c.clock(now), timings)
                c.memory = decision.memory
                if decision.action is Action.LOST:
                    c.alive = False  # the process exits
                    if believed:
                        ends[c.identity] = now
                elif decision.action is not Action.WAIT:  # the write carries the version it read
                    body = lease_manifest(decision.action, LeaseRef("ns", "l"), c.identity, timings, WALL, lease)
                    c.in_flight = (body, decision.action is Action.CREATE, c.clock(now))
            elif kind == "land":
                for body, create, _ in stray[arg]:
                    apiserver.write(body, create)
                stray[arg] = []
                if c.in_flight is not None:
                    body, create, sent_at = c.in_flight
                    c.in_flight = None
                    if not c.cut_off and apiserver.write(body, create) and c.alive:
                        c.memory = c.memory.written(sent_at)
            elif kind == "release" and c.believes_it_leads(now, timings):
                c.memory, c.alive = Memory(), False  # stops acting first, then clears the holder, then exits
                ends.pop(c.identity, None)
                current = None if c.cut_off else apiserver.read()
                if current and current.holder == c.identity:
                    apiserver.write(released_manifest(LeaseRef("ns", "l"), WALL, current), create=False)
            elif kind in ("cut off", "reconnect"):
                c.cut_off = kind == "cut off"
            elif kind == "crash":
                ends.pop(c.identity, None)
                c.alive = False
            elif kind == "restart" and not c.alive:
                if c.in_flight:
                    stray[arg].append(c.in_flight)
                generation[arg] += 1
                candidates[arg] = Candidate(f"c{arg}-{generation[arg]}", c.rate, c.offset)
        believers = [c for c in candidates if c.believes_it_leads(now, timings)]
        assert len(believers) <= 1, f"two leaders at t={now:.2f}: {[c.identity for c in believers]}"
        for c in believers:
            if not history.leaders or history.leaders[-1] != c.identity:
                history.leaders.append(c.identity)
                before = [end - now for who, end in ends.items() if who != c.identity]
                history.closest = max([history.closest, *before])
            ends[c.identity] = c.deadline(timings)
    return history


def rounds(who: int, times: int = 1, every: float = 2.0) -> list:
    """`times` full rounds (read, decide, land) of candidate `who`, `every` seconds apart."""
    return [step for _ in range(times) for step in (("read", who), ("decide", who), ("land", who), ("tick", every))]


def test_the_simulation_hands_over_after_a_crash_and_after_a_release():
    # c0 creates and leads; c1 stands by; c0 crashes; c1 takes over once the Lease was unchanged 15 s.
    crashed = rounds(0) + rounds(1) + rounds(0, 3) + rounds(1) + [("crash", 0)] + rounds(1, 8)
    assert simulate(crashed).leaders == ["c0-0", "c1-0"]
    # The same, but c0 releases: c1 takes over at its next round.
    released = rounds(0) + rounds(1) + [("release", 0)] + rounds(1)
    assert simulate(released).leaders == ["c0-0", "c1-0"]


def test_a_take_over_decided_on_a_stale_read_is_refused_by_the_resource_version():
    """c1 has watched version 1 for 15 s and decides to take over on a read from just before c0's late
    renewal landed: its PUT carries version 1, the apiserver answers 409, c0 keeps leading."""
    steps = (rounds(0) + rounds(1, every=7.0)  # t=0 c0 creates; t=2 c1 sees version 1; t=9:
             + [("read", 0), ("decide", 0), ("tick", 7.9)]  # c0 sends a renewal that lands only at t=17
             + [("read", 1), ("tick", 0.1), ("land", 0)]  # c1 reads version 1 at t=16.9, then c0's renewal lands
             + [("decide", 1), ("land", 1)])  # c1: unchanged for 15 s, take over with version 1
    history = simulate(steps)
    assert history.leaders == ["c0-0"]


def test_the_simulation_catches_timings_that_allow_two_leaders():
    """The harness can fail: a lease duration shorter than the renew deadline lets c1 take over while c0,
    whose renewals are not landing, still acts."""
    unsafe = object.__new__(Timings)
    for name, value in (("lease_duration", 5.0), ("renew_deadline", 10.0), ("retry_period", 2.0)):
        object.__setattr__(unsafe, name, value)
    steps = rounds(0) + rounds(1, every=0) + [("tick", 6.0)] + rounds(1)
    with pytest.raises(AssertionError, match="two leaders"):
        simulate(steps, timings=unsafe)


@settings(max_examples=300, deadline=None)
@given(actions=st.lists(ACTION, max_size=40), rates=st.tuples(st.floats(0.9, 1.1), st.floats(0.9, 1.1)),
       offsets=st.tuples(st.floats(0, 1000), st.floats(0, 1000)))
def test_never_two_leaders(actions, rates, offsets):
    """Clocks may run 10 % apart. Steered towards histories with handovers (most random ones have none)."""
    history = simulate(expand(actions), rates, offsets)
    target(float(len(history.leaders)), label="leaders in turn")
    target(history.closest, label="closest handover")
