"""The `drafter-operator` command: one entry point, one subcommand per job.

Subcommand implementations live in their own modules and are imported lazily, so `drafter-operator
emulate` does not pay for kopf and `drafter-operator cluster` does not pay for the emulator.

The operator's own install is lean: the local cluster, the demo and the emulator are another package,
drafter-testbed (testbed/ of the repository), that adds its subcommands through the entry-point group
COMMAND_GROUP. This module imports nothing from it; without it, the help and those commands say how to get it
instead of failing with an ImportError.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from typing import Callable

# Standard library only: the fixed names, the Lease timings' defaults and checks (with the leader election), the
# shard count's bounds.
from drafter_operator.constants import ENGINES, OPERATOR_METRICS_PORT
from drafter_operator.engines import DEFAULT_ENGINE
from drafter_operator.controllers.leadership import Timings
from drafter_operator.controllers.sharding import MAX_SHARDS, MAX_SUFFIX

DISTRIBUTION = "drafter-operator"

#: Entry points of this group are ``register(subparsers)`` functions, each adding the subcommand it is named
#: after (testbed/pyproject.toml registers drafter-testbed's).
COMMAND_GROUP = "drafter_operator.commands"

#: The developer tools drafter-testbed adds, named here only to say how to get them where it is missing.
TESTBED_COMMANDS = ("cluster", "demo", "emulate")
TESTBED_INSTALL = "pip install -e ./testbed from a checkout of the repository (./dev does it)"

#: Subcommands only the operator's own pods run (a DrafterTraining stage Job's container command, a serving
#: pod's capture sidecar): listed apart in the top-level help, under a heading that says so, not among the
#: commands people type.
INTERNAL_COMMANDS = ("run-stage", "regenerate", "captured-dataset", "capture")


def version() -> str:
    """The installed distribution's version (pyproject.toml's, via its metadata); "unknown" from a source
    tree that was never installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def added_commands() -> dict[str, importlib.metadata.EntryPoint]:
    """The subcommands installed distributions add (COMMAND_GROUP), by name; read from their metadata,
    nothing imported."""
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=COMMAND_GROUP)}


def missing_testbed_error(command: str, added: dict[str, importlib.metadata.EntryPoint]) -> str | None:
    """Why ``command`` cannot run here (a drafter-testbed command without drafter-testbed), or None."""
    if command not in TESTBED_COMMANDS or command in added:
        return None
    return f"drafter-operator {command} comes with the drafter-testbed package, not installed here: {TESTBED_INSTALL}"


def testbed_epilog(added: dict[str, importlib.metadata.EntryPoint]) -> str:
    """The help's line on the developer commands this install lacks; empty when it has them all."""
    missing = [command for command in TESTBED_COMMANDS if command not in added]
    if not missing:
        return ""
    return f"{', '.join(missing)}: developer tools of the drafter-testbed package: {TESTBED_INSTALL}"


def build_parser(added: dict[str, importlib.metadata.EntryPoint] | None = None) -> argparse.ArgumentParser:
    added = added_commands() if added is None else added
    parser = argparse.ArgumentParser(
        prog="drafter-operator",
        description="Speculative-decoding LLM serving on Kubernetes.",
        epilog=testbed_epilog(added),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_run_command(subparsers)

    rbac = subparsers.add_parser(
        "rbac", help="print the RBAC rules the operator needs, each with its reason (the Helm chart's files/rbac-rules.yaml)")
    rbac.set_defaults(handler=_print_rbac_rules)

    crds = subparsers.add_parser("crds", help="write the CustomResourceDefinitions generated from the API models")
    crds.add_argument("--output-dir", default="crds", help="directory for the CRD YAML files")
    crds.add_argument("--docs", default="docs/api.md", help="where to write the API reference ('' to skip)")
    crds.add_argument("--check", action="store_true", help="fail if the files on disk are out of date")
    crds.set_defaults(handler=_generate_crds)

    _add_bench_command(subparsers)
    _add_preflight_command(subparsers)
    _add_run_stage_command(subparsers)
    _add_regenerate_command(subparsers)
    _add_captured_dataset_command(subparsers)
    _add_capture_command(subparsers)
    for name in sorted(added):
        added[name].load()(subparsers)
    _list_internal_commands_apart(parser, subparsers)
    return parser


def _add_run_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator run`: the operator itself (what the chart's Deployment runs).
    run = subparsers.add_parser("run", help="run the operator against the current kubeconfig")
    run.add_argument("--namespace", "-n", action="append", default=[],
                     help="watch only this namespace (repeatable); default: all namespaces")
    run.add_argument("--metrics-port", type=int, default=OPERATOR_METRICS_PORT,
                     help="port of the operator's own /metrics (0 disables)")
    run.add_argument("--metrics-host", default="0.0.0.0", help="address of the operator's /metrics listener")
    run.add_argument("--health-port", type=int, default=0,
                     help="port of kopf's liveness endpoint /healthz, for the pod's probes (0, the default, disables)")
    run.add_argument("--health-host", default="0.0.0.0", help="address of the /healthz listener")
    run.add_argument("--verbose", action="store_true")
    run.add_argument("--log-format", choices=("text", "json"), default="text",
                     help="text lines, or JSON lines (time, level, logger, message and, for kopf's per-object "
                          "messages, object: the Kubernetes object) for a log pipeline; default: text")
    run.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=True,
                     help="act only while holding a Lease, so a second operator for the same namespaces stands by "
                          "(a helm upgrade's overlap, an operator run by hand); default: on")
    run.add_argument("--lease-namespace", type=_dns_label("--lease-namespace"), default=None,
                     help="namespace of the Lease; default: POD_NAMESPACE, else the pod's or the kubeconfig "
                          "context's namespace, else default")
    run.add_argument("--lease-name", type=_dns_subdomain("--lease-name"), default=None,
                     help="name of the Lease; default: drafter-operator cluster-wide, drafter-operator-<hash of the "
                          "namespaces> in namespaced mode (operators for the same scope exclude each other)")
    # kube-controller-manager's --leader-elect-* flags, with client-go's defaults (leadership.Timings).
    defaults = Timings()
    run.add_argument("--lease-duration", type=_positive_seconds("--lease-duration"), default=defaults.lease_duration,
                     metavar="SECONDS", help="how long a stand-by waits after the Lease's last renewal before it "
                                             f"takes over; default: {defaults.lease_duration:g}")
    run.add_argument("--renew-deadline", type=_positive_seconds("--renew-deadline"), default=defaults.renew_deadline,
                     metavar="SECONDS", help="how long the leader keeps acting without a successful renewal before it "
                                             "exits (status 3); raise it with --lease-duration where the apiserver "
                                             f"can be slow for longer; default: {defaults.renew_deadline:g}")
    run.add_argument("--retry-period", type=_positive_seconds("--retry-period"), default=defaults.retry_period,
                     metavar="SECONDS", help="how often the leader renews and a stand-by tries; "
                                             f"default: {defaults.retry_period:g}")
    run.add_argument("--shards", type=_shard_count, default=1, metavar="N",
                     help="split the servings, trainings and benchmarks between N leaders by a stable hash of "
                          "namespace and name, each holding a Lease of its own (<lease>-shard-<i>-of-N); run at "
                          "least N replicas with the same N, any more stand by for whichever shard is lost. "
                          "Needs leader election; default: 1 (one leader for everything)")
    run.set_defaults(handler=_run_operator)


def _list_internal_commands_apart(parser: argparse.ArgumentParser, subparsers: argparse._SubParsersAction) -> None:
    # They still parse (the Jobs run them); only the listing moves. argparse has no public way to group
    # subcommands, so their help lines leave the COMMAND list for a section of the epilog.
    internal = [action for action in subparsers._choices_actions if action.dest in INTERNAL_COMMANDS]
    subparsers._choices_actions[:] = [action for action in subparsers._choices_actions if action not in internal]
    width = max(len(action.dest) for action in internal) + 2
    lines = [f"  {action.dest:<{width}}{action.help}" for action in internal]
    parser.epilog = "\n\n".join(filter(None, ["internal commands (run by the operator's pods, not by hand):\n"
                                               + "\n".join(lines), parser.epilog]))


def _add_run_stage_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator run-stage`: what a DrafterTraining stage Job runs (training/stage_runner.py).
    from drafter_operator.training import stage_runner

    stage_runner.register(subparsers)


def _add_regenerate_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator regenerate`: the Generate stage's client of the target's engine (training/regenerate.py).
    from drafter_operator.training import regenerate

    regenerate.register(subparsers)


def _add_captured_dataset_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator captured-dataset`: a Generate stage's first step when spec.data.capture is the source
    # (capture/dataset_command.py).
    from drafter_operator.capture import dataset_command

    dataset_command.register(subparsers)


def _add_capture_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator capture`: the capture sidecar of a serving pod with spec.capture (resources/capture.py
    # renders these options from the spec; capture/sidecar.py runs the loop).
    capture = subparsers.add_parser(
        "capture", help="follow the engine's request log in the spool and keep a sample of it on the claim")
    capture.add_argument("--spool", required=True, metavar="DIR", help="the directory the engine logs requests into")
    capture.add_argument("--claim", required=True, metavar="DIR", help="where the hour files of records are written")
    capture.add_argument("--engine", choices=ENGINES, required=True, help="the engine writing the spool")
    capture.add_argument("--sample-rate", type=_sample_rate, required=True, metavar="RATE",
                         help="the fraction of requests kept, above 0 and at most 1")
    capture.add_argument("--responses", action="store_true", help="keep the responses as well as the prompts")
    capture.add_argument("--retention", type=_duration, required=True, metavar="DURATION",
                         help="how long an hour file is kept, e.g. 168h")
    capture.add_argument("--max-size", type=_quantity_bytes, required=True, metavar="QUANTITY",
                         help="the most the hour files may take, e.g. 10Gi; the oldest go first beyond it")
    capture.add_argument("--writer", default=None, metavar="NAME",
                         help="the claim's directory this sidecar appends in (default: the host name, a pod's name)")
    capture.add_argument("--redaction-dir", default=None, metavar="DIR",
                         help="the directory shared with the redaction container: every record goes through it before "
                              "it is written (default: none, records are written as the engine logged them)")
    capture.add_argument("--samples-port", type=int, default=None, metavar="PORT",
                         help="answer GET /samples?since=<time> (prompts on the claim since then) on this port "
                              "(default: not served)")
    capture.add_argument("--samples-host", default=None, metavar="HOST",
                         help="the address it listens on (default: $POD_IP, else every address)")
    capture.add_argument("--poll-seconds", type=_positive_seconds("--poll-seconds"), default=5.0, metavar="SECONDS",
                         help="how often the spool is read (default 5)")
    capture.set_defaults(handler=_capture)


def _sample_rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sample-rate {text!r}: give a decimal, e.g. 0.05") from None
    if not 0 < rate <= 1:
        raise argparse.ArgumentTypeError(f"--sample-rate {text!r}: must be above 0 and at most 1")
    return rate


def _duration(text: str) -> float:
    from drafter_operator.api.common import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _quantity_bytes(text: str) -> int:
    from drafter_operator.api.pod.values import parse_kube_quantity

    try:
        return int(parse_kube_quantity(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_preflight_command(subparsers: argparse._SubParsersAction) -> None:
    # `drafter-operator preflight`: its options and exit codes live in preflight/cli.py (no engine imports).
    from drafter_operator.preflight import cli as preflight_cli

    preflight_cli.register(subparsers)


def _add_bench_command(subparsers: argparse._SubParsersAction) -> None:
    # The options are the contract with the DrafterBenchmark controller, which renders them into its Job.
    from drafter_operator.constants import CAPTURED_PER_CATEGORY

    bench = subparsers.add_parser(
        "bench", help="benchmark an OpenAI-compatible endpoint: tok/s, acceptance from /metrics, speedup against a baseline")
    bench.add_argument("--url", required=True, help="OpenAI-compatible base URL of the target, without /v1")
    bench.add_argument("--engine", choices=ENGINES, default=DEFAULT_ENGINE,
                       help=f"engine behind --url, for its /metrics (default {DEFAULT_ENGINE})")
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
    bench.add_argument("--refine", type=int, default=8, metavar="N",
                       help="with a sweep and a baseline: at most N levels added between the last level at or above "
                            "1.0x and the first below, until the break-even is bracketed within 10%% (default 8; "
                            "0: the given levels only)")
    bench.add_argument("--repetitions", type=int, default=1, metavar="N", help="runs of the prompt set (default 1)")
    bench.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    bench.add_argument("--prompts-file", metavar="PATH",
                       help="prompts, one per line or a JSON list of strings and {\"text\", \"category\"} objects "
                            "(default: the built-in set)")
    bench.add_argument("--captured-prompts", metavar="DIR",
                       help="instead of --prompts-file: the held-out prompts of the serving capture mounted at DIR, "
                            "each tagged with its traffic category (the split a retraining from it made)")
    bench.add_argument("--held-out-fraction", type=float, metavar="F",
                       help="with --captured-prompts: the held-out share the training used, above 0 and below 1")
    bench.add_argument("--captured-before", metavar="TIME",
                       help="with --captured-prompts: only prompts captured before this RFC 3339 time")
    bench.add_argument("--captured-per-category", type=int, default=CAPTURED_PER_CATEGORY, metavar="N",
                       help=f"with --captured-prompts: the first N prompts of each category (default "
                            f"{CAPTURED_PER_CATEGORY})")
    bench.add_argument("--completions", action="store_true",
                       help="use /v1/completions with raw prompts instead of /v1/chat/completions")
    bench.add_argument("--num-speculative-tokens", type=int, metavar="K",
                       help="draft tokens per step (SGLang's acceptance rate is derived with it)")
    bench.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                       help="per-request timeout in seconds (default 600)")
    bench.add_argument("--prompt-length-buckets", type=_token_edges, metavar="1024,4096",
                       help="after the measurement, acceptance per bucket of prompt length (upper edges in prompt "
                            "tokens; a last bucket takes longer prompts), each bucket's prompts sent again one at a time")
    bench.add_argument("--acceptance-by-category", action="store_true",
                       help="after the measurement, acceptance, tok/s and speedup per traffic category of the tagged "
                            "prompts, each category's prompts sent again one at a time (and to --baseline-url)")
    bench.add_argument("--equivalence-prompts", type=int, default=0, metavar="N",
                       help="with --baseline-url: compare N prompts' greedy outputs token by token with the baseline's "
                            "after the measurement (default 0: no output check)")
    bench.add_argument("--equivalence-tokens", type=int, default=128, metavar="N",
                       help="tokens generated per prompt by the output check (default 128)")
    bench.add_argument("--equivalence-margin", type=float, default=1.0, metavar="NATS",
                       help="a divergence is a defect where the baseline's top-2 logprob margin is at least this "
                            "(default 1.0; near-ties below it are reported, not failed)")
    bench.add_argument("--deterministic", action="store_true",
                       help="both sides run the engines' deterministic modes: every divergence is a defect")
    bench.add_argument("--termination-log", metavar="PATH",
                       help="write the compact JSON result there (<= 4096 bytes), or a one-line error on failure")
    bench.set_defaults(handler=_bench)


def _token_edges(text: str) -> tuple[int, ...]:
    from drafter_operator.benchmark_client.command import token_edges

    return token_edges(text)


def _concurrency(text: str) -> tuple[int, ...]:
    from drafter_operator.benchmark_client.command import concurrency_list

    return concurrency_list(text)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _dns_label(option: str):
    def parse(text: str) -> str:
        if not _DNS_LABEL.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{option} {text!r}: a namespace name is lowercase letters, digits and "
                                             "'-', at most 63, starting and ending with a letter or digit")
        return text
    return parse


def _dns_subdomain(option: str):
    def parse(text: str) -> str:
        if len(text) > 253 or not all(_DNS_LABEL.fullmatch(part) for part in text.split(".")):
            raise argparse.ArgumentTypeError(f"{option} {text!r}: an object name is lowercase letters, digits, '-' "
                                             "and '.', at most 253, each dot-separated part starting and ending "
                                             "with a letter or digit")
        return text
    return parse


def _shard_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"--shards {text!r}: a whole number of shards from 1 to {MAX_SHARDS}")
    return count


def _positive_seconds(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: give seconds as a number, e.g. {flag}=30") from None
        if not seconds > 0 or seconds == float("inf"):
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: must be a finite number of seconds above 0")
        return seconds
    return parse


def lease_timings(args: argparse.Namespace) -> Timings:
    """The Lease timings of `run`'s flags; ValueError naming the flags when they do not fit together."""
    try:
        return Timings(lease_duration=args.lease_duration, renew_deadline=args.renew_deadline,
                       retry_period=args.retry_period)
    except ValueError as exc:
        raise ValueError(f"drafter-operator run: --lease-duration {args.lease_duration:g}, --renew-deadline "
                         f"{args.renew_deadline:g}, --retry-period {args.retry_period:g}: {exc}. Keep "
                         "lease duration > renew deadline > 1.2 x retry period, e.g. 30, 20, 4") from None


def _run_operator(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.controllers import runner

    try:
        timings = lease_timings(args)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2  # a usage error, as argparse's
    if args.shards > 1 and args.lease_name and len(args.lease_name) + MAX_SUFFIX > 253:
        print(f"drafter-operator run: --lease-name {args.lease_name!r} leaves no room for the shard suffix "
              f"(-shard-<i>-of-<N>, up to {MAX_SUFFIX} characters) within an object name's 253: "
              "shorten it", file=sys.stderr)
        return 2
    return runner.run(namespaces=args.namespace,
                      metrics=runner.Address(args.metrics_host, args.metrics_port),
                      health=runner.Address(args.health_host, args.health_port),
                      leader_election=runner.LeaderElection(args.leader_election, args.lease_namespace,
                                                            args.lease_name, timings, args.shards),
                      verbose=args.verbose, log_format=args.log_format)


def _print_rbac_rules(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator import permissions

    sys.stdout.write(permissions.rules_document())
    return 0


def _generate_crds(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.api import generate

    return generate.main(output_dir=args.output_dir, docs_path=args.docs or None, check=args.check)


def _capture(args: argparse.Namespace, extra: list[str]) -> int:
    import logging
    import socket
    from pathlib import Path

    from drafter_operator import engines, settings
    from drafter_operator.capture import sidecar
    from drafter_operator.capture.redaction import Redaction
    from drafter_operator.logs import TEXT_FORMAT

    # Not logs.configure: that sets kopf's logging up, and the sidecar does not import kopf.
    logging.basicConfig(level=logging.INFO, format=TEXT_FORMAT)
    engine = engines.engine(args.engine)
    return sidecar.run(sidecar.Sidecar(
        spool=Path(args.spool), claim=Path(args.claim), writer=args.writer or socket.gethostname(),
        kind=engine.CAPTURE_SPOOL,
        sample=sidecar.Sample(args.engine, engine.capture_line, args.sample_rate, args.responses),
        bounds=sidecar.Bounds(args.retention, args.max_size),
        redaction=Redaction(Path(args.redaction_dir)) if args.redaction_dir else None,
        samples_address=((args.samples_host or settings.POD_IP.read() or "0.0.0.0", args.samples_port)
                         if args.samples_port else None)), args.poll_seconds)


def _bench(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_operator.benchmark_client import command

    return command.main(args)


def passes_through(parser: argparse.ArgumentParser, command: str) -> bool:
    """Whether the subcommand ``command`` takes the rest of the command line unparsed."""
    subcommand = parser._subparsers._group_actions[0].choices.get(command)
    return bool(subcommand and subcommand.get_default("passthrough"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    added = added_commands()
    # Before parsing, so even `drafter-operator cluster up --help` says what to install.
    if argv and (error := missing_testbed_error(argv[0], added)):
        print(error, file=sys.stderr)
        return 2
    parser = build_parser(added)
    # A subcommand with the default passthrough (`emulate`) gets everything after its name verbatim: the
    # engine's own flags are not ours to parse here.
    if argv and passes_through(parser, argv[0]):
        args, extra = parser.parse_args(argv[:1]), argv[1:]
    else:
        args, extra = parser.parse_args(argv), []
    return int(args.handler(args, extra) or 0)


if __name__ == "__main__":
    sys.exit(main())
