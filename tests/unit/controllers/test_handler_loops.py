"""The watch-event handlers drive the per-object loops: a serving's loop starts at its first event, reads
the body of its latest one, and stops when it is being deleted; unfinished benchmarks and trainings are
reconciled every few seconds until they finish. The reconcilers are stand-ins; the handlers, the loop
registry and controllers/serving/loop.py are the operator's own."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import kopf
import pytest

from drafter_operator.controllers import handlers
from drafter_operator.controllers.object_loops import ObjectLoops
from drafter_operator.controllers.serving.apply import Applied
from drafter_operator.controllers.serving.loop import Wakeups


class Reconciles:
    """Records what each reconcile saw; stands in for the serving, benchmark and training reconcilers."""

    def __init__(self) -> None:
        self.seen: list = []

    def reconcile(self, *args):  # serving: (body, post_event, observed, acceptance); others: (ns, name, post_event)
        self.seen.append(args[0]["spec"]["drafter"] if isinstance(args[0], dict) else args[:2])
        return Applied(written=[], recheck_at=None)


@pytest.fixture
def memo():
    memo = kopf.Memo()
    memo.reconcile_pool = ThreadPoolExecutor(2)
    memo.reconciler, memo.benchmarks, memo.trainings = Reconciles(), Reconciles(), Reconciles()
    memo.loops = ObjectLoops(restart_backoff=60)
    memo.serving_bodies = {}
    memo.wakeups = Wakeups(catch_up=5)
    memo.recheck_seconds, memo.error_retry_seconds, memo.acceptance_seconds = 60.0, 5.0, 60.0
    yield memo
    memo.reconcile_pool.shutdown()


def serving(drafter: str, **metadata) -> kopf.Body:
    return kopf.Body({"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
                      "metadata": {"name": "kimi", "namespace": "team", "uid": "u1", "resourceVersion": drafter,
                                   **metadata},
                      "spec": {"drafter": drafter}})


async def serving_event(memo, event_type, body) -> None:
    no_children: dict = {}
    await handlers.serving_event(type=event_type, body=body, namespace="team", name="kimi", meta=body["metadata"],
                                 memo=memo, serving_deployments=no_children, serving_groups=no_children, serving_pods=no_children,
                                 serving_services=no_children, serving_benchmarks=no_children)


async def until(predicate, timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_servings_loop_starts_at_its_first_event_reads_the_latest_body_and_stops_at_deletion(memo):
    key = ("drafterservings", "team", "kimi")

    async def scenario():
        await serving_event(memo, None, serving("1"))  # kopf's initial listing
        await until(lambda: memo.reconciler.seen[-1:] == ["1"])
        await serving_event(memo, "MODIFIED", serving("2"))  # a spec change wakes the same loop
        await until(lambda: memo.reconciler.seen[-1:] == ["2"])
        assert len(memo.loops) == 1
        decided = len(memo.reconciler.seen)
        await serving_event(memo, "MODIFIED", serving("3", deletionTimestamp="2025-01-01T00:00:00Z"))
        assert key not in memo.loops
        await serving_event(memo, "DELETED", serving("3", deletionTimestamp="2025-01-01T00:00:00Z"))
        assert memo.serving_bodies == {}
        await asyncio.sleep(0.1)
        assert len(memo.reconciler.seen) == decided  # nothing decided for a serving being deleted

    asyncio.run(scenario())


@pytest.mark.parametrize("plural, handler, tick, reconciler, where", [
    ("drafterbenchmarks", handlers.benchmark_event, "BENCHMARK_TICK_SECONDS", "benchmarks", "state"),
    ("draftertrainings", handlers.training_event, "TRAINING_TICK_SECONDS", "trainings", "stage"),
])
def test_an_unfinished_object_is_reconciled_every_tick_until_it_finishes(memo, monkeypatch, plural, handler, tick,
                                                                         reconciler, where):
    monkeypatch.setattr(handlers, tick, 0.05)
    seen = getattr(memo, reconciler).seen
    key = (plural, "team", "run")

    async def event(event_type, state=None, **meta):
        await handler(type=event_type, namespace="team", name="run", meta=meta, status={where: state} if state else {},
                      memo=memo)

    async def scenario():
        await event(None, "Running")
        assert seen == [("team", "run")] and key in memo.loops  # the event itself reconciled
        await until(lambda: len(seen) >= 4)  # then the ticks
        await event("MODIFIED", "Succeeded")
        assert key not in memo.loops and key + ("finished",) in memo.loops  # only the slow resync is left
        count = len(seen)
        await asyncio.sleep(0.2)
        assert len(seen) == count  # no fast tick once finished
        await event("MODIFIED", "Running", deletionTimestamp="2025-01-01T00:00:00Z")
        assert key not in memo.loops and key + ("finished",) not in memo.loops  # being deleted: no ticks at all
        await event("DELETED", "Running")
        assert len(seen) == count + 1

    asyncio.run(scenario())


@pytest.mark.parametrize("plural, handler, reconciler, where", [
    ("drafterbenchmarks", handlers.benchmark_event, "benchmarks", "state"),
    ("draftertrainings", handlers.training_event, "trainings", "stage"),
])
def test_a_finished_object_is_still_resynced_now_and_then(memo, monkeypatch, plural, handler, reconciler, where):
    """Its cleanup may have been refused and the event that would retry it lost (the simulation's seed 305)."""
    monkeypatch.setattr(handlers, "FINISHED_RESYNC_SECONDS", 0.05)
    seen = getattr(memo, reconciler).seen

    async def scenario():
        await handler(type=None, namespace="team", name="run", meta={}, status={where: "Failed"}, memo=memo)
        await until(lambda: len(seen) >= 3)  # the event, then the resyncs
        await handler(type="DELETED", namespace="team", name="run", meta={}, status={where: "Failed"}, memo=memo)
        assert (plural, "team", "run", "finished") not in memo.loops

    asyncio.run(scenario())


class GoneServing:
    """A serving reconciler whose status write answers 404, and an apiserver that has `current` under its name."""

    def __init__(self, current: dict | None) -> None:
        self.current, self.attempts = current, 0
        self.kube = self

    def get(self, path: str) -> dict | None:
        assert path == "/apis/drafter.dev/v1alpha1/namespaces/team/drafterservings/kimi"
        return self.current

    def reconcile(self, *args):
        from drafter_operator.kube import ApiError

        self.attempts += 1
        raise ApiError(404, "Not Found", '{"message": "drafterservings.drafter.dev \\"kimi\\" not found"}')


@pytest.mark.parametrize("current, ends", [
    (None, True),  # its namespace went: kopf stopped watching it, and no DELETED event came
    ({"metadata": {"uid": "u2"}}, True),  # deleted and created again under its name: another object
    ({"metadata": {"uid": "u1"}}, False),  # still there (the 404 was a child's): the loop retries
])
def test_a_servings_loop_ends_when_the_apiserver_no_longer_has_it_though_no_deleted_event_came(memo, current, ends):
    key = ("drafterservings", "team", "kimi")
    memo.reconciler = GoneServing(current)
    memo.error_retry_seconds = 0.05

    async def scenario():
        await serving_event(memo, None, serving("1"))
        if ends:
            await until(lambda: key not in memo.loops)
            assert memo.serving_bodies == {} and memo.reconciler.attempts == 1
        else:
            await until(lambda: memo.reconciler.attempts >= 3)
            assert key in memo.loops
            memo.loops.stop(key)

    asyncio.run(scenario())


@pytest.mark.parametrize("plural, handler, reconciler", [
    ("drafterbenchmarks", handlers.benchmark_event, "benchmarks"),
    ("draftertrainings", handlers.training_event, "trainings"),
])
def test_a_tick_loop_ends_once_its_object_is_gone_from_the_apiserver(memo, monkeypatch, plural, handler, reconciler):
    """The reconcile found nothing (observe answered None): no DELETED event will come to stop the ticks."""
    monkeypatch.setattr(handlers, "BENCHMARK_TICK_SECONDS", 0.05)
    monkeypatch.setattr(handlers, "TRAINING_TICK_SECONDS", 0.05)
    stand_in = getattr(memo, reconciler)
    stand_in.reconcile = lambda *args: stand_in.seen.append(args[:2])  # answers None: gone
    key = (plural, "team", "run")

    async def scenario():
        await handler(type=None, namespace="team", name="run", meta={}, status={}, memo=memo)
        await until(lambda: key not in memo.loops)
        assert len(stand_in.seen) == 2  # the event's reconcile, then one tick that found it gone

    asyncio.run(scenario())
