"""spec.target: the model being served, and the engine flags the operator owns (refused in extraArgs)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from drafter_operator.api.common import RATIO_PATTERN, ApiModel, ModelRef, Ratio, Rule, decimal_range_rule
from drafter_operator.engines import owned_spellings

# Exact spellings of the flags the operator owns, on either engine (from the engines' flag tables),
# checked at admission by CEL. Every other spelling the engines accept (unique prefixes, vLLM's
# underscores and dotted keys) is refused by the operator before any pod starts (serving_problems).
OWNED_FLAG_SPELLINGS: tuple[str, ...] = tuple(f for f in owned_spellings() if not f.startswith("--speculative"))
# Every --speculative* flag (and its --no- form) belongs to spec.drafter; -sc.<key> is vLLM's dotted form.
OWNED_FLAG_PREFIXES: tuple[str, ...] = ("--speculative", "--no-speculative", "-sc.")


def owned_flag(arg: str) -> bool:
    """True when an extraArgs item is an exact spelling of a flag the operator owns (the admission check)."""
    return arg.split("=")[0] in OWNED_FLAG_SPELLINGS or arg.startswith(OWNED_FLAG_PREFIXES)


_OWNED_LIST_CEL = "[" + ", ".join(f"'{flag}'" for flag in OWNED_FLAG_SPELLINGS) + "]"
_OWNED_CEL = (f"(a.split('=')[0] in {_OWNED_LIST_CEL} || "
              + " || ".join(f"a.startsWith('{prefix}')" for prefix in OWNED_FLAG_PREFIXES) + ")")

ParserName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", min_length=1, max_length=64)]


class TargetSpec(ApiModel):
    """The model being served and how the engine loads it."""

    rules = (
        Rule(
            cel=f"!has(self.extraArgs) || !self.extraArgs.exists(a, {_OWNED_CEL})",
            message=(
                "spec.target.extraArgs must not set flags the operator owns (--model, --host, --port, "
                "--tensor-parallel-size, --max-model-len, --gpu-memory-utilization, --trust-remote-code, parsers, "
                "--served-model-name, --enable-metrics, --speculative-*, --config, ...): use the matching spec field instead"
            ),
            check=lambda t: not any(owned_flag(a) for a in t.extra_args or []),
            field_path=".extraArgs",
            reason="FieldValueForbidden",
        ),
        decimal_range_rule(
            "gpuMemoryUtilization", RATIO_PATTERN,
            'spec.target.gpuMemoryUtilization must be above 0 and at most 1, e.g. "0.9"',
            minimum=0.0, exclusive_minimum=True,
        ),
    )

    model: ModelRef
    """The target model: an absolute path on the model volume (e.g. /models/Kimi-K2.5) or a hub id ("org/name")."""
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] = 8
    """GPUs each layer is sharded over within one data-parallel rank (vLLM --tensor-parallel-size; SGLang --tp-size, times dataParallelSize). On one node it must divide resources.gpusPerReplica; tensorParallelSize x pipelineParallelSize x dataParallelSize is the GPUs the model instance runs on."""
    pipeline_parallel_size: Annotated[int, Field(ge=1, le=64)] | None = None
    """Pipeline stages the layers are split into, each stage tensorParallelSize GPUs (vLLM --pipeline-parallel-size, SGLang --pp-size); unset: 1. Typically one stage per node of a replica that spans nodes (resources.nodesPerReplica)."""
    data_parallel_size: Annotated[int, Field(ge=1, le=64)] | None = None
    """Data-parallel ranks of one replica, each with its own batch and KV cache and tensorParallelSize GPUs wide, behind the replica's one endpoint; unset: 1. vLLM --data-parallel-size; SGLang runs them as attention data parallelism (--attn-dp-size, with --tp-size tensorParallelSize x dataParallelSize). spec.replicas adds whole replicas instead."""
    expert_parallel: bool | None = None
    """Shard a mixture-of-experts model's experts over all tensorParallelSize x dataParallelSize GPUs rather than splitting every expert (vLLM --enable-expert-parallel, SGLang --ep-size); unset: off."""
    max_model_len: Annotated[int, Field(ge=128, le=16777216)] | None = None
    """Context length in tokens (vLLM --max-model-len, SGLang --context-length); engine default when unset."""
    gpu_memory_utilization: Ratio | None = None
    """Fraction of GPU memory the engine may use, e.g. "0.95" (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static)."""
    trust_remote_code: bool = False
    """Run the model repository's own Python code (needed by Kimi and other custom architectures)."""
    tool_call_parser: ParserName | None = None
    """Tool-call parser name, e.g. kimi_k2 (--tool-call-parser; vLLM also gets --enable-auto-tool-choice)."""
    reasoning_parser: ParserName | None = None
    """Reasoning parser name, e.g. kimi_k2 (--reasoning-parser)."""
    served_model_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_./:-]*$", max_length=128)] | None = None
    """The model name clients send and every engine metric is labelled with (--served-model-name); defaults to model."""
    extra_args: Annotated[list[Annotated[str, StringConstraints(min_length=1, max_length=256)]], Field(max_length=64)] | None = None
    """Extra engine flags, one argument per item (["--max-num-seqs", "8"]), checked against the engine's own parser: flags the operator owns are refused under any spelling the engine accepts."""
