"""Lifecycle of the embedded local cluster: `up`, `down`, `status`, `env`.

Order follows envtest and local-up-cluster: etcd -> kube-apiserver -> CoreDNS -> nodes -> controller manager
and scheduler -> kwok and the local process runner. Every component listens on 127.0.0.1 only, on ports
derived from one base port, and is recorded by pid file so `down` stops exactly what `up` started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from rich.console import Console

from drafter_testbed import certs, processes
from drafter_testbed.build import CLUSTER_STEPS, START_STEPS, ensure_binaries, missing_steps
from drafter_testbed.nodes import (
    KWOK,
    RUNTIME_LABEL,
    LoopbackNetwork,
    NodeSpec,
    default_topology,
    network_for,
    node_manifest,
)
from drafter_testbed.versions import PINS, bin_dir, state_root, toolchain_dir

console = Console(stderr=True)

DEFAULT_PORT_BASE = 16440
# `down` stops them in reverse order. CoreDNS starts right after the apiserver (`_start`), and is listed just
# before the runner only so that it stops after the runner's pods, before the apiserver it reads.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "coredns", "runner",
              # installed on demand (`cluster kueue`, `cluster lws`: drafter_testbed/kueue.py, lws.py), after the rest
              "kueue", "lws",
              # an operator process older versions of the demo started (it now installs the Helm chart)
              "demo-operator",
              # the Prometheus the demo leaves running with the chart's alert rules (drafter_testbed/demo_alerts.py)
              "demo-prometheus")
#: The components a cluster can start without (`up(join_later=True)`) and the build step each waits for: they join
#: the running cluster once built (`join_late`). Nothing the cluster's first minutes run needs them: CoreDNS serves
#: pods that look each other up by name, kwok runs the pretend GPU nodes, which only the scale tests fill.
LATE_COMPONENTS = {"coredns": "coredns", "kwok": "kwok"}


def default_port_base() -> int:
    return int(os.environ.get("DRAFTER_PORT_BASE", DEFAULT_PORT_BASE))


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class Ports:
    base: int = DEFAULT_PORT_BASE

    @property
    def etcd(self) -> int:
        return self.base

    @property
    def etcd_peer(self) -> int:
        return self.base + 1

    @property
    def apiserver(self) -> int:
        return self.base + 2

    @property
    def controller_manager(self) -> int:
        return self.base + 3

    @property
    def scheduler(self) -> int:
        return self.base + 4

    @property
    def kwok(self) -> int:
        return self.base + 5

    @property
    def kwok_node(self) -> int:
        return self.base + 6

    @property
    def runner_kubelet(self) -> int:
        return self.base + 7

    def all(self) -> dict[str, int]:
        return {n: getattr(self, n) for n in ("etcd", "etcd_peer", "apiserver", "controller_manager",
                                                "scheduler", "kwok", "kwok_node", "runner_kubelet")}


@dataclass
class Topology:
    gpu_nodes: int = 2
    gpu_runtime: str = KWOK
    gpus_per_node: int = 8
    gpu_product: str = "NVIDIA-B200"
    cpu_nodes: int = 1

    def nodes(self, network: LoopbackNetwork) -> list[NodeSpec]:
        return default_topology(network, self.gpu_nodes, self.gpu_runtime, self.gpus_per_node, self.gpu_product,
                                self.cpu_nodes)


@dataclass
class Layout:
    """Files of one local cluster under its state directory."""

    root: Path = field(default_factory=state_root)

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def training_python(self) -> Path:
        """Names the python of the training environment trainer-image containers run with."""
        return self.root / "training-python"

    @property
    def record(self) -> Path:
        return self.root / "cluster.json"

    @property
    def scheduler_config(self) -> Path:
        return self.root / "kube-scheduler.yaml"

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """Written only when the cluster was started with `up(audit=True)` (`cluster up --audit`)."""
        return self.logs / "audit.log"

    @property
    def corefile(self) -> Path:
        return self.root / "Corefile"

    @property
    def pod_names(self) -> Path:
        """The hosts file of pod names behind headless Services: the runner writes it, CoreDNS serves it."""
        return self.root / "coredns" / "pod-names.hosts"

    def component_kubeconfig(self, stem: str) -> Path:
        return self.root / f"kubeconfig.{stem}"


@contextlib.contextmanager
def file_lock(path: Path, mode: int = fcntl.LOCK_EX):
    """Hold `flock` on `path` (created if missing): LOCK_EX alone, LOCK_SH with other holders of LOCK_SH."""
    with open(path, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def exclusive(layout: Layout, what: str):
    """Hold an exclusive lock of this cluster's state directory while changing `what` (`up`, `nodes`): the
    test session's parallel workers (pytest-xdist) each call `up` and `add_nodes`, and two of them choosing
    ports, node names or pod CIDRs at once would collide."""
    layout.root.mkdir(parents=True, exist_ok=True)
    return file_lock(layout.root / f".{what}.lock")


def kubeconfig_dict(server: str, pki: Path, user: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "drafter-local", "cluster": {"server": server,
                                                            "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / f"{user}.crt"),
                                          "client-key": str(pki / f"{user}.key")}}],
        "contexts": [{"name": "drafter-local", "context": {"cluster": "drafter-local", "user": user}}],
        "current-context": "drafter-local",
    }


def _write_kubeconfigs(layout: Layout, ports: Ports) -> None:
    server = f"https://127.0.0.1:{ports.apiserver}"
    layout.kubeconfig.write_text(yaml.safe_dump(kubeconfig_dict(server, layout.pki, "admin")))
    layout.kubeconfig.chmod(0o600)
    for client in certs.CLIENTS:
        path = layout.component_kubeconfig(client.file_stem)
        path.write_text(yaml.safe_dump(kubeconfig_dict(server, layout.pki, client.file_stem)))
        path.chmod(0o600)


def _wait(what: str, probe, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except Exception as exc:  # noqa: BLE001 - any failure just means "not yet"
            last_error = str(exc)
        time.sleep(0.2)
    tail = ""
    if log and log.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise ClusterError(f"{what} did not become ready within {timeout:.0f}s ({last_error}).\n{tail}\n"
                       f"Fix: read {log} for the cause; `drafter-operator cluster down` cleans up.")


def _https_ok(url: str, layout: Layout) -> bool:
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
        return resp.status == 200


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


# Client rate limits and sync concurrency as large production clusters set them (the Kubernetes scalability
# tests run controller manager and scheduler with qps 100, burst 100). The defaults (qps 20, burst 30, 5
# concurrent Deployment and ReplicaSet syncs) throttle ReplicaSet and pod creation as soon as a few dozen
# Deployments change at once: with 100 servings applied together they made up 20 of the 21 s to Ready.
CONTROL_PLANE_CLIENT_QPS = 100
CONTROL_PLANE_CLIENT_BURST = 100
CONCURRENT_WORKLOAD_SYNCS = 25

# The identity users, tests and the operator run as (kubeconfig `admin`); with `up(audit=True)` every request
# it sends is written to the audit log, and nothing else (kwok's 500 node Leases alone would flood it).
AUDITED_USERS = ("admin",)


def audit_policy() -> dict:
    """Metadata (who, verb, resource, userAgent, response code) for every request of the audited users."""
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata", "users": list(AUDITED_USERS)}, {"level": "None"}]}


def scheduler_config(kubeconfig: Path) -> dict:
    # The scheduler takes its client rate limits from a config file (its --kube-api-qps and --kubeconfig are
    # deprecated and ignored beside --config, so the kubeconfig moves in here too).
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": CONTROL_PLANE_CLIENT_QPS,
                                 "burst": CONTROL_PLANE_CLIENT_BURST},
            "leaderElection": {"leaderElect": False}}


def audit_flags(layout: Layout) -> list[str]:
    return ["--audit-policy-file", str(layout.audit_policy), "--audit-log-path", str(layout.audit_log),
            "--audit-log-format", "json", "--audit-log-maxsize", "0"]


#: CoreDNS's readiness endpoint, on the cluster DNS address (no port of the cluster's base range needed).
COREDNS_READY_PORT = 8181


def corefile(network: LoopbackNetwork, layout: Layout) -> str:
    """CoreDNS's configuration: cluster.local and reverse lookups, on port 53 of the cluster DNS address only.
    Pod names behind headless Services come from the runner's hosts file (the apiserver refuses loopback
    addresses in EndpointSlices, so the kubernetes plugin never sees those pods), every other name of
    cluster.local (Services' ClusterIPs) from the apiserver. Any other zone is refused: there is no upstream,
    so a pod never queries a server beyond loopback."""
    dns = network.cluster_dns
    return f"""cluster.local:53 in-addr.arpa:53 {{
    bind {dns}
    ready {dns}:{COREDNS_READY_PORT}
    errors
    hosts {layout.pod_names} cluster.local {{
        ttl 5
        reload 1s
        no_reverse
        fallthrough
    }}
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {layout.component_kubeconfig("coredns")} drafter-local
        ttl 5
    }}
}}
"""


def dns_manifests(network: LoopbackNetwork) -> list[dict]:
    """What a real cluster's DNS add-on installs: CoreDNS's ClusterRole (as in CoreDNS's own deployment
    manifests) bound to its user, and the selectorless `kube-dns` Service that reserves the cluster DNS
    address (selectorless, so the runner's Service proxy leaves that address to CoreDNS)."""
    name = "system:coredns"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system",
                      "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
         "spec": {"clusterIP": network.cluster_dns,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]


def component_commands(layout: Layout, ports: Ports, bins: Path, audit: bool = False) -> dict[str, list[str]]:
    pki = layout.pki
    # Loopback Service and pod ranges: ClusterIPs and pod IPs never point at a real network.
    network = network_for(ports.base)
    kc = layout.component_kubeconfig
    return {
        "etcd": [
            str(bins / "etcd"), "--name", "local", "--data-dir", str(layout.etcd_data),
            "--listen-client-urls", f"http://127.0.0.1:{ports.etcd}",
            "--advertise-client-urls", f"http://127.0.0.1:{ports.etcd}",
            "--listen-peer-urls", f"http://127.0.0.1:{ports.etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{ports.etcd_peer}",
            "--initial-cluster", f"local=http://127.0.0.1:{ports.etcd_peer}",
            "--listen-metrics-urls", "",  # no extra listener
            "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn",
        ],
        "kube-apiserver": [
            str(bins / "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{ports.etcd}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(ports.apiserver),
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--authorization-mode", "RBAC",
            "--service-cluster-ip-range", network.service_cidr,
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--allow-privileged=true",
            # With a loopback advertise address the endpoint reconciler must be off (docs/testbed.md).
            "--endpoint-reconciler-type", "none",
            # `kubectl logs` reaches the process runner's kubelet API with this client certificate.
            "--kubelet-client-certificate", str(pki / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key", str(pki / "apiserver-kubelet-client.key"),
            "--kubelet-certificate-authority", str(pki / "ca.crt"),
            "--kubelet-preferred-address-types", "InternalIP",
            "--profiling=false", "--v", "1",
            *(audit_flags(layout) if audit else []),
        ],
        "coredns": [str(bins / "coredns"), "-conf", str(layout.corefile)],
        "kube-controller-manager": [
            str(bins / "kube-controller-manager"),
            "--kubeconfig", str(kc("controller-manager")),
            "--authentication-kubeconfig", str(kc("controller-manager")),
            "--authorization-kubeconfig", str(kc("controller-manager")),
            "--service-account-private-key-file", str(pki / "sa.key"),
            "--root-ca-file", str(pki / "ca.crt"),
            "--cluster-signing-cert-file", str(pki / "ca.crt"), "--cluster-signing-key-file", str(pki / "ca.key"),
            "--service-cluster-ip-range", network.service_cidr,
            "--use-service-account-credentials", "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(ports.controller_manager),
            # Pods on a node that stops heartbeating are evicted quickly: the local runner's nodes die
            # with it, and tests should not wait five minutes to see that.
            "--node-monitor-grace-period", "40s",
            "--kube-api-qps", str(CONTROL_PLANE_CLIENT_QPS), "--kube-api-burst", str(CONTROL_PLANE_CLIENT_BURST),
            "--concurrent-deployment-syncs", str(CONCURRENT_WORKLOAD_SYNCS),
            "--concurrent-replicaset-syncs", str(CONCURRENT_WORKLOAD_SYNCS),
            "--profiling=false", "--v", "1",
        ],
        "kube-scheduler": [
            str(bins / "kube-scheduler"),
            "--config", str(layout.scheduler_config),
            "--authentication-kubeconfig", str(kc("scheduler")), "--authorization-kubeconfig", str(kc("scheduler")),
            "--bind-address", "127.0.0.1", "--secure-port", str(ports.scheduler),
            "--profiling=false", "--v", "1",
        ],
        "kwok": [
            str(bins / "kwok"), "--kubeconfig", str(kc("kwok")),
            "--manage-all-nodes=false", f"--manage-nodes-with-label-selector={RUNTIME_LABEL}={KWOK}",
            "--server-address", f"127.0.0.1:{ports.kwok}", "--node-ip", "127.0.0.1",
            "--node-port", str(ports.kwok_node), "--cidr", network.kwok_fallback_cidr,
            # Without a lease duration kwok renews no node Leases: 40 s later the node lifecycle
            # controller marks its nodes NotReady and their pods unready (measured by bench/serving_scale.py).
            "--node-lease-duration-seconds", "40",
            "-c", str(_kwok_config(layout)),
        ],
        "runner": [
            sys.executable, "-m", "drafter_testbed.process_runner",
            "--kubeconfig", str(kc("runner")), "--state-dir", str(layout.root),
            "--kubelet-port", str(ports.runner_kubelet),
            # Pods resolve names through CoreDNS; the runner publishes the names of pods behind headless Services.
            "--cluster-dns", network.cluster_dns, "--pod-names-file", str(layout.pod_names),
        ],
    }


def _kwok_config(layout: Layout) -> Path:
    """kwok's stages: the upstream fast node/pod stages, with node heartbeats through leases."""
    stages_dir = toolchain_dir(PINS) / "kwok-stages"
    out = layout.root / "kwok.yaml"
    docs = [p.read_text() for p in sorted(stages_dir.glob("*.yaml"))]
    out.write_text("\n---\n".join(docs))
    return out


def read_record(layout: Layout) -> dict | None:
    try:
        return json.loads(layout.record.read_text())
    except (OSError, ValueError):
        return None


def running_components(layout: Layout) -> dict[str, int]:
    return {name: pid for name in COMPONENTS if (pid := processes.running_pid(name, layout.run))}


def is_up(layout: Layout) -> bool:
    record = read_record(layout)
    if not record or "kube-apiserver" not in running_components(layout):
        return False
    try:
        return _https_ok(f"https://127.0.0.1:{record['ports']['apiserver']}/readyz", layout)
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


def kubectl(layout: Layout, *args: str, input: str | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """The pinned kubectl against this local cluster; `check` raises ClusterError with its stderr."""
    proc = subprocess.run([str(bin_dir() / "kubectl"), "--kubeconfig", str(layout.kubeconfig), *args],
                          input=input, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def _kubectl_ok(layout: Layout, *args: str, input: str | None = None) -> str:
    return kubectl(layout, *args, input=input, check=True).stdout


def cluster_id(layout: Layout) -> str:
    """The kube-system namespace's UID: unique per etcd data dir, so per local cluster."""
    return _kubectl_ok(layout, "get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}").strip()


def apply_nodes(layout: Layout, nodes: list[NodeSpec], identity: str) -> None:
    manifests = [node_manifest(n, identity) for n in nodes]
    _kubectl_ok(layout, "apply", "--server-side", "--force-conflicts", "--field-manager", "drafter-local",
                "-f", "-", input=yaml.safe_dump_all(manifests))
    # Creating a Node ignores the status we sent; capacity and allocatable go through the status
    # subresource (kwok and the runner keep conditions fresh afterwards).
    # One kubectl per node (each patch is its own); a few at once, or 500 nodes take minutes.
    def patch_status(manifest: dict) -> None:
        status = {"status": {k: manifest["status"][k] for k in ("capacity", "allocatable", "addresses", "nodeInfo")}}
        _kubectl_ok(layout, "patch", "node", manifest["metadata"]["name"], "--subresource", "status",
                    "--type", "merge", "-p", json.dumps(status))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(patch_status, manifests))


def _nodes_ready(layout: Layout, names: list[str]) -> bool:
    out = kubectl(layout, "get", "nodes", "-o", "json")
    if out.returncode != 0:
        return False
    ready = {
        item["metadata"]["name"]
        for item in json.loads(out.stdout)["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in item.get("status", {}).get("conditions", []))
    }
    return set(names) <= ready


def _check_ports_free(ports: Ports) -> None:
    busy = {name: port for name, port in ports.all().items() if processes.port_in_use(port)}
    if busy:
        listing = ", ".join(f"{n}={p}" for n, p in busy.items())
        raise ClusterError(f"ports already in use on 127.0.0.1: {listing}. Fix: stop whatever listens there, "
                           f"or choose another range with `drafter-operator cluster up --port-base N`.")


def up(topology: Topology | None = None, port_base: int | None = None, layout: Layout | None = None,
       audit: bool = False, join_later: bool = False) -> dict:
    """Bring the local cluster up (or reuse the running one); return its record. `audit`: the apiserver
    writes every request of AUDITED_USERS to `Layout.audit_log` (off by default: it costs apiserver CPU).
    `join_later`: start without the LATE_COMPONENTS not yet built (something else builds them: the demo's
    background build), recorded as `joining` until `join_late` starts them."""
    layout = layout or Layout()
    with exclusive(layout, "up"):
        return _up(topology or Topology(), port_base or default_port_base(), layout, audit, join_later)


def _up(topology: Topology, port_base: int, layout: Layout, audit: bool, join_later: bool) -> dict:
    if is_up(layout):
        record = read_record(layout)
        console.print(f"[yellow]A local cluster is already running[/] (apiserver 127.0.0.1:"
                      f"{record['ports']['apiserver']}, state {layout.root}); reusing it.")
        if audit and not record.get("audit_log"):
            console.print("[yellow]It runs without an audit log[/]: `cluster down`, then `cluster up --audit`.")
        joined = _join_built(layout, record)
        if joined:
            console.print(f"Joined the cluster once built: {', '.join(joined)}.")
        waiting = record.get("joining") or []
        if waiting:
            console.print(f"[yellow]It runs without {', '.join(waiting)}[/], not built yet: each joins at the next "
                          "`cluster up` after `drafter-operator cluster build --cluster`.")
        elif "coredns" not in running_components(layout):
            # Started before the cluster had DNS (or CoreDNS died): reused as it is, not restarted under its users.
            console.print("[yellow]It runs without cluster DNS[/] (pods cannot resolve *.svc.cluster.local): "
                          "`cluster down`, then `cluster up` to start CoreDNS.")
        return record
    leftovers = running_components(layout)
    if leftovers:
        console.print(f"Stopping leftovers of an unhealthy local cluster: {', '.join(leftovers)}")
        down(layout=layout)
    started = time.monotonic()
    bins = ensure_binaries(only=START_STEPS if join_later else CLUSTER_STEPS)
    unbuilt = {step.name for step in missing_steps()} if join_later else set()
    late = [name for name, step in LATE_COMPONENTS.items() if step in unbuilt]
    ports = Ports(port_base)
    _check_ports_free(ports)
    try:
        return _start(layout, topology, ports, bins, port_base, started, audit, late)
    except BaseException:
        # Never leave half a cluster behind: stop whatever this attempt started, keep state for the logs.
        down(layout=layout)
        raise


def _start(layout: Layout, topology: Topology, ports: Ports, bins: Path, port_base: int, started: float,
           audit: bool, late: list[str]) -> dict:
    layout.root.mkdir(parents=True, exist_ok=True)
    certs.ensure_pki(layout.pki)
    _write_kubeconfigs(layout, ports)
    layout.scheduler_config.write_text(yaml.safe_dump(scheduler_config(layout.component_kubeconfig("scheduler"))))
    if audit:
        layout.logs.mkdir(parents=True, exist_ok=True)
        layout.audit_policy.write_text(yaml.safe_dump(audit_policy()))
    start = _starter(layout, ports, bins, audit)
    with console.status("starting etcd"):
        start("etcd")
        _wait("etcd", lambda: _component_healthy("etcd", layout, ports), 30, layout.logs / "etcd.log")
    with console.status("starting kube-apiserver"):
        start("kube-apiserver")
        _wait("kube-apiserver", lambda: _component_healthy("kube-apiserver", layout, ports), 90,
              layout.logs / "kube-apiserver.log")
    identity = cluster_id(layout)
    record = {"ports": ports.all(), "port_base": port_base, "pins": asdict(PINS), "cluster_id": identity,
              "kubeconfig": str(layout.kubeconfig), "topology": asdict(topology), "state_dir": str(layout.root),
              "audit_log": str(layout.audit_log) if audit else None, "joining": late}
    layout.record.write_text(json.dumps(record, indent=2))
    network = network_for(port_base)
    if "coredns" not in late:
        with console.status("starting CoreDNS"):
            _start_dns(layout, network, start)
    # kwok's nodes join with kwok: registered without it, they would go NotReady.
    nodes = [n for n in topology.nodes(network) if n.runtime != KWOK or "kwok" not in late]
    with console.status(f"registering {len(nodes)} nodes, starting controllers, kwok and the process runner"):
        apply_nodes(layout, nodes, identity)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok", "runner"):
            if name not in late:
                start(name)
        _wait("all nodes Ready", lambda: _nodes_ready(layout, [n.name for n in nodes]), 60, layout.logs / "kwok.log")
        if "coredns" not in late:
            # Waited on here, not before the others start: CoreDNS syncs with the apiserver meanwhile.
            _wait("coredns", lambda: _component_healthy("coredns", layout, ports), 60, layout.logs / "coredns.log")
        _wait("default service account", lambda: kubectl(layout, "get", "serviceaccount", "default").returncode == 0,
              60, layout.logs / "kube-controller-manager.log")
    record["up_seconds"] = round(time.monotonic() - started, 2)
    layout.record.write_text(json.dumps(record, indent=2))
    gpus = f"{topology.gpu_nodes} x {topology.gpus_per_node} {topology.gpu_product} via {topology.gpu_runtime}"
    if "kwok" in late and topology.gpu_runtime == KWOK:
        gpus += ", to join with kwok"
    joining = f"; {', '.join(late)} join once built" if late else ""
    console.print(f"[green]Local cluster up[/] in {record['up_seconds']}s: {len(nodes)} nodes ({gpus}){joining}.\n"
                  f"  export KUBECONFIG={layout.kubeconfig}")
    return record


def join_late(layout: Layout | None = None) -> list[str]:
    """Start the components a cluster started without (`up(join_later=True)`) whose builds have since finished;
    return their names. A no-op for a cluster that waits on nothing."""
    layout = layout or Layout()
    with exclusive(layout, "up"):
        record = read_record(layout)
        return _join_built(layout, record) if record and is_up(layout) else []


def _join_built(layout: Layout, record: dict) -> list[str]:
    joining = record.get("joining") or []
    unbuilt = {step.name for step in missing_steps()} if joining else set()
    built = [name for name in joining if LATE_COMPONENTS[name] not in unbuilt]
    if not built:
        return []
    ports = Ports(record["port_base"])
    start = _starter(layout, ports, bin_dir(), audit=bool(record.get("audit_log")))
    network = network_for(record["port_base"])
    if "coredns" in built:
        _start_dns(layout, network, start)
        _wait("coredns", lambda: _component_healthy("coredns", layout, ports), 60, layout.logs / "coredns.log")
    if "kwok" in built:
        nodes = [n for n in Topology(**record["topology"]).nodes(network) if n.runtime == KWOK]
        apply_nodes(layout, nodes, record["cluster_id"])
        start("kwok")
        _wait("kwok's nodes Ready", lambda: _nodes_ready(layout, [n.name for n in nodes]), 60, layout.logs / "kwok.log")
    record["joining"] = [name for name in joining if name not in built]
    layout.record.write_text(json.dumps(record, indent=2))
    return built


def _starter(layout: Layout, ports: Ports, bins: Path, audit: bool):
    """Starts a component by name with the command line `up` gives it (at start, or when it joins later)."""
    commands = component_commands(layout, ports, bins, audit)
    env = _component_env()

    def start(name: str) -> None:
        processes.start(name, commands[name], layout.run, layout.logs, env=env)

    return start


def _start_dns(layout: Layout, network: LoopbackNetwork, start) -> None:
    """CoreDNS's rights and address first (it lists Services at start), its config, then CoreDNS itself."""
    try:
        _kubectl_ok(layout, "apply", "--server-side", "--force-conflicts", "--field-manager", "drafter-local",
                    "-f", "-", input=yaml.safe_dump_all(dns_manifests(network)))
    except ClusterError as exc:
        raise ClusterError(f"{exc}\nFix: the cluster DNS address {network.cluster_dns} must be free in the "
                           "Service range (`kubectl get svc -A`); `drafter-operator cluster down --wipe` starts "
                           "afresh.") from exc
    layout.pod_names.parent.mkdir(parents=True, exist_ok=True)
    if not layout.pod_names.exists():
        layout.pod_names.write_text("")  # the runner fills it once pods run
    layout.corefile.write_text(corefile(network, layout))
    start("coredns")


#: The components `restart` can bounce (the demo's leftovers are not the cluster's own).
RESTARTABLE = COMPONENTS[:COMPONENTS.index("runner") + 1]


def _component_healthy(name: str, layout: Layout, ports: Ports) -> bool:
    """The probe `up` waits on at start and `restart` after a restart."""
    if name == "etcd":
        return _http_ok(f"http://127.0.0.1:{ports.etcd}/health")
    if name == "kube-apiserver":
        return _https_ok(f"https://127.0.0.1:{ports.apiserver}/readyz", layout)
    if name == "coredns":  # ready once its kubernetes plugin has synced with the apiserver
        return _http_ok(f"http://{network_for(ports.base).cluster_dns}:{COREDNS_READY_PORT}/ready")
    # The others have no probe of their own here: running again is what a restart can promise.
    return processes.running_pid(name, layout.run) is not None


def restart(name: str, layout: Layout | None = None, timeout: float = 90) -> float:
    """Stop one component of the running local cluster and start it again with the command line `up`
    gave it (a control-plane restart mid-work, for fault tests); returns the seconds until it is healthy."""
    layout = layout or Layout()
    if name not in RESTARTABLE:
        raise ClusterError(f"cannot restart {name!r}: choose one of {', '.join(RESTARTABLE)}")
    record = read_record(layout)
    if not record or processes.running_pid(name, layout.run) is None:
        raise ClusterError(f"{name} of the local cluster in {layout.root} is not running. "
                           "Fix: `drafter-operator cluster up` first.")
    ports = Ports(record["port_base"])
    # The same flags `up` gave it, the audit log included (its record says whether there is one).
    command = component_commands(layout, ports, bin_dir(), audit=bool(record.get("audit_log")))[name]
    started = time.monotonic()
    processes.stop(name, layout.run, timeout=_stop_timeout(name))
    processes.start(name, command, layout.run, layout.logs, env=_component_env())
    _wait(name, lambda: _component_healthy(name, layout, ports), timeout, layout.logs / f"{name}.log")
    return round(time.monotonic() - started, 2)


def _stop_timeout(name: str) -> float:
    return 15 if name == "runner" else 10  # the runner first stops its pods' processes


def _component_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # components use their own kubeconfigs, never a user's
    return env


def down(wipe: bool = False, layout: Layout | None = None) -> list[str]:
    layout = layout or Layout()
    stopped = []
    from drafter_testbed import kueue, lws  # they import this module

    for addon in (lws, kueue):
        # First, while the apiserver answers: their webhooks (failurePolicy Fail) go with them, or the next `up`
        # of this state would refuse every labelled Job (Kueue) or LeaderWorkerSet pod (LWS) until it is back.
        if processes.running_pid(addon.PROCESS, layout.run) is not None and is_up(layout) and addon.stop(layout):
            stopped.append(addon.PROCESS)
    # Reverse start order: the runner first (it stops its pods' processes), etcd last.
    for name in reversed(COMPONENTS):
        if processes.stop(name, layout.run, timeout=_stop_timeout(name)):
            stopped.append(name)
    if wipe and layout.root.exists():
        shutil.rmtree(layout.root)
    return stopped


def status(layout: Layout | None = None) -> dict:
    layout = layout or Layout()
    record = read_record(layout) or {}
    running = running_components(layout)
    return {
        "state_dir": str(layout.root),
        "kubeconfig": str(layout.kubeconfig) if layout.kubeconfig.exists() else None,
        "healthy": is_up(layout),
        "components": {name: {"pid": running.get(name), "rss_mib": round(processes.rss_kib(running[name]) / 1024, 1)
                              if name in running else None} for name in COMPONENTS},
        "ports": record.get("ports"),
        "cluster_id": record.get("cluster_id"),
        "audit_log": record.get("audit_log"),
        "joining": record.get("joining") or [],
    }


def use_training_python(python: str, layout: Layout | None = None) -> None:
    """Run trainer-image containers with this training environment (read by the runner per container)."""
    if not os.access(python, os.X_OK):
        raise ClusterError(f"{python} is not an executable python: build the training environment with .ci/training-env")
    layout = layout or Layout()
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.training_python.write_text(python + "\n")


def add_nodes(count: int, runtime: str, gpus: int, gpu_product: str, name_prefix: str | None = None,
              layout: Layout | None = None, taints: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """Register `count` more nodes on the running cluster; returns their names once Ready. ``taints``: (key, value)
    NoSchedule taints beside the GPU's, for nodes only some pods may use."""
    layout = layout or Layout()
    with exclusive(layout, "nodes"):
        return _add_nodes(NodeSpec(name="", runtime=runtime, pod_cidr="", gpus=gpus, gpu_product=gpu_product,
                                   taints=taints), count, name_prefix, layout)


def _add_nodes(like: NodeSpec, count: int, name_prefix: str | None, layout: Layout) -> list[str]:
    runtime, gpus, gpu_product = like.runtime, like.gpus, like.gpu_product
    record = read_record(layout)
    if not record or not is_up(layout):
        raise ClusterError("no local cluster is running. Fix: `drafter-operator cluster up` first.")
    if runtime == KWOK and "kwok" in (record.get("joining") or []):
        raise ClusterError("kwok has not joined this cluster yet (it is still being built). Fix: wait for the build "
                           "(`drafter-operator cluster build --only kwok`), then `cluster up` starts it.")
    network = network_for(record["port_base"])
    existing = json.loads(_kubectl_ok(layout, "get", "nodes", "-o", "json"))["items"]
    names = {n["metadata"]["name"] for n in existing}
    used = {network.pod_cidr_index(runtime, n.get("spec", {}).get("podCIDR", "")) for n in existing}
    free = [i for i in range(network.max_nodes(runtime)) if i not in used]
    if len(free) < count:
        raise ClusterError(f"{count} more {runtime} nodes asked for, room for {len(free)} "
                           f"(at most {network.max_nodes(runtime)} per cluster)")
    prefix = name_prefix or f"gpu-{runtime}-extra"
    specs = []
    for index in free[:count]:
        name = next(f"{prefix}-{i}" for i in range(10_000) if f"{prefix}-{i}" not in names)
        names.add(name)
        specs.append(NodeSpec(name=name, runtime=runtime, pod_cidr=network.pod_cidr(runtime, index), gpus=gpus,
                              gpu_product=gpu_product, cpu="224" if gpus else "32", memory="2Ti" if gpus else "128Gi",
                              taints=like.taints))
    apply_nodes(layout, specs, record["cluster_id"])
    _wait("new nodes Ready", lambda: _nodes_ready(layout, [s.name for s in specs]), 60 + count / 5)
    return [s.name for s in specs]
