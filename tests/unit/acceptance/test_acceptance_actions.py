"""onDegraded as a pure decision: Alert, Rollback without ping-pong, DisableSpeculation once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.acceptance.actions import Action, RevisionRecord, plan
from drafter_operator.engines import metrics as m
from drafter_operator.acceptance import verdict as a

R = RevisionRecord


def test_nothing_happens_while_healthy():
    assert plan("Rollback", False, "b", [R("a", good=True), R("b")], False) == Action("none")


def test_alert_only_marks_the_revision():
    action = plan("Alert", True, "b", [R("a", good=True), R("b")], False)
    assert action.kind == "none" and action.mark_degraded == ("b",)


def test_rollback_goes_to_the_newest_good_revision_that_never_degraded():
    revisions = [R("a", good=True), R("b", good=True, degraded=True), R("c", good=True), R("d")]
    action = plan("Rollback", True, "d", revisions, False)
    assert (action.kind, action.target, action.mark_degraded) == ("rollback", "c", ("d",))
    assert "rolling back to c" in action.message


def test_rollback_without_a_good_revision_stays_and_says_why():
    action = plan("Rollback", True, "b", [R("a", degraded=True, good=True), R("b")], False)
    assert action.kind == "none" and "no earlier revision served well" in action.message


def test_disable_speculation_once():
    action = plan("DisableSpeculation", True, "b", [R("b")], False)
    assert (action.kind, action.target) == ("disableSpeculation", "b")
    assert plan("DisableSpeculation", True, "b", [R("b", degraded=True)], True).kind == "none"
    assert plan("DisableSpeculation", True, "n", [R("n", speculative=False)], False).kind == "none"


def test_unknown_policy_is_an_error():
    with pytest.raises(ValueError):
        plan("Panic", True, "a", [R("a")], False)


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=8), st.data())
def test_rollback_never_targets_a_degraded_or_unproven_revision_and_never_the_active_one(flags, data):
    revisions = [R(f"r{i}", good=g, degraded=d) for i, (g, d) in enumerate(flags)]
    active = data.draw(st.sampled_from([r.name for r in revisions]))
    action = plan("Rollback", True, active, revisions, False)
    if action.kind == "rollback":
        target = next(r for r in revisions if r.name == action.target)
        assert target.good and not target.degraded and target.name != active
    # applying the marks and deciding again for the new active revision never returns to a marked one
    marked = {*action.mark_degraded, *(r.name for r in revisions if r.degraded)}
    if action.kind == "rollback":
        after = [R(r.name, good=r.good, degraded=r.name in marked) for r in revisions]
        again = plan("Rollback", True, action.target, after, False)
        assert again.target is None or again.target not in marked


def test_status_block_lists_replicas_only_when_they_differ():
    def w(drafts, accepted):
        return m.AcceptanceWindow(engine="vllm", drafts=drafts, draft_tokens=drafts * 5, accepted_tokens=accepted,
                                  generation_tokens=drafts + accepted, acceptance_rate=accepted / (drafts * 5),
                                  mean_acceptance_length=1 + accepted / drafts, rate_source="counters")
    same = a.with_replicas(a.AcceptanceSample(at=0), {"p1": w(100, 300), "p2": w(200, 600)})
    block = a.status_block(same, "engine", 300, "2026-11-30T12:00:00Z")
    assert block["rate"] == pytest.approx(0.6) and block["draftTokens"] == 1500 and "replicas" not in block
    differ = a.with_replicas(a.AcceptanceSample(at=0), {"p1": w(100, 450), "p2": w(100, 50)})
    block = a.status_block(differ, "engine", 300, "2026-11-30T12:00:00Z")
    assert [r["pod"] for r in block["replicas"]] == ["p1", "p2"] and block["replicas"][1]["rate"] == pytest.approx(0.1)
    # what the operator writes is what the CRD's status schema describes
    from drafter_operator.api.serving import AcceptanceStatus
    assert AcceptanceStatus.model_validate(block).replicas[0].pod == "p1"
    assert a.status_block(a.AcceptanceSample(at=0), "engine", 300, "x") is None
