"""Contract tier, drafter families (issue 27): the engine facts the API's per-family rules rest on, each shown by
vLLM's or SGLang's own code refusing or silently changing what the API refuses (docs/engines-contract.md,
"Drafter families"), and checks that would catch a wrong rendering."""

from __future__ import annotations

import json
from typing import Any

import pytest

from drafter_operator.api import DrafterServingSpec
from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import vllm as vllm_engine
from tests.support.contract_parsers import METHODS, check_sglang, parse

# The modules using the session-scoped `parsers` (a vLLM and an SGLang parser process, about 100 s to start under
# CI load) share one worker, so one worker starts them rather than both (tests/contract/conftest.py).
pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("engine-parsers")]


def vllm_full(parsers, config: dict) -> dict:
    result = parse(parsers, "vllm", ["vllm", "serve", "/models/m", "--speculative-config", json.dumps(config)])
    assert result["status"] == "ok", result
    return result["speculative"]["full"]


@pytest.mark.parametrize("method", [m for m, (name, _, _) in METHODS.items() if name is not None])
def test_the_dynamic_schedule_survives_exactly_where_the_api_allows_it(parsers, method):
    """vLLM's own post-parse code (VllmConfig's runner choice and _maybe_disable_dynamic_sd_for_v1) on the real
    SpeculativeConfig: the schedule is dropped silently for the methods the API refuses spec.drafter.dynamic for."""
    from drafter_operator.engines.vllm import METHODS_WITHOUT_DYNAMIC

    body: dict[str, Any] = {"method": method, "numSpeculativeTokens": 4}
    if method in ("eagle3", "eagle", "draftModel", "dflash"):
        body["model"] = "/models/drafters/d"
    serving = DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/models/Kimi-K2.5"},
                                                 "drafter": body})
    schedule = [(1, 8, 4), (9, 65536, 0)]
    result = parse(parsers, "vllm", vllm_engine.render_command(serving, schedule=schedule))
    real = result["speculative"]["full"]
    assert "ok" in real, real
    kept = real["ok"]["runner"]["schedule_kept"]
    assert (kept is None) is (method in METHODS_WITHOUT_DYNAMIC), real["ok"]["runner"]
    if kept is not None:
        assert [tuple(e) for e in kept] == schedule


@pytest.mark.parametrize("config,message", [
    ({"method": "dflash", "model": "/models/d"}, "`num_speculative_tokens` was not provided"),
    ({"method": "dspark"}, "num_speculative_tokens must be provided"),  # bundled weights only with k
    ({"method": "ngram_gpu"}, "num_speculative_tokens must be provided"),
    ({"method": "suffix", "suffix_decoding_min_token_prob": 1.5}, "must be in [0, 1]"),
    ({"method": "suffix", "suffix_decoding_max_tree_depth": 0}, "must be >= 1"),
    ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2}, "prompt_lookup_min"),
], ids=["dflash-without-k", "dspark-bundled-without-k", "ngram-gpu-without-k", "suffix-probability", "suffix-depth",
        "prompt-lookup-order"])
def test_vllm_refuses_what_the_api_refuses(parsers, config, message):
    error = vllm_full(parsers, config).get("error", "")
    assert message in error, error


@pytest.mark.parametrize("algorithm", ["SUFFIX", "NGRAM_GPU"])
def test_sglang_has_no_suffix_and_no_gpu_ngram(parsers, algorithm):
    """Why the API refuses suffix and ngramGpu with engine sglang."""
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--speculative-algorithm", algorithm]
    assert "Unknown speculative algorithm" in parse(parsers, "sglang", argv)["algorithm"].get("error", "")


@pytest.mark.parametrize("method,wrong", [("dflash", "7"), ("dspark", "8")])
def test_a_wrong_block_size_would_be_caught(parsers, method, wrong):
    """k=7 is a DFlash block of 8 and a DSpark block size of 7: the other reading fails the checks."""
    body: dict[str, Any] = {"method": method, "numSpeculativeTokens": 7}
    if method == "dflash":
        body["model"] = "/models/drafters/dflash"
    serving = DrafterServingSpec.model_validate({"engine": "sglang", "target": {"model": "/models/m"}, "drafter": body})
    argv = sglang_engine.render_command(serving)
    flag = f"--speculative-{method}-block-size"
    argv[argv.index(flag) + 1] = wrong
    assert METHODS[method][1] in argv
    with pytest.raises(AssertionError):
        check_sglang(serving, parse(parsers, "sglang", argv))


def test_the_vllm_renderer_keeps_every_family_setting(parsers):
    """Suffix decoding's four settings as rendered come back from the real SpeculativeConfig unchanged."""
    serving = DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/models/m"}, "drafter": {
        "method": "suffix", "suffix": {"maxTreeDepth": 40, "maxCachedRequests": 7, "maxSpecFactor": "2.5",
                                       "minTokenProb": "0.05"}}})
    config = vllm_engine.speculative_config(serving.drafter)
    real = vllm_full(parsers, config)["ok"]
    assert {key: real[key] for key in config if key != "method"} == {key: v for key, v in config.items() if key != "method"}
    assert real["num_speculative_tokens"] == 40  # k defaults to the tree depth
