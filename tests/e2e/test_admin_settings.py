"""An administrator changes the operator's settings under a running serving (docs/guarantees.md, guarantee 14):
the allow-list tightened mid-swap, as a `helm upgrade` of tenancy.allowedImagePrefixes restarts the operator.

The operator here is one of the test's own, for a namespace outside the session operator's prefix, with its Lease
in it (as tests/e2e/test_two_operators.py runs its operators): its settings are the test's to change."""

from __future__ import annotations

import json

import pytest
import yaml

from drafter_testbed import harness
from drafter_testbed.volumes import static_claim
from tests.e2e.conftest import emulator_settings
from tests.support.e2e_chart import delete_namespaces, make_namespace
from tests.support.e2e_serving import apply, condition, deployments, seed_serving, serving_status, wait_ready

pytestmark = pytest.mark.e2e

ALLOWED = "DRAFTER_ALLOWED_IMAGE_PREFIXES"


def test_an_allow_list_tightened_mid_swap_keeps_the_active_revision_serving_and_frees_the_pending_one(
        cluster, crds, engine_nodes, tmp_path):
    namespace = make_namespace(cluster, "tenancy")
    operator = harness.OperatorProcess(cluster, tmp_path / "operator.log", namespaces=[namespace],
                                       env={ALLOWED: json.dumps(["vllm/"])})
    operator.extra_args = ["--lease-namespace", namespace]
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            static_claim(namespace, "models", f"/tmp/drafter-e2e/{namespace}")))
        emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="40")
        operator.start(keep_running=True)
        serving = seed_serving(swap={"strategy": "BlueGreen"})
        apply(cluster, namespace, serving)
        old = wait_ready(cluster, namespace, "kimi", timeout=150)["activeRevision"]
        serving["spec"]["drafter"]["numSpeculativeTokens"] = 3
        apply(cluster, namespace, serving)
        new = cluster.wait_for("the new revision loading", lambda: next(
            (r for r in deployments(cluster, namespace, "kimi") if r != old), None), timeout=30)
        # helm upgrade --set tenancy.allowedImagePrefixes='{registry.internal/}': the operator restarts with it.
        operator.stop()
        operator.env[ALLOWED] = json.dumps(["registry.internal/"])
        operator.start(keep_running=True)
        cluster.wait_for("the pending revision stopped", lambda: list(deployments(cluster, namespace, "kimi")) == [old],
                         timeout=60)
        status = serving_status(cluster, namespace, "kimi")
        assert condition(status, "Ready")["status"] == "True" and status["activeRevision"] == old
        progressing = condition(status, "Progressing")
        assert progressing["reason"] == "InvalidSpec" and "tenancy.allowedImagePrefixes" in progressing["message"]
        service = cluster.get_json("-n", namespace, "service", "kimi")
        assert service["spec"]["selector"]["drafter.dev/revision"] == old
        assert new not in deployments(cluster, namespace, "kimi")
    finally:
        operator.stop()
        delete_namespaces(cluster, namespace)
        cluster.kubectl("delete", "pv", f"{namespace}-models", "--wait=false", check=False)
