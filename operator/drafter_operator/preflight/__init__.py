"""Preflight: check a drafter checkpoint against its target and engine before a 30-minute model load.

Pure and cheap: reads config.json files, safetensors headers (never the weights, except the small d2t/t2d
mapping tensors) and tokenizer files; imports no engine. `preflight(...)` returns a `PreflightVerdict` (ok,
problems, warnings, passed checks) that maps onto the DrafterCompatible condition (``verdict.condition()``
or its status/reason/message). The rules and the engine facts behind them: docs/preflight.md.
"""

from __future__ import annotations

import os

from drafter_operator import engines as engine_modules
from drafter_operator.constants import CHECKED_METHODS, METHODS_IN_TARGET, METHODS_OF_TARGET_ONLY
from drafter_operator.preflight import engines
from drafter_operator.preflight.checkpoint import Checkpoint, load_checkpoint
from drafter_operator.preflight.rules import Context, Report, check_files, rules_for
from drafter_operator.preflight.verdict import CONDITION_TYPE, Finding, PreflightVerdict

__all__ = ["CONDITION_TYPE", "Checkpoint", "Finding", "PreflightVerdict", "load_checkpoint", "preflight"]

# Rules after which nothing else is meaningful: the drafter is the wrong kind of head for the method.
_STOP_REASONS = frozenset({"EagleDrafterAsEagle3", "Eagle3DrafterAsEagle", "DrafterMethodMismatch", "ArchitectureMissing",
                           "ModelTypeMissing", "SpeculatorsTypeUnsupported", "SpeculatorsFieldMissing",
                           "MtpVariantMissing", "MtpVariantRefused"})


def preflight(drafter: str | os.PathLike | None, target: str | os.PathLike, engine: str, method: str,
              trained_convention: str | None = None, vllm_runner: str = "v2",
              num_speculative_tokens: int | None = None) -> PreflightVerdict:
    """Check ``drafter`` (a checkpoint directory; None for mtp, and for dspark with the target's own head)
    against ``target`` for ``engine``.

    ``trained_convention`` (vllm | sglang) says how the drafter's eagle_aux_hidden_state_layer_ids were
    meant when it was trained; None infers it from the format (speculators: vllm; eagle_config: sglang).
    ``vllm_runner`` (v2, the GPU default in vLLM 0.33.0, or v1) selects where vLLM reads the layer ids.
    ``num_speculative_tokens`` (spec.drafter.numSpeculativeTokens) is checked against a block drafter's block.
    """
    if engine not in engines.ENGINES:
        raise ValueError(f"engine must be one of {engines.ENGINES}, not {engine!r}")
    if trained_convention is not None and trained_convention not in engines.CONVENTIONS:
        raise ValueError(f"trained_convention must be one of {engines.CONVENTIONS}, not {trained_convention!r}")
    if vllm_runner not in engines.VLLM_RUNNERS:
        raise ValueError(f"vllm_runner must be one of {engines.VLLM_RUNNERS}, not {vllm_runner!r}")
    target_ckpt = load_checkpoint(target)
    report = Report()
    drafter_ckpt = None
    if drafter is not None and method in METHODS_OF_TARGET_ONLY:
        if os.path.realpath(drafter) != os.path.realpath(target):
            report.warning("mtp-head", "DrafterIgnored",
                           f"method mtp drafts with the target's own MTP layers: the drafter {drafter} is not used.")
    elif drafter is not None and method in CHECKED_METHODS:
        drafter_ckpt = load_checkpoint(drafter)
    verdict = PreflightVerdict(engine=engine, method=method, drafter=str(drafter) if drafter is not None else None,
                      target=str(target))
    ctx = Context(engine=engine, method=method, target=target_ckpt, drafter=drafter_ckpt,
                  trained_convention=trained_convention, vllm_runner=vllm_runner, facts=verdict.facts,
                  num_speculative_tokens=num_speculative_tokens)
    runner = vllm_runner if engine_modules.engine(engine).MODEL_RUNNERS else None
    verdict.facts.update(engine_version=engines.ENGINE_VERSIONS[engine], vllm_runner=runner)
    if method not in CHECKED_METHODS:
        report.warning("method", "MethodNotChecked", f"preflight has no rules for method {method!r} "
                       f"(it checks {', '.join(CHECKED_METHODS)}).")
        verdict.findings = report.findings
        return verdict
    if method not in METHODS_IN_TARGET and drafter is None:
        report.problem("checkpoint-files", "DrafterMissing", f"method {method} loads a drafter checkpoint: none given.",
                       "pass the drafter's directory")
        verdict.findings = report.findings
        return verdict
    if check_files(ctx, report):
        for _, rule in rules_for(method, bundled=drafter is None):
            rule(ctx, report)
            if any(f.reason in _STOP_REASONS for f in report.findings):
                break
    verdict.findings = report.findings
    return verdict
