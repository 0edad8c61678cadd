"""Engine pods as users run them on a real cluster: a hub token from a Secret, user variables, pod
policy applied in place, the hub cache shared by revisions, and offline mode failing fast."""

from __future__ import annotations

import json
import urllib.request

import pytest
import yaml

from tests.e2e.conftest import emulator_settings
from tests.support.e2e_serving import apply, condition, seed_serving, serving_status, wait_ready

pytestmark = pytest.mark.e2e

HUB_TOKEN = "hf_e2eNeverShowThisTokenAnywhere0123456789"
PUBLIC_DRAFTER = "AQ-MedAI/Kimi-K2-Instruct-eagle3"


def ready_pod(cluster, namespace: str, revision: str) -> dict:
    return cluster.wait_for(f"a Ready pod of revision {revision}", lambda: next((
        p for p in cluster.get_json("-n", namespace, "pods", "-l", f"drafter.dev/revision={revision}")["items"]
        if not p["metadata"].get("deletionTimestamp") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions") or [])),
        None), timeout=120)


def emulator_state(pod: dict, port: int = 8000) -> tuple[dict, str]:
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/emulator/state", timeout=10) as response:
        body = response.read().decode()
    return json.loads(body), body


def test_a_hub_token_from_a_secret_reaches_the_engine_by_name_only_and_pod_policy_changes_apply_in_place(fast_engines):
    cluster, namespace, operator = fast_engines
    cluster.kubectl("-n", namespace, "create", "secret", "generic", "hub-token", f"--from-literal=HF_TOKEN={HUB_TOKEN}")
    serving = seed_serving("kimi", envFrom=[{"secretRef": {"name": "hub-token"}}],
                           env=[{"name": "NCCL_DEBUG", "value": "WARN"}],
                           pod={"labels": {"example.com/team": "inference"},
                                "annotations": {"example.com/owner": "ml-platform"}})
    serving["spec"].pop("acceptance")
    apply(cluster, namespace, serving)
    ready = wait_ready(cluster, namespace, "kimi")
    revision = ready["activeRevision"]
    deployment = cluster.get_json("-n", namespace, "deployment", f"kimi-{revision}")
    pod = ready_pod(cluster, namespace, revision)
    state, body = emulator_state(pod)
    names = state["environment"]["names"]
    assert {"HF_TOKEN", "NCCL_DEBUG", "HF_HUB_OFFLINE"} <= set(names)
    assert pod["metadata"]["labels"]["example.com/team"] == "inference"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "ml-platform"

    # The value is nowhere the operator or the engine puts anything.
    places = {
        "serving": cluster.kubectl("-n", namespace, "get", "drafterserving", "kimi", "-o", "yaml").stdout,
        "deployment": yaml.safe_dump(deployment),
        "pod": yaml.safe_dump(pod),
        "events": cluster.kubectl("-n", namespace, "get", "events", "-o", "yaml").stdout,
        "operator log": operator.log_path.read_text(errors="replace"),
        "emulator state": body,
    }
    assert [where for where, text in places.items() if HUB_TOKEN in text] == []

    # A pod-policy and env change: the same revision and Deployment, its pods restarted with the change.
    serving["spec"]["pod"] = {"labels": {"example.com/team": "training"}}  # the annotation is removed
    serving["spec"]["env"].append({"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"})
    apply(cluster, namespace, serving)
    changed = cluster.wait_for("the new template rolled out", lambda: next((
        p for p in cluster.get_json("-n", namespace, "pods", "-l", "example.com/team=training")["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions") or [])),
        None), timeout=120)
    assert changed["metadata"]["labels"]["drafter.dev/revision"] == revision
    assert "example.com/owner" not in (changed["metadata"].get("annotations") or {})
    after = cluster.get_json("-n", namespace, "deployment", f"kimi-{revision}")
    assert after["metadata"]["uid"] == deployment["metadata"]["uid"]
    assert [d["metadata"]["name"] for d in cluster.get_json("-n", namespace, "deployments", "-l",
                                                            "drafter.dev/serving=kimi")["items"]] == [f"kimi-{revision}"]
    assert serving_status(cluster, namespace, "kimi")["activeRevision"] == revision
    assert "VLLM_LOGGING_LEVEL" in emulator_state(changed)[0]["environment"]["names"]


def test_the_hub_cache_is_shared_by_revisions_so_a_swap_does_not_download_again(fast_engines):
    cluster, namespace, _ = fast_engines
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="1", download_seconds="2")
    from drafter_testbed.volumes import static_claim
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(static_claim(namespace, "hf-cache", "/tmp/unused")))
    serving = seed_serving("kimi-sglang", engine="sglang",
                           drafter={"method": "eagle3", "model": PUBLIC_DRAFTER, "numSteps": 3, "eagleTopk": 1,
                                    "numDraftTokens": 4})
    serving["spec"]["image"] = "lmsysorg/sglang:v0.5.23"
    serving["spec"]["storage"] = {**serving["spec"]["storage"], "cacheClaim": "hf-cache"}
    serving["spec"].pop("acceptance")
    apply(cluster, namespace, serving)
    first = wait_ready(cluster, namespace, "kimi-sglang")["activeRevision"]
    hub = emulator_state(ready_pod(cluster, namespace, first), 30000)[0]["hub"]
    drafter = next(m for m in hub["models"] if m["model"] == PUBLIC_DRAFTER)
    assert hub["offline"] is False and drafter["source"] == "downloaded" and drafter["persisted"] is True

    serving["spec"]["drafter"].update(numSteps=2, numDraftTokens=3)  # a new revision: a new engine process
    apply(cluster, namespace, serving)
    second = cluster.wait_for("the new revision to serve", lambda: (s := serving_status(
        cluster, namespace, "kimi-sglang")).get("activeRevision") not in (None, first)
        and condition(s, "Ready").get("status") == "True" and s["activeRevision"], timeout=180)
    hub = emulator_state(ready_pod(cluster, namespace, second), 30000)[0]["hub"]
    assert next(m for m in hub["models"] if m["model"] == PUBLIC_DRAFTER)["source"] == "cache"


def test_offline_with_a_hub_id_not_in_the_cache_fails_the_start_in_seconds_with_the_engines_error(fast_engines):
    cluster, namespace, _ = fast_engines
    from drafter_testbed.volumes import static_claim
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(static_claim(namespace, "empty-cache", "/tmp/unused")))
    serving = seed_serving("kimi-offline")
    serving["spec"]["target"]["model"] = "moonshotai/Kimi-K2.5"
    serving["spec"]["drafter"] = {"method": "none"}
    serving["spec"].pop("acceptance")
    serving["spec"]["storage"] = {**serving["spec"]["storage"], "cacheClaim": "empty-cache", "offline": True}
    apply(cluster, namespace, serving)
    # spec.startup.timeout is 45m: only the engine's exit can fail it within the wait below
    failed = cluster.wait_for("the start to fail", lambda: (s := serving_status(cluster, namespace, "kimi-offline"))
                              and condition(s, "Progressing").get("reason") == "RevisionFailed" and s, timeout=120)
    message = condition(failed, "Progressing")["message"]
    assert "engine exited with code 1" in message and "moonshotai/Kimi-K2.5" in message, message
    assert "there is no earlier revision to fall back to" in message
    assert condition(failed, "Ready")["reason"] in ("EngineExited", "EngineStarting")
    record = failed["revisions"][-1]
    assert record["good"] is False and record["failedReason"].startswith("failed to start: engine exited")
    events = cluster.get_json("-n", namespace, "events", "--field-selector", "involvedObject.name=kimi-offline")
    assert "RevisionFailed" in [e["reason"] for e in events["items"]]


@pytest.mark.parametrize("change,message", [
    ({"pod": {"labels": {"drafter.dev/revision": "mine"}}}, "labels must not use the operator's keys"),
    ({"resources": {"requests": {"cpu": "lots"}}}, "spec.resources.requests.cpu"),
    ({"resources": {"requests": {"memory": "64Gi"}, "limits": {"memory": "32Gi"}}},
     "resources.limits must not be below resources.requests"),
    ({"env": [{"name": "HF_TOKEN", "value": HUB_TOKEN}]}, "must not hold a hub token"),
])
def test_the_schema_refuses_operator_label_keys_bad_quantities_and_literal_tokens(cluster, crds, namespace, change, message):
    serving = seed_serving("refused")
    if "resources" in change:
        change = {"resources": {"gpusPerReplica": 8, **change["resources"]}}
    serving["spec"].update(change)
    done = cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(serving), check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert HUB_TOKEN not in done.stderr  # the refusal does not echo the token back
