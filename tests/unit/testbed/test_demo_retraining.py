"""The retraining story's declarations (drafter_testbed/demo_retraining.py), checked without a cluster: the serving
it applies is one the operator accepts, each retraining it would start is a valid DrafterTraining warm-started
from the drafter serving then, its traffic is of the kinds the story says, and the emulator profile gives its
drafters the acceptance the story needs (the code drafter drifts on the shifted traffic; the retrained one does
not)."""

from __future__ import annotations

from drafter_operator.acceptance.drift import Baseline
from drafter_operator.api import DrafterServing
from drafter_operator.api.training.spec import DrafterTrainingSpec
from drafter_operator.resources.retraining import retraining_training
from drafter_testbed import demo_retraining as story
from drafter_operator.capture import categorize
from drafter_testbed.emulator.profiles import load_profile


def test_the_serving_is_accepted_and_its_retraining_trains_on_the_capture_from_the_code_drafter():
    body = story.serving_manifest()
    body["metadata"]["uid"] = "uid-1"
    serving = DrafterServing.model_validate(body)
    assert serving.spec.capture.claim_name == story.CAPTURE_CLAIM == serving.spec.retraining.template.spec["data"][
        "capture"]["claimName"]
    promoted = serving.spec.model_copy(update={"drafter": serving.spec.drafter.model_copy(
        update={"method": "eagle3", "model": story.CODE_DRAFTER})})
    manifest = retraining_training(story.NAMESPACE, story.SERVING, "uid-1", promoted, 1, "DriftDetected")
    spec = DrafterTrainingSpec.model_validate(manifest["spec"])
    assert spec.base_drafter == story.CODE_DRAFTER  # warm-started from what serves
    assert spec.output.path == f"{story.RETRAINED_PREFIX}-r1"
    assert manifest["metadata"]["name"] == f"{story.SERVING}-r1"


def test_the_traffic_is_code_then_other_languages():
    assert {categorize.classify_text(p) for p in story.CODE_PROMPTS} == {"code"}
    assert {categorize.classify_text(p) for p in story.NON_ENGLISH_PROMPTS} == {"nonEnglish"}


def test_the_code_drafter_drifts_on_the_shifted_traffic_and_the_retrained_one_does_not():
    profile = load_profile()

    def length(model: str, category: str) -> float:
        found = profile.lookup("vllm", model)
        a = 1 - (1 - found.acceptance) * profile.rejection_factor(category, found)
        return sum(a ** i for i in range(6))  # k = 5, the bonus token included

    from drafter_operator.benchmark_client.captured import CapturedPrompts, held_out_prompts
    from drafter_operator.benchmark_client.prompts import builtin_set

    def mix_length(model: str, mix: tuple[str, ...]) -> float:
        return sum(length(model, c) for c in mix) / len(mix)

    # The code drafter's training reads a dataset: its gate sends the built-in prompts.
    gate_mix = tuple(p.category for p in builtin_set()[:story.GATE["numPrompts"]])
    tolerance = float(story.ACCEPTANCE["driftTolerance"])
    code_gate = Baseline("r", "b", mix_length(story.CODE_DRAFTER, gate_mix), tolerance)
    assert length(story.CODE_DRAFTER, "code") > code_gate.floor  # before the shift: no drift
    assert length(story.CODE_DRAFTER, "nonEnglish") < code_gate.floor  # after it: drift
    # The retraining reads the capture: its Evaluate and its gate send the prompts it held out of both traffics,
    # cycled to the gate's numPrompts (the set is what a benchmark pod finds on the claim).
    records = [{"kind": "prompt", "time": "2026-12-07T09:00:00Z", "content": {"prompt": text}}
               for text in story.CODE_PROMPTS + story.NON_ENGLISH_PROMPTS]
    fraction = float(story.retraining_template()["data"]["capture"]["heldOutFraction"])
    held_out = held_out_prompts(records, CapturedPrompts(None, fraction))
    assert {p.category for p in held_out} == {"code", "nonEnglish"}  # both traffics are in the measured set
    measured = tuple(held_out[i % len(held_out)].category for i in range(story.GATE["numPrompts"]))
    retrained = f"{story.RETRAINED_PREFIX}-r1"
    retrained_gate = Baseline("r", "b", mix_length(retrained, measured), tolerance)
    assert length(retrained, "nonEnglish") > retrained_gate.floor
    # Evaluate's must-beat: on the held-out captured prompts the retrained drafter accepts clearly more than the
    # code one does on the same prompts.
    assert retrained_gate.length > 1.05 * mix_length(story.CODE_DRAFTER, measured)
