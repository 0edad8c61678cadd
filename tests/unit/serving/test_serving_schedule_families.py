"""spec.drafter.dynamic per drafter family (controllers/serving/schedule.py): the schedule's k is the k the engine
runs the family with (engines.draft_tokens_per_step), and the API refuses dynamic for a family whose k the
operator does not know or whose schedule vLLM drops."""

from __future__ import annotations

import pytest

from drafter_operator.api.serving import DrafterServingSpec
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.controllers.serving.schedule import speculation_schedule

IMAGE = "vllm/vllm-openai:v0.33.0"
SWEEP = [{"concurrency": 1, "speedup": 1.6, "tokensPerSecond": 90.0},
         {"concurrency": 16, "speedup": 1.1, "tokensPerSecond": 500.0},
         {"concurrency": 32, "speedup": 0.7, "tokensPerSecond": 700.0}]


def spec(**drafter) -> DrafterServingSpec:
    return DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/models/t"},
                                              "drafter": {"dynamic": "fromBenchmark", **drafter}})


def run(levels) -> dict:
    return {"metadata": {"name": "sweep"}, "status": {"state": "Succeeded", "result": {"levels": levels},
                                                      "completionTime": "2026-01-01T00:00:00Z"}}


@pytest.mark.parametrize("drafter,k", [
    ({"method": "dflash", "model": "/models/d", "numSpeculativeTokens": 7}, 7),
    ({"method": "dspark", "numSpeculativeTokens": 6}, 6),
    ({"method": "ngramGpu", "numSpeculativeTokens": 3}, 3),
    ({"method": "ngram", "numSpeculativeTokens": 4}, 4),
    ({"method": "mtp"}, 1),  # vLLM needs it and the operator renders 1 (engines/vllm.py MTP_DEFAULT_SPECULATIVE_TOKENS)
])
def test_the_schedule_drafts_the_families_k(drafter, k):
    s = spec(**drafter)
    schedule, status = speculation_schedule(s, IMAGE, {revision_hash(s, IMAGE): [run(SWEEP)]}, None)
    assert schedule == [(1, 19, k), (20, 65536, 0)]
    assert status["ranges"][0]["numSpeculativeTokens"] == k


def test_dspark_without_k_is_refused_with_dynamic_by_the_api():
    # vLLM would take k from the draft's block_size, which the operator does not read: no schedule could be right.
    with pytest.raises(ValueError, match="numSpeculativeTokens"):
        spec(method="dspark")


def test_suffix_is_refused_with_dynamic_by_the_api():
    with pytest.raises(ValueError, match="suffix"):
        spec(method="suffix", numSpeculativeTokens=8)


@pytest.mark.parametrize("drafter,k", [({"method": "suffix"}, 24), ({"method": "suffix", "suffix": {"maxTreeDepth": 9}}, 9),
                                       ({"method": "suffix", "suffix": {"maxCachedRequests": 10}}, 24),
                                       ({"method": "suffix", "numSpeculativeTokens": 8, "suffix": {"maxTreeDepth": 9}}, 8)])
def test_suffix_k_is_the_one_vllm_runs(drafter, k):
    # vLLM sets num_speculative_tokens to suffix_decoding_max_tree_depth (default 24) when it is unset
    # (config/speculative.py 538, 1731-1739): the gate's k annotation and the acceptance watch use that bound.
    from drafter_operator import engines
    s = DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/models/t"}, "drafter": drafter})
    assert engines.draft_tokens_per_step("vllm", s.drafter) == k
