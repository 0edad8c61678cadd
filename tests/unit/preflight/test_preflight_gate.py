"""The drafter preflight as a gate of a revision (pure): the engine pods' `preflight` init container's
termination message -> DrafterCompatible, an at-once revision failure, Events.

The verdicts are real: `drafter-operator preflight --termination-message` runs on tiny checkpoints
(drafter_testbed/tiny_checkpoints.py) and its record is put into the pod status the decide reads, as the kubelet would.
"""

from __future__ import annotations

import copy
import io
import json
from argparse import Namespace
from pathlib import Path

import pytest

from drafter_operator.controllers.serving.drafter_compatible import FAILURE_MESSAGE_CHARS, pod_preflight, revision_preflight
from drafter_operator.controllers.serving.state import ServingState
from drafter_operator.controllers.serving.observe import observed_from
from drafter_operator.preflight import cli as pf_cli
from drafter_operator.preflight.verdict import parse_termination_record
from drafter_testbed import tiny_checkpoints as tiny
from drafter_operator.resources.engine import ENGINE_CONTAINER, PREFLIGHT_CONTAINER
from drafter_operator.resources.labels import REVISION_LABEL
from tests.support.servings import DRAIN, IMAGES, rolled_back, seed_body, swapped, World

OPERATOR_IMAGE = "ghcr.io/drafter-dev/drafter-operator:0.1.0"
TARGET = "/models/tiny-llama"  # matches no known-bad entry (the seed's Kimi target does)
GOOD = "/models/drafters/tiny-eagle3"
BROKEN = "/models/drafters/tiny-eagle3-no-d2t"


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """(exit code, termination message) of the real CLI for a good drafter, one without d2t, and a
    checkpoint that is not there (--skip-missing)."""
    root = tmp_path_factory.mktemp("gate")
    target = tiny.make_target(root / "target")
    good = tiny.make_specforge(root / "good", eagle_aux_hidden_state_layer_ids=list(tiny.TRAINED_POSITIONS))
    broken = tiny.make_specforge(root / "broken", eagle_aux_hidden_state_layer_ids=list(tiny.TRAINED_POSITIONS),
                                 drop=("d2t", "t2d"))
    out = {}
    for name, drafter in (("good", good), ("broken", broken), ("missing", root / "not-there")):
        message = root / f"{name}.termination-log"
        args = Namespace(drafter=str(drafter), target=str(target), engine="vllm", method="eagle3",
                         trained_convention=None, vllm_model_runner="v2", json=False,
                         termination_message=str(message), skip_missing=True, num_speculative_tokens=None)
        code = pf_cli.main(args, io.StringIO(), io.StringIO())
        out[name] = (code, message.read_text())
    assert [out[n][0] for n in ("good", "broken", "missing")] == [0, 1, 0]
    return out


def terminated(code: int, message: str | None = None, reason: str | None = None) -> dict:
    return {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error"),
            **({"message": message} if message is not None else {})}


def init_status(code: int, message: str | None = None, *, again: bool = False, reason: str | None = None) -> dict:
    """The preflight's initContainerStatuses entry: finished, or (``again``) running once more after it
    failed, with the failure in lastState, as a kubelet restarting it with back-off reports it."""
    status = {"name": PREFLIGHT_CONTAINER, "ready": False, "restartCount": 1 if again else 0,
              "state": {"terminated": terminated(code, message, reason)}}
    if again:
        status["state"] = {"running": {"startedAt": "2026-11-29T12:00:05Z"}}
        status["lastState"] = {"terminated": terminated(code, message, reason)}
    return status


def pod(init: dict | None, name: str = "kimi-r-1", revision: str = "r", ready: bool = False) -> dict:
    engine = {"name": ENGINE_CONTAINER, "ready": ready, "started": ready, "restartCount": 0,
              "state": {"running": {}} if ready else {"waiting": {"reason": "PodInitializing"}}}
    status: dict = {"containerStatuses": [engine], "conditions": [{"type": "Ready", "status": str(ready)}]}
    if ready:
        status["podIP"] = "10.0.0.9"
    if init is not None:
        status["initContainerStatuses"] = [init]
    return {"metadata": {"name": name, "labels": {REVISION_LABEL: revision}}, "status": status}


class GateWorld(World):
    """World whose engine pods carry a preflight init container status (``init``, by revision): a Ready
    Deployment's pods passed it; a Deployment that is not Ready has one pod held by it."""

    def __init__(self, body: dict):
        super().__init__(body)
        self.init: dict[str, dict] = {}

    def state(self) -> ServingState:
        pods = []
        for deployment in self.deployments.values():
            revision = deployment["metadata"]["labels"][REVISION_LABEL]
            ready = deployment.get("status", {}).get("readyReplicas", 0)
            for i in range(max(ready, 1 if revision in self.init else 0)):
                pods.append(pod(self.init.get(revision), f"{deployment['metadata']['name']}-{i}", revision,
                                ready=i < ready))
        return ServingState(serving=copy.deepcopy(self.body),
                            observed=observed_from(copy.deepcopy(list(self.deployments.values())), pods,
                                                   copy.deepcopy(self.service), self.body["metadata"].get("uid")),
                            now=self.now, default_images=IMAGES, drain=DRAIN, operator_image=OPERATOR_IMAGE)

    def settle(self) -> None:
        """Only revisions whose preflight passed (or that have none) become Ready."""
        for d in self.deployments.values():
            init = self.init.get(d["metadata"]["labels"][REVISION_LABEL])
            if init is None or init["state"].get("terminated", {}).get("exitCode") == 0:
                d["status"] = {"readyReplicas": d["spec"]["replicas"], "observedGeneration": d["metadata"]["generation"]}


def tiny_body(drafter: str = GOOD, **spec) -> dict:
    body = seed_body(**spec)
    body["spec"]["target"]["model"] = TARGET
    body["spec"]["drafter"]["model"] = drafter
    return body


def created_revision(plan) -> str:
    (write,) = [w for w in plan.writes if w.plural == "deployments" and w.verb == "create"]
    return write.body["metadata"]["labels"][REVISION_LABEL]


def started(world, init: dict) -> str:
    """Create the first revision, let its pods' preflight say ``init``, and converge; the revision."""
    first = world.decide()
    revision = created_revision(first)
    world.apply(first)
    world.init[revision] = init
    world.converge()
    return revision


def test_the_engine_pods_get_the_preflight_init_container_in_the_operators_image():
    world = GateWorld(tiny_body())
    plan = world.decide()
    (write,) = [w for w in plan.writes if w.plural == "deployments"]
    (init,) = write.body["spec"]["template"]["spec"]["initContainers"]
    assert init["name"] == PREFLIGHT_CONTAINER and init["image"] == OPERATOR_IMAGE
    assert init["command"][:2] == ["drafter-operator", "preflight"]
    assert init["command"][init["command"].index("--drafter") + 1] == GOOD


def test_a_failing_preflight_fails_the_first_revision_at_once_with_its_reason_the_fix_and_a_warning(records):
    world = GateWorld(tiny_body(BROKEN))
    first = world.decide()
    world.apply(first)
    revision = created_revision(first)
    world.init[revision] = init_status(*records["broken"])
    failed = world.decide()  # the same moment: no startup timeout has passed
    record = failed.record_first["revisions"][-1]
    assert record["name"] == revision and record["good"] is False
    assert "drafter preflight failed (DraftVocabMappingMissing)" in record["failedReason"]
    world.apply(failed)
    compatible = world.condition("DrafterCompatible")
    assert (compatible["status"], compatible["reason"]) == ("False", "DraftVocabMappingMissing")
    assert compatible["message"].startswith(f"revision {revision}: preflight refused the drafter for vllm method eagle3")
    assert "d2t" in compatible["message"] and "Fix:" in compatible["message"]
    assert world.condition("Ready")["reason"] == "DrafterIncompatible"
    assert world.condition("Progressing")["reason"] == "RevisionFailed"
    warnings = [(kind, reason) for kind, reason, _ in failed.events if kind == "Warning"]
    assert ("Warning", "DraftVocabMappingMissing") in warnings and ("Warning", "RevisionFailed") in warnings
    # The verdict is news once: the next decisions post nothing and write nothing more.
    world.apply(world.decide())
    again = world.decide()
    assert not again.writes_anything(), again
    assert [e[1] for e in world.events].count("DraftVocabMappingMissing") == 1


def test_a_failing_preflight_leaves_the_old_revision_serving_and_its_verdict_outlives_the_deleted_revision(records):
    world = GateWorld(tiny_body(swap={"strategy": "BlueGreen"}))
    first = world.decide()
    old = created_revision(first)
    world.init[old] = init_status(*records["good"])
    world.apply(first)
    world.converge()
    assert world.condition("DrafterCompatible")["reason"] == "PreflightPassed"
    world.body["spec"]["drafter"]["model"] = BROKEN
    world.body["metadata"]["generation"] = 2
    started = world.decide()
    new = created_revision(started)
    world.apply(started)
    world.init[new] = init_status(*records["broken"], again=True)  # seen while the kubelet retries it
    failed = world.decide()
    assert [p.rsplit("/", 1)[1] for p in failed.deletes] == [f"kimi-{new}"]
    assert rolled_back(failed) and not swapped(failed)
    world.apply(failed)
    assert world.service["spec"]["selector"][REVISION_LABEL] == old
    assert world.condition("Ready")["status"] == "True"  # the old revision never stopped serving
    world.converge()
    assert list(world.deployments) == [f"kimi-{old}"]
    # Its pods are gone; the condition still says why the revision the spec asks for cannot run.
    compatible = world.condition("DrafterCompatible")
    assert (compatible["status"], compatible["reason"]) == ("False", "DraftVocabMappingMissing")
    assert compatible["message"].startswith(f"revision {new}: ")
    assert f"revision {new} failed to start: drafter preflight failed" in world.condition("Progressing")["message"]
    # Back to the good drafter: its running revision's verdict again.
    world.body["spec"]["drafter"]["model"] = GOOD
    world.body["metadata"]["generation"] = 3
    world.converge()
    assert world.condition("DrafterCompatible")["reason"] == "PreflightPassed"


def test_a_passing_preflight_sets_drafter_compatible_true_with_its_summary(records):
    world = GateWorld(tiny_body())
    revision = started(world, init_status(*records["good"]))
    compatible = world.condition("DrafterCompatible")
    assert (compatible["status"], compatible["reason"]) == ("True", "PreflightPassed")
    assert compatible["message"].startswith(f"revision {revision}: preflight passed for vllm method eagle3: ")
    assert compatible["message"].endswith(" checks")
    assert world.condition("Ready")["status"] == "True"
    # No Warning from the verdict (nor from the first start, which the conditions say).
    assert [e[1] for e in world.events if e[0] == "Warning"] == []


def test_a_known_bad_match_outranks_a_passed_preflight_but_a_failed_one_outranks_it(records):
    world = GateWorld(seed_body())  # the seed: a known-bad engine x method x target
    first = world.decide()
    revision = created_revision(first)
    world.apply(first)
    code, message = records["good"]
    record = json.loads(message)
    assert "aux-layers" in record["passedChecks"]
    # a preflight that passed, but not the rule that checks the entry's cause
    record["passedChecks"] = [c for c in record["passedChecks"] if c != "aux-layers"]
    world.init[revision] = init_status(code, json.dumps(record))
    world.converge()
    assert world.condition("DrafterCompatible")["reason"] == "KnownBadCombination"
    failing = GateWorld(seed_body())
    plan = failing.decide()
    failing.apply(plan)
    failing.init[created_revision(plan)] = init_status(*records["broken"])
    failing.apply(failing.decide())
    assert failing.condition("DrafterCompatible")["reason"] == "DraftVocabMappingMissing"


def test_a_known_bad_entry_does_not_apply_to_a_drafter_whose_preflight_passed_the_rule_for_its_cause(records):
    # The seed's entry (vLLM + EAGLE-3 + Kimi/DeepSeek) is about layer ids; a drafter whose aux-layers
    # check passed (e.g. trained for vLLM's ids by a DrafterTraining) is not that case.
    world = GateWorld(seed_body())
    started(world, init_status(*records["good"]))
    compatible = world.condition("DrafterCompatible")
    assert (compatible["status"], compatible["reason"]) == ("True", "PreflightPassed")
    assert "known-bad vllm-eagle3-deepseek-mla matches" in compatible["message"]
    assert "ruled out its cause" in compatible["message"]


def test_a_checkpoint_not_on_the_volume_is_not_a_verdict_the_known_bad_one_stays_with_a_note(records):
    world = GateWorld(tiny_body())
    revision = started(world, init_status(*records["missing"]))
    compatible = world.condition("DrafterCompatible")
    assert (compatible["status"], compatible["reason"]) == ("True", "NoKnownIssues")
    assert f"revision {revision}: preflight checked nothing" in compatible["message"]
    assert "is not a directory here" in compatible["message"]
    assert world.condition("Ready")["status"] == "True"


def test_pod_preflight_reads_the_termination_then_the_last_one_and_reports_a_container_without_a_verdict(records):
    failed = pod_preflight(pod(init_status(*records["broken"], again=True)))
    assert failed.failed and failed.status == "False" and failed.reason == "DraftVocabMappingMissing"
    assert failed.seconds == parse_termination_record(records["broken"][1])["seconds"]
    passed = pod_preflight(pod(init_status(*records["good"])))
    assert not passed.failed and passed.checked and passed.status == "True"
    assert not pod_preflight(pod(init_status(*records["missing"]))).checked
    assert pod_preflight(pod(None)) is None  # no init container: a revision without a preflight
    running = {"name": PREFLIGHT_CONTAINER, "state": {"running": {}}, "restartCount": 0}
    assert pod_preflight(pod(running)) is None  # not finished yet
    killed = pod_preflight(pod(init_status(137, None, reason="OOMKilled"), name="kimi-abc-xyz"))
    assert killed.failed and (killed.status, killed.reason) == ("Unknown", "PreflightError")
    assert "exited with code 137 (OOMKilled) without a verdict" in killed.message
    assert "kubectl logs kimi-abc-xyz -c preflight" in killed.message
    # A usage error (exit 2) prints to stderr, which terminationMessagePolicy File does not keep.
    assert pod_preflight(pod(init_status(2, "", reason="Error"))).reason == "PreflightError"
    # A record that disagrees with the exit code is not trusted as a pass.
    assert pod_preflight(pod(init_status(1, records["good"][1]))).reason == "PreflightError"
    assert pod_preflight(pod(init_status(0, "not json"))) is None
    other = dict(init_status(1, records["broken"][1]), name="some-other-init")
    assert pod_preflight(pod(other)) is None


def test_one_failed_pod_decides_a_revision_and_its_failure_text_is_bounded(records):
    good, broken = pod(init_status(*records["good"])), pod(init_status(*records["broken"]))
    assert revision_preflight([good, broken]).failed
    assert revision_preflight([pod(init_status(*records["missing"])), good]).checked
    assert revision_preflight([pod(None)]) is None
    failure = revision_preflight([broken]).failure()
    assert failure.startswith("drafter preflight failed (DraftVocabMappingMissing): preflight refused")
    assert len(failure) <= len("drafter preflight failed (DraftVocabMappingMissing): ") + FAILURE_MESSAGE_CHARS + 3


def test_the_same_revision_failing_again_after_an_operator_restart_is_not_news(records):
    """The decision reads only the cluster and its own status: a restarted operator repeats nothing."""
    world = GateWorld(tiny_body(BROKEN))
    first = world.decide()
    world.apply(first)
    world.init[created_revision(first)] = init_status(*records["broken"])
    world.apply(world.decide())
    world.apply(world.decide())
    restarted = copy.deepcopy(world)
    plan = restarted.decide()
    assert plan.events == [] and plan.record_first == {} and not plan.writes_anything()


def test_an_example_serving_with_a_hub_drafter_gets_no_preflight():
    sglang = Path(__file__).resolve().parents[3] / "examples" / "serving-sglang-kimi-k25-eagle3.yaml"
    import yaml

    body = yaml.safe_load(sglang.read_text())
    body["metadata"] = {"name": "kimi", "namespace": "team", "uid": "u-1", "generation": 1}
    world = GateWorld(body)
    (write,) = [w for w in world.decide().writes if w.plural == "deployments"]
    assert "initContainers" not in write.body["spec"]["template"]["spec"]
