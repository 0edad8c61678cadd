"""The rules on a replica's parallel layout and on what each engine allows of speculation with it
(api/serving/parallel_rules.py), against an independent reading of the engines' constraints."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drafter_operator.api import DrafterServingSpec
from drafter_operator.api.serving.problems import SERVING_OPERATOR_CHECKS, capacity_problems, serving_problems

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRAFTERS = {
    ("vllm", "none"): {"method": "none"},
    ("vllm", "eagle3"): {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 3},
    ("vllm", "mtp"): {"method": "mtp", "numSpeculativeTokens": 2},
    ("vllm", "ngram"): {"method": "ngram", "numSpeculativeTokens": 3},
    ("vllm", "dspark"): {"method": "dspark", "numSpeculativeTokens": 5},
    ("sglang", "none"): {"method": "none"},
    ("sglang", "eagle"): {"method": "eagle", "model": "/models/d", "numSteps": 3},
    ("sglang", "eagle3"): {"method": "eagle3", "model": "/models/d", "numSteps": 3},
    ("sglang", "mtp"): {"method": "mtp", "numSteps": 3},
    ("sglang", "ngram"): {"method": "ngram"},
    ("sglang", "draftModel"): {"method": "draftModel", "model": "/models/d", "numSteps": 3},
    ("sglang", "dflash"): {"method": "dflash", "model": "/models/d"},
    ("sglang", "dspark"): {"method": "dspark"},
}


def serving(engine="vllm", method="none", *, tp=8, pp=None, dp=None, gpus=8, nodes=None, drafter=None,
            **more) -> dict:
    target = {"model": "/models/t", "tensorParallelSize": tp}
    if pp is not None:
        target["pipelineParallelSize"] = pp
    if dp is not None:
        target["dataParallelSize"] = dp
    resources = {"gpusPerReplica": gpus, **({"nodesPerReplica": nodes} if nodes is not None else {})}
    return {"engine": engine, "target": target, "resources": resources,
            "drafter": {**DRAFTERS[(engine, method)], **(drafter or {})}, **more}


def refusal(data: dict) -> str | None:
    try:
        DrafterServingSpec.model_validate(data)
    except ValidationError as error:
        return str(error)
    return None


# --- the layout ------------------------------------------------------------------------------------------------


def layout_ok(tp: int, pp: int, dp: int, gpus: int, nodes: int) -> bool:
    """Every rank a GPU: on one node the ranks fit the pod's GPUs evenly, across nodes they fill every node's."""
    world = tp * pp * dp
    if nodes == 1:
        return gpus % tp == 0 and gpus % world == 0
    return world == gpus * nodes


@FAST
@given(tp=st.integers(1, 16), pp=st.sampled_from([None, 1, 2, 3, 4]), dp=st.sampled_from([None, 1, 2, 4]),
       gpus=st.integers(1, 16), nodes=st.sampled_from([None, 1, 2, 3, 4]))
def test_the_layout_fills_the_gpus_of_every_node(tp, pp, dp, gpus, nodes):
    error = refusal(serving(tp=tp, pp=pp, dp=dp, gpus=gpus, nodes=nodes))
    assert (error is None) == layout_ok(tp, pp or 1, dp or 1, gpus, nodes or 1), error
    if error is not None and (nodes or 1) > 1:
        assert "must equal spec.resources.gpusPerReplica x nodesPerReplica" in error
    elif error is not None and gpus % tp == 0:
        assert "must divide spec.resources.gpusPerReplica on one node" in error


def test_a_tensor_parallel_group_may_span_nodes():
    assert refusal(serving(tp=16, gpus=8, nodes=2)) is None
    assert "spec.target.tensorParallelSize must divide" in refusal(serving(tp=16, gpus=8))


def test_unset_sizes_stay_out_of_the_object_so_revisions_keep_their_names():
    spec = DrafterServingSpec.model_validate(serving())
    emitted = spec.to_json()
    assert "pipelineParallelSize" not in emitted["target"] and "dataParallelSize" not in emitted["target"]
    assert "nodesPerReplica" not in emitted["resources"]


# --- what the engines allow of speculation with it -------------------------------------------------------------


@pytest.mark.parametrize("engine, method", [("vllm", "eagle3"), ("sglang", "eagle3"), ("sglang", "mtp")])
def test_a_dynamic_schedule_is_refused_with_data_parallelism_on_both_engines(engine, method):
    dynamic = {"dynamic": "fromBenchmark"}
    assert refusal(serving(engine, method, tp=4, dp=2, drafter=dynamic)) is not None
    assert "spec.drafter.dynamic is not offered with spec.target.dataParallelSize above 1" in \
        refusal(serving(engine, method, tp=4, dp=2, drafter=dynamic))
    assert refusal(serving(engine, method, tp=4, dp=1, drafter=dynamic)) is None
    assert refusal(serving(engine, method, tp=4, dp=2)) is None


@pytest.mark.parametrize("method, allowed", [
    ("none", True), ("eagle", True), ("mtp", True), ("eagle3", False), ("ngram", False), ("draftModel", False),
    ("dflash", False), ("dspark", False)])
def test_sglang_speculates_across_pipeline_stages_with_eagle_only(method, allowed):
    error = refusal(serving("sglang", method, pp=2, nodes=2))
    assert (error is None) == allowed, error
    if not allowed:
        assert "spec.target.pipelineParallelSize above 1 on sglang refuses spec.drafter.method" in error
    assert refusal(serving("sglang", method, pp=1, tp=8, gpus=8)) is None


@pytest.mark.parametrize("method", ["eagle3", "mtp", "ngram", "dspark"])
def test_vllm_takes_every_method_with_pipeline_stages_and_data_parallelism(method):
    assert refusal(serving("vllm", method, pp=2, nodes=2)) is None
    assert refusal(serving("vllm", method, dp=2, nodes=2)) is None


@pytest.mark.parametrize("method, allowed", [
    ("none", True), ("eagle3", True), ("mtp", True), ("dflash", True), ("ngram", False), ("draftModel", False)])
def test_sglang_attention_data_parallelism_refuses_ngram_and_draft_models(method, allowed):
    error = refusal(serving("sglang", method, dp=2, nodes=2))
    assert (error is None) == allowed, error
    if not allowed:
        assert "spec.target.dataParallelSize above 1 on sglang refuses spec.drafter.method ngram and draftModel" in error


def test_sglang_pipelined_speculation_refuses_attention_dp_and_adaptive_speculation():
    assert "needs dataParallelSize 1 and no spec.drafter.dynamic" in refusal(
        serving("sglang", "mtp", tp=4, pp=2, dp=2, nodes=2))
    assert "needs dataParallelSize 1 and no spec.drafter.dynamic" in refusal(
        serving("sglang", "eagle", pp=2, nodes=2, drafter={"dynamic": "fromBenchmark"}))
    assert refusal(serving("sglang", "none", tp=4, pp=2, dp=2, nodes=2)) is None


def test_vllm_dspark_adaptive_verification_is_refused_with_pipeline_stages():
    adaptive = {"dspark": {"adaptiveVerification": True}}
    assert "spec.drafter.dspark.adaptiveVerification is refused with spec.target.pipelineParallelSize" in refusal(
        serving("vllm", "dspark", pp=2, nodes=2, drafter=adaptive))
    assert refusal(serving("vllm", "dspark", pp=1, drafter=adaptive)) is None
    assert refusal(serving("vllm", "dspark", pp=2, nodes=2, drafter={"dspark": {"adaptiveVerification": False}})) is None


# --- the operator's checks -------------------------------------------------------------------------------------


def problems(data: dict, gpus_per_node: int | None = 8) -> list[str]:
    return serving_problems(DrafterServingSpec.model_validate(data), gpus_per_node=gpus_per_node)


def test_a_replica_spanning_nodes_fits_when_each_pod_fits_a_node():
    assert problems(serving(tp=8, pp=2, nodes=2)) == []
    assert capacity_problems(16, 8) and "spec.resources.nodesPerReplica" in capacity_problems(16, 8)[0]
    assert "not supported yet" not in " ".join(SERVING_OPERATOR_CHECKS)


def test_sglang_pipelined_speculation_needs_its_switch_in_spec_env():
    needs = problems(serving("sglang", "mtp", pp=2, nodes=2))
    assert any("SGLANG_ENABLE_PP_SPEC=1 in spec.env" in p for p in needs), needs
    assert problems(serving("sglang", "mtp", pp=2, nodes=2, env=[{"name": "SGLANG_ENABLE_PP_SPEC", "value": "1"}])) == []
    assert problems(serving("sglang", "mtp", pp=2, nodes=2, env=[{"name": "SGLANG_ENABLE_PP_SPEC", "value": "0"}]))
    assert problems(serving("sglang", "none", pp=2, nodes=2)) == []


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_sglang_block_drafters_with_attention_dp_need_the_data_parallel_lm_head(method):
    found = problems(serving("sglang", method, dp=2, nodes=2))
    assert any("--enable-dp-lm-head" in p for p in found), found
    with_head = serving("sglang", method, dp=2, nodes=2)
    with_head["target"]["extraArgs"] = ["--enable-dp-lm-head"]
    assert problems(with_head) == []


@pytest.mark.parametrize("engine, method, field, value, item", [
    ("vllm", "mtp", "expertParallel", True, ["-ep"]),
    ("vllm", "mtp", "expertParallel", False, ["--enable-expert-parallel"]),
    ("sglang", "mtp", "dataParallelSize", 2, ["--attn-dp-size", "2"]),
    ("sglang", "mtp", "dataParallelSize", 2, ["--enable-dp-attention"]),
    ("sglang", "mtp", "expertParallel", True, ["--ep", "8"]),
])
def test_extra_args_may_not_say_again_what_a_set_parallel_field_renders(engine, method, field, value, item):
    data = serving(engine, method, tp=4 if field == "dataParallelSize" else 8)
    data["target"][field] = value
    data["target"]["extraArgs"] = item
    found = problems(data)
    assert any(f"sets what spec.target.{field} renders" in p for p in found), found
    del data["target"][field]
    assert not any("renders: keep" in p for p in problems(data))
