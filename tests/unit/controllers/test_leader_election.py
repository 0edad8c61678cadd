"""Leader election's apply side (controllers/leader_election.py) against an in-memory Lease API with the
apiserver's optimistic concurrency: create, renew, 409s, take-over after expiry, release, the watchdog
that ends a leader at its renew deadline, the stand-by /healthz, the Lease namespace's defaults and the
`run` options. The real apiserver: tests/e2e/test_two_operators.py."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.cli import build_parser
from drafter_operator.controllers import leader_election as election
from drafter_operator.controllers.leadership import Action, LeaseRef, Memory, Timings, request_timeout
from drafter_operator.kube import ApiError
from drafter_operator.monitoring import operator_metrics
from tests.processes import free_port

LEASES = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
LEASE = LeaseRef("ns", "lease")


class LeaseApi:
    """The Lease endpoints of an apiserver, in memory: 404, 409 AlreadyExists, 409 Conflict on a stale
    resourceVersion. `down` makes every request fail as a dropped connection would."""

    def __init__(self):
        self.leases: dict[str, dict] = {}
        self.version = 0
        self.down = False
        self.calls: list[tuple[str, str]] = []

    def request(self, method, path, body=None, timeout=None):
        self.calls.append((method, path))
        if self.down:
            raise ConnectionError("apiserver unreachable")
        if method == "POST":
            assert path == LEASES and "resourceVersion" not in body["metadata"]
            name = body["metadata"]["name"]
            if name in self.leases:
                raise ApiError(409, "Conflict", json.dumps({"reason": "AlreadyExists"}))
            return self._store(name, body)
        name = path.removeprefix(LEASES + "/")
        if method == "GET":
            if name not in self.leases:
                raise ApiError(404, "Not Found", "{}")
            return self.leases[name]
        assert method == "PUT"
        current = self.leases.get(name)
        if current is None:
            raise ApiError(404, "Not Found", "{}")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", json.dumps({"reason": "Conflict"}))
        return self._store(name, body)

    def _store(self, name, body):
        self.version += 1
        self.leases[name] = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return self.leases[name]

    def holder(self, name="lease") -> str:
        return self.leases[name]["spec"]["holderIdentity"]


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(api, identity, clock, timings=Timings(), on_lost=None):
    return election.LeaderElector(api, LEASE, identity, timings, now=clock,
                                  on_lost=on_lost or (lambda reason: pytest.fail(f"unexpected loss: {reason}")))


def test_first_creates_second_stands_by_and_renewals_move_the_version():
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.step().action is Action.CREATE and a.memory.leading
    assert api.holder() == "a" and api.leases["lease"]["spec"]["leaseDurationSeconds"] == 15
    assert b.step().action is Action.WAIT and not b.memory.leading
    version = api.leases["lease"]["metadata"]["resourceVersion"]
    clock.t += 2
    assert a.step().action is Action.RENEW and a.memory.renewed_at == clock.t
    assert api.leases["lease"]["metadata"]["resourceVersion"] != version


def test_two_candidates_creating_at_once_one_wins_the_other_gets_409():
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    # Both read "no Lease" before either wrote: b's POST is the second and is refused.
    original = api.request
    seen_none = []

    def request(method, path, body=None, timeout=None):
        if method == "GET" and len(seen_none) < 2:
            seen_none.append(path)
            raise ApiError(404, "Not Found", "{}")
        return original(method, path, body, timeout)

    api.request = request
    assert a.step().action is Action.CREATE and b.step().action is Action.CREATE
    assert a.memory.leading and not b.memory.leading and api.holder() == "a"


def test_the_standby_takes_over_only_after_the_lease_stayed_unchanged_for_its_duration():
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    a.step()
    b.step()  # sees a's version at t
    clock.t += 14.9
    assert b.step().action is Action.WAIT
    clock.t += 0.1
    assert b.step().action is Action.TAKE_OVER and b.memory.leading and api.holder() == "b"
    assert api.leases["lease"]["spec"]["leaseTransitions"] == 1
    # a comes back (it was stalled): long past its deadline, it has lost whatever it reads.
    clock.t += 1
    decision = a.step()
    assert decision.action is Action.LOST and "renew deadline" in decision.reason and api.holder() == "b"


def test_release_lets_the_standby_take_over_at_its_next_round():
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    a.step()
    b.step()
    assert a.release() and api.holder() == ""
    assert api.leases["lease"]["spec"]["leaseDurationSeconds"] == 1
    assert b.step().action is Action.TAKE_OVER and api.holder() == "b"
    assert not a.release()  # no longer leading: nothing to release


def test_release_leaves_a_lease_someone_else_took():
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    a.step()
    b.step()
    clock.t += 9  # a still within its deadline, but b has taken the Lease meanwhile (b's clock ran ahead)
    api.leases["lease"]["spec"]["holderIdentity"] = "b"
    assert not a.release() and api.holder() == "b"


def test_an_unreachable_apiserver_is_a_wait_for_a_candidate_and_a_loss_past_the_deadline_for_a_leader():
    api, clock = LeaseApi(), Clock()
    a = elector(api, "a", clock)
    a.step()
    api.down = True
    clock.t += 5
    assert a.step().action is Action.WAIT and a.memory.leading  # the deadline has not passed
    clock.t += 5
    decision = a.step()
    assert decision.action is Action.LOST and "past the renew deadline" in decision.reason
    candidate = elector(api, "c", clock)
    assert candidate.step().action is Action.WAIT and not candidate.memory.leading


def test_a_write_whose_answer_is_lost_does_not_count_as_leading():
    api, clock = LeaseApi(), Clock()
    a = elector(api, "a", clock)
    original = api.request

    def request(method, path, body=None, timeout=None):
        answer = original(method, path, body, timeout)
        if method == "POST":
            raise TimeoutError("read timed out")  # stored, but the answer never came
        return answer

    api.request = request
    a.step()
    assert not a.memory.leading and api.holder() == "a"
    assert a.step().action is Action.RENEW and a.memory.leading  # the next round finds its own name


def test_a_missing_lease_namespace_is_a_start_up_error_naming_the_fix():
    api = LeaseApi()

    def request(method, path, body=None, timeout=None):
        raise ApiError(404, "Not Found", json.dumps({"message": 'namespaces "ns" not found'}))

    api.request = request
    with pytest.raises(election.LeaseNamespaceMissing, match="Lease namespace ns does not exist.*--lease-namespace"):
        elector(api, "a", Clock()).acquire(threading.Event())


# --------------------------------------------------------------------------------------------------
# the threads: renewer and watchdog, with real time and short timings


FAST = Timings(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)


def test_the_renewer_keeps_the_lease_and_the_watchdog_ends_a_leader_that_cannot_renew():
    # Real threads on a machine that may be loaded: every wait below is a guard against hanging, and what
    # is asserted is the order of events on the elector's own clock, never how long they took.
    api = LeaseApi()
    lost = threading.Event()
    reasons, lost_at = [], []
    a = election.LeaderElector(api, LEASE, "a", FAST, now=time.monotonic,
                               on_lost=lambda r: (reasons.append(r), lost_at.append(time.monotonic()), lost.set()))
    assert a.acquire(threading.Event())
    a.start_renewing()
    first = api.leases["lease"]["metadata"]["resourceVersion"]
    deadline = time.monotonic() + 30
    while api.leases["lease"]["metadata"]["resourceVersion"] == first:
        assert time.monotonic() < deadline, "the renewer never renewed"
        time.sleep(0.05)
    assert not lost.is_set()
    api.down = True
    assert lost.wait(30), "the watchdog did not end the leader"
    # Never early: the deadline counts from the last renewal that succeeded.
    assert lost_at[0] - a.memory.renewed_at >= FAST.renew_deadline
    assert "renew deadline" in reasons[0]
    a.release()


def test_the_renewer_gives_up_at_once_when_the_lease_names_someone_else():
    api = LeaseApi()
    lost = threading.Event()
    reasons = []
    a = election.LeaderElector(api, LEASE, "a", FAST, on_lost=lambda r: (reasons.append(r), lost.set()))
    a.acquire(threading.Event())
    a.start_renewing()
    api.leases["lease"]["spec"]["holderIdentity"] = "intruder"
    assert lost.wait(30) and "names intruder" in reasons[0]
    a.release()


def test_acquire_stands_by_until_stopped_and_the_gauge_says_so():
    api = LeaseApi()
    holder = election.LeaderElector(api, LEASE, "holder", FAST, on_lost=lambda r: None)
    assert holder.acquire(threading.Event())
    assert operator_metrics.LEADER._value.get() == 1.0
    standby = election.LeaderElector(api, LEASE, "standby", FAST, on_lost=lambda r: None)
    holder.start_renewing()
    stop = threading.Event()
    threading.Timer(0.8, stop.set).start()
    assert not standby.acquire(stop)  # the holder renews: never taken over
    assert operator_metrics.LEADER._value.get() == 0.0
    holder.release()
    assert standby.acquire(threading.Event()) and api.holder() == "standby"


# --------------------------------------------------------------------------------------------------
# stand-by health, identity, namespace, options


def test_standby_health_answers_healthz_and_frees_its_port():
    port = free_port()
    health = election.StandbyHealth("127.0.0.1", port, str(LeaseRef("ns", "l")))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert response.status == 200
            assert json.loads(response.read()) == {"leaderElection": "standby", "lease": "ns/l"}
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert missing.value.code == 404
    finally:
        health.stop()
    import socket

    with socket.socket() as s:  # kopf binds the same port next
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_holder_identity_names_the_pod_and_pid_and_is_unique(monkeypatch):
    import os

    monkeypatch.setenv("POD_NAME", "drafter-operator-7d9f-x2")
    first, second = election.holder_identity(), election.holder_identity()
    assert first.startswith(f"drafter-operator-7d9f-x2_{os.getpid()}_") and first != second


def test_lease_namespace_defaults(monkeypatch, tmp_path):
    monkeypatch.setattr(election, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    monkeypatch.setenv("POD_NAMESPACE", "drafter-system")
    assert election.default_lease_namespace() == "drafter-system"
    monkeypatch.delenv("POD_NAMESPACE")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "team-a"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}], "users": [{"name": "u", "user": {}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert election.default_lease_namespace() == "team-a"
    sa = tmp_path / "namespace"
    sa.write_text("in-pod\n")
    monkeypatch.setattr(election, "SERVICE_ACCOUNT_NAMESPACE", sa)
    assert election.default_lease_namespace() == "in-pod"
    monkeypatch.setattr(election, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert election.default_lease_namespace() == "default"


def test_run_options():
    args = build_parser().parse_args(["run"])
    assert (args.leader_election, args.lease_namespace, args.lease_name) == (True, None, None)
    args = build_parser().parse_args(["run", "--no-leader-election", "--lease-namespace", "ops",
                                      "--lease-name", "drafter.shard-1"])
    assert (args.leader_election, args.lease_namespace, args.lease_name) == (False, "ops", "drafter.shard-1")


def test_shard_options(capsys):
    from drafter_operator.cli import main

    assert build_parser().parse_args(["run"]).shards == 1
    assert build_parser().parse_args(["run", "--shards", "3"]).shards == 3
    # A Lease name that leaves no room for the shard suffix within 253 characters: refused before the apiserver.
    assert main(["run", "--shards", "2", "--lease-name", ".".join(["a" * 60] * 4)]) == 2
    assert "leaves no room for the shard suffix" in capsys.readouterr().err


def test_lease_timings_default_to_client_gos_and_follow_the_flags():
    from drafter_operator.cli import lease_timings

    assert lease_timings(build_parser().parse_args(["run"])) == Timings()
    args = build_parser().parse_args(["run", "--lease-duration", "30", "--renew-deadline=20", "--retry-period", "2.5"])
    assert lease_timings(args) == Timings(lease_duration=30, renew_deadline=20, retry_period=2.5)


@pytest.mark.parametrize("flags, says", [
    (["--renew-deadline", "20"], "lease duration 15 s must exceed the renew deadline (20 s)"),
    (["--retry-period", "9"], "renew deadline 10 s must exceed 1.2 x the retry period (9 s)"),
])
def test_lease_timings_that_cannot_keep_one_leader_are_refused_naming_the_flags(flags, says):
    from drafter_operator.cli import lease_timings

    with pytest.raises(ValueError) as refused:
        lease_timings(build_parser().parse_args(["run", *flags]))
    message = str(refused.value)
    assert says in message and "--lease-duration" in message and "--renew-deadline" in message
    assert "lease duration > renew deadline > 1.2 x retry period" in message


def test_run_with_lease_timings_that_do_not_fit_exits_2_before_reaching_the_apiserver(capsys):
    from drafter_operator.cli import main

    assert main(["run", "--renew-deadline", "20"]) == 2
    assert "--renew-deadline 20" in capsys.readouterr().err


@pytest.mark.parametrize("option, value, says", [
    ("--lease-name", "Drafter_Lease", "an object name is lowercase"),
    ("--lease-namespace", "ops.team", "a namespace name is lowercase"),
    ("--renew-deadline", "soon", "give seconds as a number"),
    ("--lease-duration", "0", "must be a finite number of seconds above 0"),
    ("--retry-period", "inf", "must be a finite number of seconds above 0"),
    ("--shards", "0", "a whole number of shards from 1 to 1024"),
    ("--shards", "two", "a whole number of shards from 1 to 1024"),
])
def test_bad_lease_options_are_refused_naming_the_option(capsys, option, value, says):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", option, value])
    err = capsys.readouterr().err
    assert f"{option} {value!r}" in err and says in err


class SlowLeaseApi(LeaseApi):
    """Answers only requests allowed at least `takes` seconds, as a busy apiserver does; records each timeout."""

    def __init__(self, takes: float):
        super().__init__()
        self.takes, self.timeouts = takes, []

    def request(self, method, path, body=None, timeout=None):
        self.timeouts.append(timeout)
        if timeout is not None and timeout < self.takes:
            raise TimeoutError(f"read timed out ({timeout} s)")
        return super().request(method, path, body, timeout)


def test_a_leader_keeps_the_lease_through_an_apiserver_slower_than_the_retry_period():
    # Under a 500-serving cold start the apiserver answered the renewals in about 3 s: with a 2-s bound on
    # each request every renewal failed and the operator exited 10 s after it started.
    api, clock = SlowLeaseApi(takes=3.0), Clock()
    a = elector(api, "a", clock)
    api.takes = 0  # the Lease is created while the apiserver is idle
    a.step()
    api.takes = 3.0
    for _ in range(10):
        clock.t += 2
        assert a.step().action is Action.RENEW and a.memory.leading
    assert min(api.timeouts[2:]) > 3.0  # after the candidate's GET and POST


@given(st.floats(0, 30), st.floats(0.5, 5))
def test_a_leaders_request_may_take_until_its_renew_deadline_and_a_candidates_one_retry_period(since, retry):
    timings = Timings(lease_duration=4 * retry + 1, renew_deadline=3 * retry, retry_period=retry)
    leader = Memory(renewed_at=100.0)
    timeout = request_timeout(leader, 100.0 + since, timings)
    assert timeout == pytest.approx(max(0.1, timings.renew_deadline - since))
    assert since + timeout <= timings.renew_deadline + 1e-9 or timeout == 0.1  # never waits past the deadline
    assert request_timeout(Memory(), 100.0 + since, timings) == retry
