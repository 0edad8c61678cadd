"""End-to-end: the seed DrafterServing on the test's GPU nodes, applied, waited for Ready, read back."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import E2E_GPU_PRODUCT, emulator_settings

REPO = Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples" / "serving-vllm-kimi-k25-eagle3.yaml").read_text())


def seed_serving(name: str = "kimi", gpu_product: str = E2E_GPU_PRODUCT, **spec_changes) -> dict:
    """The seed example, placed on the test's process GPU nodes."""
    serving = copy.deepcopy(SEED)
    serving["metadata"] = {"name": name}
    serving["spec"]["placement"] = {"gpuProduct": gpu_product, "nodeSelector": {"drafter.dev/node-runtime": "process"}}
    serving["spec"].update(spec_changes)
    return serving


def apply(cluster, namespace: str, obj: dict) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(obj))


def serving_status(cluster, namespace: str, name: str) -> dict:
    return cluster.get_json("-n", namespace, "drafterserving", name).get("status") or {}


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def wait_ready(cluster, namespace: str, name: str, revision: str | None = None, timeout: float = 90) -> dict:
    def ready():
        status = serving_status(cluster, namespace, name)
        said = condition(status, "Ready")
        # A refused spec never gets Ready: say why now rather than after the whole timeout.
        assert said.get("reason") != "InvalidSpec", f"DrafterServing {name} refused: {said.get('message')}"
        ok = said.get("status") == "True" and (revision is None or status.get("activeRevision") == revision)
        return ok and status
    return cluster.wait_for(f"DrafterServing {name} Ready", ready, timeout=timeout)


def deployments(cluster, namespace: str, name: str) -> dict[str, dict]:
    items = cluster.get_json("-n", namespace, "deployments", "-l", f"drafter.dev/serving={name}")["items"]
    return {d["metadata"]["labels"]["drafter.dev/revision"]: d for d in items
            if not d["metadata"].get("deletionTimestamp")}


def service_ip(cluster, namespace: str, name: str) -> str:
    return cluster.get_json("-n", namespace, "service", name)["spec"]["clusterIP"]


@pytest.fixture


def serving_env(cluster, namespace, operator, engine_nodes, model_volume):
    # Ten times faster than real time: same token counts and ratios, shorter tests.
    emulator_settings(cluster, namespace, time_scale="0.1")
    return cluster, namespace
