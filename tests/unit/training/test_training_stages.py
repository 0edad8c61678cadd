"""The DrafterTraining stage machine (pure): order, resume, failure, optional stages."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers.training.stages import STAGES, StageJob, plan_stages, stages_for

ALL = stages_for(generate=True, evaluate=True, promote=True)


def jobs(**states: str) -> dict:
    return {stage: StageJob(stage, state, "boom" if state == "Failed" else "") for stage, state in states.items()}


def test_the_spec_decides_which_stages_run():
    assert ALL == STAGES
    assert stages_for(generate=False, evaluate=False, promote=False) == ("Extract", "Train", "Export")
    assert stages_for(generate=True, evaluate=True, promote=False) == ("Generate", "Extract", "Train", "Export", "Evaluate")


def test_stages_start_one_after_the_other():
    assert plan_stages(ALL, {}).start == "Generate"
    running = plan_stages(ALL, jobs(Generate="Running"))
    assert (running.stage, running.start, running.done) == ("Generate", None, ())
    nxt = plan_stages(ALL, jobs(Generate="Succeeded"))
    assert (nxt.stage, nxt.start, nxt.done) == ("Extract", "Extract", ("Generate",))
    finished = plan_stages(ALL, jobs(**{s: "Succeeded" for s in ALL}))
    assert (finished.stage, finished.start, finished.done) == ("Succeeded", None, ALL)


def test_a_failed_stage_stops_the_run_with_its_own_error():
    decision = plan_stages(ALL, jobs(Generate="Succeeded", Extract="Succeeded", Train="Failed"))
    assert decision.stage == "Failed" and decision.start is None
    assert decision.failed == StageJob("Train", "Failed", "boom") and decision.done == ("Generate", "Extract")


def test_a_finished_stage_whose_job_is_gone_is_not_repeated():
    decision = plan_stages(ALL, jobs(Train="Running"), recorded=frozenset({"Generate", "Extract"}))
    assert (decision.stage, decision.start) == ("Train", None)
    assert plan_stages(ALL, {}, recorded=frozenset({"Generate"})).start == "Extract"


@given(st.lists(st.sampled_from(["Succeeded", "Running", "Failed", None]), min_size=6, max_size=6))
def test_never_more_than_one_stage_starts_and_never_one_after_an_unfinished_stage(states):
    observed = {stage: StageJob(stage, state) for stage, state in zip(ALL, states) if state}
    decision = plan_stages(ALL, observed)
    if decision.start is not None:
        index = ALL.index(decision.start)
        assert decision.start not in observed
        assert all(observed.get(s) and observed[s].state == "Succeeded" for s in ALL[:index])
    assert list(decision.done) == list(ALL[:len(decision.done)])


@given(st.lists(st.sampled_from(["Succeeded", "Running", "Failed", "Disrupted", None]), min_size=6, max_size=6),
       st.lists(st.integers(0, 4), min_size=6, max_size=6), st.integers(0, 4))
def test_a_disrupted_stage_gets_its_next_attempt_while_retries_remain_and_never_a_stage_before_it(states, attempts, retries):
    observed = {stage: StageJob(stage, "Failed" if state == "Disrupted" else state, attempt=attempt,
                                disrupted="pod x: EvictionByEvictionAPI" if state == "Disrupted" else None)
                for stage, state, attempt in zip(ALL, states, attempts) if state}
    decision = plan_stages(ALL, observed, disruption_retries=retries)
    first = next((s for s in ALL if (observed.get(s) or StageJob(s, "Running")).state != "Succeeded"), None)
    job = observed.get(first) if first else None
    if job is not None and job.disrupted and job.attempt < retries:
        assert (decision.start, decision.attempt, decision.retried) == (first, job.attempt + 1, job)
    elif job is not None and job.state == "Failed":
        assert decision.start is None and decision.failed == job
    assert list(decision.done) == list(ALL[:len(decision.done)])  # a finished stage is never left or redone
