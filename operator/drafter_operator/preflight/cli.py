"""`drafter-operator preflight`: the preflight as a command (exit 0 compatible, 1 problems, 2 usage)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import textwrap
import time
from typing import TextIO

from drafter_operator.preflight.engines import CONVENTIONS, VLLM_RUNNERS
from drafter_operator.constants import CHECKED_METHODS, ENGINES, METHODS_IN_TARGET, METHODS_OF_TARGET_ONLY
from drafter_operator.preflight.verdict import Finding, PreflightVerdict, termination_record

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "preflight", help="check a drafter checkpoint against its target and engine in seconds, before serving",
        description="Reads config.json, safetensors headers and tokenizer files of the drafter and the target "
                    "(never the weights) and checks what vLLM 0.33.0 / SGLang 0.5.23 would refuse late or serve "
                    "with collapsed acceptance. Exit 0: compatible (warnings allowed); 1: problems; 2: usage error.")
    parser.add_argument("--drafter", metavar="DIR", help="the drafter checkpoint directory (not needed for mtp, "
                        "nor for dspark with the target's bundled DSpark head)")
    parser.add_argument("--target", required=True, metavar="DIR", help="the target model's checkpoint directory")
    parser.add_argument("--engine", required=True, choices=ENGINES, help="the engine that will serve")
    parser.add_argument("--method", required=True, choices=CHECKED_METHODS, help="spec.drafter.method")
    parser.add_argument("--trained-convention", choices=CONVENTIONS, metavar="{vllm,sglang}",
                        help="how the drafter's eagle_aux_hidden_state_layer_ids were meant in training: vllm "
                             "(speculators: ids are positions) or sglang (SpecForge: layer id + 1); default: from "
                             "the checkpoint's format")
    parser.add_argument("--vllm-model-runner", choices=VLLM_RUNNERS, default="v2",
                        help="vLLM's model runner (v2, the 0.33.0 default on GPUs; v1 with VLLM_USE_V2_MODEL_RUNNER=0)")
    parser.add_argument("--num-speculative-tokens", type=int, metavar="K",
                        help="spec.drafter.numSpeculativeTokens: dflash and dspark check it against the block the "
                             "drafter was trained with")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--termination-message", metavar="PATH",
                        help="also write the verdict as compact JSON of at most 4096 bytes to PATH (the engine "
                             "pod's preflight init container: /dev/termination-log, read by the operator)")
    parser.add_argument("--skip-missing", action="store_true",
                        help="a --drafter or --target that is not a directory is reported as not checked (a "
                             "warning, exit 0) instead of a usage error: the engine names a missing model itself "
                             "within seconds of starting")
    parser.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace, extra: list[str]) -> int:
    return main(args)


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from drafter_operator.preflight import preflight

    out = out or sys.stdout
    err = err or sys.stderr
    if args.method not in METHODS_IN_TARGET and not args.drafter:
        print(f"drafter-operator preflight: --drafter is required for method {args.method}", file=err)
        return EXIT_USAGE
    missing = [(flag, path) for flag, path in (("--target", args.target), ("--drafter", args.drafter))
               if path is not None and not os.path.isdir(path)]
    if missing and not args.skip_missing:
        for flag, path in missing:
            print(f"drafter-operator preflight: {flag} {path}: not a directory", file=err)
        return EXIT_USAGE
    started = time.monotonic()
    if missing:
        verdict = not_checked(args, missing)
    else:
        verdict = preflight(args.drafter, args.target, args.engine, args.method,
                            trained_convention=args.trained_convention, vllm_runner=args.vllm_model_runner,
                            num_speculative_tokens=args.num_speculative_tokens)
    if args.termination_message:
        with open(args.termination_message, "w", encoding="utf-8") as handle:
            handle.write(termination_record(verdict, seconds=time.monotonic() - started))
    if args.json:
        json.dump(verdict.to_dict(), out, indent=2)
        out.write("\n")
    else:
        out.write(render(verdict, width=shutil.get_terminal_size((110, 24)).columns))
    return EXIT_OK if verdict.ok else EXIT_PROBLEMS


def not_checked(args: argparse.Namespace, missing: list[tuple[str, str]]) -> PreflightVerdict:
    """The verdict with --skip-missing when a checkpoint directory is not there: nothing checked."""
    verdict = PreflightVerdict(engine=args.engine, method=args.method, drafter=args.drafter, target=args.target)
    role = {"--target": "the target", "--drafter": "the drafter"}
    verdict.findings = [Finding("checkpoint-files", "warning", "CheckpointNotFound",
                                f"not checked: {role[flag]} {path} is not a directory here; the engine names a "
                                "missing model itself when it starts")
                        for flag, path in missing]
    return verdict


def render(verdict: PreflightVerdict, width: int = 110) -> str:
    """A table: one row per finding (problems first), the fix under its message."""
    width = max(72, min(width, 160))
    state = "NOT COMPATIBLE" if not verdict.ok else "COMPATIBLE" if verdict.checked else "NOT CHECKED"
    counts = f"{len(verdict.problems)} problem(s), {len(verdict.warnings)} warning(s), {len(verdict.passed)} passed"
    drafter = verdict.drafter or ("(target's own MTP layers)" if verdict.method in METHODS_OF_TARGET_ONLY else "(target's own DSpark head)")
    lines = [f"preflight {verdict.engine} method {verdict.method}: {state} ({counts})",
             f"  drafter {drafter}", f"  target  {verdict.target}", ""]
    rows = [(f.check, {"problem": "PROBLEM", "warning": "warning", "ok": "ok"}[f.severity], f)
            for f in verdict.problems + verdict.warnings + verdict.passed]
    check_w = max([len("CHECK")] + [len(r[0]) for r in rows])
    result_w = len("PROBLEM")
    detail_w = width - check_w - result_w - 4
    lines.append(f"{'CHECK':<{check_w}}  {'RESULT':<{result_w}}  DETAIL")
    for check, result, finding in rows:
        detail = textwrap.wrap(finding.message, detail_w) or [""]
        if finding.fix:
            detail += textwrap.wrap("fix: " + finding.fix, detail_w, subsequent_indent="     ")
        pad = " " * (check_w + result_w + 4)
        lines.append(f"{check:<{check_w}}  {result:<{result_w}}  {detail[0]}")
        lines.extend(pad + d for d in detail[1:])
    lines.append("")
    condition = verdict.condition()
    lines.append(f"condition {condition['type']}={condition['status']} reason={condition['reason']}")
    return "\n".join(lines) + "\n"
