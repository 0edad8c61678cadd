"""People and GitOps touching a serving's children on the real cluster (docs/guarantees.md, "Hands on children"):
`kubectl delete` of the active Deployment mid-swap, and a hand-made Service with the serving's name."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.conftest import emulator_settings
from tests.support.e2e_serving import (apply, condition, deployments, seed_serving, serving_env, serving_status,
                                       wait_ready)  # noqa: F401

pytestmark = pytest.mark.e2e

QUICK_GATE = {"minTokensPerSecond": "1", "numPrompts": 2, "maxTokens": 64}


def selected_revision(cluster, namespace: str, name: str) -> str | None:
    service = cluster.get_json("-n", namespace, "service", name)
    return service["spec"]["selector"].get("drafter.dev/revision")


def gate_passed(cluster, namespace: str, revision: str) -> bool:
    gates = cluster.get_json("-n", namespace, "drafterbenchmarks", "-l",
                             f"drafter.dev/gate=true,drafter.dev/revision={revision}")["items"]
    return any(((g.get("status") or {}).get("result") or {}).get("verdict") == "Passed" for g in gates)


def test_deleting_the_active_deployment_mid_swap_never_serves_the_pending_revision_before_its_gate(serving_env):
    cluster, namespace = serving_env
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="20")
    serving = seed_serving(swap={"strategy": "BlueGreen", "gate": QUICK_GATE})
    apply(cluster, namespace, serving)
    old = wait_ready(cluster, namespace, "kimi", timeout=120)["activeRevision"]
    uid = deployments(cluster, namespace, "kimi")[old]["metadata"]["uid"]
    serving["spec"]["drafter"]["numSpeculativeTokens"] = 3
    apply(cluster, namespace, serving)
    new = cluster.wait_for("the new revision", lambda: next(
        (r for r in deployments(cluster, namespace, "kimi") if r != old), None), timeout=30)
    cluster.kubectl("-n", namespace, "delete", "deployment", f"kimi-{old}", "--wait=false")  # to restart it

    def progress():
        selected = selected_revision(cluster, namespace, "kimi")
        # The invariant, at every look: traffic never reaches the new revision before its gate passed.
        assert selected in (old, new) and (selected == old or gate_passed(cluster, namespace, new)), selected
        return selected == new

    restored = cluster.wait_for("the active revision's Deployment back", lambda: progress() or (
        (d := deployments(cluster, namespace, "kimi").get(old)) and d["metadata"]["uid"] != uid and d), timeout=60)
    assert restored is True or restored["metadata"]["labels"]["drafter.dev/revision"] == old
    cluster.wait_for("the new revision to serve after its gate", progress, timeout=240)
    assert gate_passed(cluster, namespace, new)
    wait_ready(cluster, namespace, "kimi", revision=new, timeout=60)


def test_a_hand_made_service_with_the_servings_name_is_a_name_conflict_and_stays_untouched(serving_env):
    cluster, namespace = serving_env
    legacy = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kimi"},
              "spec": {"selector": {"app": "legacy-kimi"}, "ports": [{"port": 8000}]}}
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(legacy))
    apply(cluster, namespace, seed_serving())
    status = cluster.wait_for("NameConflict", lambda: (s := serving_status(cluster, namespace, "kimi")) and condition(
        s, "Progressing").get("reason") == "NameConflict" and s, timeout=60)
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NameConflict")
    assert "Service" in ready["message"] and "not owned by this DrafterServing" in ready["message"]
    service = cluster.get_json("-n", namespace, "service", "kimi")
    assert service["spec"]["selector"] == {"app": "legacy-kimi"}
    assert not service["metadata"].get("ownerReferences")
    # kopf posts Events from a queue of its own, after the status write: the Event may come a moment later.
    cluster.wait_for("the NameConflict Event", lambda: "NameConflict" in [e["reason"] for e in cluster.get_json(
        "-n", namespace, "events", "--field-selector", "involvedObject.name=kimi")["items"]], timeout=60)
