"""The whole DrafterServing reconcile decision (pure): rollouts, swaps, failures, Events, steady state.

`World` plays the cluster: it applies a plan's writes the way the apiserver would (create, JSON merge
patch, delete, status subresource) and, on `settle`, plays the Deployment controller and the kubelet
(every Deployment's pods Ready). Nothing here talks to Kubernetes.
"""

from __future__ import annotations

import copy
import datetime as dt

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.controllers.serving.decide import decide
from drafter_operator.controllers.plan import Plan
from drafter_operator.resources.labels import REVISION_LABEL
from tests.support.servings import DIGEST, DRAIN, finish_gate, gated_body, promote, REPO, rolled_back, seed_body, swapped, World


def test_first_rollout_creates_then_reports_ready_then_writes_nothing():
    world = World(seed_body())
    first = world.decide()
    assert [(w.verb, w.plural) for w in first.writes] == [("create", "deployments"), ("create", "services")]
    assert first.status["conditions"][0]["reason"] == "EngineStarting"
    world.apply(first)
    world.settle()
    ready = world.decide()
    assert ready.writes == [] and ready.record_first["revisions"][0]["good"] is True
    assert ready.status["conditions"][0]["status"] == "True"
    assert ready.events == []  # a rollout going as it should: the conditions say it, an Event would be chatter
    world.apply(ready)
    steady = world.decide()
    assert not steady.writes_anything(), steady


def test_a_drafter_change_swaps_bluegreen_counts_one_swap_and_drains_before_deleting():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.body["metadata"]["generation"] = 2
    started = world.decide()
    assert [w.verb for w in started.writes] == ["create"] and swapped(started) is None
    world.apply(started)
    world.settle()
    switch = world.decide()
    assert swapped(switch) == "BlueGreen" and ("Normal", "Switched") in [(e[0], e[1]) for e in switch.events]
    assert switch.deletes == []  # the old revision drains first
    assert switch.recheck_at == world.now + DRAIN + dt.timedelta(seconds=1)
    world.apply(switch)
    after = world.decide()  # still draining: no child write, no second Switched
    assert (after.writes, after.deletes, after.events, swapped(after)) == ([], [], [], None)
    assert world.condition("Progressing")["message"].startswith("switched traffic")
    world.apply(after)  # the steady message ("revision ... is serving")
    assert not world.decide().writes_anything()
    world.now = switch.recheck_at
    drained = world.decide()
    assert [p.rsplit("/", 1)[1] for p in drained.deletes] == [f"kimi-{old}"] and swapped(drained) is None
    world.apply(drained)
    assert not world.decide().writes_anything()
    assert [e[1] for e in world.events].count("Switched") == 1


def test_a_new_revision_that_never_starts_fails_once_with_one_event_and_is_not_retried():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    started = world.decide()
    world.apply(started)  # created, never Ready
    new = started.writes[0].body["metadata"]["name"]
    starting = world.decide()
    assert starting.recheck_at == world.now + dt.timedelta(minutes=45, seconds=1)
    world.now = starting.recheck_at
    failed = world.decide()
    assert failed.record_first["revisions"][-1]["good"] is False  # recorded before anything else is written
    assert rolled_back(failed) and [p.rsplit("/", 1)[1] for p in failed.deletes] == [new]
    reasons = [e[1] for e in failed.events]
    assert reasons.count("RevisionFailed") == 1  # the planner's Event, not also the condition's transition
    assert "spec.startup.timeout" in next(e[2] for e in failed.events if e[1] == "RevisionFailed")
    world.apply(failed)
    again = world.decide()  # only the Progressing message settles ("... keeps serving")
    assert (again.writes, again.deletes, again.events, again.record_first, rolled_back(again)) == ([], [], [], {}, False)
    world.apply(again)
    assert not world.decide().writes_anything()


def test_invalid_spec_reports_one_event_and_creates_nothing():
    world = World(seed_body(replicas=-1))
    plan = world.decide()
    assert plan.writes == [] and plan.deletes == []
    assert plan.status["conditions"][0]["reason"] == "InvalidSpec"
    assert [e[1] for e in plan.events] == ["InvalidSpec"]
    world.apply(plan)
    assert not world.decide().writes_anything()


def test_known_bad_blocked_creates_nothing_and_warns_once():
    body = seed_body()
    body["spec"]["drafter"]["allowKnownBad"] = False
    world = World(body)
    plan = world.decide()
    assert plan.writes == [] and world.decide().status["conditions"][0]["reason"] == "KnownBadCombination"
    assert [e[1] for e in plan.events].count("KnownBadCombination") >= 1
    world.apply(plan)
    assert not world.decide().writes_anything()


specs = st.fixed_dictionaries({
    "replicas": st.integers(0, 2),
    "swap": st.sampled_from([{"strategy": "BlueGreen"}, {"strategy": "Recreate"}]),
    "tokens": st.sampled_from([3, 5, 7]),
})


@settings(max_examples=40, deadline=None)
@given(st.lists(specs, min_size=1, max_size=4))
def test_every_sequence_of_spec_changes_reaches_a_steady_state_with_no_further_writes(changes):
    world = World(seed_body())
    for generation, change in enumerate(changes, start=1):
        world.body["spec"].update(replicas=change["replicas"], swap=change["swap"])
        world.body["spec"]["drafter"]["numSpeculativeTokens"] = change["tokens"]
        world.body["metadata"]["generation"] = generation
        world.converge()
        status = world.body["status"]
        assert status["observedGeneration"] == generation
        assert len(world.deployments) == 1  # every older revision is gone once drained
        assert world.service["spec"]["selector"][REVISION_LABEL] == status["activeRevision"]
        assert world.condition("Ready")["status"] == ("True" if change["replicas"] else "False")
    # Events are de-duplicated: one per reason in any single reconcile.
    assert world.decide().events == []


@settings(max_examples=40, deadline=None)
@given(st.lists(specs, min_size=1, max_size=3), st.integers(0, 3), st.integers(0, 3_000))
def test_decide_is_deterministic_and_leaves_its_input_alone(changes, settle_steps, seconds):
    world = World(seed_body())
    for change in changes:
        world.body["spec"].update(replicas=change["replicas"], swap=change["swap"])
        world.body["spec"]["drafter"]["numSpeculativeTokens"] = change["tokens"]
        for step in range(settle_steps):
            world.apply(world.decide())
            if step % 2:
                world.settle()
    world.now += dt.timedelta(seconds=seconds)
    state = world.state()
    before = copy.deepcopy(state)
    assert decide(state) == decide(copy.deepcopy(state))
    assert state == before


def test_a_serving_recreated_under_the_same_name_ignores_the_old_ones_children():
    """Deleted and re-applied at once: the garbage collector has not removed the old serving's children."""
    world = World(seed_body())
    world.converge()
    old_revision = world.body["status"]["activeRevision"]
    world.body = seed_body()
    world.body["metadata"]["uid"] = "u-2"
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    plan = world.decide()
    created = [w for w in plan.writes if w.verb == "create"]
    # Its own revision, not a swap from the old one; the Service name is still held by the old owner.
    assert [w.plural for w in created] == ["deployments"]
    assert plan.status["activeRevision"] != old_revision and not swapped(plan)
    assert all(ref["uid"] == "u-2" for w in created for ref in w.body["metadata"]["ownerReferences"])


def test_a_child_name_held_by_another_owner_is_reported_not_created_over_and_over():
    world = World(seed_body())
    world.converge()
    leftover = world.body["status"]["activeRevision"]
    world.body = seed_body()
    world.body["metadata"]["uid"] = "u-2"  # re-created; the garbage collector has not removed the old children
    plan = world.decide()
    assert all(w.verb != "create" or w.body["metadata"]["name"] not in (f"kimi-{leftover}", "kimi")
               for w in plan.writes)
    progressing = next(c for c in plan.status["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "NameConflict" and f"Deployment team/kimi-{leftover}" in progressing["message"]
    assert "Service team/kimi" in progressing["message"]
    assert ("Warning", "NameConflict") in [(e[0], e[1]) for e in plan.events]


def test_a_gated_swap_benchmarks_the_ready_revision_before_traffic_moves_and_a_failed_gate_removes_it():
    world = World(gated_body())
    world.converge()
    old = world.body["status"]["activeRevision"]
    assert world.benchmarks == {}  # the first revision has nothing to be compared with
    world.body["spec"]["drafter"]["model"] = "/models/drafters/emulator-bad-drafter"
    world.apply(world.decide())
    world.settle()
    gating = world.decide()
    (write,) = [w for w in gating.writes if w.plural == "drafterbenchmarks"]
    new = write.body["metadata"]["labels"][REVISION_LABEL]
    assert write.body["spec"]["endpoint"].startswith("http://10.0.") and write.body["spec"]["gate"] == {"minSpeedup": "1.2"}
    assert write.body["spec"]["baseline"] == {"tokensPerSecond": "82.5"}
    assert write.body["metadata"]["annotations"]["drafter.dev/num-speculative-tokens"] == "5"
    assert write.body["metadata"]["annotations"]["drafter.dev/drafter"] == "eagle3:/models/drafters/emulator-bad-drafter k=5"
    assert next(c for c in gating.status["conditions"] if c["type"] == "Progressing")["reason"] == "Gating"
    assert not swapped(gating) and world.service["spec"]["selector"][REVISION_LABEL] == old
    world.apply(gating)
    assert [w for w in world.decide().writes if w.plural == "drafterbenchmarks"] == []  # created once
    finish_gate(world, False, "speedup 0.64x < 1.20x")
    failed = world.decide()
    assert [p.rsplit("/", 1)[1] for p in failed.deletes] == [f"kimi-{new}"] and not swapped(failed)
    assert ("Warning", "GateFailed") in [(e[0], e[1]) for e in failed.events]
    assert failed.record_first["revisions"][-1]["failedReason"] == "failed spec.swap.gate (speedup 0.64x < 1.20x)"
    world.apply(failed)
    world.converge()
    assert world.service["spec"]["selector"][REVISION_LABEL] == old
    assert "failed spec.swap.gate (speedup 0.64x < 1.20x)" in world.condition("Progressing")["message"]


def test_a_passed_gate_moves_traffic():
    world = World(gated_body(concurrencyLevels=[1, 8, 32]))
    world.converge()
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())
    (gate,) = world.benchmarks.values()
    assert gate["spec"]["concurrencyLevels"] == [1, 8, 32] and "concurrencyLevels" not in gate["spec"]["gate"]
    finish_gate(world, True, "every spec.swap.gate threshold met")
    switched = world.decide()
    assert swapped(switched) == "BlueGreen"
    world.apply(switched)
    world.converge()
    assert world.condition("Ready")["status"] == "True" and len(world.benchmarks) == 1


def finished_run(name: str, revision: str | None, completed: str, *, speedup: float = 0.66, length: float = 1.75,
                 k: int | None = 5, gate_of: str | None = None, state: str = "Succeeded") -> dict:
    """A DrafterBenchmark of the serving: run by hand (spec.servingRef), or the gate of ``gate_of``."""
    meta: dict = {"name": name, "namespace": "team"}
    spec: dict = {"servingRef": {"name": "kimi"}}
    if gate_of:
        meta.update(labels={"drafter.dev/serving": "kimi", REVISION_LABEL: gate_of, "drafter.dev/gate": "true"},
                    ownerReferences=[{"uid": "u-1"}])
        spec = {"endpoint": "http://10.0.0.1:8000"}
    status = {"state": state, "completionTime": completed,
              "result": {"tokensPerSecond": 54.4, "speedup": speedup, "acceptanceLength": length}}
    status.update({key: value for key, value in (("revision", revision), ("numSpeculativeTokens", k)) if value})
    return {"metadata": meta, "spec": spec, "status": status}


def test_auto_learns_from_the_newest_finished_run_of_the_active_revision_by_hand_or_gate():
    world = World(seed_body(acceptance={"minAcceptanceRate": "auto"}))
    world.converge()
    active = world.body["status"]["activeRevision"]
    assert "acceptanceThreshold" not in world.body["status"]  # the first revision is never gated: nothing yet
    world.benchmarks = {b["metadata"]["name"]: b for b in (
        finished_run("older", active, "2026-11-29T10:00:00Z", speedup=1.2, length=2.5),
        finished_run("by-hand", active, "2026-11-29T11:00:00Z"),
        finished_run("other-revision", "0123456789", "2026-11-29T12:00:00Z", speedup=1.9, length=3.9),
        finished_run("straddled-a-swap", None, "2026-11-29T12:30:00Z", speedup=1.9, length=3.9),
        finished_run("still-running", active, "", state="Running", speedup=1.9, length=3.9),
        finished_run("foreign-gate", active, "2026-11-29T13:00:00Z", gate_of=active) | {"metadata": {
            "name": "foreign-gate", "labels": {"drafter.dev/gate": "true", REVISION_LABEL: active}}},
    )}
    world.converge()
    status = world.body["status"]
    assert status["lastBenchmark"] == {"name": "by-hand", "tokensPerSecond": 54.4, "speedup": 0.66,
                                       "acceptanceLength": 1.75, "numSpeculativeTokens": 5, "revision": active}
    threshold = status["acceptanceThreshold"]
    assert threshold["source"] == "benchmark by-hand"
    # draft cost c = (1.75 / 0.66 - 1) / 5 = 0.330; break-even length 1 + 5c = 2.65: above what it accepts
    assert threshold["breakEvenLength"] == pytest.approx(1.75 / 0.66, abs=1e-3)
    # an own gate finished later wins; its k comes from its annotation when its status has none
    world.benchmarks["gate"] = finished_run("gate", None, "2026-11-29T14:00:00Z", k=None, speedup=1.5, length=3.0,
                                            gate_of=active)
    world.benchmarks["gate"]["metadata"]["annotations"] = {"drafter.dev/num-speculative-tokens": "5"}
    world.converge()
    assert world.body["status"]["lastBenchmark"]["name"] == "gate"
    assert world.body["status"]["lastBenchmark"]["numSpeculativeTokens"] == 5
    assert world.body["status"]["acceptanceThreshold"]["source"] == "benchmark gate"


def test_an_engine_that_exits_before_it_was_ever_ready_is_read_from_its_pod_with_its_last_output():
    from drafter_operator.controllers.serving.observe import EXIT_MESSAGE_CHARS, engine_exit

    def pod(state: dict, last: dict | None = None, started: bool = False, name: str = "engine") -> dict:
        status = {"name": name, "ready": False, "started": started, "state": state, "restartCount": 1}
        if last:
            status["lastState"] = last
        return {"status": {"containerStatuses": [status]}}

    log = "INFO loading\n" + "x" * 2000 + "\nOSError: offline mode is enabled, no file for org/model"
    crashed = pod({"waiting": {"reason": "CrashLoopBackOff"}}, {"terminated": {"exitCode": 1, "message": log}})
    message = engine_exit(crashed)
    assert message.startswith("engine exited with code 1: ...") and message.endswith("no file for org/model")
    assert len(message) <= len("engine exited with code 1: ...") + EXIT_MESSAGE_CHARS
    assert engine_exit(pod({"terminated": {"exitCode": 2}})) == "engine exited with code 2"
    assert engine_exit(pod({"running": {}})) is None
    assert engine_exit(pod({"terminated": {"exitCode": 0}})) is None
    assert engine_exit(pod({"running": {}}, {"terminated": {"exitCode": 137}}, started=True)) is None  # it had started
    assert engine_exit(pod({"terminated": {"exitCode": 1}}, name="sidecar")) is None


def test_pod_settings_change_in_place_on_a_new_generation_but_an_operator_upgrade_never_restarts_engines():
    world = World(seed_body())
    world.converge()
    (name,) = world.deployments
    # A spec change to pod settings: the same Deployment, its template rewritten (and nothing else created).
    world.body["spec"]["pod"] = {"labels": {"example.com/team": "inference"}}
    world.body["metadata"]["generation"] = 2
    plan = world.decide()
    (write,) = [w for w in plan.writes if w.plural == "deployments"]
    assert write.verb == "patch" and write.path.endswith(name)
    assert write.body["spec"]["template"]["metadata"]["labels"]["example.com/team"] == "inference"
    assert write.body["metadata"]["annotations"]["drafter.dev/serving-generation"] == "2"
    world.apply(plan)
    world.settle()
    assert list(world.deployments) == [name]
    # Unset again: the label is deleted from the template (merge patch null), not left behind.
    del world.body["spec"]["pod"]
    world.body["metadata"]["generation"] = 3
    (write,) = [w for w in world.decide().writes if w.plural == "deployments"]
    assert write.body["spec"]["template"]["metadata"]["labels"]["example.com/team"] is None
    world.converge()
    # The template as an older operator rendered it (no env, say): same generation, so no rewrite.
    world.deployments[name]["spec"]["template"]["spec"]["containers"][0].pop("env")
    assert [w for w in world.decide().writes if w.plural == "deployments"] == []
    # A Deployment from before the annotations: only they are recorded, the pods stay.
    annotations = world.deployments[name]["metadata"]["annotations"]
    settings = annotations.pop("drafter.dev/pod-settings")
    annotations.pop("drafter.dev/serving-generation")
    (write,) = [w for w in world.decide().writes if w.plural == "deployments"]
    assert write.body == {"metadata": {"annotations": {"drafter.dev/serving-generation": "3",
                                                       "drafter.dev/pod-settings": settings}}}
    world.apply(Plan(writes=[write]))
    # A replicas change (a new generation) after an upgrade that renders differently: scaled, not rewritten.
    world.body["spec"]["replicas"] = 2
    world.body["metadata"]["generation"] = 4
    (write,) = [w for w in world.decide().writes if w.plural == "deployments"]
    assert write.body["spec"] == {"replicas": 2}


# A DrafterTraining's Promote: a one-shot BlueGreen swap with its own gate; spec.swap stays the user's.


def test_a_promotion_gates_its_own_revision_only_and_leaves_spec_swap_as_the_user_set_it():
    world = World(seed_body(swap={"strategy": "Recreate", "drainTimeout": "2m"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    patch = promote(world)
    assert "swap" not in patch["spec"] and world.body["spec"]["swap"] == {"strategy": "Recreate", "drainTimeout": "2m"}
    assert promotion_patch_again(world) is None  # a repeated reconcile of the training patches nothing
    started = world.decide()
    # BlueGreen (the promotion's strategy), not the user's Recreate: the old revision keeps serving
    assert [(w.verb, w.plural) for w in started.writes] == [("create", "deployments")]
    world.apply(started)
    world.settle()
    gating = world.decide()
    (write,) = [w for w in gating.writes if w.plural == "drafterbenchmarks"]
    new = write.body["metadata"]["labels"][REVISION_LABEL]
    assert write.body["spec"]["gate"] == {"minSpeedup": "1.5", "minTokensPerSecond": "41.00"}
    assert write.body["spec"]["baseline"] == {"servingRef": {"name": "kimi-k25-baseline"}}
    world.apply(gating)
    source = "the gate of drafter.dev/promotion by kimi-ft (generation 1)"
    assert world.body["status"]["gating"]["revision"] == new and world.body["status"]["gating"]["source"] == source
    assert world.body["status"]["promotion"]["revision"] == new
    assert source in world.condition("Progressing")["message"]
    finish_gate(world, True, "every threshold met")
    switched = world.decide()
    assert swapped(switched) == "BlueGreen"
    world.apply(switched)
    world.converge()
    assert world.body["status"]["activeRevision"] == new and world.body["spec"]["swap"]["strategy"] == "Recreate"
    # A later change of the promoted drafter (k) is the user's: spec.swap (Recreate, no gate) governs it.
    world.ask_for_k(3)
    recreate = world.decide()
    assert recreate.writes and all(w.plural == "deployments" for w in recreate.writes)
    assert any(w.verb == "patch" and w.body["spec"]["replicas"] == 0 for w in recreate.writes)  # the old stops first
    world.converge()
    assert world.body["status"]["activeRevision"] not in (old, new) and len(world.benchmarks) == 1
    assert [e for e in world.events if e[1] == "Switched"][-1][2].endswith("(Recreate)")


def promotion_patch_again(world: World):
    from drafter_operator.api.training import DrafterTraining
    from drafter_operator.controllers.training.promotion import promotion_patch

    training = yaml.safe_load((REPO / "examples" / "training-kimi-k25-eagle3.yaml").read_text())
    return promotion_patch(world.body, DrafterTraining.model_validate(training).spec, "kimi-ft (generation 1)", 41.0, DIGEST)


def test_a_promotion_the_gate_refuses_names_its_gate_and_a_manual_change_afterwards_is_not_gated_by_it():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    old = world.body["status"]["activeRevision"]
    promote(world)
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())
    finish_gate(world, False, "41.0 tok/s is below 41.00")
    failed = world.decide()
    assert failed.record_first["revisions"][-1]["failedReason"] == (
        "failed the gate of drafter.dev/promotion by kimi-ft (generation 1) (41.0 tok/s is below 41.00)")
    world.apply(failed)
    world.converge()
    assert world.body["status"]["activeRevision"] == old
    # The user points the drafter elsewhere: their own BlueGreen without a gate, whatever the annotation says.
    world.body["spec"]["drafter"] = {**world.body["spec"]["drafter"], "model": "/models/drafters/other",
                                     "contentDigest": None}
    world.body["spec"]["drafter"] = {k: v for k, v in world.body["spec"]["drafter"].items() if v is not None}
    world.body["metadata"]["generation"] += 1
    world.converge()
    assert world.body["status"]["activeRevision"] != old and len(world.benchmarks) == 1
    assert world.body["status"]["promotion"]["revision"] == failed.record_first["revisions"][-1]["name"]


def test_a_promotion_in_force_is_a_steady_state():
    world = World(seed_body(swap={"strategy": "BlueGreen"}))
    world.converge()
    promote(world)
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())
    finish_gate(world, True, "passed")
    world.converge()
    assert not world.decide().writes_anything()
    assert promotion_patch_again(world) is None
