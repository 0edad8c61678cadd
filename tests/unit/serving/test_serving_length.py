"""LengthCovered (controllers/serving/length.py, pure): spec.target.maxModelLen against the length a DrafterTraining
trained the promoted drafter at, recorded by its Promote in the drafter.dev/trained-length annotation."""

from __future__ import annotations

import json

from drafter_operator.api.serving import DrafterSpec
from drafter_operator.constants import TRAINED_LENGTH_ANNOTATION
from drafter_operator.controllers.serving.length import (
    COVERED,
    LONGER,
    UNKNOWN,
    UNSET,
    trained_length,
    trained_length_annotation,
)
from tests.support.servings import DIGEST, World, promote, seed_body

TRAINED = "/models/drafters/kimi-k25-eagle3-ft"  # the example training's output (spec.train.maxLength 4096)


def length_condition(world: World) -> dict | None:
    return next((c for c in world.body["status"]["conditions"] if c["type"] == "LengthCovered"), None)


def promoted_world(**target) -> World:
    """The seed (maxModelLen 32768) with the example training's drafter promoted and served."""
    body = seed_body(swap={"strategy": "BlueGreen"})
    body["spec"]["target"].update(target)
    body["spec"]["target"] = {k: v for k, v in body["spec"]["target"].items() if v is not None}
    world = World(body)
    world.converge()
    assert length_condition(world) is None  # a drafter no training promoted: nothing is known, nothing said
    patch = promote(world)
    assert json.loads(patch["metadata"]["annotations"][TRAINED_LENGTH_ANNOTATION]) == {
        "by": "kimi-ft (generation 1)", "model": TRAINED, "contentDigest": DIGEST, "maxLength": 4096}
    return world


def finish_promotion(world: World) -> None:
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())
    (gate,) = [b for b in world.benchmarks.values() if "status" not in b]
    gate["status"] = {"state": "Succeeded", "result": {"verdict": "Passed", "verdictMessage": "met"}}
    world.converge()


def test_a_max_model_len_past_the_trained_length_warns_once_naming_both_and_the_fix():
    world = promoted_world()
    first = world.decide()
    world.apply(first)
    covered = length_condition(world)
    assert (covered["status"], covered["reason"]) == ("False", LONGER)
    assert covered["message"] == (
        f"spec.target.maxModelLen 32768 is longer than the 4096 tokens kimi-ft (generation 1) trained drafter "
        f"{TRAINED} at (its spec.train.maxLength): past 4096 tokens the drafter meets positions it never learned and "
        "its acceptance falls. Lower spec.target.maxModelLen to 4096, or train the drafter at 32768 with a "
        "DrafterTraining (spec.train.maxLength: 32768) and promote it")
    assert [(e[0], e[1]) for e in first.events if e[1] == LONGER] == [("Warning", LONGER)]
    finish_promotion(world)
    assert [e[1] for e in world.events].count(LONGER) == 1 and length_condition(world)["reason"] == LONGER
    assert not world.decide().writes_anything()


def test_a_max_model_len_within_the_trained_length_is_covered():
    world = promoted_world(maxModelLen=4096)
    world.apply(world.decide())
    covered = length_condition(world)
    assert (covered["status"], covered["reason"]) == ("True", COVERED) and "within the 4096 tokens" in covered["message"]


def test_an_unset_max_model_len_is_unknown_and_says_what_to_set():
    world = promoted_world(maxModelLen=None)
    world.apply(world.decide())
    covered = length_condition(world)
    assert (covered["status"], covered["reason"]) == ("Unknown", UNSET)
    assert "Set spec.target.maxModelLen to at most 4096" in covered["message"]


def test_a_drafter_changed_by_hand_after_the_promotion_is_not_the_trained_one():
    world = promoted_world()
    finish_promotion(world)
    world.body["spec"]["drafter"] = {**world.body["spec"]["drafter"], "model": "/models/drafters/other"}
    del world.body["spec"]["drafter"]["contentDigest"]
    world.body["metadata"]["generation"] += 1
    world.converge()
    covered = length_condition(world)
    assert (covered["status"], covered["reason"]) == ("Unknown", UNKNOWN)
    assert "only a DrafterTraining's Promote records it" in covered["message"]


def test_the_annotation_binds_the_length_to_the_drafters_model_and_digest():
    raw = trained_length_annotation("t (generation 2)", "/models/d", DIGEST, 8192)
    drafter = DrafterSpec.model_validate({"method": "eagle3", "model": "/models/d", "contentDigest": DIGEST})
    assert trained_length({TRAINED_LENGTH_ANNOTATION: raw}, drafter) == (8192, "t (generation 2)")
    assert trained_length({TRAINED_LENGTH_ANNOTATION: raw}, drafter.model_copy(update={"content_digest": None})) is None
    assert trained_length({TRAINED_LENGTH_ANNOTATION: "{not json"}, drafter) is None
    assert trained_length({TRAINED_LENGTH_ANNOTATION: json.dumps({"model": "/models/d", "contentDigest": DIGEST,
                                                                  "maxLength": "8192"})}, drafter) is None
    assert trained_length({}, drafter) is None
