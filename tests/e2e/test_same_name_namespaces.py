"""Two DrafterServings with the same name in two namespaces, one with a good drafter and one with the
seed's bad one: their Services, the operator's metric series, Events and statuses never mix."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest
import yaml

from tests.conftest import NAMESPACE_PREFIX
from tests.e2e.conftest import emulator_settings
from tests.support.e2e_acceptance import GOOD_DRAFTER, SEED_DRAFTER, Traffic, degraded, engine_pods
from tests.support.e2e_engine_faults import small
from tests.support.e2e_serving import apply, service_ip, serving_status, wait_ready

pytestmark = pytest.mark.e2e

NAME = "kimi"
ACCEPTANCE = {"minAcceptanceRate": "0.4", "window": "30s", "for": "0s", "minDraftTokens": 50, "onDegraded": "Alert"}


@pytest.fixture
def two_namespaces(fast_engines):
    """The test's namespace and a second one set up the same way (claim, fast emulator), both watched."""
    cluster, first, operator = fast_engines
    second = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", second)
    cluster.wait_for("the second namespace's default service account", lambda: cluster.kubectl(
        "-n", second, "get", "serviceaccount", "default", check=False).returncode == 0)
    from drafter_testbed.volumes import static_claim

    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(static_claim(second, "models", f"/tmp/drafter-e2e/{second}")))
    emulator_settings(cluster, second, time_scale="0.1", startup_seconds="2")
    yield cluster, (first, second), operator
    cluster.kubectl("delete", "namespace", second, "--wait=false", check=False)
    cluster.kubectl("delete", "pv", f"{second}-models", "--wait=false", check=False)


def watched(drafter: str) -> dict:
    serving = small(NAME)
    serving["spec"]["drafter"]["model"] = drafter
    serving["spec"]["acceptance"] = ACCEPTANCE
    return serving


def served_by(cluster, namespace: str, requests: int = 6) -> set[tuple[str, str]]:
    """(drafter, engine) of the engines that answer through the namespace's Service (the local runner
    routes a Service's cluster IP to the Ready pods its selector matches, as kube-proxy does)."""
    ip = service_ip(cluster, namespace, NAME)
    answers = set()
    for _ in range(requests):
        with urllib.request.urlopen(f"http://{ip}:8000/emulator/state", timeout=10) as response:
            state = json.load(response)
        # The drafter's directory name (the runner maps a container path to the claim's host path).
        answers.add((state["speculation"]["drafter"].rsplit("/", 1)[-1], state["engine"]))
    return answers


def serving_events(cluster, namespace: str) -> list[dict]:
    return cluster.get_json("-n", namespace, "events", "--field-selector",
                            f"involvedObject.kind=DrafterServing,involvedObject.name={NAME}")["items"]


def test_same_name_in_two_namespaces_never_mixes(two_namespaces):
    cluster, (good_ns, bad_ns), operator = two_namespaces
    apply(cluster, good_ns, watched(GOOD_DRAFTER))
    apply(cluster, bad_ns, watched(SEED_DRAFTER))
    revisions = {ns: wait_ready(cluster, ns, NAME)["activeRevision"] for ns in (good_ns, bad_ns)}
    pods = {ns: engine_pods(cluster, ns, NAME, revisions[ns]) for ns in (good_ns, bad_ns)}
    assert {p["status"]["podIP"] for p in pods[good_ns]}.isdisjoint({p["status"]["podIP"] for p in pods[bad_ns]})

    # Traffic the whole time: a window without drafts removes the acceptance series.
    with Traffic(cluster, good_ns, NAME, limit_seconds=150), Traffic(cluster, bad_ns, NAME, limit_seconds=150):
        good = degraded(cluster, good_ns, NAME, "False", "AcceptanceHealthy", timeout=60)
        bad = degraded(cluster, bad_ns, NAME, "True", "LowAcceptanceRate", timeout=60)
        # Services: each answers from its own namespace's engine only.
        assert served_by(cluster, good_ns) == {(GOOD_DRAFTER.rsplit("/", 1)[-1], "vllm")}
        assert served_by(cluster, bad_ns) == {(SEED_DRAFTER.rsplit("/", 1)[-1], "vllm")}

        # Statuses: each its own figures, revisions and endpoint.
        assert good["acceptance"]["rate"] > 0.6 > 0.3 > bad["acceptance"]["rate"]
        assert good["acceptance"]["revision"] == revisions[good_ns] and bad["acceptance"]["revision"] == revisions[bad_ns]
        assert revisions[good_ns] != revisions[bad_ns]  # different drafters
        assert (good["endpoint"]["host"], bad["endpoint"]["host"]) == (f"{NAME}.{good_ns}.svc.cluster.local",
                                                                     f"{NAME}.{bad_ns}.svc.cluster.local")

        for ns in (good_ns, bad_ns):
            service = cluster.get_json("-n", ns, "service", NAME)
            assert service["spec"]["selector"]["drafter.dev/revision"] == revisions[ns]

        # The operator's series: one per namespace, each with its own value.
        rate = {ns: operator.metric("drafter_acceptance_rate", namespace=ns, name=NAME) for ns in (good_ns, bad_ns)}
        assert rate[good_ns] > 0.6 > 0.3 > rate[bad_ns], rate
        assert operator.metric("drafter_degraded", namespace=good_ns, name=NAME, revision=revisions[good_ns]) == 0.0
        assert operator.metric("drafter_degraded", namespace=bad_ns, name=NAME, revision=revisions[bad_ns]) == 1.0
        assert operator.metric("drafter_degraded", namespace=good_ns, name=NAME, revision=revisions[bad_ns]) is None
        for ns in (good_ns, bad_ns):
            assert operator.metric("drafter_serving_ready", namespace=ns, name=NAME) == 1.0

        # Events: on the right object, and only that object's story.
        for ns in (good_ns, bad_ns):
            uid = cluster.get_json("-n", ns, "drafterserving", NAME)["metadata"]["uid"]
            assert {(e["involvedObject"]["namespace"], e["involvedObject"]["uid"]) for e in serving_events(cluster, ns)} \
                == {(ns, uid)}
        assert "LowAcceptanceRate" in {e["reason"] for e in serving_events(cluster, bad_ns)}
        assert "LowAcceptanceRate" not in {e["reason"] for e in serving_events(cluster, good_ns)}

        # Deleting one takes its series and objects only.
        cluster.kubectl("-n", bad_ns, "delete", "drafterserving", NAME, "--wait=true", "--timeout=60s")
        cluster.wait_for("the deleted serving's series gone", lambda: operator.metric(
            "drafter_serving_ready", namespace=bad_ns, name=NAME) is None)
        assert operator.metric("drafter_acceptance_rate", namespace=bad_ns, name=NAME) is None
        assert operator.metric("drafter_serving_ready", namespace=good_ns, name=NAME) == 1.0
        assert operator.metric("drafter_acceptance_rate", namespace=good_ns, name=NAME) > 0.6
        assert serving_status(cluster, good_ns, NAME)["activeRevision"] == revisions[good_ns]
        assert served_by(cluster, good_ns) == {(GOOD_DRAFTER.rsplit("/", 1)[-1], "vllm")}
