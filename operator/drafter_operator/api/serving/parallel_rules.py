"""The rules on a replica's parallel layout (spec.target's tensor, pipeline and data-parallel sizes over
spec.resources' GPUs and nodes) and what each engine allows of speculation with it.

The layout: every rank is one GPU, so tensor x pipeline x data is the GPUs the model instance runs on. On one node
it must divide the pod's GPUs (as tensorParallelSize alone always had to); across nodes it must fill them exactly,
since both engines put world size / nodes ranks on every node (vLLM 0.33.0 create_engine_config: "--nnodes must
evenly divide the total world size"; SGLang 0.5.23 check_server_args: "tp_size must be divisible by number of
nodes"). What the engines refuse or silently drop with pipeline or data parallelism is each engine module's
(section 0): DYNAMIC_WITH_DATA_PARALLEL, PIPELINE_REFUSED_METHODS, DATA_PARALLEL_REFUSED_METHODS.
"""

from __future__ import annotations

from collections.abc import Callable

from drafter_operator.api.common import Rule, cel_in, spoken
from drafter_operator.constants import ENGINES
from drafter_operator.engines import engine as engine_module
from drafter_operator.engines import engines_without, sglang, vllm
from drafter_operator.engines.group import Parallelism

# The sizes as CEL reads them: an unset size is 1 (the fields have no schema default, so that a serving written
# before they existed keeps its revision's name).
_TP = "self.target.tensorParallelSize"
_PP = "(has(self.target.pipelineParallelSize) ? self.target.pipelineParallelSize : 1)"
_DP = "(has(self.target.dataParallelSize) ? self.target.dataParallelSize : 1)"
_NODES = "(has(self.resources.nodesPerReplica) ? self.resources.nodesPerReplica : 1)"
_GPUS = "self.resources.gpusPerReplica"
_WORLD = f"{_TP} * {_PP} * {_DP}"

#: The engines that drop spec.drafter.dynamic's schedule with data parallelism.
ENGINES_DROPPING_DYNAMIC_WITH_DATA_PARALLEL: tuple[str, ...] = engines_without("DYNAMIC_WITH_DATA_PARALLEL")


def _layout(spec) -> Parallelism:
    return Parallelism.of(spec)


def _engine_refuses(engine: str, methods_by_engine: dict[str, tuple[str, ...]]) -> str:
    """CEL: ``self.engine`` is ``engine`` and the drafter's method is one that engine refuses."""
    return f"(self.engine == '{engine}' && {cel_in('self.drafter.method', methods_by_engine[engine])})"


def _method_rule(attribute: str, size_cel: str, field: str, size: Callable[[Parallelism], int],
                 why: dict[str, str]) -> tuple[Rule, ...]:
    """One rule per engine that refuses some drafter methods when the size (``size_cel`` in CEL, ``size`` of the
    layout in Python) is above 1: ``attribute`` names the engines' tuple of those methods, ``why`` holds each such
    engine's reason and way out."""
    refused = {name: getattr(engine_module(name), attribute) for name in ENGINES}
    return tuple(
        Rule(
            cel=f"{size_cel} == 1 || !{_engine_refuses(engine, refused)}",
            message=(f"spec.target.{field} above 1 on {engine} refuses spec.drafter.method "
                     f"{spoken(methods, 'and')}: {why[engine]}"),
            check=lambda s, engine=engine, methods=methods: (
                size(_layout(s)) == 1 or s.engine != engine or s.drafter.method not in methods),
            field_path=f".target.{field}",
            reason="FieldValueForbidden",
        )
        for engine, methods in refused.items() if methods
    )


PARALLEL_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"{_NODES} > 1 || {_GPUS} % {_TP} != 0 || {_GPUS} % ({_WORLD}) == 0",
        message=(
            "spec.target.tensorParallelSize x pipelineParallelSize x dataParallelSize (the GPUs the model runs on) "
            "must divide spec.resources.gpusPerReplica on one node: e.g. tensorParallelSize 4 and dataParallelSize 2 "
            "with gpusPerReplica 8, or span nodes with spec.resources.nodesPerReplica"
        ),
        check=lambda s: _layout(s).spans_nodes or s.resources.gpus_per_replica % _layout(s).tensor != 0
        or s.resources.gpus_per_replica % _layout(s).world_size == 0,
        field_path=".target",
    ),
    Rule(
        cel=f"{_NODES} == 1 || {_WORLD} == {_GPUS} * {_NODES}",
        message=(
            "spec.target.tensorParallelSize x pipelineParallelSize x dataParallelSize must equal "
            "spec.resources.gpusPerReplica x nodesPerReplica when a replica spans nodes (every GPU of every node "
            "runs one rank): e.g. nodesPerReplica 2 with gpusPerReplica 8, tensorParallelSize 8 and "
            "pipelineParallelSize 2 (or dataParallelSize 2)"
        ),
        check=lambda s: not _layout(s).spans_nodes
        or _layout(s).world_size == s.resources.gpus_per_replica * _layout(s).nodes,
        field_path=".resources.nodesPerReplica",
    ),
    *((Rule(
        cel=f"{_DP} == 1 || !has(self.drafter.dynamic) || !({cel_in('self.engine', ENGINES_DROPPING_DYNAMIC_WITH_DATA_PARALLEL)})",
        message=(
            "spec.drafter.dynamic is not offered with spec.target.dataParallelSize above 1 on "
            f"{spoken(ENGINES_DROPPING_DYNAMIC_WITH_DATA_PARALLEL, 'or')}: with data parallelism vLLM 0.33.0 drops its "
            "per-batch-size schedule and SGLang 0.5.23 its adaptive speculation (the ranks could choose different "
            "draft lengths and stall), serving a static k; remove dynamic, or set dataParallelSize 1 and add "
            "spec.replicas instead"
        ),
        check=lambda s: _layout(s).data == 1 or s.drafter.dynamic is None
        or s.engine not in ENGINES_DROPPING_DYNAMIC_WITH_DATA_PARALLEL,
        field_path=".drafter.dynamic",
        reason="FieldValueForbidden",
    ),) if ENGINES_DROPPING_DYNAMIC_WITH_DATA_PARALLEL else ()),
    *_method_rule("PIPELINE_REFUSED_METHODS", _PP, "pipelineParallelSize", lambda layout: layout.pipeline, {
        sglang.ENGINE: (
            "SGLang 0.5.23 speculates across pipeline stages with EAGLE alone (methods eagle and mtp); set "
            "pipelineParallelSize 1 (span nodes with tensorParallelSize or dataParallelSize) or use engine vllm"),
    }),
    *_method_rule("DATA_PARALLEL_REFUSED_METHODS", _DP, "dataParallelSize", lambda layout: layout.data, {
        sglang.ENGINE: (
            "SGLang 0.5.23 runs dataParallelSize as attention data parallelism, which its n-gram and draft-model "
            "speculation do not support; set dataParallelSize 1 (add spec.replicas instead) or use engine vllm"),
    }),
    Rule(
        cel=(f"self.engine != '{vllm.ENGINE}' || {_PP} == 1 || !has(self.drafter.dspark) "
             "|| !has(self.drafter.dspark.adaptiveVerification) || !self.drafter.dspark.adaptiveVerification"),
        message=(
            "spec.drafter.dspark.adaptiveVerification is refused with spec.target.pipelineParallelSize above 1 on "
            "vllm: vLLM 0.33.0 keeps the confidences it verifies by on the last stage only; remove it or set "
            "pipelineParallelSize 1"
        ),
        check=lambda s: s.engine != vllm.ENGINE or _layout(s).pipeline == 1 or s.drafter.dspark is None
        or not s.drafter.dspark.adaptive_verification,
        field_path=".drafter.dspark.adaptiveVerification",
        reason="FieldValueForbidden",
    ),
    Rule(
        cel=(f"self.engine != '{sglang.ENGINE}' || {_PP} == 1 || self.drafter.method == 'none' "
             f"|| ({_DP} == 1 && !has(self.drafter.dynamic))"),
        message=(
            "spec.target.pipelineParallelSize above 1 with a drafter on sglang needs dataParallelSize 1 and no "
            "spec.drafter.dynamic: SGLang 0.5.23's pipelined speculation (SGLANG_ENABLE_PP_SPEC) refuses attention "
            "data parallelism and adaptive speculation; remove them or set pipelineParallelSize 1"
        ),
        check=lambda s: s.engine != sglang.ENGINE or _layout(s).pipeline == 1 or s.drafter.method == "none"
        or (_layout(s).data == 1 and s.drafter.dynamic is None),
        field_path=".target.pipelineParallelSize",
        reason="FieldValueForbidden",
    ),
)
