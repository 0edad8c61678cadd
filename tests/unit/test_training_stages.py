"""The DrafterTraining stage machine (pure): order, resume, failure, optional stages."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers.training_stages import STAGES, StageJob, plan_stages, stages_for

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
