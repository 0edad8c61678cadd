"""The pure parts of the local cluster's LeaderWorkerSet (drafter_testbed/lws.py): its configuration, the release
manifests as this cluster installs them, its command line and the LeaderWorkerSet builder. The real LWS runs in
tests/e2e/test_lws_testbed.py."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from drafter_testbed import lws

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

# The shape of `kubectl kustomize config/default` of LWS v0.9.0 (one of each kind it renders, webhooks abridged).
RELEASE = list(yaml.safe_load_all("""
apiVersion: v1
kind: Namespace
metadata: {name: lws-system}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: leaderworkersets.leaderworkerset.x-k8s.io}
spec:
  conversion:
    strategy: Webhook
    webhook:
      clientConfig:
        service: {name: lws-webhook-service, namespace: lws-system, path: /convert}
      conversionReviewVersions: [v1]
  group: leaderworkerset.x-k8s.io
  names: {kind: LeaderWorkerSet, plural: leaderworkersets}
  scope: Namespaced
  versions: []
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: disaggregatedsets.disaggregatedset.x-k8s.io}
spec:
  group: disaggregatedset.x-k8s.io
  names: {kind: DisaggregatedSet, plural: disaggregatedsets}
  scope: Namespaced
  versions: []
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: lws-controller-manager, namespace: lws-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lws-manager-role}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: lws-manager-config, namespace: lws-system}
---
apiVersion: v1
kind: Secret
metadata: {name: lws-webhook-server-cert, namespace: lws-system}
---
apiVersion: v1
kind: Service
metadata: {name: lws-webhook-service, namespace: lws-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: lws-controller-manager, namespace: lws-system}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: lws-mutating-webhook-configuration}
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: lws-webhook-service, namespace: lws-system, path: /mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset}
  failurePolicy: Fail
  name: mleaderworkerset.kb.io
  rules: [{apiGroups: [leaderworkerset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [leaderworkersets]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: lws-webhook-service, namespace: lws-system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  objectSelector:
    matchExpressions: [{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}]
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: lws-validating-webhook-configuration}
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: lws-webhook-service, namespace: lws-system, path: /validate--v1-pod}
  failurePolicy: Fail
  name: vpod.kb.io
  objectSelector:
    matchExpressions: [{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}]
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}]
  sideEffects: None
"""))


def test_the_release_installs_its_namespace_crds_and_webhooks_and_leaves_the_deployment_and_its_rbac_out():
    objects = lws.release_objects(RELEASE, 18463, CA)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Namespace", "lws-system"),
        ("CustomResourceDefinition", "leaderworkersets.leaderworkerset.x-k8s.io"),
        ("CustomResourceDefinition", "disaggregatedsets.disaggregatedset.x-k8s.io"),
        ("MutatingWebhookConfiguration", "lws-mutating-webhook-configuration"),
        ("ValidatingWebhookConfiguration", "lws-validating-webhook-configuration")]
    # `stop` unregisters exactly the configurations the release names
    assert sorted(f"{o['kind'].lower()}/{o['metadata']['name']}" for o in objects
                  if o["kind"].endswith("WebhookConfiguration")) == sorted(lws.WEBHOOK_CONFIGURATIONS)


def test_every_webhook_and_the_crd_conversion_call_loopback_by_url_with_the_cluster_ca():
    objects = {o["metadata"]["name"]: o for o in lws.release_objects(RELEASE, 18463, CA)}
    bundle = base64.b64encode(CA).decode()
    mutating = objects["lws-mutating-webhook-configuration"]["webhooks"]
    assert [h["clientConfig"] for h in mutating] == [
        {"url": "https://127.0.0.1:18463/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", "caBundle": bundle},
        {"url": "https://127.0.0.1:18463/mutate--v1-pod", "caBundle": bundle}]
    # the release's own limits stay: only pods of a LeaderWorkerSet pass through its pod webhooks
    assert mutating[1]["objectSelector"] == {"matchExpressions": [
        {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}
    assert mutating[1]["failurePolicy"] == "Fail"
    (vpod,) = objects["lws-validating-webhook-configuration"]["webhooks"]
    assert vpod["clientConfig"]["url"] == "https://127.0.0.1:18463/validate--v1-pod"
    conversion = objects["leaderworkersets.leaderworkerset.x-k8s.io"]["spec"]["conversion"]
    assert conversion == {"strategy": "Webhook", "webhook": {"clientConfig": {
        "url": "https://127.0.0.1:18463/convert", "caBundle": bundle}, "conversionReviewVersions": ["v1"]}}
    assert "conversion" not in objects["disaggregatedsets.disaggregatedset.x-k8s.io"]["spec"]
    # the input is left as read
    assert "service" in RELEASE[1]["spec"]["conversion"]["webhook"]["clientConfig"]


def test_configuration_binds_loopback_ports_after_kueues_and_turns_leader_election_and_cert_rotation_off(tmp_path):
    from drafter_testbed import kueue

    ports = lws.ports_of(18440)
    assert ports.all() == {"webhook": 18463, "health": 18464, "metrics": 18465}
    assert not set(ports.all().values()) & set(kueue.ports_of(18440).all().values())
    assert min(ports.all().values()) > 18440 + 7  # cluster.Ports takes base .. base+7
    config = lws.configuration(ports, tmp_path / "certs")
    assert config["apiVersion"] == "config.lws.x-k8s.io/v1alpha1" and config["kind"] == "Configuration"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 18463, "certDir": str(tmp_path / "certs")}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:18464"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:18465"}
    # strict decoding: only fields of LWS's Configuration (api/config/v1alpha1)
    assert set(config) == {"apiVersion", "kind", "leaderElection", "internalCertManagement", "webhook", "health",
                           "metrics"}


def test_lws_runs_with_the_release_deployments_arguments_and_is_built_with_its_version():
    assert lws.command(Path("/bin/lws"), Path("/s/config.yaml")) == [
        "/bin/lws", "--config=/s/config.yaml", "--zap-log-level=2"]
    assert lws.ldflags("v0.9.0") == "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=v0.9.0"
    assert lws.ldflags("v0.9.0", "f056f6").endswith("-X sigs.k8s.io/lws/pkg/version.GitCommit=f056f6")
    assert lws.stamp("v0.9.0") == ".lws-v0.9.0"


def test_a_leader_worker_set_makes_groups_of_size_pods_from_one_template_with_a_copied_pod_spec():
    spec = {"containers": [{"name": "main", "image": "busybox"}]}
    obj = lws.leader_worker_set("ns", "engine", replicas=2, size=3, pod_spec=spec)
    assert obj["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and obj["kind"] == "LeaderWorkerSet"
    assert obj["metadata"] == {"name": "engine", "namespace": "ns"}
    assert obj["spec"]["replicas"] == 2
    template = obj["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 3 and template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert "leaderTemplate" not in template and template["workerTemplate"]["spec"] == spec
    template["workerTemplate"]["spec"]["containers"].append({})
    assert len(spec["containers"]) == 1
