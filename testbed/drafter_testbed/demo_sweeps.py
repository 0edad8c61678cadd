"""The demo's DrafterBenchmark load sweeps: one sweep followed to its end, and drafter families compared.

A sweep measures one serving against the no-speculation baseline at 1, 8 and 32 streams, then at levels
that bracket its break-even. The family comparison sweeps two more families on the same target (suffix
decoding, a DSpark block drafter) the same way and prints `kubectl drafter compare` of the three: the
drafter to pick at each load, or no speculation where none pays.
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
    manifest = {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"servingRef": {"name": serving}, "baseline": {"servingRef": {"name": BASELINE}},
                         "concurrencyLevels": SWEEP_LEVELS, "numPrompts": 3, "maxTokens": max_tokens}}
    kubectl("-n", namespace, "delete", "drafterbenchmark", name, "--ignore-not-found", "--wait=true")
    kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    deadline = time.monotonic() + timeout
    item: dict = {}
    with console.status(f"DrafterBenchmark {name}: concurrency {SWEEP_LEVELS}, then levels that bracket the "
                        "break-even (a Job on the CPU node)"):
        while time.monotonic() < deadline:
            item = json.loads(kubectl("-n", namespace, "get", "drafterbenchmark", name, "-o", "json").stdout)
            if (item.get("status") or {}).get("state") in ("Succeeded", "Failed"):
                break
            time.sleep(1)
    status = item.get("status") or {}
    if status.get("state") != "Succeeded":
        failed = watch.condition(item, "Failed")
        raise local.ClusterError(f"DrafterBenchmark {name}: {status.get('state')}: {failed.get('message')}")
    return item


def show_comparison(kubectl: Kubectl, console: Console, namespace: str, sweeps: list[dict]) -> None:
    """`kubectl drafter compare` of ``sweeps``, through the plugin's own functions."""
    candidates = []
    for sweep in sweeps:
        serving = json.loads(kubectl("-n", namespace, "get", "drafterserving", sweep["spec"]["servingRef"]["name"],
                                     "-o", "json").stdout)
        candidates.append(compare.candidate(sweep, serving))
    names = " ".join(s["metadata"]["name"] for s in sweeps)
    console.print(f"\n$ kubectl drafter compare {names} -n {namespace}   (docs/kubectl-plugin.md)")
    try:
        console.print(compare.render(compare.compare(candidates)), markup=False, highlight=False, end="")
    except actions.PluginError as exc:
        raise local.ClusterError(f"kubectl drafter compare: {exc}") from None
