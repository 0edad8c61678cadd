"""ScheduleIgnored: a replica's drafted tokens per step against the most its batch-size schedule allows (pure), the
counters the window reads it from, and a real emulator process that drops the schedule as vLLM does with data
parallelism above 1."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
import sys

from hypothesis import given, strategies as st

from drafter_operator.acceptance import schedule_obeyed as so
from drafter_operator.acceptance.measurement import AcceptanceMonitor
from drafter_operator.api import DrafterServingSpec
from drafter_operator.controllers.serving.acceptance import Watched, scheduled_ranges
from drafter_operator.engines import dynamic, sglang, vllm
from drafter_operator.engines import metrics as m
from tests.processes import free_port, listening_process
from tests.support.emulator_processes import generate
from tests.support.windows import vllm_window

T0 = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc)
#: k 4 up to 6 streams, 2 up to 12, 1 up to 24, none from 25 (non-increasing, as every schedule the operator renders).
SCHEDULE = ((1, 6, 4), (7, 12, 2), (13, 24, 1), (25, dynamic.MAX_BATCH_SIZE, 0))


def window(drafted_per_step: float | None, fewest_running: float | None, drafts: float = 100.0) -> m.AcceptanceWindow:
    base = vllm_window(max(drafts, 1.0), max(drafts, 1.0) * 0.5, k=4)
    return dataclasses.replace(base, drafts=drafts, drafted_per_step=drafted_per_step, fewest_running=fewest_running)


@given(st.integers(1, 200), st.integers(0, 4))
def test_drafting_the_schedules_k_or_fewer_at_the_batch_seen_is_never_ignored(running: int, fewer: int):
    k_there = dynamic.k_for_batch(SCHEDULE, running, 4)
    drafted = max(k_there - fewer, 0)
    found = so.check(SCHEDULE, 4, [("pod-a", window(float(drafted), float(running), drafts=100.0 if drafted else 0.0))])
    assert found.status == "False" and found.reason == so.OBEYED


@given(st.integers(7, 200))
def test_drafting_the_static_k_where_the_schedule_allows_fewer_is_ignored(running: int):
    """vLLM with data parallelism above 1 drafts the static k at every batch size."""
    found = so.check(SCHEDULE, 4, [("pod-a", window(4.0, float(running)))])
    assert (found.status, found.reason) == ("True", so.IGNORED)
    assert "pod-a drafted 4.00 tokens per step" in found.message
    assert f"at most {dynamic.k_for_batch(SCHEDULE, running, 4)}" in found.message


def test_the_fewest_requests_a_window_saw_bound_it_and_half_a_token_is_slack():
    # Between two bands (6 and 7 streams) a mean of 2.4 at 7 or more is within the slack of k=2 there.
    assert so.check(SCHEDULE, 4, [("a", window(2.4, 7.0))]).status == "False"
    assert so.check(SCHEDULE, 4, [("a", window(2.6, 7.0))]).status == "True"
    # A window whose scrapes saw 6 running at some point allows k=4 throughout.
    assert so.check(SCHEDULE, 4, [("a", window(4.0, 6.0))]).status == "False"


def test_one_replica_that_ignores_it_is_enough_and_named():
    found = so.check(SCHEDULE, 4, [("good", window(1.0, 30.0, drafts=0.0)), ("dp2", window(4.0, 30.0))])
    assert found.status == "True" and found.message.startswith("dp2 drafted")


def test_no_batch_size_or_nothing_generated_is_no_evidence():
    idle = dataclasses.replace(window(4.0, 30.0), generation_tokens=0.0)
    assert so.check(SCHEDULE, 4, [("a", window(4.0, None)), ("b", idle)]).status == "Unknown"
    assert so.check(SCHEDULE, 4, []).reason == so.NO_EVIDENCE


def test_the_counters_give_the_window_its_fewest_running_and_drafted_per_step():
    def vllm_scrape(drafts: float, running: float) -> m.SpecDecodeCounters:
        return m.SpecDecodeCounters(engine="vllm", speculative=True, drafts=drafts, draft_tokens=drafts * 3,
                                    accepted_tokens=drafts, generation_tokens=drafts * 2, running_requests=running)
    found = m.window(vllm_scrape(10, 9.0), vllm_scrape(110, 14.0))
    assert (found.fewest_running, found.drafted_per_step) == (9.0, 3.0)
    gap = dataclasses.replace(vllm_scrape(110, 1.0), running_requests=None)
    assert m.window(vllm_scrape(10, 9.0), gap).fewest_running is None  # a scrape without the gauge: no bound

    def sglang_scrape(calls: float, steps: float, running: float) -> m.SpecDecodeCounters:
        return m.SpecDecodeCounters(engine="sglang", speculative=True, drafts=calls, generation_tokens=calls * 2,
                                    num_steps_gauge=steps, num_draft_tokens_gauge=steps + 1, running_requests=running)
    found = m.window(sglang_scrape(10, 4, 3.0), sglang_scrape(50, 2, 12.0))
    assert (found.fewest_running, found.drafted_per_step) == (3.0, 4.0)


def test_the_parsers_read_the_running_batch_per_engine_core_and_rank():
    body = ('vllm:num_requests_running{engine="0",model_name="m"} 10\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 14\n'
            'vllm:generation_tokens_total{engine="0",model_name="m"} 5\n')
    assert vllm.parse_spec_decode_metrics(body).running_requests == 12.0
    body = ('sglang:num_running_reqs{model_name="m",tp_rank="0"} 7\n'
            'sglang:generation_tokens_total{model_name="m",is_streaming="true"} 5\n')
    assert sglang.parse_spec_decode_metrics(body).running_requests == 7.0


def test_the_watch_follows_the_ranges_only_of_the_revision_they_were_rendered_into():
    block = {"scheduledRevision": "r2", "revision": "r1",
             "ranges": [{"start": 1, "end": 8, "numSpeculativeTokens": 3}, {"start": 9, "end": 65536,
                                                                             "numSpeculativeTokens": 0}]}
    assert scheduled_ranges("r2", block) == ((1, 8, 3), (9, 65536, 0))
    assert scheduled_ranges("r1", block) is None and scheduled_ranges("r2", None) is None


def serving_spec() -> DrafterServingSpec:
    return DrafterServingSpec.model_validate({
        "engine": "vllm", "target": {"model": "/models/kimi-k2.5"},
        "drafter": {"method": "eagle3", "model": "/models/emulator-good-drafter", "numSpeculativeTokens": 3},
        "acceptance": {"minAcceptanceRate": "0.1", "window": "30s", "for": "0s", "minDraftTokens": 10}})


def measured_with(data_parallel: int):
    """The watch of a real vLLM emulator rendered with a schedule of k=1 at every batch size (k=3 static)."""
    config = ('{"method":"eagle3","model":"/models/emulator-good-drafter","num_speculative_tokens":3,'
              '"num_speculative_tokens_per_batch_size":[[1,65536,1]]}')
    port = free_port()
    env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.01",
           "DRAFTER_EMULATOR_SEED": "3", "DRAFTER_EMULATOR_ACCEPTANCE": "0.7"}
    argv = [sys.executable, "-m", "drafter_operator.cli", "emulate", "vllm", "serve", "/models/kimi-k2.5",
            "--speculative-config", config, "--data-parallel-size", str(data_parallel), "--port", str(port)]
    with listening_process(argv, env, port):
        from drafter_operator.acceptance.engine_source import Replica
        replica = Replica(name=f"pod-{port}", ip="127.0.0.1", port=port)
        pods = [{"metadata": {"name": replica.name, "labels": {"drafter.dev/revision": "r2"}},
                 "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}]
        monitor = AcceptanceMonitor("ns", "kimi", port=port)
        watched = Watched(serving_spec(), "r2", schedule=((1, 65536, 1),))
        asyncio.run(monitor.measure(watched, pods, T0))
        generate(replica, 3)
        return asyncio.run(monitor.measure(watched, pods, T0 + dt.timedelta(seconds=10)))


def test_an_engine_that_drops_its_schedule_is_seen_and_one_that_applies_it_is_not():
    ignored = measured_with(data_parallel=2)
    assert ignored.schedule is not None and (ignored.schedule.status, ignored.schedule.reason) == ("True", so.IGNORED)
    assert "drafted 3.00 tokens per step" in ignored.schedule.message
    obeyed = measured_with(data_parallel=1)
    assert (obeyed.schedule.status, obeyed.schedule.reason) == ("False", so.OBEYED)
    assert "1.00 at" in obeyed.schedule.message


# ---------------------------------------------------------------- the condition in the serving's decision

def scheduled_world():
    """A serving with spec.drafter.dynamic whose static revision was swept, now serving the scheduled revision."""
    from tests.support.servings import World, seed_body
    body = seed_body()
    body["spec"]["drafter"]["dynamic"] = "fromBenchmark"
    body["spec"]["acceptance"] = {"minAcceptanceRate": "0.1", "window": "2m", "for": "5m", "minDraftTokens": 1000}
    world = World(body)
    world.converge()
    static = world.body["status"]["activeRevision"]
    world.benchmarks["sweep"] = {
        "metadata": {"name": "sweep", "namespace": "team", "creationTimestamp": "2026-11-29T12:00:00Z"},
        "spec": {"servingRef": {"name": "kimi"}},
        "status": {"state": "Succeeded", "revision": static, "completionTime": "2026-11-29T12:10:00Z",
                   "result": {"speedup": 1.5, "levels": [
                       {"concurrency": 1, "speedup": 1.6, "tokensPerSecond": 90.0},
                       {"concurrency": 16, "speedup": 1.1, "tokensPerSecond": 500.0},
                       {"concurrency": 32, "speedup": 0.7, "tokensPerSecond": 700.0}]}}}
    world.converge()
    scheduled = world.body["status"]["speculationSchedule"]["scheduledRevision"]
    assert world.body["status"]["activeRevision"] == scheduled != static
    return world, scheduled


def condition_of(world) -> dict | None:
    return next((c for c in world.body["status"]["conditions"] if c["type"] == so.CONDITION), None)


def test_the_condition_says_what_the_watch_saw_of_the_revision_that_runs_the_schedule():
    from drafter_operator.acceptance import verdict as a
    from drafter_operator.acceptance.measurement import Measurement
    from drafter_operator.controllers.serving.decide import decide
    world, scheduled = scheduled_world()
    assert (condition_of(world)["status"], condition_of(world)["reason"]) == ("Unknown", so.NO_EVIDENCE)
    unknown = a.AcceptanceVerdict(status="Unknown", reason=a.INSUFFICIENT_DATA, message="")

    def look(check, revision=scheduled):
        plan = decide(dataclasses.replace(world.state(), acceptance=Measurement(
            revision=revision, verdict=unknown, previous=unknown, status=None, schedule=check)))
        world.apply(plan)
        return plan

    ignored = so.ScheduleCheck("True", so.IGNORED, "pod-0 drafted 5.00 tokens per step at 30 running")
    plan = look(ignored)
    assert (condition_of(world)["status"], condition_of(world)["reason"]) == ("True", so.IGNORED)
    assert ("Warning", so.CONDITION, ignored.message) in plan.events
    # The same verdict with another figure: nothing new to say, nothing written.
    again = look(dataclasses.replace(ignored, message="pod-0 drafted 4.98 tokens per step at 31 running"))
    assert not again.writes_anything()
    # Another revision's check is not this one's.
    look(so.ScheduleCheck("False", so.OBEYED, "within"), revision="elsewhere")
    assert condition_of(world)["status"] == "True"
    cleared = look(so.ScheduleCheck("False", so.OBEYED, "pod-0 1.00 at 30 (at most 1)"))
    assert (condition_of(world)["status"], condition_of(world)["reason"]) == ("False", so.OBEYED)
    assert [(e[0], e[1]) for e in cleared.events if e[1] in (so.CONDITION, "ScheduleObeyed")] == [
        ("Normal", "ScheduleObeyed")]


def test_a_serving_without_a_schedule_has_no_such_condition():
    from tests.support.servings import World, seed_body
    world = World(seed_body())
    world.converge()
    assert condition_of(world) is None


def test_while_the_refined_bands_start_the_predicted_revision_keeps_its_condition():
    from drafter_operator.controllers.serving.schedule_obeyed import schedule_verdict
    refining = {"scheduledRevision": "r3", "predictedRevision": "r2", "refinedWith": "gate",
                "ranges": [{"start": 1, "end": 65536, "numSpeculativeTokens": 2}]}
    held = {"type": so.CONDITION, "status": "False", "reason": so.OBEYED}
    assert schedule_verdict("r2", refining, None, False, held) is None
    # Without a refinement, a revision the ranges were not rendered into runs none.
    assert schedule_verdict("r2", {**refining, "predictedRevision": None}, None, False, held).reason == so.NO_SCHEDULE
