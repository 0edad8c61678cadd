"""End-to-end: a DrafterBenchmark against a serving, its status, and a serving on half a node."""
from __future__ import annotations

from tests.support.e2e_serving import seed_serving

SEED_DRAFTER = "/models/drafters/kimi-k25-eagle3"  # the seed's: 15% acceptance, 0.66x (docs/emulator-model.md)


def benchmark(name: str, serving: str, **spec) -> dict:
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark", "metadata": {"name": name},
            "spec": {"servingRef": {"name": serving}, "numPrompts": 3, "maxTokens": 256, "timeout": "5m", **spec}}


def benchmark_status(cluster, namespace: str, name: str) -> dict:
    return cluster.get_json("-n", namespace, "drafterbenchmark", name).get("status") or {}


def finished(cluster, namespace: str, name: str, timeout: float = 240) -> dict:
    return cluster.wait_for(f"DrafterBenchmark {name} finished", lambda: (s := benchmark_status(
        cluster, namespace, name)).get("state") in ("Succeeded", "Failed") and s, timeout=timeout)


GOOD_DRAFTER = "/models/drafters/emulator-good-drafter"  # ~1.7x at k = 5


def half_node(name: str, **spec) -> dict:
    """A serving on 4 GPUs, so the baseline and both revisions of a BlueGreen swap fit on two 8-GPU nodes."""
    serving = seed_serving(name, **spec)
    serving["spec"]["target"]["tensorParallelSize"] = 4
    serving["spec"]["resources"] = {"gpusPerReplica": 4}
    serving["spec"].pop("acceptance", None)
    return serving
