"""The drafter preflight end to end: engine pods check their drafter checkpoint in an init container before
the engine starts, and the verdict is the DrafterServing's DrafterCompatible condition.

Tiny real checkpoints (drafter_testbed/tiny_checkpoints.py) are written to the host side of the model claim; the local
process runner runs the init container (`drafter-operator preflight` on this host's interpreter) against
them, and the engine (the emulator) only once it passed.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
import yaml

from drafter_testbed import tiny_checkpoints as tiny
from drafter_operator.preflight.verdict import parse_termination_record
from tests.e2e.conftest import E2E_GPU_PRODUCT

pytestmark = pytest.mark.e2e

TARGET = "tiny-target"
# The positions the tiny drafters were trained on, also as the top-level list vLLM reads first.
LAYERS = {"eagle_aux_hidden_state_layer_ids": list(tiny.TRAINED_POSITIONS)}
# One fault per drafter: (directory, the reason DrafterCompatible must name, how it is made).
FAULTS = {
    "hidden-size": ("HiddenSizeMismatch", lambda d: tiny.make_specforge(
        d, config=tiny.specforge_config(hidden=2 * tiny.HIDDEN, **LAYERS), tensors=tiny.eagle3_tensors(hidden=2 * tiny.HIDDEN))),
    "no-d2t": ("DraftVocabMappingMissing", lambda d: tiny.make_specforge(d, drop=("d2t", "t2d"), **LAYERS)),
    "draft-vocab": ("LmHeadShape", lambda d: tiny.make_specforge(d, draft_vocab=2 * tiny.DRAFT_VOCAB, **LAYERS)),
    "aux-layers": ("AuxLayerOutOfRange", lambda d: tiny.make_specforge(
        d, eagle_aux_hidden_state_layer_ids=[1, 2, tiny.LAYERS + 5])),
    "eagle1-as-eagle3": ("EagleDrafterAsEagle3", lambda d: tiny.make_eagle1(d)),
}
# How long the test waits for a verdict: a guard, not a measure (a loaded machine stretches it). That the
# preflight, not the 10-minute startup timeout, stopped a revision is read from its pod: the engine never ran.
VERDICT_GUARD_SECONDS = 90


def serving(name: str, drafter: str, **spec) -> dict:
    return {
        "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing", "metadata": {"name": name},
        "spec": {
            "engine": "vllm",
            "target": {"model": f"/models/{TARGET}", "tensorParallelSize": 1},
            "drafter": {"method": "eagle3", "model": f"/models/drafters/{drafter}", "numSpeculativeTokens": 3},
            "resources": {"gpusPerReplica": 1},
            "placement": {"gpuProduct": E2E_GPU_PRODUCT, "nodeSelector": {"drafter.dev/node-runtime": "process"}},
            "storage": {"modelClaim": "models", "mountPath": "/models"},
            "startup": {"timeout": "10m"},
            **spec,
        },
    }


def apply(cluster, namespace: str, obj: dict) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(obj))


def status_of(cluster, namespace: str, name: str) -> dict:
    return cluster.get_json("-n", namespace, "drafterserving", name).get("status") or {}


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def pods_of(cluster, namespace: str, name: str, revision: str | None = None) -> list[dict]:
    selector = f"drafter.dev/serving={name}" + (f",drafter.dev/revision={revision}" if revision else "")
    return cluster.get_json("-n", namespace, "pods", "-l", selector)["items"]


def preflight_termination(pod: dict) -> dict:
    (init,) = [c for c in pod["status"].get("initContainerStatuses") or [] if c["name"] == "preflight"]
    return (init.get("state") or {}).get("terminated") or (init.get("lastState") or {}).get("terminated") or {}


def engine_never_started(pod: dict) -> bool:
    (engine,) = [c for c in pod["status"].get("containerStatuses") or [] if c["name"] == "engine"]
    return (set(engine.get("state") or {}) <= {"waiting"} and not engine.get("lastState")
            and engine.get("restartCount", 0) == 0 and not engine.get("started"))


def seconds_between(start: str, end: str) -> float:
    parse = lambda t: dt.datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


@pytest.fixture
def checkpoints(fast_engines, model_volume):
    """The tiny target, a good drafter and one broken copy per fault, on the model claim's host directory."""
    from drafter_testbed import cluster as local

    cluster, namespace, _ = fast_engines
    root = local.Layout().root / "claims" / namespace / model_volume
    tiny.make_target(root / TARGET)
    tiny.make_specforge(root / "drafters" / "good", **LAYERS)
    for name, (_, make) in FAULTS.items():
        make(root / "drafters" / name)
    return cluster, namespace


def test_a_good_drafter_serves_and_each_broken_one_is_stopped_before_its_engine_starts(checkpoints):
    cluster, namespace = checkpoints
    applied = time.monotonic()
    apply(cluster, namespace, serving("good", "good", swap={"strategy": "BlueGreen"}))
    for name in FAULTS:
        apply(cluster, namespace, serving(name, name))

    stopped_after: dict[str, float] = {}

    def all_stopped():
        for name, (reason, _) in FAULTS.items():
            if name not in stopped_after and condition(status_of(cluster, namespace, name),
                                                        "DrafterCompatible").get("reason") == reason:
                stopped_after[name] = time.monotonic() - applied
        return len(stopped_after) == len(FAULTS)

    cluster.wait_for("every broken drafter's verdict", all_stopped, timeout=VERDICT_GUARD_SECONDS)

    measured = {}
    for name, (reason, _) in FAULTS.items():
        status = status_of(cluster, namespace, name)
        compatible = condition(status, "DrafterCompatible")
        assert compatible["status"] == "False" and "Fix:" in compatible["message"], compatible
        assert compatible["message"].startswith(f"revision {status['activeRevision']}: preflight refused the drafter")
        assert condition(status, "Ready")["reason"] == "DrafterIncompatible"
        progressing = condition(status, "Progressing")
        assert progressing["reason"] == "RevisionFailed" and f"drafter preflight failed ({reason})" in progressing["message"]
        assert status["revisions"][-1]["good"] is False  # failed at once, not after spec.startup.timeout
        (pod,) = pods_of(cluster, namespace, name)
        assert engine_never_started(pod), pod["status"]
        terminated = preflight_termination(pod)
        record = parse_termination_record(terminated["message"])
        assert terminated["exitCode"] == 1 and record["reason"] == reason and not record["ok"]
        measured[name] = {"check_seconds": record["seconds"],
                          "container_seconds": seconds_between(terminated["startedAt"], terminated["finishedAt"]),
                          "verdict_after_apply": round(stopped_after[name], 1)}
        events = cluster.get_json("-n", namespace, "events", "--field-selector", f"involvedObject.name={name}")["items"]
        assert any(e["type"] == "Warning" and e["reason"] == reason for e in events), [e["reason"] for e in events]

    # The good drafter passed and its engine serves.
    def ready():
        status = status_of(cluster, namespace, "good")
        return condition(status, "Ready").get("status") == "True" and status
    status = cluster.wait_for("the good drafter's serving Ready", ready, timeout=60)
    compatible = condition(status, "DrafterCompatible")
    assert (compatible["status"], compatible["reason"]) == ("True", "PreflightPassed"), compatible
    assert compatible["message"].startswith(f"revision {status['activeRevision']}: preflight passed for vllm method eagle3")
    (pod,) = pods_of(cluster, namespace, "good")
    assert preflight_termination(pod)["exitCode"] == 0

    # A swap to a broken drafter (BlueGreen): refused in seconds while the good revision keeps serving.
    old = status["activeRevision"]
    apply(cluster, namespace, serving("good", "no-d2t", swap={"strategy": "BlueGreen"}))
    swapped = time.monotonic()
    refused = cluster.wait_for("the swap refused", lambda: (s := status_of(cluster, namespace, "good")) and condition(
        s, "Progressing").get("reason") == "RevisionFailed" and s, timeout=VERDICT_GUARD_SECONDS)
    measured["swap-refused-after"] = round(time.monotonic() - swapped, 1)
    assert refused["activeRevision"] == old and condition(refused, "Ready")["status"] == "True"
    assert condition(refused, "DrafterCompatible")["reason"] == "DraftVocabMappingMissing"
    cluster.wait_for("the refused revision's pods to go", lambda: {p["metadata"]["labels"]["drafter.dev/revision"]
                                                                   for p in pods_of(cluster, namespace, "good")} == {old},
                     timeout=60)
    selector = cluster.get_json("-n", namespace, "service", "good")["spec"]["selector"]
    assert selector["drafter.dev/revision"] == old
    print("preflight timings:", json.dumps(measured, sort_keys=True))
