"""The `drafter-operator` command: one entry point, one subcommand per job.

Subcommand implementations live in their own modules and are imported lazily, so `drafter-operator
emulate` does not pay for kopf and `drafter-operator cluster` does not pay for the emulator.
"""

from __future__ import annotations

import argparse
import sys


def _add_cluster_commands(subparsers: argparse._SubParsersAction) -> None:
    from drafter_operator.testbed import cli as testbed_cli

    testbed_cli.register(subparsers)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drafter-operator",
        description="Speculative-decoding LLM serving on Kubernetes.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = subparsers.add_parser("run", help="run the operator against the current kubeconfig")
    run.add_argument("--namespace", "-n", action="append", default=[],
                     help="watch only this namespace (repeatable); default: all namespaces")
    run.add_argument("--metrics-port", type=int, default=8080,
                     help="port of the operator's own /metrics (0 disables)")
    run.add_argument("--metrics-host", default="0.0.0.0", help="address of the operator's /metrics listener")
    run.add_argument("--verbose", action="store_true")
    run.set_defaults(handler=_run_operator)

    crds = subparsers.add_parser("crds", help="write the CustomResourceDefinitions generated from the API models")
    crds.add_argument("--output-dir", default="crds", help="directory for the CRD YAML files")
    crds.add_argument("--docs", default="docs/api.md", help="where to write the API reference ('' to skip)")
    crds.add_argument("--check", action="store_true", help="fail if the files on disk are out of date")
    crds.set_defaults(handler=_generate_crds)

    emulate = subparsers.add_parser(
        "emulate", add_help=False,
        help="serve an engine emulator from a vLLM or SGLang command line (emulate vllm serve ... | emulate sglang ...)",
    )
    emulate.set_defaults(handler=_emulate)

    demo = subparsers.add_parser("demo", help="the main job on the embedded local cluster: baseline vs two drafters, measured")
    demo.add_argument("--max-tokens", type=int, default=256, help="tokens generated per prompt (default 256)")
    demo.add_argument("--prompts", type=int, default=3, help="prompts per serving, 1-5 (default 3)")
    demo.set_defaults(handler=_demo)

    _add_bench_command(subparsers)
    _add_preflight_command(subparsers)
    _add_run_stage_command(subparsers)
    _add_regenerate_command(subparsers)
    _add_cluster_commands(subparsers)
    return parser


def _add_run_stage_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator run-stage`: what a DrafterTraining stage Job runs (training/stage_runner.py).
    from drafter_operator.training import stage_runner

    stage_runner.register(subparsers)


def _add_regenerate_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator regenerate`: the Generate stage's client of the target's engine (training/regenerate.py).
    from drafter_operator.training import regenerate

    regenerate.register(subparsers)


def _add_preflight_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator preflight`: its options and exit codes live in preflight/cli.py (no engine imports).
    from drafter_operator.preflight import cli as preflight_cli

    preflight_cli.register(subparsers)


def _add_bench_command(subparsers: argparse._SubParsersAction) -> None:
    # The options are the contract with the DrafterBenchmark controller, which renders them into its Job.
    bench = subparsers.add_parser(
        "bench", help="benchmark an OpenAI-compatible endpoint: tok/s, acceptance from /metrics, speedup against a baseline")
    bench.add_argument("--url", required=True, help="OpenAI-compatible base URL of the target, without /v1")
    bench.add_argument("--engine", choices=("vllm", "sglang"), default="vllm",
                       help="engine behind --url, for its /metrics (default vllm)")
    bench.add_argument("--model", help="model name sent in requests (default: the first id of GET /v1/models)")
    bench.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                       help="an engine pod's base URL (or its /metrics URL) for acceptance; repeatable, one per pod "
                            "(default: --url)")
    bench.add_argument("--baseline-url", metavar="URL",
                       help="no-speculation endpoint benchmarked interleaved with the target, prompt by prompt")
    bench.add_argument("--baseline-metrics-url", action="append", default=[], metavar="URL",
                       help="the baseline's pods' /metrics (repeatable; accepted, not used for figures)")
    bench.add_argument("--baseline-tps", type=float, metavar="X", help="a recorded baseline throughput in tok/s")
    bench.add_argument("--num-prompts", type=int, default=5, metavar="N", help="prompts per repetition (default 5)")
    bench.add_argument("--max-tokens", type=int, default=512, metavar="N",
                       help="tokens generated per prompt, ignore_eos (default 512)")
    bench.add_argument("--concurrency", type=_concurrency, default=(1,), metavar="1,2,4",
                       help="streams at once; a comma list sweeps the levels (default 1)")
    bench.add_argument("--repetitions", type=int, default=1, metavar="N", help="runs of the prompt set (default 1)")
    bench.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    bench.add_argument("--prompts-file", metavar="PATH",
                       help="prompts, one per line or a JSON list of strings (default: the built-in set)")
    bench.add_argument("--completions", action="store_true",
                       help="use /v1/completions with raw prompts instead of /v1/chat/completions")
    bench.add_argument("--num-speculative-tokens", type=int, metavar="K",
                       help="draft tokens per step (SGLang's acceptance rate is derived with it)")
    bench.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                       help="per-request timeout in seconds (default 600)")
    bench.add_argument("--termination-log", metavar="PATH",
                       help="write the compact JSON result there (<= 4096 bytes), or a one-line error on failure")
    bench.set_defaults(handler=_bench)


def _concurrency(text: str) -> tuple[int, ...]:
    from drafter_operator.bench.command import concurrency_list

    return concurrency_list(text)


def _run_operator(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.controllers import runner

    return runner.run(namespaces=args.namespace, metrics_port=args.metrics_port, verbose=args.verbose,
                      metrics_host=args.metrics_host)


def _generate_crds(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.api import generate

    return generate.main(output_dir=args.output_dir, docs_path=args.docs or None, check=args.check)


def _demo(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.testbed import demo

    return demo.main(max_tokens=args.max_tokens, prompts=max(1, min(5, args.prompts)))


def _bench(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.bench import command

    return command.main(args)


def _emulate(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.emulator import server

    return server.main(extra)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # `emulate` passes everything after it verbatim: the engine's own flags are not ours to parse here.
    if argv and argv[0] == "emulate":
        args, extra = parser.parse_args(argv[:1]), argv[1:]
    else:
        args, extra = parser.parse_args(argv), []
    return int(args.handler(args, extra) or 0)


if __name__ == "__main__":
    sys.exit(main())
