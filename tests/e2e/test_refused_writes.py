"""A write the real apiserver refuses is visible within one reconcile (docs/guarantees.md, "Failures are
visible"): a ValidatingAdmissionPolicy of the local kube-apiserver refuses the serving's Deployments; the
serving says so in Progressing (WriteRefused, with the policy's own message) and a Warning Event, creates
nothing after the refused write, and goes on by itself once the policy is gone."""

from __future__ import annotations

import pytest
import yaml

from tests.support.e2e_serving import apply, condition, seed_serving, serving_status, wait_ready

pytestmark = pytest.mark.e2e


def policy(namespace: str) -> list[dict]:
    name = f"no-engines-{namespace}"
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["deployments"]}]},
                  "validations": [{"expression": "false",
                                   "message": "GPU change freeze CF-21: no new engine Deployments this week"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}},
    ]


def test_a_deployment_refused_by_an_admission_policy_is_in_status_and_events(cluster, namespace, operator, engine_nodes,
                                                                               model_volume):
    objects = policy(namespace)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    try:
        # The binding takes a moment to reach the admission chain: wait until a create is refused.
        probe = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "probe", "namespace": namespace},
                 "spec": {"selector": {"matchLabels": {"p": "p"}}, "template": {"metadata": {"labels": {"p": "p"}},
                          "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
        cluster.wait_for("the policy to refuse a Deployment", lambda: cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe), check=False).returncode != 0,
            timeout=60)
        apply(cluster, namespace, seed_serving("kimi-frozen"))
        refused = cluster.wait_for("WriteRefused in status", lambda: (s := serving_status(
            cluster, namespace, "kimi-frozen")) and condition(s, "Progressing").get("reason") == "WriteRefused" and s,
            timeout=60)
        message = condition(refused, "Progressing")["message"]
        assert "create Deployment kimi-frozen-" in message and "GPU change freeze CF-21" in message, message
        # The Event is posted after the status write (a separate request): wait for it rather than race it.
        warnings = cluster.wait_for("the WriteRefused Event", lambda: [
            e for e in cluster.get_json("-n", namespace, "events", "--field-selector",
                                        "involvedObject.name=kimi-frozen")["items"] if e["reason"] == "WriteRefused"],
            timeout=60)
        assert warnings[0]["type"] == "Warning" and "CF-21" in warnings[0]["message"]
        # Nothing after the refused write: no Service pointing at a revision that does not exist.
        assert cluster.kubectl("-n", namespace, "get", "service", "kimi-frozen", check=False).returncode != 0
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(objects))
    status = wait_ready(cluster, namespace, "kimi-frozen", timeout=120)  # the retry goes through on its own
    assert condition(status, "Progressing")["reason"] != "WriteRefused"


def test_a_delete_for_the_object_as_read_keeps_one_changed_since(cluster, namespace):
    """Plan.delete_if_unchanged as the real apiserver holds it: the operator's client sends the resourceVersion it read
    as DeleteOptions.preconditions, and an object written since is kept with 409 Conflict (a stage Job that finished
    after a lagging list showed it running keeps its completion); the version read now deletes it."""
    from drafter_operator.kube import ApiError, Kube, object_path

    kube = Kube(cluster.api_client())
    path = object_path("v1", "configmaps", namespace, "stage-record")
    read = kube.create(object_path("v1", "configmaps", namespace), {"metadata": {"name": "stage-record"},
                                                                      "data": {"state": "running"}})
    written = kube.patch(path, {"data": {"state": "complete"}})
    with pytest.raises(ApiError) as refused:
        kube.delete(path, resource_version=read["metadata"]["resourceVersion"])
    assert refused.value.status == 409
    assert "the ResourceVersion in the precondition" in refused.value.body  # the simulated apiserver's words too
    assert kube.get(path)["data"] == {"state": "complete"}
    assert kube.delete(path, resource_version=written["metadata"]["resourceVersion"])
    assert kube.get(path) is None
