"""Pods resolve cluster names as on a real cluster (docs/testbed.md, "Cluster DNS"): an Indexed Job's pods find
each other as `<job>-<index>.<headless service>` (what a torchrun rendezvous needs) and a Service's name
answers its ClusterIP."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

pytestmark = pytest.mark.e2e

JOB, HEADLESS, PLAIN, PORT = "ranks", "workers", "plain", 29500

# Rank 0 listens on its own pod IP (pods share the host's network namespace, each with an address of its
# own) and answers one connection; rank 1 finds it by name through the search path, connects, and reports
# what it saw in its termination message. Both retry for a while: a name resolves only once the runner has
# published the pod and CoreDNS has reread it, as on a real cluster where DNS lags the pods by seconds.
RANKS = textwrap.dedent(f"""
    import json, os, socket, time
    index = int(os.environ["JOB_COMPLETION_INDEX"])
    if index == 0:
        server = socket.create_server((os.environ["POD_IP"], {PORT}))
        server.settimeout(120)
        conn, _ = server.accept()
        conn.sendall(b"hello from rank 0: " + conn.recv(100))
        conn.close()
    else:
        deadline = time.monotonic() + 90

        def retry(what, attempt):
            while True:
                try:
                    return attempt()
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{{what}} failed for 90 s")
                    time.sleep(0.5)

        peer = retry("resolving {JOB}-0.{HEADLESS}", lambda: socket.gethostbyname("{JOB}-0.{HEADLESS}"))
        conn = retry("connecting", lambda: socket.create_connection(("{JOB}-0.{HEADLESS}", {PORT}), timeout=5))
        conn.sendall(b"rank 1")
        reply = conn.recv(100).decode()
        report = {{"peer": peer, "reply": reply, "plain": socket.gethostbyname("{PLAIN}"),
                  "hostname": socket.gethostname(), "fqdn": socket.getfqdn(),
                  "resolv": open("/etc/resolv.conf").read()}}
        open("/dev/termination-log", "w").write(json.dumps(report))
""")


def test_indexed_job_pods_find_each_other_by_name_and_a_service_name_answers_its_cluster_ip(
        local_cluster_only, namespace):
    cluster = local_cluster_only
    headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": HEADLESS},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                         "selector": {"batch.kubernetes.io/job-name": JOB}, "ports": [{"port": PORT}]}}
    plain = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": PLAIN},
             "spec": {"selector": {"batch.kubernetes.io/job-name": JOB}, "ports": [{"port": 80, "targetPort": PORT}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB},
           "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
                    "template": {"spec": {
                        "subdomain": HEADLESS, "restartPolicy": "Never",
                        "nodeSelector": {"drafter.dev/node-runtime": "process"},
                        "containers": [{"name": "rank", "image": "python:3.11", "command": ["python", "-c", RANKS]}]}}}}
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump_all([headless, plain, job]))
    done = cluster.wait_for("the Job to complete or fail", lambda: (j := cluster.get_json("-n", namespace, "job", JOB))
                            and any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                                    for c in j.get("status", {}).get("conditions") or []) and j, timeout=150)
    pods = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p
            for p in cluster.get_json("-n", namespace, "pods", "-l", f"batch.kubernetes.io/job-name={JOB}")["items"]}
    messages = {i: p["status"]["containerStatuses"][0]["state"].get("terminated", {}).get("message")
                for i, p in pods.items()}
    assert any(c["type"] == "Complete" for c in done["status"]["conditions"]), messages
    report = json.loads(messages["1"])
    assert report["peer"] == pods["0"]["status"]["podIP"]  # the name is pod 0's own address, read back from the API
    assert report["reply"] == "hello from rank 0: rank 1"
    assert report["plain"] == cluster.get_json("-n", namespace, "service", PLAIN)["spec"]["clusterIP"]
    assert report["hostname"] == f"{JOB}-1"  # the Job controller's spec.hostname, not the pod's generated name
    assert report["fqdn"] == f"{JOB}-1.{HEADLESS}.{namespace}.svc.cluster.local"
    assert f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local" in report["resolv"]
    kube_dns = cluster.get_json("-n", "kube-system", "service", "kube-dns")["spec"]["clusterIP"]
    assert f"nameserver {kube_dns}" in report["resolv"]
