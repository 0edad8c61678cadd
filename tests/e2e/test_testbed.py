"""The embedded local cluster behaves like a real one where the operator depends on it (issue 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import urllib.request

import pytest
import yaml

pytestmark = pytest.mark.e2e

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _apply(cluster, namespace: str, *manifests: dict) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump_all(manifests))


def _pod(name: str, command: list[str], **spec) -> dict:
    container = {"name": "main", "image": "python:3.11", "command": command}
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"drafter.dev/node-runtime": "process"},
                     "containers": [container], **spec}}


def _gpu_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"tolerations": GPU_TOLERATION, "containers": [
                {"name": "engine", "image": "vllm/vllm-openai:v0.33.0",
                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def _condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def test_gpu_deployment_is_scheduled_on_a_fake_gpu_node_and_becomes_ready(cluster, namespace):
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "engine"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "engine"}},
                 "template": {"metadata": {"labels": {"app": "engine"}}, "spec": {
                     "tolerations": GPU_TOLERATION,
                     "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200", "drafter.dev/node-runtime": "kwok"},
                     "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.33.0",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
    }
    _apply(cluster, namespace, deployment)
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/engine", "--timeout=60s")
    pod = cluster.get_json("-n", namespace, "pods", "-l", "app=engine")["items"][0]
    node = cluster.get_json("node", pod["spec"]["nodeName"])
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-B200"
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert _condition(pod, "Ready")["status"] == "True"


@pytest.fixture(scope="session")
def two_h100_nodes(local_cluster_only):
    """Exactly two 8-GPU kwok nodes of their own (the LeaderWorkerSet tests add nodes of the same product beside
    them, tainted for their own pods alone): a capacity we know."""
    cluster = local_cluster_only
    product = "NVIDIA-H100-80GB-HBM3"
    nodes = [n["metadata"]["name"] for n in cluster.get_json("nodes", "-l", f"nvidia.com/gpu.product={product}")["items"]
             if n["metadata"]["name"].rsplit("-", 1)[0] == "capacity"]
    if not nodes:
        from drafter_testbed import cluster as local

        nodes = local.add_nodes(2, "kwok", 8, product, "capacity")
    assert len(nodes) == 2
    return product


@pytest.mark.cluster_lock("h100-nodes")  # the two nodes' capacity must be free when the test starts
def test_gpu_pod_beyond_capacity_stays_pending_unschedulable(cluster, namespace, two_h100_nodes):
    pods = [_gpu_pod(f"gpu-{i}") for i in range(3)]
    for pod in pods:
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": two_h100_nodes}
    _apply(cluster, namespace, *pods)

    def placement():
        pods = cluster.get_json("-n", namespace, "pods")["items"]
        bound = [p for p in pods if p["spec"].get("nodeName")]
        unschedulable = [p for p in pods if (_condition(p, "PodScheduled") or {}).get("reason") == "Unschedulable"]
        return (bound, unschedulable) if len(bound) == 2 and len(unschedulable) == 1 else None

    bound, (pending,) = cluster.wait_for("two GPU pods bound and one unschedulable", placement, timeout=60)
    assert len({p["spec"]["nodeName"] for p in bound}) == 2  # one 8-GPU pod per node
    assert pending["status"]["phase"] == "Pending"
    assert "Insufficient nvidia.com/gpu" in _condition(pending, "PodScheduled")["message"]


def test_job_on_the_process_node_really_runs_and_reports_its_termination_message(local_cluster_only, namespace):
    cluster = local_cluster_only
    script = "import os; open('/dev/termination-log', 'w').write('ran on ' + os.environ['HOSTNAME'] + ' ip ' + os.environ['MY_IP'])"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello"},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never", "nodeSelector": {"drafter.dev/node-runtime": "process"},
               "containers": [{"name": "main", "image": "python:3.11", "command": ["python3", "-c", script],
                               "env": [{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}}}
    _apply(cluster, namespace, job)
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Complete", "job/hello", "--timeout=60s")
    pod = cluster.get_json("-n", namespace, "pods", "-l", "job-name=hello")["items"][0]
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Succeeded"
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["message"] == f"ran on {pod['metadata']['name']} ip {pod['status']['podIP']}"
    assert pod["status"]["podIP"].startswith("127.")


def test_failing_command_marks_the_pod_failed_with_its_message(local_cluster_only, namespace):
    cluster = local_cluster_only
    script = "import sys; open('/dev/termination-log', 'w').write('drafter not found'); sys.exit(3)"
    _apply(cluster, namespace, _pod("fails", ["python3", "-c", script]))
    pod = cluster.wait_for("the pod to fail", lambda: (p := cluster.get_json("-n", namespace, "pod", "fails"))
                           .get("status", {}).get("phase") == "Failed" and p)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated == {**terminated, "exitCode": 3, "reason": "Error", "message": "drafter not found"}


def test_a_deleted_jobs_pod_reaches_a_terminal_phase_and_a_podfailurepolicy_job_replaces_it(local_cluster_only,
                                                                                             namespace):
    """As a kubelet does: a pod deleted while it runs turns Failed before it goes, so the Job controller, which
    waits for a terminal phase when the Job has a podFailurePolicy (every DrafterTraining stage Job), replaces
    it; without the phase the Job waits for ever (seen: an Extract share never replaced)."""
    cluster = local_cluster_only
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "replaced"},
           "spec": {"backoffLimit": 1, "podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [
               {"type": "DisruptionTarget", "status": "True"}]}]}, "template": {"spec": {
               "restartPolicy": "Never", "nodeSelector": {"drafter.dev/node-runtime": "process"},
               "containers": [{"name": "main", "image": "python:3.11",
                               "command": ["python3", "-c", "import time; time.sleep(600)"]}]}}}}
    _apply(cluster, namespace, job)

    def running():
        pods = cluster.get_json("-n", namespace, "pods", "-l", "job-name=replaced")["items"]
        return next((p for p in pods if (p.get("status") or {}).get("phase") == "Running"), None)
    first = cluster.wait_for("the Job's pod to run", running, timeout=60)
    cluster.kubectl("-n", namespace, "delete", "pod", first["metadata"]["name"], "--wait=false")

    def replacement():
        pods = cluster.get_json("-n", namespace, "pods", "-l", "job-name=replaced")["items"]
        return next((p for p in pods if p["metadata"]["uid"] != first["metadata"]["uid"]), None)
    assert cluster.wait_for("a replacement pod", replacement, timeout=90)
    status = cluster.wait_for("the Job to count the failure", lambda: (s := cluster.get_json(
        "-n", namespace, "job", "replaced").get("status") or {}).get("failed") == 1 and s, timeout=60)
    assert not [c for c in status.get("conditions") or [] if c["type"] == "Failed" and c["status"] == "True"]


def test_fallback_to_logs_on_error_reports_the_log_tail(local_cluster_only, namespace):
    cluster = local_cluster_only
    pod = _pod("logs", ["python3", "-c", "import sys; print('loading shard 17 failed'); sys.exit(1)"],
               container={"terminationMessagePolicy": "FallbackToLogsOnError"})
    _apply(cluster, namespace, pod)
    status = cluster.wait_for("the pod to fail", lambda: (p := cluster.get_json("-n", namespace, "pod", "logs"))
                              .get("status", {}).get("phase") == "Failed" and p["status"])
    assert "loading shard 17 failed" in status["containerStatuses"][0]["state"]["terminated"]["message"]


SERVER = textwrap.dedent("""
    import http.server, os, time
    time.sleep(float(os.environ['DELAY']))
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = ('hello from ' + os.environ['POD_NAME']).encode()
            self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    http.server.ThreadingHTTPServer((os.environ['POD_IP'], 8080), Handler).serve_forever()
""")


def _server_pod(name: str, delay: float) -> dict:
    return _pod(name, ["python3", "-c", SERVER], container={
        "env": [{"name": "DELAY", "value": str(delay)},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1, "failureThreshold": 1}})


def test_readiness_follows_the_http_probe_of_the_pods_own_process(local_cluster_only, namespace):
    cluster = local_cluster_only
    _apply(cluster, namespace, _server_pod("web", delay=4))
    running = cluster.wait_for("the process to start", lambda: (p := cluster.get_json("-n", namespace, "pod", "web"))
                               .get("status", {}).get("phase") == "Running" and p)
    assert _condition(running, "Ready")["status"] == "False"  # the process sleeps before it listens
    ready = cluster.wait_for("readiness", lambda: (p := cluster.get_json("-n", namespace, "pod", "web")) and
                             (_condition(p, "Ready") or {}).get("status") == "True" and p, timeout=30)
    started = ready["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    ready_at = _condition(ready, "Ready")["lastTransitionTime"]
    assert ready_at > started  # RFC 3339 in UTC compares as text; became ready only after the delay
    with urllib.request.urlopen(f"http://{ready['status']['podIP']}:8080/", timeout=5) as resp:
        assert resp.read() == b"hello from web"


def test_service_cluster_ip_forwards_to_ready_pods_only(local_cluster_only, namespace):
    cluster = local_cluster_only
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}
    ready_pod, slow_pod = _server_pod("web", delay=0), _server_pod("web-slow", delay=600)
    slow_pod["metadata"]["labels"] = {"app": "web"}
    _apply(cluster, namespace, service, ready_pod, slow_pod)
    ip = cluster.get_json("-n", namespace, "service", "web")["spec"]["clusterIP"]
    assert ip.startswith("127.")

    def fetch():
        try:
            with urllib.request.urlopen(f"http://{ip}:80/", timeout=2) as resp:
                return resp.read()
        except OSError:
            return None

    assert cluster.wait_for("the Service to answer", fetch, timeout=30) == b"hello from web"
    # The unready pod never receives traffic: ten requests in a row all reach the ready one.
    assert {fetch() for _ in range(10)} == {b"hello from web"}


def test_crd_and_custom_object_apply_and_server_side_validation_rejects_bad_objects(cluster, namespace):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.testbed.drafter.dev"},
        "spec": {"group": "testbed.drafter.dev", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
                         "size": {"type": "integer", "minimum": 1, "maximum": 16}}}}}}}]},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(crd))
    cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.testbed.drafter.dev", "--timeout=30s")
    good = {"apiVersion": "testbed.drafter.dev/v1", "kind": "Widget", "metadata": {"name": "ok"}, "spec": {"size": 5}}
    cluster.wait_for("the new API to be served", lambda: cluster.kubectl(
        "-n", namespace, "apply", "-f", "-", input=json.dumps(good), check=False).returncode == 0, timeout=30)
    assert cluster.get_json("-n", namespace, "widget", "ok")["spec"] == {"size": 5}
    bad = {**good, "metadata": {"name": "bad"}, "spec": {"size": 17}}
    proc = cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert "spec.size" in proc.stderr and "less than or equal to 16" in proc.stderr


def test_runner_refuses_a_cluster_that_is_not_its_own(local_cluster_only, tmp_path):
    from drafter_testbed.cluster import Layout

    layout = Layout()
    record = json.loads(layout.record.read_text())
    (tmp_path / "cluster.json").write_text(json.dumps({**record, "cluster_id": "not-this-cluster"}))
    proc = subprocess.run([sys.executable, "-m", "drafter_testbed.process_runner", "--kubeconfig",
                           str(layout.component_kubeconfig("runner")), "--state-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "refusing to run pods for a cluster that is not ours" in proc.stderr


def test_second_cluster_up_reuses_the_running_cluster(local_cluster_only):
    from drafter_testbed import cluster as local

    before = local.status()
    proc = subprocess.run([sys.executable, "-m", "drafter_operator.cli", "cluster", "up"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "already running" in proc.stderr
    pids = lambda report: {name: c["pid"] for name, c in report["components"].items()}  # noqa: E731
    assert pids(local.status()) == pids(before)  # same pids: nothing restarted


def test_nothing_the_local_cluster_started_listens_beyond_loopback(local_cluster_only):
    from drafter_testbed import cluster as local

    pids = {str(c["pid"]) for c in local.status()["components"].values() if c["pid"]}
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    ours = [line for line in lines if any(f"pid={pid}," in line for pid in pids)]
    assert ours, "expected the control plane's listeners in `ss` output"
    for line in ours:
        local_address = line.split()[3]
        assert local_address.startswith("127.") or local_address.startswith("[::ffff:127."), line


def test_kubectl_logs_reads_a_process_pods_output(local_cluster_only, namespace):
    cluster = local_cluster_only
    script = "import time\nfor i in range(3): print('loading shard', i, flush=True)\ntime.sleep(600)"
    _apply(cluster, namespace, _pod("chatty", ["python3", "-c", script]))
    logs = cluster.wait_for("the pod's output", lambda: (p := cluster.kubectl(
        "-n", namespace, "logs", "chatty", check=False)).returncode == 0 and "shard 2" in p.stdout and p.stdout,
        timeout=30)
    assert logs.splitlines() == ["loading shard 0", "loading shard 1", "loading shard 2"]
    assert cluster.kubectl("-n", namespace, "logs", "chatty", "--tail", "1").stdout.strip() == "loading shard 2"


def test_kwok_nodes_keep_heartbeating_through_leases(local_cluster_only):
    cluster = local_cluster_only
    names = [n["metadata"]["name"] for n in cluster.get_json("nodes", "-l", "drafter.dev/node-runtime=kwok")["items"]]
    assert names

    def renew_times():
        leases = {lease["metadata"]["name"]: lease["spec"].get("renewTime")
                  for lease in cluster.get_json("-n", "kube-node-lease", "leases")["items"]}
        return {name: leases.get(name) for name in names}

    first = cluster.wait_for("a Lease for every kwok node", lambda: all((t := renew_times()).values()) and t)
    # kwok renews well within the controller manager's 40 s grace period, so nodes never go NotReady.
    cluster.wait_for("every kwok Lease renewed", lambda: all(
        renewed != first[name] for name, renewed in renew_times().items()), timeout=45)


def _free_port_base(local) -> int:
    """A port base no cluster uses, whose loopback addresses differ from the suite's and the default cluster's (the
    suite's own cluster may run at any DRAFTER_PORT_BASE)."""
    from drafter_testbed import processes

    taken = {local.network_for(base).base for base in (local.default_port_base(), local.DEFAULT_PORT_BASE)}
    return next(base for base in range(21000, 30000, 16) if local.network_for(base).base not in taken
                and not any(processes.port_in_use(port) for port in local.Ports(base).all().values()))


def test_cluster_up_names_a_port_that_is_taken_and_starts_nothing(local_cluster_only, tmp_path):
    import socket

    from drafter_testbed import cluster as local

    layout = local.Layout(root=tmp_path / "state")
    ports = local.Ports(_free_port_base(local))
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", ports.apiserver))
        blocker.listen()
        with pytest.raises(local.ClusterError) as error:
            local.up(port_base=ports.base, layout=layout)
    assert f"apiserver={ports.apiserver}" in str(error.value) and "--port-base" in str(error.value)
    assert local.running_components(layout) == {}


def test_a_cluster_started_before_coredns_and_kwok_are_built_runs_without_them_until_they_join(
        local_cluster_only, tmp_path, monkeypatch):
    """A cold `./dev demo` starts the cluster while CoreDNS and kwok still compile (drafter_testbed/late_build.py):
    `up(join_later=True)` starts without them and says so, `join_late` starts nothing before they are built and
    each, with kwok's nodes, once they are. Here a toolchain cache of the test's own lacks their binaries until the
    test links them in: what a finished background build does."""
    from drafter_testbed import build
    from drafter_testbed import cluster as local
    from drafter_testbed.versions import bin_dir, toolchain_dir

    built, built_toolchain = bin_dir(), toolchain_dir()
    monkeypatch.setenv("DRAFTER_CACHE_DIR", str(tmp_path / "cache"))
    bins = bin_dir()
    bins.mkdir(parents=True)
    late = {o for step in build.STEPS if step.name in local.LATE_COMPONENTS.values() for o in step.outputs}
    for entry in built.iterdir():
        if entry.name not in late:
            (bins / entry.name).symlink_to(entry)
    (toolchain_dir() / "kwok-stages").symlink_to(built_toolchain / "kwok-stages")
    assert {"coredns", "kwok"} <= {s.name for s in build.missing_steps()}

    layout = local.Layout(root=tmp_path / "state")
    try:
        record = local.up(port_base=_free_port_base(local), layout=layout, join_later=True)
        assert record["joining"] == ["coredns", "kwok"]
        running = local.running_components(layout)
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "runner"} <= set(running)
        assert not {"coredns", "kwok"} & set(running)

        def node_names() -> set[str]:
            answer = local.kubectl(layout, "get", "nodes", "-o", "json", check=True).stdout
            return {n["metadata"]["name"] for n in json.loads(answer)["items"]}

        assert not any(name.startswith("gpu-kwok") for name in node_names())  # they would go NotReady unserved
        assert local.join_late(layout) == []  # not built yet: nothing starts
        assert local.status(layout)["joining"] == ["coredns", "kwok"]
        with pytest.raises(local.ClusterError, match="kwok has not joined"):
            local.add_nodes(1, "kwok", 8, "NVIDIA-B200", layout=layout)

        for name in sorted(late):  # the background build finishes
            (bins / name).symlink_to(built / name)
        assert local.join_late(layout) == ["coredns", "kwok"]
        running = local.running_components(layout)
        assert {"coredns", "kwok"} <= set(running)
        assert {"gpu-kwok-0", "gpu-kwok-1"} <= node_names()  # Ready: join_late waited for them
        assert local.read_record(layout)["joining"] == [] and local.join_late(layout) == []
    finally:
        local.down(wipe=True, layout=layout)


def _without_changing_parts(answer: dict) -> dict:
    """An answer without what moves between two reads (a node's heartbeat, a lease's renewal)."""
    answer = json.loads(json.dumps(answer))
    for item in answer["items"] if answer.get("kind") == "List" else [answer]:
        item.pop("status", None)
        item.get("spec", {}).pop("renewTime", None)
        for key in ("resourceVersion", "managedFields"):
            item.get("metadata", {}).pop(key, None)
    return answer


def test_the_harness_reads_answer_what_kubectl_answers(cluster, crds, namespace):  # it reads the CRDs too
    """The harness reads plain `get`s over its own connection (drafter_testbed/reads.py): each answer must be
    kubectl's, names resolved as kubectl resolves them (short names, kinds, type.group, the core group first)."""
    _apply(cluster, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "labels": {"a": "b"}}},
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two"}})
    # Only what no other worker changes meanwhile: this namespace's objects and cluster-wide objects by name.
    forms = [("-n", namespace, "cm"), ("configmaps", "-n", namespace, "-l", "a=b"), ("configmap", "two", "-n", namespace),
             ("cm/one", f"--namespace={namespace}"), ("ns", namespace), ("namespace", namespace),
             ("crd", "drafterservings.drafter.dev"), ("customresourcedefinitions.apiextensions.k8s.io/drafterservings.drafter.dev",),
             ("dsv", "-n", namespace), ("drafterservings.drafter.dev", "-n", namespace), ("events", "-n", namespace),
             ("serviceaccounts", "--namespace", namespace, "--field-selector", "metadata.name=default")]
    for form in forms:
        ours = cluster.get_json(*form)
        kubectls = json.loads(cluster.kubectl("get", *form, "-o", "json").stdout)
        assert _without_changing_parts(ours) == _without_changing_parts(kubectls), form
    assert [i["metadata"]["name"] for i in cluster.get_json("-n", namespace, "cm", "-l", "a=b")["items"]] == ["one"]
    with pytest.raises(AssertionError, match=r'NotFound.*configmaps "three" not found'):
        cluster.get_json("-n", namespace, "configmap", "three")
    # A form it does not read (an output option) is kubectl's, and answers the same.
    names = [i["metadata"]["name"] for i in cluster.get_json("-n", namespace, "cm", "--sort-by", ".metadata.name")["items"]]
    assert {"one", "two"} <= set(names) and names == sorted(names)


def test_a_native_sidecar_starts_before_the_main_container_runs_beside_it_and_outlives_it(local_cluster_only, namespace):
    """An init container with restartPolicy Always (the capture sidecar is one) runs as a kubelet runs it: it starts
    in the init order and the main container starts once it has started (without a startup probe, once its process
    runs), it is restarted when it exits, a Job's pod completes when its main container does, and then the sidecar
    is stopped and not started again."""
    cluster = local_cluster_only
    shared = {"name": "shared", "emptyDir": {}}
    mount = [{"name": "shared", "mountPath": "/shared"}]
    # The sidecar appends a line per start; the main container waits for the sidecar's first line, writes, exits.
    sidecar = {"name": "side", "image": "python:3.11", "restartPolicy": "Always", "volumeMounts": mount,
               "command": ["python3", "-c", "import time, os\nopen('/shared/side', 'a').write('started\\n')\n"
                                            "time.sleep(2 if len(open('/shared/side').read().split()) < 2 else 3600)"]}
    main = {"name": "main", "image": "python:3.11", "volumeMounts": mount,
            "command": ["python3", "-c", "import os, time\n"
                                         "while not os.path.exists('/shared/side'): time.sleep(0.1)\n"
                                         "time.sleep(10)\n"
                                         "open('/dev/termination-log', 'w').write(open('/shared/side').read())"]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "with-side"},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never", "nodeSelector": {"drafter.dev/node-runtime": "process"},
               "initContainers": [sidecar], "containers": [main], "volumes": [shared]}}}}
    _apply(cluster, namespace, job)
    cluster.kubectl("-n", namespace, "wait", "--for=condition=Complete", "job/with-side", "--timeout=90s")
    pod = cluster.get_json("-n", namespace, "pods", "-l", "job-name=with-side")["items"][0]
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0, terminated
    # The sidecar exited after 2 s and was started again while the main container ran.
    assert terminated["message"].split() == ["started", "started"], terminated
    (side,) = pod["status"]["initContainerStatuses"]
    assert side["restartCount"] >= 1
    assert "running" not in side["state"]  # a finished pod's sidecar is stopped and stays stopped
