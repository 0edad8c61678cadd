"""Condition bookkeeping and the 'did our manifest change' comparison used before every write."""

from __future__ import annotations

import datetime as dt

from drafter_operator.controllers import conditions
from drafter_operator.controllers.serving.patches import changed_fields, template_differs
from drafter_operator.controllers.serving.status import transition_events
from drafter_operator.controllers.swap import Verdict

T0 = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)
T1 = T0 + dt.timedelta(minutes=5)


def test_transition_time_is_kept_while_the_status_holds_and_moves_when_it_changes():
    first = conditions.merge(None, [("Ready", Verdict("False", "EngineStarting", "0/1"))], 1, T0)
    same = conditions.merge(first, [("Ready", Verdict("False", "Unschedulable", "no GPUs"))], 2, T1)
    assert same[0]["lastTransitionTime"] == "2026-11-29T12:00:00Z"  # still False: no transition
    assert same[0]["reason"] == "Unschedulable" and same[0]["observedGeneration"] == 2
    flipped = conditions.merge(same, [("Ready", Verdict("True", "EngineReady", "1/1"))], 2, T1)
    assert flipped[0]["lastTransitionTime"] == "2026-11-29T12:05:00Z"


def test_none_leaves_a_condition_alone_and_order_is_stable():
    current = conditions.merge(None, [("DrafterCompatible", Verdict("True", "NoKnownIssues", "ok")),
                                      ("Ready", Verdict("True", "EngineReady", "ok"))], 1, T0)
    merged = conditions.merge(current, [("Ready", None), ("Progressing", Verdict("False", "RevisionActive", "x"))],
                              1, T1)
    assert [c["type"] for c in merged] == ["Ready", "Progressing", "DrafterCompatible"]
    assert merged[0] == current[0]


def test_transition_events_only_for_ready_and_progressing_changes_a_person_should_read():
    before = conditions.merge(None, [("Ready", Verdict("False", "EngineStarting", "0/1")),
                                     ("Progressing", Verdict("True", "RevisionStarting", "starting"))], 1, T0)
    assert transition_events(None, before) == []  # a rollout starting: the conditions say it
    after = conditions.merge(before, [("Ready", Verdict("True", "EngineReady", "1/1")),
                                      ("Progressing", Verdict("True", "RevisionStarting", "starting"))], 1, T1)
    assert transition_events(before, after) == []  # and getting Ready as it should
    failed = conditions.merge(after, [("Progressing", Verdict("False", "RevisionFailed", "rolled back"))], 1, T1)
    assert transition_events(after, failed) == [("Warning", "RevisionFailed", "Progressing=False: rolled back")]
    assert transition_events(failed, failed) == []
    # Ready lost is news whatever the reason, and so is the way back from a problem.
    lost = conditions.merge(after, [("Ready", Verdict("False", "EngineStarting", "0/1"))], 1, T1)
    assert transition_events(after, lost) == [("Warning", "EngineStarting", "Ready=False: 0/1")]
    exited = conditions.merge(before, [("Ready", Verdict("False", "EngineExited", "exit 1"))], 1, T1)
    assert transition_events(before, exited) == [("Warning", "EngineExited", "Ready=False: exit 1")]
    back = conditions.merge(exited, [("Ready", Verdict("True", "EngineReady", "1/1"))], 1, T1)
    assert transition_events(exited, back) == [("Normal", "EngineReady", "Ready=True: 1/1")]


def test_template_comparison_ignores_apiserver_defaults_but_sees_our_changes():
    ours = {"spec": {"containers": [{"name": "engine", "image": "vllm:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    served = {"metadata": {"creationTimestamp": None}, "spec": {
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
        "containers": [{"name": "engine", "image": "vllm:1", "imagePullPolicy": "IfNotPresent",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    assert not template_differs(served, ours)
    changed = {"spec": {"containers": [{"name": "engine", "image": "vllm:2", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    assert template_differs(served, changed)
    two = {"spec": {"containers": ours["spec"]["containers"] * 2}}
    assert template_differs(served, two)


def test_changed_keeps_only_differing_status_fields():
    # an absent field equals None: nothing to write; a present one set to None is written (merge-patch deletes it)
    assert changed_fields({"a": 1, "b": [1]}, {"a": 1, "b": [2], "c": None}) == {"b": [2]}
    assert changed_fields({"a": 1}, {"a": None}) == {"a": None}
    assert changed_fields({"a": 1}, {"a": 1}) == {}


def test_an_unset_pod_policy_field_is_a_change_and_its_patch_deletes_it():
    from drafter_operator.controllers.serving.patches import merge_overlay, removed_from_template

    container = {"name": "engine", "image": "vllm:1", "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}]}
    wanted = {"metadata": {"labels": {"team": "a"}}, "spec": {"containers": [container]}}
    served = {"metadata": {"labels": {"team": "a", "cost-center": "42"}, "annotations": {"x": "y"}},
              "spec": {"dnsPolicy": "ClusterFirst", "priorityClassName": "inference", "securityContext": {},
                       "containers": [{**container, "envFrom": [{"secretRef": {"name": "hub"}}],
                                       "imagePullPolicy": "IfNotPresent"}]}}
    assert template_differs(served, wanted)  # the subset comparison alone would see no change
    overlay = removed_from_template(served, wanted)
    assert overlay == {"metadata": {"labels": {"cost-center": None}, "annotations": {"x": None}},
                       "spec": {"priorityClassName": None, "containers": None}}
    patch = merge_overlay(overlay, wanted)
    # deletions where wanted is silent; what wanted sets (its containers list, whole) wins
    assert patch == {"metadata": {"labels": {"team": "a", "cost-center": None}, "annotations": {"x": None}},
                     "spec": {"containers": [container], "priorityClassName": None}}
    # apiserver defaults (an empty securityContext, dnsPolicy) are not removals
    same = {"metadata": {"labels": {"team": "a"}}, "spec": {"dnsPolicy": "ClusterFirst", "securityContext": {},
                                                            "containers": [dict(container)]}}
    assert removed_from_template(same, wanted) == {} and not template_differs(same, wanted)
