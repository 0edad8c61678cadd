"""`drafter-operator run` in its named parts: the start-up checks, the memory-release setting, the side
services, kopf under a signal, and the Lease around it (controllers/runner.py). kopf, the apiserver and
the Lease are stand-ins here; test_leader_election.py covers the Lease itself."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers import leader_election, runner
from drafter_operator.controllers.leadership import LeaseRef


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_the_memory_release_interval_is_read_as_seconds(seconds):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRAFTER_MEMORY_RELEASE_SECONDS", repr(seconds))
        assert runner.memory_release_seconds() == seconds


def test_a_memory_release_setting_that_is_no_number_is_refused_naming_it(monkeypatch):
    monkeypatch.delenv("DRAFTER_MEMORY_RELEASE_SECONDS", raising=False)
    assert runner.memory_release_seconds() == 60.0
    monkeypatch.setenv("DRAFTER_MEMORY_RELEASE_SECONDS", "soon")
    assert "DRAFTER_MEMORY_RELEASE_SECONDS='soon' is not a number" in runner.memory_release_seconds()


@pytest.fixture
def apiserver(monkeypatch):
    """missing_access answers what ``denied`` holds; no client is built."""
    from drafter_operator import kube, permissions
    denied: list = []
    monkeypatch.setattr(kube, "load_api_client", lambda: None)
    monkeypatch.setattr(kube, "Kube", lambda client: "kube")
    monkeypatch.setattr(permissions, "missing_access", lambda k, namespaces, lease: list(denied))
    monkeypatch.setattr(permissions, "explain_missing", lambda missing, namespaces: f"denied: {missing}")
    return denied


def test_startup_stops_on_a_denied_permission_or_a_malformed_tenant_setting(apiserver, monkeypatch):
    assert runner.startup_problem([], None) is None
    apiserver.append("list pods")
    assert runner.startup_problem([], None) == "denied: ['list pods']"
    apiserver.clear()
    from drafter_operator.acceptance import prometheus_source
    monkeypatch.setattr(prometheus_source, "endpoints_from_env", lambda: (_ for _ in ()).throw(ValueError("bad URL")))
    assert runner.startup_problem([], None) == "drafter-operator: bad URL"


def test_run_exits_2_before_kopf_on_a_startup_problem_or_a_bad_release_setting(apiserver, monkeypatch, capsys):
    monkeypatch.setattr(runner, "start_side_services", lambda *a: pytest.fail("started"))
    apiserver.append("get leases")
    assert runner.run([], leader_election=runner.LeaderElection(enabled=False)) == 2
    assert "denied" in capsys.readouterr().err
    apiserver.clear()
    monkeypatch.setenv("DRAFTER_MEMORY_RELEASE_SECONDS", "x")
    assert runner.run([], leader_election=runner.LeaderElection(enabled=False)) == 2


def test_shards_without_leader_election_are_refused_before_anything_starts(apiserver, monkeypatch, capsys):
    monkeypatch.setattr(runner, "start_side_services", lambda *a: pytest.fail("started"))
    assert runner.run([], leader_election=runner.LeaderElection(enabled=False, shards=2)) == 2
    assert "--shards needs leader election" in capsys.readouterr().err


def test_side_services_start_only_what_is_asked(monkeypatch):
    started = []
    monkeypatch.setattr(runner.logs, "configure", lambda fmt, verbose: started.append(("logs", fmt)))
    monkeypatch.setattr(runner, "start_http_server", lambda port, addr: started.append(("metrics", port)))
    monkeypatch.setattr(runner.memory_release, "PeriodicRelease",
                        lambda s: type("R", (), {"start": lambda self: started.append(("release", s))})())
    runner.start_side_services("json", False, runner.Address("0.0.0.0", 0), 0)
    assert started == [("logs", "json")]
    runner.start_side_services("text", True, runner.Address("0.0.0.0", 8080), 30.0)
    assert started[1:] == [("logs", "text"), ("metrics", 8080), ("release", 30.0)]


def test_lead_never_starts_kopf_after_a_signal_and_cancels_it_on_one(monkeypatch):
    runs = []

    async def operator(**kwargs):
        runs.append(kwargs["namespaces"])
        await asyncio.sleep(3600)
    monkeypatch.setattr(runner.kopf, "operator", operator)
    stopped = threading.Event()
    stopped.set()
    asyncio.run(runner.lead(["a"], None, runner.kopf.Memo(), (), stopped))
    assert runs == []

    async def signalled():
        task = asyncio.create_task(runner.lead(["a"], None, runner.kopf.Memo(), (signal.SIGUSR1,), threading.Event()))
        await asyncio.sleep(0.05)
        signal.raise_signal(signal.SIGUSR1)
        await asyncio.wait_for(task, 60)
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        asyncio.run(signalled())
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert runs == [["a"]]


class Elector:
    def __init__(self, leading=True, missing=False):
        self.leading, self.missing, self.calls = leading, missing, []

    def acquire(self, stop):
        self.calls.append("acquire")
        if self.missing:
            raise leader_election.LeaseNamespaceMissing("namespace ops not found")
        return self.leading

    def start_renewing(self):
        self.calls.append("renew")

    def release(self):
        self.calls.append("release")


class Shards:
    """leader_election.ShardElection over fakes: ``elector`` leads shard ``index`` of as many as it is given."""

    def __init__(self, elector: Elector, index: int = 0):
        self.elector, self.index = elector, index

    def __call__(self, electors):
        self.electors = [self.elector] * len(electors)
        return self

    where = "ops/lease"

    def acquire(self, stop):
        return self.index if self.elector.acquire(stop) else None


@pytest.mark.parametrize("elector, code, calls", [
    (Elector(), 0, ["acquire", "renew", "lead", "release"]),
    (Elector(leading=False), 0, ["acquire"]),
    (Elector(missing=True), 2, ["acquire"]),
])
def test_run_leading_leads_only_with_the_lease_and_releases_it_after(monkeypatch, elector, code, calls):
    monkeypatch.setattr(signal, "signal", recording_signal(monkeypatch))
    from drafter_operator import kube
    monkeypatch.setattr(kube, "load_api_client", lambda: None)
    monkeypatch.setattr(leader_election, "ShardElection", Shards(elector))

    async def lead(*args):
        elector.calls.append("lead")
    monkeypatch.setattr(runner, "lead", lead)
    assert runner.run_leading([], None, [LeaseRef("ops", "lease")], None, runner.Address("0.0.0.0", 0)) == code
    assert elector.calls == calls


def test_the_shard_it_leads_is_what_its_handlers_filter_by(monkeypatch):
    """Of two shard Leases it took the second: kopf runs with memo.shard = shard 1 of 2."""
    monkeypatch.setattr(signal, "signal", recording_signal(monkeypatch))
    from drafter_operator import kube
    from drafter_operator.controllers.sharding import Shard
    monkeypatch.setattr(kube, "load_api_client", lambda: None)
    monkeypatch.setattr(leader_election, "ShardElection", Shards(Elector(), index=1))
    seen = []

    async def lead(namespaces, liveness, memo, signals, stop):
        seen.append(memo.shard)
    monkeypatch.setattr(runner, "lead", lead)
    leases = [LeaseRef("ops", "l-shard-0-of-2"), LeaseRef("ops", "l-shard-1-of-2")]
    assert runner.run_leading([], None, leases, None, runner.Address("0.0.0.0", 0)) == 0
    assert seen == [Shard(1, 2)]


def recording_signal(monkeypatch):
    """signal.signal that only records what it is given, returning the handler it replaces."""
    handlers = {signal.SIGTERM: "term", signal.SIGINT: "int"}

    def install(sig, handler):
        previous, handlers[sig] = handlers[sig], handler
        return previous
    install.handlers = handlers
    return install


def test_the_signal_handlers_come_back_once_the_lease_is_released(monkeypatch):
    from drafter_operator import kube
    install = recording_signal(monkeypatch)
    monkeypatch.setattr(signal, "signal", install)
    monkeypatch.setattr(kube, "load_api_client", lambda: None)
    monkeypatch.setattr(leader_election, "ShardElection", Shards(Elector()))

    async def lead(*args):
        assert install.handlers[signal.SIGTERM] != "term"  # standing by and leading: ours
    monkeypatch.setattr(runner, "lead", lead)
    assert runner.run_leading([], None, [LeaseRef("ops", "lease")], None, runner.Address("0.0.0.0", 0)) == 0
    assert install.handlers == {signal.SIGTERM: "term", signal.SIGINT: "int"}
