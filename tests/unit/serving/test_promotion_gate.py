"""A promotion's revision identity (the drafter's content digest) and its one-shot gate (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterServing
from drafter_operator.controllers.promotion_gate import Desired, promotion_annotation, promotion_swap
from drafter_operator.constants import PROMOTION_ANNOTATION
from drafter_operator.controllers.serving.revisions import revision_config, revision_hash

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DIGEST = "sha256:" + "0f" * 32
GATE = {"minSpeedup": "1.5", "baseline": {"tokensPerSecond": "60"}}


def example(name: str):
    return DrafterServing.model_validate(yaml.safe_load((EXAMPLES / name).read_text())).spec


# The names the operator gave these examples' revisions before contentDigest existed: an upgrade must not
# rename (and so restart) a single serving whose drafter has no digest.
@pytest.mark.parametrize("name, revision", [
    ("serving-airgapped.yaml", "4c745dfac4"), ("serving-baseline.yaml", "687a9ab57e"),
    ("serving-sglang-kimi-k25-eagle3.yaml", "8624ca4c27"), ("serving-vllm-kimi-k25-eagle3.yaml", "a39bc78275")])
def test_a_drafter_without_a_digest_keeps_its_revision_name(name, revision):
    spec = example(name)
    assert "contentDigest" not in revision_config(spec, "img:1")["drafter"]
    assert revision_hash(spec, "img:1") == revision
    # dynamic's schedule names a second revision the same way as before
    assert revision_hash(spec, "img:1", [(1, 8, 5)]) != revision


@given(st.sampled_from(["0", "7", "a", "f"]), st.integers(min_value=0, max_value=63))
def test_a_new_export_at_the_same_path_is_a_new_revision(char, at):
    spec = example("serving-vllm-kimi-k25-eagle3.yaml")
    first = spec.model_copy(update={"drafter": spec.drafter.model_copy(update={"content_digest": DIGEST})})
    hexes = DIGEST.removeprefix("sha256:")
    other = "sha256:" + hexes[:at] + ("1" if hexes[at] == char else char) + hexes[at + 1:]
    second = spec.model_copy(update={"drafter": spec.drafter.model_copy(update={"content_digest": other})})
    assert len({revision_hash(spec, "i"), revision_hash(first, "i"), revision_hash(second, "i")}) == 3


def promoted_spec(digest: str | None = DIGEST):
    spec = example("serving-vllm-kimi-k25-eagle3.yaml")
    return spec.model_copy(update={"drafter": spec.drafter.model_copy(update={"content_digest": digest})})


def annotations(digest: str | None = DIGEST, gate: dict | None = GATE, by: str = "ft (generation 1)") -> dict:
    return {PROMOTION_ANNOTATION: promotion_annotation(by, "/models/drafters/kimi-k25-eagle3", digest, gate)}


def test_the_promotion_binds_to_the_first_revision_with_its_drafter_and_its_scheduled_revision_only():
    spec = promoted_spec()
    first = promotion_swap(annotations(), None, spec, Desired("static", "static"), frozenset(), action=False)
    assert first.request is not None and first.request.gate.min_speedup == "1.5"
    assert first.record["revision"] == "static" and first.gate_source.endswith("by ft (generation 1)")
    # the schedule learned from the gate's sweep: the same drafter, a new name; still the promotion's
    scheduled = promotion_swap(annotations(), first.record, spec, Desired("scheduled", "static"), frozenset(),
                               action=False)
    assert scheduled.request is not None
    # once it served, or for any other revision (another image, another k), spec.swap governs
    for desired, static, good in (("static", "static", frozenset({"static"})),
                                  ("scheduled", "static", frozenset({"scheduled"})),
                                  ("other", "other", frozenset())):
        later = promotion_swap(annotations(), first.record, spec, Desired(desired, static), good, action=False)
        assert later.request is None and later.gate_source == "spec.swap.gate" and later.record == first.record


def test_no_promotion_without_a_matching_drafter_a_valid_annotation_or_during_an_ondegraded_action():
    spec = promoted_spec()
    cases = [
        (annotations(digest="sha256:" + "11" * 32), spec, False),  # another export than the one the spec runs
        (annotations(), promoted_spec(None), False),  # the spec's drafter has no digest (changed by hand)
        ({PROMOTION_ANNOTATION: "{not json"}, spec, False),
        ({PROMOTION_ANNOTATION: '{"by": "x", "model": "/m", "gate": {"minSpeedup": "1.5"}}'}, spec, False),  # no baseline
        (annotations(), spec, True),  # an onDegraded action chose what runs
        ({}, spec, False),
    ]
    for given_annotations, serving_spec, action in cases:
        swap = promotion_swap(given_annotations, None, serving_spec, Desired("r", "r"), frozenset(), action=action)
        assert swap.request is None and swap.record is None


def test_a_new_annotation_value_is_a_new_promotion():
    spec = promoted_spec()
    first = promotion_swap(annotations(by="ft (generation 1)"), None, spec, Desired("a", "a"), frozenset(),
                           action=False)
    again = promotion_swap(annotations(by="ft (generation 2)"), first.record, spec, Desired("b", "b"), frozenset({"a"}),
                           action=False)
    assert again.request is not None and again.record["revision"] == "b" and again.record["request"] != first.record["request"]


def test_content_digest_needs_a_model_and_its_spelling():
    body = yaml.safe_load((EXAMPLES / "serving-vllm-kimi-k25-eagle3.yaml").read_text())
    body["spec"]["drafter"] = {"method": "ngram", "numSpeculativeTokens": 3, "contentDigest": DIGEST}
    with pytest.raises(ValueError, match="contentDigest names what is at drafter.model"):
        DrafterServing.model_validate(body)
    body["spec"]["drafter"] = {"method": "eagle3", "model": "/m", "numSpeculativeTokens": 3, "contentDigest": "sha256:AB"}
    with pytest.raises(ValueError, match="contentDigest"):
        DrafterServing.model_validate(body)


@pytest.mark.parametrize("prompts", [
    {"persistentVolumeClaim": {"claimName": "ft-work", "path": "data/held-out-prompts.json"}},
    {"categorized": [{"text": "¿Qué hora es? 日本語で", "category": "nonEnglish"}, {"text": "def f():", "category": "code"}]},
], ids=["claim", "categorized"])
@pytest.mark.parametrize("by_category", [True, False])
def test_a_promotion_gates_prompts_and_acceptance_by_category_survive_the_annotation(prompts, by_category):
    from drafter_operator.api.benchmark_gate import BenchmarkGate
    from drafter_operator.resources.gate import GatedPod, gate_benchmark

    gate = {**GATE, "numPrompts": 2, "prompts": prompts, "acceptanceByCategory": by_category}
    written = annotations(gate=BenchmarkGate.model_validate(gate).to_json())
    raw = written[PROMOTION_ANNOTATION]
    if "categorized" in prompts:  # UTF-8, not \u escapes: a gate's prompts in another script keep their size
        assert "¿Qué hora es? 日本語で" in raw and "\\u" not in raw
    swap = promotion_swap(written, None, promoted_spec(), Desired("r", "r"), frozenset(), action=False)
    assert swap.request is not None
    assert swap.request.gate.prompts.to_json() == prompts and swap.request.gate.acceptance_by_category is by_category
    # the one-shot gate's benchmark measures on those prompts
    manifest = gate_benchmark("team", "kimi", promoted_spec(), GatedPod("r", "10.1.0.9", 8000), swap.request.gate)
    assert manifest["spec"]["prompts"] == prompts and manifest["spec"]["acceptanceByCategory"] is by_category
    assert manifest["spec"]["gate"] == {"minSpeedup": "1.5"}


def test_an_ascii_promotion_annotation_is_written_as_before():
    """ensure_ascii off changes nothing for a gate of ASCII (every gate before prompts could ride in it), so the
    request key of a promotion written by an earlier operator is the same."""
    raw = annotations()[PROMOTION_ANNOTATION]
    assert raw == ('{"by":"ft (generation 1)","contentDigest":"' + DIGEST + '","gate":{"baseline":{"tokensPerSecond":'
                   '"60"},"minSpeedup":"1.5"},"model":"/models/drafters/kimi-k25-eagle3","strategy":"BlueGreen"}')
