"""Pure pieces of the local cluster: build derivations, node builders, the runner's launch plans."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_testbed import build, launch, nodes
from drafter_testbed.cluster import (
    ClusterError,
    Layout,
    Ports,
    audit_policy,
    component_commands,
    kubeconfig_dict,
    restart,
    scheduler_config,
)
from drafter_testbed.code_roots import source_pythonpath
from drafter_testbed.tiny_target import TOKENIZER_FILES
from drafter_testbed.versions import Pins

KUBERNETES_GO_MOD = """module k8s.io/kubernetes

go 1.25.0

require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/kubectl => ./staging/src/k8s.io/kubectl
)
"""


def test_staging_replaces_are_derived_from_the_go_mod():
    lines = build.staging_replaces(KUBERNETES_GO_MOD, "v0.35.4")
    assert lines == ["\tk8s.io/api => k8s.io/api v0.35.4", "\tk8s.io/client-go => k8s.io/client-go v0.35.4",
                     "\tk8s.io/kubectl => k8s.io/kubectl v0.35.4"]


def test_version_ldflags_set_both_version_packages():
    flags = build.version_ldflags(Pins(kubernetes="v1.35.4"))
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v1.35.4" in flags
        assert f"-X {pkg}.gitMinor=35" in flags


def test_pins_derive_the_staging_version_and_a_distinct_cache_key():
    assert Pins(kubernetes="v1.36.3").staging_version == "v0.36.3"
    assert Pins(kubernetes="v1.36.3").key != Pins().key


def test_check_go_names_the_step_and_the_fix(monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError, match="step 'toolchain'.*Fix: install Go"):
        build.check_go()


def test_gpu_node_carries_allocatable_gpus_blackwell_labels_and_the_gpu_taint():
    spec = nodes.NodeSpec(name="gpu-0", runtime=nodes.KWOK, pod_cidr="127.11.0.0/24", gpus=8)
    node = nodes.node_manifest(spec, "cluster-uid")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-B200"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.family"] == "blackwell"
    assert labels[nodes.RUNTIME_LABEL] == nodes.KWOK
    assert node["metadata"]["annotations"][nodes.CLUSTER_ANNOTATION] == "cluster-uid"
    assert node["spec"]["taints"] == [nodes.GPU_TAINT]


def test_a_tests_own_node_carries_its_taint_beside_the_gpus():
    spec = nodes.NodeSpec(name="lws-0", runtime=nodes.KWOK, pod_cidr="127.11.0.0/24", gpus=8,
                          taints=(("drafter.dev/lws-test", "true"),))
    assert nodes.node_manifest(spec, "id")["spec"]["taints"] == [
        nodes.GPU_TAINT, {"key": "drafter.dev/lws-test", "value": "true", "effect": "NoSchedule"}]


def test_cpu_node_has_no_gpu_and_no_taint():
    node = nodes.node_manifest(nodes.NodeSpec(name="cpu", runtime=nodes.PROCESS, pod_cidr="127.10.0.0/24"), "id")
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert node["spec"]["taints"] == []


def test_unknown_gpu_product_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="NVIDIA-B200"):
        nodes.gpu_labels("NVIDIA-Z9", 8)


@given(st.sampled_from([nodes.KWOK, nodes.PROCESS]), st.integers(0, 254), st.integers(1024, 65000))
def test_pod_cidrs_are_loopback_and_distinct_per_runtime(runtime, index, port_base):
    network = nodes.network_for(port_base)
    cidr = ipaddress.ip_network(network.pod_cidr(runtime, index))
    assert cidr.is_loopback and ipaddress.ip_network(network.service_cidr).is_loopback
    assert not cidr.overlaps(ipaddress.ip_network("127.0.0.0/16"))  # the control plane's 127.0.0.1
    other = nodes.KWOK if runtime == nodes.PROCESS else nodes.PROCESS
    assert not cidr.overlaps(ipaddress.ip_network(network.pod_cidr(other, index)))
    assert not cidr.overlaps(ipaddress.ip_network(network.service_cidr))
    assert network.owns_pod_cidr(runtime, str(cidr)) and not network.owns_pod_cidr(other, str(cidr))


@given(st.integers(1024, 65000), st.integers(1024, 65000))
def test_clusters_in_different_port_slots_get_disjoint_addresses(port_base, other):
    # A developer's cluster (16440) and CI's (17440) on one machine must not share pod or Service IPs.
    if (port_base // 8) % 59 == (other // 8) % 59:
        return
    a, b = nodes.network_for(port_base), nodes.network_for(other)
    assert not set(range(a.base, a.base + 4)) & set(range(b.base, b.base + 4))
    assert max(a.base, b.base) + 3 <= 255


@given(st.integers(0, nodes.MAX_KWOK_NODES - 1), st.integers(0, nodes.MAX_KWOK_NODES - 1), st.integers(1024, 65000))
def test_kwok_pod_cidrs_reach_past_255_nodes_without_overlapping(index, other, port_base):
    # A scale run registers 500+ kwok nodes; a /24 per node in one /16 stopped at 255 (add_nodes raised
    # StopIteration). Every index maps to its own loopback CIDR, away from Services, process pods and kwok's
    # fallback range, and back to the same index (add_nodes finds the free ones that way).
    network = nodes.network_for(port_base)
    cidr = network.pod_cidr(nodes.KWOK, index)
    net = ipaddress.ip_network(cidr)
    assert net.is_loopback and net.num_addresses >= 128  # more than a node's 110 pods
    assert network.pod_cidr_index(nodes.KWOK, cidr) == index
    assert network.pod_cidr_index(nodes.PROCESS, cidr) is None
    for foreign in (network.service_cidr, network.kwok_fallback_cidr, f"127.{network.base}.0.0/16"):
        assert not net.overlaps(ipaddress.ip_network(foreign))
    if other != index:
        assert not net.overlaps(ipaddress.ip_network(network.pod_cidr(nodes.KWOK, other)))


@pytest.mark.parametrize("cidr", ["", "10.0.0.0/24", "127.{process}.3.0/24", "127.x.1.0/24", "127.{extra}.0.64/25",
                                  "127.{extra}.0.0/24", "127.{services}.0.0/24", "127.{kwok}.7.0/25"])
def test_cidrs_not_made_by_pod_cidr_have_no_index(cidr):
    network = nodes.network_for(16440)
    cidr = cidr.format(process=network.base, kwok=network.base + 1, services=network.base + 2, extra=network.base + 3)
    assert network.pod_cidr_index(nodes.KWOK, cidr) is None


def test_node_indexes_past_the_limit_are_refused():
    network = nodes.network_for(16440)
    with pytest.raises(ValueError, match="out of range"):
        network.pod_cidr(nodes.KWOK, nodes.MAX_KWOK_NODES)
    with pytest.raises(ValueError, match="out of range"):
        network.pod_cidr(nodes.PROCESS, 255)


def test_audit_policy_logs_only_the_audited_users_and_no_request_bodies():
    policy = audit_policy()
    assert policy["rules"][0] == {"level": "Metadata", "users": ["admin"]}
    assert policy["rules"][-1] == {"level": "None"}  # the control plane's own traffic stays out
    assert "RequestReceived" in policy["omitStages"]  # one event per request, not two


def test_audit_flags_only_when_asked(tmp_path):
    layout = Layout(tmp_path)
    plain = component_commands(layout, Ports(20000), tmp_path, audit=False)["kube-apiserver"]
    audited = component_commands(layout, Ports(20000), tmp_path, audit=True)["kube-apiserver"]
    assert "--audit-policy-file" not in plain
    assert audited[audited.index("--audit-log-path") + 1] == str(layout.audit_log)


def test_controllers_and_scheduler_run_with_production_client_limits(tmp_path):
    commands = component_commands(Layout(tmp_path), Ports(20000), tmp_path)
    manager = commands["kube-controller-manager"]
    for flag in ("--kube-api-qps", "--kube-api-burst", "--concurrent-deployment-syncs", "--concurrent-replicaset-syncs"):
        assert int(manager[manager.index(flag) + 1]) > 20  # above every default (20, 30, 5, 5)
    scheduler = commands["kube-scheduler"]
    assert scheduler[scheduler.index("--config") + 1] == str(Layout(tmp_path).scheduler_config)
    assert "--kubeconfig" not in scheduler  # ignored beside --config: the config file carries it
    connection = scheduler_config(tmp_path / "kc")["clientConnection"]
    assert connection["kubeconfig"] == str(tmp_path / "kc") and connection["qps"] > 50 and connection["burst"] > 100 - 1


def test_the_developer_and_ci_clusters_do_not_share_addresses():
    assert nodes.network_for(16440).base != nodes.network_for(17440).base


def test_default_topology_gives_distinct_names_and_cidrs():
    specs = nodes.default_topology(nodes.network_for(16440), 3, nodes.PROCESS, 8, "NVIDIA-H200")
    assert len({s.name for s in specs}) == len(specs) == 4
    assert len({s.pod_cidr for s in specs}) == 4


def test_ports_are_consecutive_and_distinct():
    ports = Ports(20000).all()
    assert sorted(ports.values()) == list(range(20000, 20008))


def test_restart_names_what_it_can_restart_and_refuses_a_component_that_is_not_running(tmp_path):
    with pytest.raises(ClusterError, match="choose one of etcd, kube-apiserver, kube-controller-manager"):
        restart("demo-operator", layout=Layout(tmp_path))
    with pytest.raises(ClusterError, match="etcd of the local cluster in .* is not running"):
        restart("etcd", layout=Layout(tmp_path))


def test_kubeconfig_points_at_loopback_with_client_certs(tmp_path):
    config = kubeconfig_dict("https://127.0.0.1:16442", tmp_path, "admin")
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:16442"
    assert config["users"][0]["user"]["client-key"] == str(tmp_path / "admin.key")


@pytest.mark.parametrize("image,repo", [
    ("vllm/vllm-openai:v0.33.0", "vllm/vllm-openai"),
    ("docker.io/vllm/vllm-openai:latest", "vllm/vllm-openai"),
    ("registry.local:5000/team/drafter-operator@sha256:abc", "team/drafter-operator"),
    ("lmsysorg/sglang", "lmsysorg/sglang"),
])
def test_image_repository(image, repo):
    assert launch.image_repository(image) == repo


def test_engine_entrypoints_become_the_emulator_with_the_same_flags():
    py = "/venv/bin/python"
    vllm = launch.host_argv(["vllm", "serve", "/models/k", "--port", "8000"], python=py)
    assert vllm == [py, "-m", "drafter_operator.cli", "emulate", "vllm", "serve", "/models/k", "--port", "8000"]
    sgl = launch.host_argv(["python3", "-m", "sglang.launch_server", "--model-path", "m"], python=py)
    assert sgl[:4] == [py, "-m", "drafter_operator.cli", "emulate"] and sgl[4:] == [
        "python3", "-m", "sglang.launch_server", "--model-path", "m"]
    assert launch.host_argv(["python3", "-c", "print(1)"], python=py) == [py, "-c", "print(1)"]
    assert launch.host_argv(["drafter-operator", "bench"], python=py) == [py, "-m", "drafter_operator.cli", "bench"]


def test_unknown_commands_are_refused_not_guessed():
    with pytest.raises(launch.LaunchError, match="not available on the local process runner"):
        launch.host_argv(["nvidia-smi"])


def test_vllm_image_without_command_uses_its_entrypoint():
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0", "args": ["/m", "--port", "8000"]}
    assert launch.container_argv(container) == ["vllm", "serve", "/m", "--port", "8000"]
    with pytest.raises(launch.LaunchError, match="set `command`"):
        launch.container_argv({"name": "x", "image": "busybox"})


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "a"}},
       "spec": {"nodeName": "n", "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}},
                                             {"name": "models", "persistentVolumeClaim": {"claimName": "weights"}}]}}


def test_plan_remaps_termination_path_and_mounts_into_the_pods_own_directory(tmp_path):
    container = {"name": "main", "image": "python:3.11",
                 "command": ["python3", "-c", "open('/dev/termination-log','w'); open('/dev/shm/x','w')"],
                 "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "models", "mountPath": "/models"}],
                 "env": [{"name": "MODEL", "value": "/models/kimi"},
                         {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                         {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                         {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}
    pod_dir = tmp_path / "pod"
    paths = launch.volume_host_paths(POD, pod_dir, tmp_path / "state")
    plan = launch.plan(POD, container, "127.10.0.9", pod_dir, 16442, lambda kind, ns, name: {"k": "v"},
                       paths, python=sys.executable)
    script = plan.argv[2]
    assert str(pod_dir / "main.termination-log") in script and str(pod_dir / "volumes" / "shm" / "x") in script
    assert plan.env["MODEL"] == str(tmp_path / "state" / "claims" / "ns" / "weights" / "kimi")
    assert plan.env["IP"] == plan.env["DRAFTER_EMULATOR_HOST"] == "127.10.0.9"
    assert plan.env["APP"] == "a" and plan.env["CFG"] == "v"
    assert plan.env["KUBERNETES_SERVICE_PORT"] == "16442"


def test_missing_config_key_is_an_error_naming_the_variable(tmp_path):
    container = {"name": "m", "command": ["true"],
                 "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "absent"}}}]}
    with pytest.raises(launch.LaunchError, match="env X"):
        launch.plan(POD, container, "127.10.0.2", tmp_path, 1, lambda *a: {}, {})


@given(st.lists(st.sampled_from(["/a/b", "/a", "x", "y", "=", " "]), max_size=12))
def test_remap_maps_every_occurrence_longest_prefix_first(segments):
    mapping = {"/a": "/X", "/a/b": "/Y"}
    text = " ".join(segments)
    expected = " ".join({"/a/b": "/Y", "/a": "/X"}.get(s, s) for s in segments)
    assert launch.remap(text, mapping) == expected


def test_remap_maps_whole_components_once():
    # The local runner's pod directories live under host paths that may start like a container path.
    mapping = {"/work": "/tmp/claims/hs", "/opt/adapters": "/work/repo/adapters"}
    assert launch.remap("/opt/adapters/x.py --out=/work/data /workspace /work", mapping) == \
        "/work/repo/adapters/x.py --out=/tmp/claims/hs/data /workspace /tmp/claims/hs"


def test_tiny_target_runs_from_the_source_roots_alone(tmp_path):
    # What the training environment gets: no site-packages (-S), both packages from source_pythonpath; the
    # module finds the tokenizer the operator package ships and writes the dataset.
    import json
    import os
    import subprocess

    from drafter_testbed.code_roots import source_pythonpath
    from drafter_testbed.tiny_target import TOKENIZER_FILES

    env = {"PATH": os.environ["PATH"], "PYTHONPATH": source_pythonpath()}
    code = "from drafter_testbed.tiny_target import TOKENIZER_DIR; print(TOKENIZER_DIR)"
    done = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    tokenizer_dir = done.stdout.strip()
    assert tokenizer_dir.endswith("drafter_operator/data/tokenizer")
    assert all(os.path.isfile(os.path.join(tokenizer_dir, name)) for name in TOKENIZER_FILES)
    out = tmp_path / "chats.jsonl"
    done = subprocess.run([sys.executable, "-S", "-m", "drafter_testbed.tiny_target", "dataset", str(out),
                           "--conversations", "3"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["tiny-0000", "tiny-0001", "tiny-0002"]


@given(total=st.integers(1, 5000), done=st.integers(1, 5000), elapsed=st.floats(1, 3600))
def test_a_build_progress_line_says_what_is_left_at_the_rate_so_far(total, done, elapsed):
    done = min(done, total)
    line = build.progress_line("kubernetes: compile", done, total, elapsed)
    assert line.startswith(f"kubernetes: compile: {done}/{total} packages, {elapsed:.0f}s")
    left = elapsed * (total - done) / done
    expected = f"{left / 60:.0f} min" if left >= 90 else f"{max(left, 1):.0f} s"
    assert line.endswith(f", about {expected} left")


def test_a_build_without_a_known_package_count_says_only_what_it_did():
    assert build.progress_line("kwok v0.8.0", 140, 0, 41.6) == "kwok v0.8.0: 140 packages, 42s"


def test_every_build_step_carries_a_measured_cold_estimate_and_the_cluster_steps_exist():
    assert all(step.cold_seconds > 0 for step in build.STEPS)
    assert set(build.CLUSTER_STEPS) <= {step.name for step in build.STEPS}


def test_the_late_steps_are_cluster_steps_and_the_start_steps_the_rest():
    assert set(build.LATE_STEPS) < set(build.CLUSTER_STEPS)
    assert set(build.START_STEPS) | set(build.LATE_STEPS) == set(build.CLUSTER_STEPS)
    assert not set(build.START_STEPS) & set(build.LATE_STEPS)
    assert {"kubernetes", "etcd", "helm"} <= set(build.START_STEPS)  # the apiserver, its store, the chart's install


def test_named_steps_build_in_the_order_asked_for(tmp_path, monkeypatch):
    """The demo's background build asks for CoreDNS first (the training scene needs it soonest), whatever order
    STEPS lists the steps in."""
    monkeypatch.setenv("DRAFTER_CACHE_DIR", str(tmp_path))
    built: list[str] = []

    def step(name: str) -> build.Step:
        def run(pins, out):
            built.append(name)
            (out / name).write_text("built")
        return build.Step(name, (name,), run, cold_seconds=1)

    monkeypatch.setattr(build, "STEPS", (step("kwok"), step("prometheus"), step("coredns"), step("crane")))
    monkeypatch.setattr(build, "check_go", lambda: "go1.26.8")
    build.ensure_binaries(only=("coredns", "prometheus", "kwok"))
    assert built == ["coredns", "prometheus", "kwok"]
    build.ensure_binaries(only=("crane", "kwok"))  # kwok is built: only crane is left
    assert built == ["coredns", "prometheus", "kwok", "crane"]


def test_cluster_build_refuses_cluster_and_only_together(capsys):
    from drafter_operator import cli

    with pytest.raises(SystemExit) as refused:
        cli.main(["cluster", "build", "--cluster", "--only", "helm"])
    assert refused.value.code == 2
    assert "--only: not allowed with argument --cluster" in capsys.readouterr().err
