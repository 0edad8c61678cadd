"""The named steps of the DrafterServing decision (controllers/serving/decide.py and the modules it reads), each on its own.

The whole decision is tested end to end in test_serving_decide.py; here each step's own promise, with the
cluster played by `World` where a step needs a real state.
"""

from __future__ import annotations

import copy
import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import timestamps
from drafter_operator.api import DrafterServing
from drafter_operator.controllers.serving import decide as sd
from drafter_operator.controllers.promotion_gate import Desired
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.controllers.serving.acceptance import ACTION_BLOCKED, AcceptanceDecision, action_blocked
from drafter_operator.controllers.serving.compatibility import Compatibility, compatibility_events
from drafter_operator.controllers.serving.observe import Observed, ready_pod_ips
from drafter_operator.controllers.plan import Write
from drafter_operator.controllers.serving.pointer import pointer_write, switch_record
from drafter_operator.controllers.swap import SwapPlan, Verdict
from drafter_operator.constants import PREVIOUS_REVISION_ANNOTATION, SWITCHED_AT_ANNOTATION
from tests.support.servings import IMAGES, T0, World, seed_body

IMAGE = IMAGES["vllm"]


def serving_of(body: dict) -> DrafterServing:
    return DrafterServing.model_validate(body)


def test_validated_returns_the_serving_or_every_problem():
    world = World(seed_body())
    assert isinstance(sd.validated(world.state()), DrafterServing)
    bad = World(seed_body(replicas=-1, engine="nonsense"))
    problems = sd.validated(bad.state())
    assert isinstance(problems, list) and len(problems) >= 2 and all(isinstance(p, str) for p in problems)


def test_choose_revision_is_the_specs_until_an_action_names_another_drafter():
    spec = serving_of(seed_body()).spec
    plain = sd.choose_revision(spec, IMAGE, {}, {})
    assert plain.revision == revision_hash(spec, IMAGE) and plain.running.action is None
    action = {"action": "DisableSpeculation", "specRevision": plain.revision, "drafterSpec": {"method": "none"},
              "image": IMAGE, "message": "m"}
    disabled = sd.choose_revision(spec, IMAGE, {}, {}, action)
    assert disabled.running.spec.drafter.method == "none" and disabled.revision != plain.revision
    # The same action read back from status decides the same revision (a restart mid-action).
    assert sd.choose_revision(spec, IMAGE, {"degradedAction": action}, {}).revision == disabled.revision


def test_current_measurement_drops_one_of_another_incarnation():
    world = World(seed_body())

    class Seen:
        def __init__(self, uid):
            self.serving_uid = uid

    def with_measurement(uid):
        state = world.state()
        return sd.ServingState(**{**state.__dict__, "acceptance": Seen(uid)})

    assert sd.current_measurement(with_measurement("u-1")).serving_uid == "u-1"
    assert sd.current_measurement(with_measurement(None)).serving_uid is None
    assert sd.current_measurement(with_measurement("u-old")) is None


def test_records_first_orders_a_retry_under_the_verdicts_and_the_action():
    swap = SwapPlan(mark_failed="r2")
    judged = AcceptanceDecision(action={"action": "DisableSpeculation", "message": "off"})
    revisions = [{"name": "r2", "good": False}]
    first = sd.records_first({"revisions": []}, revisions, swap, judged, {"retryRequest": "1", "revisions": []})
    assert first["revisions"] == revisions  # the verdict wins over the retry's cleared copy
    assert first["retryRequest"] == "1" and first["speculationDisabled"] == "off"
    assert sd.records_first({"revisions": revisions}, revisions, SwapPlan(), AcceptanceDecision(), None) == {}


def test_name_conflicts_drops_creates_of_names_another_owner_holds():
    body = {"metadata": {"name": "kimi", "namespace": "team"}}
    mine = Write("create", "deployments", "p", copy.deepcopy(body))
    theirs = Write("create", "services", "p", copy.deepcopy(body))
    patch = Write("patch", "services", "p/kimi", copy.deepcopy(body))
    observed = Observed(foreign=frozenset({("services", "kimi")}))
    kept, verdict = sd.name_conflicts([mine, theirs, patch], observed)
    assert kept == [mine, patch]
    assert verdict.reason == "NameConflict" and "Service team/kimi exists" in verdict.message
    assert sd.name_conflicts([mine], Observed()) == ([mine], None)


def test_action_blocked_names_the_action_and_who_keeps_serving():
    verdict = action_blocked({"action": "Rollback"}, "Deployment team/x exists", "r1")
    assert (verdict.status, verdict.reason) == ("True", ACTION_BLOCKED)
    assert "onDegraded Rollback cannot take effect: Deployment team/x exists; revision r1" in verdict.message


@given(st.integers(0, 3600))
def test_gating_record_keeps_when_gating_began(seconds):
    now = T0 + dt.timedelta(seconds=seconds)
    promotion = sd.promotion_swap(None, None, serving_of(seed_body()).spec, Desired("r2", "r2"), frozenset(), False)
    assert sd.gating_record({}, SwapPlan(), promotion, now) is None
    began = sd.gating_record({}, SwapPlan(run_gate="r2"), promotion, T0)
    assert sd.gating_record({"gating": began}, SwapPlan(run_gate="r2"), promotion, now)["since"] == began["since"]
    other = sd.gating_record({"gating": began}, SwapPlan(run_gate="r3"), promotion, now)
    assert other["revision"] == "r3" and other["since"] == timestamps.format_seconds(now)


def test_decision_events_put_a_retry_first_and_the_acceptance_events_last():
    compatible = Compatibility(False, Verdict("True", "NoKnownIssues", ""), None, None)
    judged = AcceptanceDecision(events=[("Warning", "RollingBack", "x")])
    swap = SwapPlan(events=[("Normal", "Switched", "to r2")])
    status = {"retryRequest": "2", "conditions": []}
    events = sd.decision_events(status, {"conditions": []}, swap, compatible, judged, "r2")
    assert [e[1] for e in events] == ["RetryRequested", "Switched", "RollingBack"]
    assert sd.decision_events(status, {"conditions": []}, SwapPlan(), compatible, AcceptanceDecision(), None) == []


def test_compatibility_events_warn_once_per_new_problem():
    bad = Verdict("False", "KnownBadCombination", "k1")
    assert compatibility_events(Compatibility(False, bad, bad, None)) == [("Warning", "KnownBadCombination", "k1")]
    written = {"status": "False", "reason": "KnownBadCombination"}
    assert compatibility_events(Compatibility(False, bad, bad, written)) == []
    assert compatibility_events(Compatibility(False, bad, Verdict("True", "NoKnownIssues", ""), None)) == []


def test_swap_step_holds_a_blocked_first_revision_without_planning():
    world = World(seed_body())
    state = world.state()
    target = sd.choose_revision(serving_of(world.body).spec, IMAGE, {}, {})
    promotion = sd.promotion_swap(None, None, target.running.spec, Desired(target.revision, target.revision),
                                  frozenset(), False)
    blocked = Compatibility(True, Verdict("False", "KnownBadCombination", "bad"), None, None)
    swap, swap_input = sd.swap_step(state, {}, target, None, blocked, promotion)
    assert swap_input is None and swap.ready.reason == "KnownBadCombination" and not swap.scale
    free = Compatibility(False, Verdict("True", "NoKnownIssues", ""), None, None)
    swap, swap_input = sd.swap_step(state, {}, target, None, free, promotion)
    assert swap_input.desired == target.revision and swap.scale == {target.revision: 1}


def test_child_writes_are_deployments_then_the_service():
    world = World(seed_body())
    state = world.state()
    serving = serving_of(world.body)
    target = sd.choose_revision(serving.spec, IMAGE, {}, {})
    swap = SwapPlan(scale={target.revision: 1}, service_revision=target.revision)
    writes = sd.child_writes(state, serving, target, swap, None, 8000)
    assert [(w.verb, w.plural) for w in writes] == [("create", "deployments"), ("create", "services")]


def test_pointer_write_records_the_switch_only_when_traffic_moves():
    world = World(seed_body())
    serving = serving_of(world.body)
    assert pointer_write(serving, world.body, Observed(), None, None, 8000, T0) is None
    moved = pointer_write(serving, world.body, Observed(), "r2", "r1", 8000, T0)
    annotations = switch_record(moved.body)
    assert annotations[PREVIOUS_REVISION_ANNOTATION] == "r1" and annotations[SWITCHED_AT_ANNOTATION] == timestamps.format_seconds(T0)
    still = pointer_write(serving, world.body, Observed(), "r2", None, 8000, T0)
    assert PREVIOUS_REVISION_ANNOTATION not in switch_record(still.body)


def test_ready_pod_ips_are_ready_pods_with_an_ip_not_being_deleted():
    def pod(ip, ready, deleting=False):
        meta = {"deletionTimestamp": "x"} if deleting else {}
        return {"metadata": meta, "status": {"podIP": ip, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}}

    pods = [pod("10.0.0.2", True), pod("10.0.0.1", True), pod("10.0.0.3", False), pod("10.0.0.4", True, True),
            pod(None, True)]
    assert ready_pod_ips(pods) == ["10.0.0.1", "10.0.0.2"]
