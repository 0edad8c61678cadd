"""The swap-fault harness's own checks (drafter_testbed/swap_faults.py): each invariant catches what it names, and
the phase follows a swap's objects. A harness whose checks cannot fail would report faults survived."""

from __future__ import annotations

import copy

import pytest

from drafter_testbed import swap_faults as sf

UID = "serving-uid"


def obj(kind: str, name: str, uid: str, owner: str | None = None, revision: str | None = None, **extra) -> dict:
    labels = {sf.SERVING_LABEL: "kimi", **({sf.REVISION_LABEL: revision} if revision else {})}
    meta = {"name": name, "uid": uid, "labels": labels,
            "ownerReferences": [{"uid": owner}] if owner else []}
    return {"kind": kind, "metadata": meta, **extra}


def finished_swap() -> sf.Snapshot:
    """kimi swapped from revision aaa to bbb: only bbb's Deployment, ReplicaSet and Ready pod are left."""
    serving = {"kind": "DrafterServing", "metadata": {"name": "kimi", "uid": UID},
               "status": {"activeRevision": "bbb", "previousRevision": "aaa",
                          "revisions": [{"name": "aaa", "good": True}, {"name": "bbb", "good": True}],
                          "conditions": [{"type": "Ready", "status": "True"}]}}
    return {
        "DrafterServing": [serving],
        "Deployment": [obj("Deployment", "kimi-bbb", "d-b", UID, "bbb", spec={"replicas": 1})],
        "ReplicaSet": [obj("ReplicaSet", "kimi-bbb-1", "rs-b", "d-b", "bbb")],
        "Pod": [obj("Pod", "kimi-bbb-1-x", "p-b", "rs-b", "bbb",
                    status={"conditions": [{"type": "Ready", "status": "True"}]})],
        "Service": [obj("Service", "kimi", "s", UID, spec={"selector": {sf.REVISION_LABEL: "bbb"}})],
    }


def broken(snapshot: sf.Snapshot, **expected) -> set[str]:
    return {c.name for c in sf.swap_invariants(snapshot, "kimi", **expected) if not c.held}


def test_a_finished_swap_holds_every_invariant():
    assert broken(finished_swap(), history_before=["aaa"], expected_active="bbb", expected_previous="aaa") == set()


def test_a_leftover_old_deployment_is_a_duplicate_and_an_orphan_without_its_owner():
    snapshot = finished_swap()
    snapshot["Deployment"].append(obj("Deployment", "kimi-aaa", "d-a", "gone-uid", "aaa", spec={"replicas": 1}))
    assert broken(snapshot) == {"no duplicated Deployment", "no orphaned Deployment, ReplicaSet, pod, Job or Service"}


@pytest.mark.parametrize("mutate, invariant", [
    (lambda s: s["Service"][0]["spec"]["selector"].update({sf.REVISION_LABEL: "aaa"}), "exactly one active revision"),
    (lambda s: s["Pod"][0]["status"]["conditions"][0].update(status="False"), "Service points at a Ready revision"),
    (lambda s: s["Service"].append(obj("Service", "kimi-2", "s2", UID)), "no duplicated Service"),
    (lambda s: s.setdefault("Job", []).append(obj("Job", "kimi-bench-g1", "j", "no-such-benchmark")),
     "no orphaned Deployment, ReplicaSet, pod, Job or Service"),
    (lambda s: s["Pod"].append(obj("Pod", "kimi-aaa-1-y", "p-a", "rs-a", "aaa")),
     "no orphaned Deployment, ReplicaSet, pod, Job or Service"),
    (lambda s: s["DrafterServing"][0]["status"]["revisions"].insert(0, {"name": "zzz"}), "revisions history intact"),
    (lambda s: s["DrafterServing"][0]["status"].update(previousRevision=None), "revisions history intact"),
    (lambda s: s["DrafterServing"][0]["status"]["revisions"][1].update(good=None), "revisions history intact"),
])
def test_each_invariant_catches_its_fault(mutate, invariant):
    snapshot = copy.deepcopy(finished_swap())
    mutate(snapshot)
    assert invariant in broken(snapshot, history_before=["aaa"], expected_previous="aaa")


def test_two_gate_benchmarks_of_one_revision_are_duplicates():
    snapshot = finished_swap()
    gate = obj("DrafterBenchmark", "kimi-gate-bbb", "g1", UID, "bbb")
    gate["metadata"]["labels"][sf.GATE_LABEL] = "true"
    second = copy.deepcopy(gate)
    second["metadata"].update(name="kimi-gate-bbb-2", uid="g2")
    snapshot["DrafterBenchmark"] = [gate, second]
    assert broken(snapshot) == {"no duplicated gate benchmark"}


def test_the_phase_follows_a_bluegreen_swap():
    snapshot = finished_swap()
    snapshot["Service"][0]["spec"]["selector"][sf.REVISION_LABEL] = "aaa"
    snapshot["Deployment"].append(obj("Deployment", "kimi-aaa", "d-a", UID, "aaa", spec={"replicas": 1}))
    pod = snapshot["Pod"].pop()
    assert sf.swap_phase(snapshot, "kimi", "aaa") == sf.CREATED
    pod["status"]["conditions"][0]["status"] = "False"
    snapshot["Pod"].append(pod)
    assert sf.swap_phase(snapshot, "kimi", "aaa") == sf.LOADING
    pod["status"]["conditions"][0]["status"] = "True"
    assert sf.swap_phase(snapshot, "kimi", "aaa") == sf.SWITCH
    snapshot["Service"][0]["spec"]["selector"][sf.REVISION_LABEL] = "bbb"
    assert sf.swap_phase(snapshot, "kimi", "aaa") == sf.DELETION
    snapshot["DrafterServing"][0]["status"]["degradedAction"] = {"revision": "bbb"}
    assert sf.swap_phase(snapshot, "kimi", "aaa") == f"{sf.IN_FLIGHT}: {sf.DELETION}"
    snapshot["Deployment"] = [d for d in snapshot["Deployment"] if d["metadata"]["name"] != "kimi-aaa"]
    assert sf.swap_phase(snapshot, "kimi", "aaa") == sf.SETTLED


def test_recreate_stops_the_old_revision_before_the_new_one_exists():
    snapshot = finished_swap()
    snapshot["Deployment"][0]["spec"]["replicas"] = 0
    assert sf.swap_phase(snapshot, "kimi", "bbb") == sf.STOPPING
