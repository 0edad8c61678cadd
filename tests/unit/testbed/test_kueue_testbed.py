"""The pure parts of the local cluster's Kueue (drafter_testbed/kueue.py): its configuration, the rewritten
webhook configurations and CRDs, the queue builders. The real Kueue runs in tests/e2e/test_kueue.py."""

from __future__ import annotations

import base64

import yaml

from drafter_testbed import kueue

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

# The shape of config/components/webhook/manifests.yaml in Kueue v0.17.0 (three of its 88 webhooks).
MANIFESTS = yaml.safe_load_all("""
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}
  failurePolicy: Fail
  name: mjob.kb.io
  rules:
  - apiGroups: [batch]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [jobs]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [pods]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue}
  failurePolicy: Fail
  name: vclusterqueue.kb.io
  rules:
  - apiGroups: [kueue.x-k8s.io]
    apiVersions: [v1beta2]
    operations: [CREATE, UPDATE]
    resources: [clusterqueues]
  sideEffects: None
""")


def test_webhooks_call_loopback_by_url_with_the_cluster_ca_and_only_jobs_and_kueues_own_api():
    manifests = list(MANIFESTS)
    mutating, validating = kueue.webhook_configurations(manifests, 18460, CA)
    assert mutating["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert validating["metadata"]["name"] == "kueue-validating-webhook-configuration"
    # the pod webhook serves an integration that is off: every pod of the cluster would pass through Kueue
    assert [h["name"] for h in mutating["webhooks"]] == ["mjob.kb.io"]
    job = mutating["webhooks"][0]
    assert job["clientConfig"] == {"url": "https://127.0.0.1:18460/mutate-batch-v1-job",
                                   "caBundle": base64.b64encode(CA).decode()}
    assert job["objectSelector"] == {"matchExpressions": [
        {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]}
    assert job["failurePolicy"] == "Fail" and job["rules"][0]["resources"] == ["jobs"]
    cq = validating["webhooks"][0]
    assert cq["clientConfig"]["url"] == "https://127.0.0.1:18460/validate-kueue-x-k8s-io-v1beta2-clusterqueue"
    assert "objectSelector" not in cq  # Kueue's own objects are always validated
    # the input is left as read
    assert "service" in manifests[0]["webhooks"][0]["clientConfig"]


def test_configuration_binds_loopback_ports_beyond_the_clusters_and_manages_only_labelled_jobs(tmp_path):
    ports = kueue.ports_of(18440)
    assert ports.all() == {"webhook": 18460, "health": 18461, "metrics": 18462}
    assert min(ports.all().values()) > 18440 + 7  # cluster.Ports takes base .. base+7
    config = kueue.configuration(ports, tmp_path / "certs")
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and config["kind"] == "Configuration"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 18460, "certDir": str(tmp_path / "certs")}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:18461"
    assert config["metrics"]["bindAddress"] == "127.0.0.1:18462"
    assert config["manageJobsWithoutQueueName"] is False
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["featureGates"] == {"VisibilityOnDemand": False}  # it would listen on every address
    assert config["clientConnection"] == {"qps": 50, "burst": 100}


def test_conversion_is_set_for_the_crds_kueues_kustomization_patches_and_not_for_commented_ones():
    kustomization = """patches:
- path: patches/webhook_in_localqueues.yaml
- path: patches/webhook_in_workloads.yaml
#- path: patches/webhook_in_resourceflavors.yaml
#- path: patches/cainjection_in_clusterqueues.yaml
"""
    assert kueue.conversion_crds(kustomization) == ["localqueues", "workloads"]
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "spec": {"names": {"plural": "workloads"}, "versions": []}}
    converted = kueue.with_conversion(crd, 18460, CA)
    assert converted["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "url": "https://127.0.0.1:18460/convert", "caBundle": base64.b64encode(CA).decode()}
    assert converted["spec"]["conversion"]["strategy"] == "Webhook"
    assert "conversion" not in crd["spec"]


def test_kueue_runs_with_its_metrics_certificate_mounted_and_keeps_its_pid(tmp_path):
    argv = kueue.command(tmp_path / "kueue", tmp_path / "config.yaml", tmp_path / "certs")
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert "--fork" not in argv  # unshare execs: the pid file names Kueue itself
    assert argv[-7:] == [str(tmp_path / "certs"), "/etc/kueue/metrics/certs", str(tmp_path / "kueue"), "--config",
                         str(tmp_path / "config.yaml"), "--zap-log-level", "info"]


def test_the_serving_certificate_names_loopback_and_is_signed_by_the_cluster_ca(tmp_path):
    from cryptography import x509

    from drafter_testbed import certs

    certs.ensure_pki(tmp_path / "pki")
    kueue.serving_certificate(tmp_path / "pki", tmp_path / "certs")
    cert = x509.load_pem_x509_certificate((tmp_path / "certs" / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / "pki" / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    before = (tmp_path / "certs" / "tls.crt").read_bytes()
    kueue.serving_certificate(tmp_path / "pki", tmp_path / "certs")
    assert (tmp_path / "certs" / "tls.crt").read_bytes() == before  # kept, not reissued


def test_queue_builders_use_the_api_kueue_stores():
    assert kueue.resource_flavor("default") == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                                "metadata": {"name": "default"}}
    cq = kueue.cluster_queue("gpus", "default", {"nvidia.com/gpu": "1", "cpu": "8", "memory": "32Gi"})
    assert cq["apiVersion"] == "kueue.x-k8s.io/v1beta2" and cq["spec"]["namespaceSelector"] == {}
    (group,) = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert group["flavors"] == [{"name": "default", "resources": [
        {"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "32Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": "1"}]}]
    assert kueue.local_queue("ns", "team", "gpus") == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team", "namespace": "ns"},
        "spec": {"clusterQueue": "gpus"}}


def test_a_queued_job_is_labelled_and_suspended_and_conditions_are_found_by_type():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"}, "spec": {"template": {}}}
    queued = kueue.queued_job(job, "team")
    assert queued["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team"}
    assert queued["spec"]["suspend"] is True and "labels" not in job["metadata"]
    workload = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}
    assert kueue.condition(workload, "QuotaReserved")["status"] == "True"
    assert kueue.condition(workload, "Admitted") is None and kueue.condition({}, "Admitted") is None
