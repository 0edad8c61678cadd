"""Each drafter family rendered on each engine (issue 27): the method spelling, its settings as the engine's keys
and flags, k per engine, and the families an engine refuses at apply. tests/contract holds these renderings to
vLLM's and SGLang's own parsers and config classes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drafter_operator import constants, engines
from drafter_operator.api import DrafterServingSpec

TARGET = "/models/DeepSeek-V4.1-Flash"


def spec(engine: str, drafter: dict) -> DrafterServingSpec:
    return DrafterServingSpec.model_validate({"engine": engine, "target": {"model": TARGET}, "drafter": drafter})


def vllm_config(drafter: dict) -> dict:
    argv = engines.vllm.render_command(spec("vllm", drafter))
    return json.loads(argv[argv.index("--speculative-config") + 1])


def sglang_flags(drafter: dict) -> list[str]:
    argv = engines.sglang.render_command(spec("sglang", drafter))
    return argv[argv.index("--speculative-algorithm"):]


@pytest.mark.parametrize("drafter,expected", [
    ({"method": "ngramGpu", "numSpeculativeTokens": 4}, {"method": "ngram_gpu", "num_speculative_tokens": 4}),
    ({"method": "ngram", "numSpeculativeTokens": 4, "ngram": {"promptLookupMin": 2, "promptLookupMax": 5}},
     {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}),
    ({"method": "suffix"}, {"method": "suffix"}),
    ({"method": "suffix", "numSpeculativeTokens": 16,
      "suffix": {"maxTreeDepth": 32, "maxCachedRequests": 0, "maxSpecFactor": "1.5", "minTokenProb": "0.2"}},
     {"method": "suffix", "num_speculative_tokens": 16, "suffix_decoding_max_tree_depth": 32,
      "suffix_decoding_max_cached_requests": 0, "suffix_decoding_max_spec_factor": 1.5,
      "suffix_decoding_min_token_prob": 0.2}),
    ({"method": "dflash", "model": "/models/d", "numSpeculativeTokens": 15},
     {"method": "dflash", "model": "/models/d", "num_speculative_tokens": 15}),
    ({"method": "dspark", "model": "/models/ds"}, {"method": "dspark", "model": "/models/ds"}),
    ({"method": "dspark", "numSpeculativeTokens": 7}, {"method": "dspark", "num_speculative_tokens": 7}),
    ({"method": "dspark", "model": TARGET, "numSpeculativeTokens": 7,
      "dspark": {"draftTopk": 4, "adaptiveVerification": True}},
     {"method": "dspark", "model": TARGET, "num_speculative_tokens": 7, "dspark_draft_topk": 4,
      "enable_adaptive_verification": True}),
])
def test_each_family_renders_its_speculative_config_on_vllm(drafter, expected):
    assert vllm_config(drafter) == expected


@pytest.mark.parametrize("drafter,expected", [
    ({"method": "dflash", "model": "/models/d"}, ["DFLASH", "--speculative-draft-model-path", "/models/d"]),
    # A DFlash block holds the anchor and the k drafts; a DSpark block size is the k drafts.
    ({"method": "dflash", "model": "/models/d", "numSpeculativeTokens": 15},
     ["DFLASH", "--speculative-draft-model-path", "/models/d", "--speculative-dflash-block-size", "16"]),
    ({"method": "dspark"}, ["DSPARK"]),
    ({"method": "dspark", "numSpeculativeTokens": 7}, ["DSPARK", "--speculative-dspark-block-size", "7"]),
    ({"method": "dspark", "model": "/models/ds", "numSpeculativeTokens": 7},
     ["DSPARK", "--speculative-draft-model-path", "/models/ds", "--speculative-dspark-block-size", "7"]),
])
def test_the_block_drafters_render_their_block_size_on_sglang(drafter, expected):
    assert sglang_flags(drafter) == ["--speculative-algorithm", *expected]


@pytest.mark.parametrize("engine,drafter,k", [
    ("vllm", {"method": "mtp"}, 1),  # what the renderer fills in, not None
    ("vllm", {"method": "suffix"}, 24),  # vLLM's tree depth default (config/speculative.py 538)
    ("vllm", {"method": "suffix", "suffix": {"maxTreeDepth": 12}}, 12),
    ("vllm", {"method": "suffix", "numSpeculativeTokens": 8, "suffix": {"maxTreeDepth": 12}}, 8),
    ("vllm", {"method": "dspark", "model": "/models/ds"}, None),  # the draft's block_size
    ("vllm", {"method": "dflash", "model": "/models/d", "numSpeculativeTokens": 15}, 15),
    ("sglang", {"method": "dflash", "model": "/models/d", "numSpeculativeTokens": 15}, 15),
    ("sglang", {"method": "dspark", "numSpeculativeTokens": 7}, 7),
    ("sglang", {"method": "dspark"}, None),
    ("sglang", {"method": "eagle3", "model": "/models/d", "numSteps": 3}, 3),
    ("sglang", {"method": "none"}, None),
])
def test_k_follows_the_method(engine, drafter, k):
    assert engines.draft_tokens_per_step(engine, spec(engine, drafter).drafter) == k


@given(st.integers(1, 16))
@settings(max_examples=16, deadline=None)
def test_vllm_renders_the_k_it_reports(k):
    """The k acceptance and the gate use is the k the --speculative-config carries, for every family."""
    for method in constants.SPECULATIVE_METHODS:
        drafter = {"method": method, "numSpeculativeTokens": k,
                   **({"model": "/models/d"} if method in constants.METHODS_WITH_MODEL else {})}
        assert vllm_config(drafter)["num_speculative_tokens"] == engines.draft_tokens_per_step(
            "vllm", spec("vllm", drafter).drafter) == k


@pytest.mark.parametrize("engine,drafter,fragment", [
    ("sglang", {"method": "suffix"}, "vLLM only"),
    ("sglang", {"method": "ngramGpu"}, "vLLM only"),
    ("sglang", {"method": "ngram", "ngram": {"promptLookupMax": 3}}, "are vLLM settings"),
    ("sglang", {"method": "dspark", "dspark": {"adaptiveVerification": True}}, "are vLLM settings"),
    ("sglang", {"method": "dflash", "model": "/models/d", "numSteps": 1}, "do not apply to methods dflash and dspark"),
    ("sglang", {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 3}, "is a vLLM setting except"),
    ("vllm", {"method": "dflash", "model": "/models/d"}, "numSpeculativeTokens is required"),
    ("vllm", {"method": "ngramGpu"}, "numSpeculativeTokens is required"),
    ("vllm", {"method": "dflash"}, "spec.drafter.model is required"),
    ("vllm", {"method": "suffix", "model": "/models/d"}, "must be empty"),
    ("vllm", {"method": "suffix", "dynamic": "fromBenchmark"}, "spec.drafter.dynamic is not kept"),
    ("vllm", {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 3, "suffix": {"maxTreeDepth": 4}},
     "spec.drafter.suffix holds settings of method suffix only"),
    ("vllm", {"method": "ngram", "numSpeculativeTokens": 3, "ngram": {"promptLookupMin": 5, "promptLookupMax": 2}},
     "must not exceed promptLookupMax"),
    ("vllm", {"method": "dflash", "model": TARGET, "numSpeculativeTokens": 3}, "must differ from spec.target.model"),
    ("vllm", {"method": "dspark"}, "required with engine vllm and method dspark without drafter.model"),
    ("vllm", {"method": "dspark", "model": "/models/ds", "dynamic": "fromBenchmark"},
     "dynamic with method dspark needs spec.drafter.numSpeculativeTokens"),
    ("vllm", {"method": "dspark", "numSpeculativeTokens": 7, "dspark": {"draftTopk": 4}}, "needs a Qwen3 DSpark draft"),
])
def test_what_each_engine_refuses_is_refused_with_the_fix(engine, drafter, fragment):
    with pytest.raises(ValidationError, match=fragment):
        spec(engine, drafter)


def test_dspark_may_draft_with_the_targets_bundled_weights():
    assert spec("vllm", {"method": "dspark", "model": TARGET}).drafter.model == TARGET
    assert spec("vllm", {"method": "dspark", "numSpeculativeTokens": 7, "dynamic": "fromBenchmark"}).drafter.dynamic
    assert spec("sglang", {"method": "dspark"}).drafter.model is None  # SGLang finds the bundled draft itself
