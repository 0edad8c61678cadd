"""The named steps of a serving's loop (controllers/handlers.py): reading the drain, one measurement (the
acceptance monitor's), stopping."""

from __future__ import annotations

import asyncio
import datetime as dt
from concurrent.futures import Future

from drafter_operator.acceptance.measurement import AcceptanceMonitor

from drafter_operator.controllers import handlers
from drafter_operator.controllers.serving.observe import Observed
from drafter_operator.constants import PREVIOUS_REVISION_ANNOTATION, REVISION_LABEL


def draining_observed() -> Observed:
    service = {"metadata": {"annotations": {PREVIOUS_REVISION_ANNOTATION: "old"}},
               "spec": {"selector": {REVISION_LABEL: "new"}}}
    return Observed(deployments={"old": {}, "new": {}}, service=service, ready_pod_ips={"old": ["10.0.0.1"]})


def test_read_drain_asks_the_draining_revisions_engines_and_records_their_answer(monkeypatch):
    asked = []

    async def in_flight(engine, ips, port):
        asked.append((engine, ips, port))
        return 3

    monkeypatch.setattr(handlers, "requests_in_flight", in_flight)
    observed = draining_observed()
    snapshot = {"spec": {"engine": "vllm"}, "status": {"revisions": [{"name": "old", "engine": "sglang"}]}}
    asyncio.run(handlers.read_drain(observed, snapshot))
    assert asked == [("sglang", ["10.0.0.1"], 30000)] and observed.in_flight == {"old": 3}


def test_read_drain_leaves_in_flight_unknown_when_nothing_drains_or_no_answer(monkeypatch):
    async def no_answer(engine, ips, port):
        return None

    monkeypatch.setattr(handlers, "requests_in_flight", no_answer)
    observed = draining_observed()
    asyncio.run(handlers.read_drain(observed, {"spec": {"engine": "vllm"}}))
    assert observed.in_flight == {}
    quiet = Observed()
    asyncio.run(handlers.read_drain(quiet, {"spec": {"engine": "vllm"}}))
    assert quiet.in_flight == {}


class Monitor:
    def __init__(self):
        self.forgot = 0

    def forget(self):
        self.forgot += 1


class CountingMonitor(AcceptanceMonitor):
    def __init__(self):
        super().__init__("team", "kimi")
        self.forgot = 0

    def forget(self):
        self.forgot += 1
        super().forget()


def test_measure_forgets_the_watch_when_nothing_is_watched():
    monitor = CountingMonitor()
    assert asyncio.run(monitor.measure(None, [], dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))) is None
    assert monitor.forgot == 1


def test_stop_cancels_the_tasks_and_forgets_again_when_a_running_reconcile_ends(monkeypatch):
    forgotten = []
    monkeypatch.setattr(handlers.operator_metrics, "forget_serving", lambda ns, name: forgotten.append((ns, name)))
    monitor = Monitor()

    async def scenario():
        task = asyncio.create_task(asyncio.sleep(60))
        running: Future = Future()
        await handlers.stop_serving_loop({task}, monitor, {running}, "team", "kimi")
        assert task.cancelled() and forgotten == [("team", "kimi")]
        running.set_result(None)
        assert forgotten == [("team", "kimi")] * 2 and monitor.forgot == 2

    asyncio.run(scenario())


def test_a_measurement_resumes_from_what_the_body_records_for_the_watched_revision():
    from drafter_operator.acceptance import verdict as a
    from drafter_operator.acceptance.measurement import Incarnation, incarnation, persisted_verdict
    from drafter_operator.controllers.serving.acceptance import Watched

    status = {"acceptance": {"revision": "r1"},
              "conditions": [{"type": "Degraded", "status": "True", "reason": a.LOW_RATE, "message": "low",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    body = {"metadata": {"uid": "u1"}, "status": status}
    recorded = incarnation(body, Watched(spec=None, revision="r1"))
    assert recorded == Incarnation(uid="u1", verdict=persisted_verdict(status, "r1"), drift=None)
    assert recorded.verdict.degraded
    assert incarnation(body, Watched(spec=None, revision="r2")) == Incarnation(uid="u1")  # another revision's
    assert incarnation(body, None) == Incarnation(uid="u1")
