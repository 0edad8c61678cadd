"""minAcceptanceRate / minAcceptanceLength: auto through the serving decision, per drafter family: a family whose
engine rate is not (length - 1) / k is told why, and its length threshold is learned all the same."""

from __future__ import annotations

from drafter_operator.acceptance import verdict as a
from drafter_operator.controllers.serving.acceptance import revision_family, watched_revision
from drafter_operator.api.serving import DrafterServingSpec
from tests.support.serving_acceptance import auto_body, gated_swap
from tests.support.servings import World

RESULT = {"tokensPerSecond": 90.0, "speedup": 1.4, "acceptanceLength": 3.1}


def test_ngram_on_vllm_without_a_mean_draft_refuses_an_auto_rate_with_the_reason_and_the_fix():
    world = World(auto_body(minAcceptanceRate="auto"))
    world.body["spec"]["acceptance"].pop("minAcceptanceLength")
    world.converge()
    gated_swap(world, RESULT, {"method": "ngram", "numSpeculativeTokens": 4})
    condition = world.condition("Degraded")
    assert (condition["status"], condition["reason"]) == ("Unknown", a.NO_BENCHMARK)
    assert "recorded no mean draft" in condition["message"]
    assert "use minAcceptanceLength: auto" in condition["message"]
    assert watched_revision(world.body) is None  # never a made-up threshold


def test_ngram_on_vllm_learns_its_auto_rate_from_the_gates_mean_draft():
    world = World(auto_body(minAcceptanceRate="auto"))
    world.body["spec"]["acceptance"].pop("minAcceptanceLength")
    world.converge()
    revision = gated_swap(world, {**RESULT, "meanDraftTokens": 2.5}, {"method": "ngram", "numSpeculativeTokens": 4})
    assert world.body["status"]["lastBenchmark"]["meanDraftTokens"] == 2.5
    threshold = world.body["status"]["acceptanceThreshold"]
    # L* = 3.1 / 1.4 = 2.2143; x 1.05 = 2.325; per drafted token (2.325 - 1) / 2.5 = 0.53 (not / k = 4: 0.33)
    assert threshold["minAcceptanceRate"] == 0.53 and threshold["revision"] == revision
    assert watched_revision(world.body).learned.min_rate == 0.53


def test_ngram_on_vllm_learns_its_length_threshold():
    world = World(auto_body())
    world.converge()
    revision = gated_swap(world, RESULT, {"method": "ngram", "numSpeculativeTokens": 4})
    threshold = world.body["status"]["acceptanceThreshold"]
    # L* = E / S = 3.1 / 1.4 = 2.2143; x 1.05 = 2.325
    assert threshold["minAcceptanceLength"] == 2.325 and threshold["revision"] == revision
    assert watched_revision(world.body).learned.min_length == threshold["minAcceptanceLength"]


def test_the_family_is_the_active_revisions_not_the_specs():
    spec = DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/m"},
                                              "drafter": {"method": "ngram", "numSpeculativeTokens": 4}})
    records = [{"name": "r1", "engine": "vllm", "drafterSpec": {"method": "eagle3", "model": "/d"}}]
    assert revision_family(spec, records, "r1") == ("vllm", "eagle3")  # after a Rollback to r1
    assert revision_family(spec, records, "r2") == ("vllm", "ngram")
