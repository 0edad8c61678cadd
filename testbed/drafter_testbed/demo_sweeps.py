"""The demo's DrafterBenchmark load sweeps: one sweep followed to its end, and drafter families compared.

A sweep measures one serving against the no-speculation baseline at 1, 8 and 32 streams, then at levels
that bracket its break-even. The family comparison is one DrafterBenchmark with spec.candidates: the
retrained EAGLE-3 serving and two more families on the same target (suffix decoding, a DSpark block
drafter), swept one after another the same way; its status.comparison names the drafter to pick at each
load, or no speculation where none pays, and `kubectl drafter compare` of it prints the table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import yaml
from rich.console import Console

from drafter_operator.kubectl_plugin import actions, compare
from drafter_testbed import cluster as local
from drafter_testbed import demo_acceptance as watch

SWEEP_LEVELS = [1, 8, 32]
BASELINE = "kimi-baseline"
#: Two more families on the demo's target, each on its own 8-GPU node: suffix decoding (no drafter model,
#: vLLM only) and a DSpark block drafter checkpoint (7 drafts a step, one draft forward).
FAMILIES = {
    "kimi-vllm-suffix": {"engine": "vllm", "drafter": {"method": "suffix"}},
    "kimi-vllm-dspark": {"engine": "vllm", "drafter": {"method": "dspark", "model": "/models/drafters/kimi-k25-dspark",
                                                       "numSpeculativeTokens": 7}},
}

Kubectl = Callable[..., object]


def run_sweep(kubectl: Kubectl, console: Console, namespace: str, name: str, serving: str, max_tokens: int,
              timeout: float = 300) -> dict:
    """Create the sweep ``name`` of ``serving`` (an earlier one of that name is replaced), follow it to its end,
    and return it; ClusterError when it does not succeed."""
    spec = {"servingRef": {"name": serving}, "baseline": {"servingRef": {"name": BASELINE}},
            "concurrencyLevels": SWEEP_LEVELS, "numPrompts": 3, "maxTokens": max_tokens}
    return run_benchmark(kubectl, console, namespace, name, spec, timeout,
                         f"DrafterBenchmark {name}: concurrency {SWEEP_LEVELS}, then levels that bracket the "
                         "break-even (a Job on the CPU node)")


def run_comparison(kubectl: Kubectl, console: Console, namespace: str, name: str, candidates: list[str],
                   max_tokens: int, timeout: float = 900) -> dict:
    """One DrafterBenchmark comparing ``candidates`` (each swept in turn by a run of its own), followed to its end."""
    spec = {"candidates": [{"name": c} for c in candidates], "baseline": {"servingRef": {"name": BASELINE}},
            "concurrencyLevels": SWEEP_LEVELS, "numPrompts": 3, "maxTokens": max_tokens}
    return run_benchmark(kubectl, console, namespace, name, spec, timeout,
                         f"DrafterBenchmark {name}: {len(candidates)} candidates swept one after another")


def run_benchmark(kubectl: Kubectl, console: Console, namespace: str, name: str, spec: dict, timeout: float,
                  doing: str) -> dict:
    manifest = {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    kubectl("-n", namespace, "delete", "drafterbenchmark", name, "--ignore-not-found", "--wait=true")
    kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    deadline = time.monotonic() + timeout
    item: dict = {}
    with console.status(doing) as shown:
        while time.monotonic() < deadline:
            item = json.loads(kubectl("-n", namespace, "get", "drafterbenchmark", name, "-o", "json").stdout)
            if (item.get("status") or {}).get("state") in ("Succeeded", "Failed"):
                break
            shown.update(f"{doing}: {watch.condition(item, 'Complete').get('message') or 'starting'}")
            time.sleep(1)
    status = item.get("status") or {}
    if status.get("state") != "Succeeded":
        failed = watch.condition(item, "Failed")
        raise local.ClusterError(f"DrafterBenchmark {name}: {status.get('state')}: {failed.get('message')}")
    return item


def show_comparison(kubectl: Kubectl, console: Console, namespace: str, names: list[str]) -> None:
    """`kubectl drafter compare NAMES...` (sweeps, or a comparison: its candidates' runs), through the plugin's
    own functions."""
    candidates = []
    try:
        for name in names:
            for run in compare.runs_of(json.loads(kubectl("-n", namespace, "get", "drafterbenchmark", name,
                                                          "-o", "json").stdout)):
                sweep = json.loads(kubectl("-n", namespace, "get", "drafterbenchmark", run, "-o", "json").stdout)
                serving = json.loads(kubectl("-n", namespace, "get", "drafterserving",
                                             sweep["spec"]["servingRef"]["name"], "-o", "json").stdout)
                candidates.append(compare.candidate(sweep, serving))
        console.print(f"\n$ kubectl drafter compare {' '.join(names)} -n {namespace}   (docs/kubectl-plugin.md)")
        console.print(compare.render(compare.compare(candidates)), markup=False, highlight=False, end="")
    except actions.PluginError as exc:
        raise local.ClusterError(f"kubectl drafter compare: {exc}") from None
