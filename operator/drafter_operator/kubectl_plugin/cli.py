"""`kubectl drafter COMMAND NAME`: the thin layer that runs kubectl for tree.py and actions.py.

kubectl itself does the talking (found as $KUBECTL, else `kubectl` on PATH: a kubectl plugin runs where
kubectl does), so the kubeconfig, context, credentials plugins and the namespace of the context apply
exactly as they do to kubectl.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone

from drafter_operator.controllers.serving.known_bad import packaged_table
from drafter_operator.kubectl_plugin import actions, compare, known_bad, tree
from drafter_operator.constants import BENCHMARK_PLURAL, SERVING_LABEL
from drafter_operator.settings import KUBECTL


class Kubectl:
    def __init__(self, args: argparse.Namespace):
        self.base = [KUBECTL.read()]
        for flag in ("kubeconfig", "context", "namespace"):
            if getattr(args, flag):
                self.base.append(f"--{flag}={getattr(args, flag)}")

    def run(self, *args: str, input: str | None = None) -> str:
        try:
            done = subprocess.run([*self.base, *args], input=input, capture_output=True, text=True)
        except FileNotFoundError:
            raise actions.PluginError(f"{self.base[0]} not found: put kubectl on PATH or name it in $KUBECTL") from None
        if done.returncode != 0:
            raise actions.PluginError(done.stderr.strip() or f"kubectl {' '.join(args)} failed ({done.returncode})")
        return done.stdout

    def get(self, *args: str) -> dict:
        return json.loads(self.run("get", *args, "-o", "json"))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def get(kubectl: Kubectl, args: argparse.Namespace) -> int:
    serving = kubectl.get("drafterserving", args.name)
    pods = kubectl.get("pods", "-l", f"{SERVING_LABEL}={args.name}")["items"]
    benchmarks = kubectl.get(BENCHMARK_PLURAL)["items"]
    now = _now()
    sys.stdout.write(tree.render(tree.build(serving, pods, benchmarks, now), now))
    return 0


def retry(kubectl: Kubectl, args: argparse.Namespace) -> int:
    serving = kubectl.get("drafterserving", args.name)
    patch = actions.retry_annotation(serving, str(int(time.time())))
    kubectl.run("patch", "drafterserving", args.name, "--type=merge", "-p", json.dumps(patch))
    failed = serving["status"]["revisions"][-1]["name"]
    print(f"drafterserving/{args.name}: retrying revision {failed} "
          f"({actions.RETRY_ANNOTATION}={patch['metadata']['annotations'][actions.RETRY_ANNOTATION]})")
    return 0


def retrain(kubectl: Kubectl, args: argparse.Namespace) -> int:
    serving = kubectl.get("drafterserving", args.name)
    patch = actions.retrain_annotation(serving, str(int(time.time())))
    kubectl.run("patch", "drafterserving", args.name, "--type=merge", "-p", json.dumps(patch))
    waiting = ((serving.get("status") or {}).get("retraining") or {}).get("waiting")
    print(f"drafterserving/{args.name}: retraining asked "
          f"({actions.RETRAIN_ANNOTATION}={patch['metadata']['annotations'][actions.RETRAIN_ANNOTATION]}); "
          + (f"it waits: {waiting}" if waiting else "status.retraining.history names the training it starts"))
    return 0


def rollback(kubectl: Kubectl, args: argparse.Namespace) -> int:
    serving = kubectl.get("drafterserving", args.name)
    patch, revision = actions.rollback_patch(serving)
    kubectl.run("patch", "drafterserving", args.name, "--type=json", "-p", json.dumps(patch))
    print(f"drafterserving/{args.name}: spec restored to revision {revision}; the operator swaps to it "
          f"(spec.swap.strategy). Follow it with: kubectl drafter get {args.name}")
    return 0


def benchmark(kubectl: Kubectl, args: argparse.Namespace) -> int:
    kubectl.get("drafterserving", args.name)  # a missing serving fails here, not as a Failed benchmark
    body = actions.benchmark_object(args.name, args.num_prompts, args.max_tokens, args.concurrency)
    created = json.loads(kubectl.run("create", "-f", "-", "-o", "json", input=json.dumps(body)))
    name = created["metadata"]["name"]
    print(f"drafterbenchmark/{name} created")
    if not args.wait:
        return 0
    from rich.console import Console

    console = Console(stderr=True)
    deadline = time.monotonic() + args.timeout
    current = created
    # A spinner with the benchmark's state on a terminal; one line per change of state otherwise.
    with console.status(actions.benchmark_line(current)) as spinner:
        shown = None
        while (state := (current.get("status") or {}).get("state")) not in ("Succeeded", "Failed"):
            line = actions.benchmark_line(current)
            if line != shown:
                spinner.update(line)
                if not console.is_terminal:
                    print(line, file=sys.stderr)
                shown = line
            if time.monotonic() > deadline:
                print(f"drafterbenchmark/{name}: still {state or 'Pending'} after {args.timeout:g}s; it keeps "
                      f"running: kubectl get drafterbenchmark {name}", file=sys.stderr)
                return 1
            time.sleep(args.interval)
            current = kubectl.get("drafterbenchmark", name)
    print(actions.benchmark_line(current))
    result = (current.get("status") or {}).get("result") or {}
    if summary := tree._benchmark_summary(result):
        print(f"  {summary}")
    return 0 if state == "Succeeded" else 1


def compare_benchmarks(kubectl: Kubectl, args: argparse.Namespace) -> int:
    candidates = []
    names = [run for name in args.benchmarks for run in compare.runs_of(kubectl.get(BENCHMARK_PLURAL, name))]
    for name in names:
        benchmark = kubectl.get(BENCHMARK_PLURAL, name)
        ref = ((benchmark.get("spec") or {}).get("servingRef") or {}).get("name")
        try:
            serving = kubectl.get("drafterserving", ref) if ref else None
        except actions.PluginError:
            serving = None  # deleted since: the family is then unknown, the figures stand
        candidates.append(compare.candidate(benchmark, serving))
    sys.stdout.write(compare.render(compare.compare(candidates)))
    return 0


def known_bad_rows(kubectl: Kubectl, args: argparse.Namespace) -> int:
    marks = None
    if args.serving:
        serving = kubectl.get("drafterserving", args.serving)
        pods = kubectl.get("pods", "-l", f"{SERVING_LABEL}={args.serving}")["items"]
        placed = sorted({p["spec"]["nodeName"] for p in pods if (p.get("spec") or {}).get("nodeName")})
        try:
            # `kubectl get nodes A -o json` answers one node as itself, several as a List.
            got = kubectl.get("nodes", *placed) if placed else {"items": []}
            nodes = got["items"] if "items" in got else [got]
        except actions.PluginError as exc:  # may not read nodes: rows keyed by GPU stay pending
            print(f"kubectl drafter known-bad: the pods' nodes are not readable ({exc}); rows keyed by GPU product "
                  "show as pending unless spec.placement.gpuProduct is set", file=sys.stderr)
            nodes = []
        marks = known_bad.serving_marks(serving, known_bad.node_products(pods, nodes))
    sys.stdout.write(known_bad.render(packaged_table(), args.output, marks))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl drafter",
                                     description="Inspect and steer DrafterServings (the drafter-operator's).")
    parser.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    parser.add_argument("--context", help="the kubeconfig context")
    parser.add_argument("--kubeconfig", help="the kubeconfig file")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, handler, text in (
            ("get", get, "the serving as a tree: revisions, pods, what serves, acceptance, benchmarks, conditions"),
            ("retry", retry, "start the serving's failed newest revision again (drafter.dev/retry)"),
            ("retrain", retrain, "ask the serving's spec.retraining for a training now (drafter.dev/retrain)"),
            ("rollback", rollback, "restore the spec of the last revision that served well; the operator swaps to it")):
        command = commands.add_parser(name, help=text)
        command.add_argument("name", metavar="NAME", help="the DrafterServing")
        command.set_defaults(handler=handler)
    bench = commands.add_parser("benchmark", help="run a DrafterBenchmark of the serving and follow it until done")
    bench.add_argument("name", metavar="NAME", help="the DrafterServing")
    bench.add_argument("--num-prompts", type=int, default=5, help="prompts (default 5)")
    bench.add_argument("--max-tokens", type=int, default=512, help="tokens per prompt (default 512)")
    bench.add_argument("--concurrency", type=int, default=1, help="streams at once (default 1)")
    bench.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                       help="follow it until it finishes (default); --no-wait only creates it")
    bench.add_argument("--timeout", type=float, default=1800, help="seconds to follow it (default 1800)")
    bench.add_argument("--interval", type=float, default=2, help="seconds between reads (default 2)")
    bench.set_defaults(handler=benchmark)
    versus = commands.add_parser("compare", help="Succeeded benchmark sweeps side by side: the speedup of each at every "
                                                 "load, and the drafter to pick there")
    versus.add_argument("benchmarks", metavar="BENCHMARK", nargs="+",
                        help="DrafterBenchmarks with concurrencyLevels, or one with spec.candidates (its candidates' runs)")
    versus.set_defaults(handler=compare_benchmarks)
    table = commands.add_parser("known-bad", help="the known-bad table the operator checks servings against: "
                                                  "engine, versions, method, k, GPU, parallelism, role, page size, "
                                                  "sleep, issue")
    table.add_argument("-o", "--output", choices=("table", "yaml", "json"), default="table",
                       help="table (default), or the rows as YAML or JSON")
    table.add_argument("--serving", metavar="NAME", help="only the rows that match this DrafterServing, or wait for "
                                                          "the GPU product of the nodes its pods run on")
    table.set_defaults(handler=known_bad_rows)
    # The other flags can come after the command too, as with kubectl (`kubectl drafter get kimi -n team-a`).
    for sub in commands.choices.values():
        sub.add_argument("-n", "--namespace", dest="namespace", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(Kubectl(args), args) or 0)
    except actions.PluginError as exc:
        print(f"kubectl drafter {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
