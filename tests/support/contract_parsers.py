"""The engines' own argument parsers in their environments (the contract tier): one command line parsed,
and what SGLang must have understood of a spec."""
from __future__ import annotations

from drafter_operator.api import DrafterServingSpec
from drafter_operator.engines.group import Parallelism
from tests.contract.family_checks import check_sglang_block

PORT = {"vllm": 8000, "sglang": 30000}

# spec.drafter.method -> (vLLM SpeculativeConfig.method, SGLang --speculative-algorithm, the SGLang
# builtin that name resolves to), as the engines document them.
METHODS: dict[str, tuple[str | None, str | None, str]] = {
    "eagle3": ("eagle3", "EAGLE3", "EAGLE3"),
    "eagle": ("eagle", "EAGLE", "EAGLE"),
    "mtp": ("mtp", "NEXTN", "EAGLE"),  # SGLang runs MTP heads (NEXTN) on its EAGLE worker
    "ngram": ("ngram", "NGRAM", "NGRAM"),
    "ngramGpu": ("ngram_gpu", None, None),  # vLLM only: SGLang 0.5.23 has one n-gram proposer
    "suffix": ("suffix", None, None),  # vLLM only: SGLang 0.5.23 has no suffix decoding
    "dflash": ("dflash", "DFLASH", "DFLASH"),
    "dspark": ("dspark", "DSPARK", "DSPARK"),
    "draftModel": ("draft_model", "STANDALONE", "STANDALONE"),
    "none": (None, None, "NONE"),
}


def parse(parsers, engine: str, argv: list[str], full: bool = True) -> dict:
    (result,) = parsers[engine].check([{"id": "case", "argv": argv, "full": full}])
    return result


def check_sglang(spec: DrafterServingSpec, result: dict) -> None:
    assert result["status"] == "ok", f"SGLang refused the command line: {result}"
    args, target, drafter = result["args"], spec.target, spec.drafter
    assert args["model_path"] == target.model
    assert (args["host"], args["port"]) == ("0.0.0.0", PORT["sglang"])
    layout = Parallelism.of(spec)
    # attention data parallelism widens the tensor-parallel group to every data-parallel rank's GPUs
    assert args["tp_size"] == target.tensor_parallel_size * layout.data
    assert (args["pp_size"], args["attn_dp_size"], args["nnodes"], args["node_rank"]) == (
        layout.pipeline, layout.data, layout.nodes, 0)
    assert args["ep_size"] == (args["tp_size"] if layout.expert else 1)
    assert args["served_model_name"] in (target.served_model_name, target.model if not target.served_model_name else None)
    assert args["context_length"] == target.max_model_len
    expected_fraction = float(target.gpu_memory_utilization) if target.gpu_memory_utilization is not None else None
    assert args["mem_fraction_static"] == expected_fraction
    assert args["trust_remote_code"] is target.trust_remote_code
    assert args["tool_call_parser"] == target.tool_call_parser
    assert args["reasoning_parser"] == target.reasoning_parser
    assert args["enable_metrics"] is True  # off by default in SGLang; acceptance monitoring needs /metrics

    _, algorithm, builtin = METHODS[drafter.method]
    assert args["speculative_algorithm"] == algorithm
    assert result["algorithm"] == {"ok": builtin}
    assert args["speculative_draft_model_path"] == drafter.model
    assert args["speculative_num_steps"] == drafter.num_steps
    assert args["speculative_eagle_topk"] == drafter.eagle_topk
    assert args["speculative_num_draft_tokens"] == drafter.num_draft_tokens
    if drafter.method in ("dflash", "dspark"):
        check_sglang_block(drafter, args, result["resolved"])
