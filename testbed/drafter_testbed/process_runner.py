"""The local process runner: a minimal kubelet (and kube-proxy) for the local cluster's process nodes.

It starts each pod's containers as host processes (see launch.py for the translation), gives every pod
its own loopback address from its node's podCIDR, runs startup/readiness/liveness probes, reports
Running/Ready/Succeeded/Failed with termination messages through the pod status API, keeps its nodes
alive with leases, and plays kube-proxy by forwarding each Service's loopback ClusterIP to the Ready
pods its selector matches (EndpointSlices refuse loopback addresses; see docs/testbed.md).

Pod DNS, as the kubelet gives it: each pod's processes run in a mount and UTS namespace of the pod's own,
with its hostname and its own /etc/hosts and /etc/resolv.conf (the cluster DNS, CoreDNS) bind-mounted. For
the same reason the Service proxy exists, the runner also publishes the names CoreDNS would read from
EndpointSlices (pods behind headless Services) in a hosts file CoreDNS serves.

Safety: it runs strangers' commands on this host, so it acts only when the apiserver is on
127.0.0.1, its kube-system UID is the one recorded when the local cluster was created, and a node
carries that same identity in an annotation. Anything else is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx
from aiohttp import web
from kubernetes import client, config

from drafter_operator.kube import ApiError, Kube, object_path

from drafter_operator.resources.engine import GPU_PRODUCT_LABEL
from drafter_testbed import launch
from drafter_testbed.emulator.model import ENV_GPU_PRODUCT as EMULATOR_GPU_PRODUCT_ENV
from drafter_testbed.nodes import CLUSTER_ANNOTATION, PROCESS, RUNTIME_LABEL

log = logging.getLogger("drafter.runner")

TICK_SECONDS = 0.5
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10
MAX_BACKOFF_SECONDS = 10.0
TERMINATION_MESSAGE_LIMIT = 4096


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(path: str) -> str:
    """A host file the pod's own copies start from ("" when the host has none)."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""


class RefusedCluster(RuntimeError):
    pass


@dataclass
class ProbeState:
    successes: int = 0
    failures: int = 0
    next_at: float = 0.0
    running: bool = False


@dataclass
class ContainerRun:
    spec: dict
    init: bool = False
    proc: asyncio.subprocess.Process | None = None
    started_at: str | None = None
    started_mono: float = 0.0
    restart_count: int = 0
    started: bool = False  # startup probe passed (or none)
    ready: bool = False
    terminated: dict | None = None  # last termination: exitCode, reason, message, times
    waiting_reason: str | None = "ContainerCreating"
    waiting_message: str | None = None
    restart_at: float = 0.0
    probes: dict[str, ProbeState] = field(default_factory=dict)
    plan: launch.LaunchPlan | None = None
    killed_for: str | None = None

    @property
    def sidecar(self) -> bool:
        """A native sidecar (KEP-753): an init container with restartPolicy Always. It starts in the init order,
        lets the next one start once it has started, runs beside the main containers, is restarted whenever it
        exits, and is stopped after them."""
        return self.init and self.spec.get("restartPolicy") == "Always"


@dataclass(frozen=True)
class PodDNS:
    """What a pod's processes see in their own namespaces: its hostname, /etc/hosts and /etc/resolv.conf
    (None: the host's, for dnsPolicy Default)."""
    hostname: str
    hosts: Path
    resolv: Path | None


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    pod: dict
    ip: str
    directory: Path
    containers: list[ContainerRun]
    start_time: str = field(default_factory=now_iso)
    failed_reason: str | None = None
    failed_message: str | None = None
    last_status: dict | None = None
    deleting_since: float | None = None
    dns: PodDNS | None = None


def phase_of(run: PodRun, restart_policy: str) -> str:
    if run.failed_reason:
        return "Failed"
    main = [c for c in run.containers if not c.init]
    inits = [c for c in run.containers if c.init and not c.sidecar]  # a sidecar's exit fails nothing: it restarts
    if any(c.proc is not None for c in main):
        return "Running"
    if main and all(c.terminated is not None and c.proc is None for c in main) and restart_policy != "Always":
        codes = [c.terminated["exitCode"] for c in main]
        if all(code == 0 for code in codes):
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
    if inits and restart_policy == "Never" and any(
            c.terminated and c.terminated["exitCode"] != 0 for c in inits):
        return "Failed"
    return "Pending" if not any(c.started_at for c in main) else "Running"


class Runner:
    def __init__(self, api: client.ApiClient, state_dir: Path, cluster_id: str, apiserver_port: int,
                 kubelet_port: int = 0, cluster_dns: str | None = None, pod_names_file: Path | None = None):
        self.api = api
        self.kube = Kube(api)
        self.kubelet_port = kubelet_port
        self.state_dir = state_dir
        self.cluster_id = cluster_id
        self.apiserver_port = apiserver_port
        self.pods_dir = state_dir / "pods"
        self.nodes: dict[str, dict] = {}
        self.runs: dict[str, PodRun] = {}
        self.used_ips: set[str] = set()
        self.listeners: dict[tuple[str, int], tuple[asyncio.base_events.Server, dict]] = {}
        self.http = httpx.AsyncClient(timeout=2.0)
        self.stopping = asyncio.Event()
        self.cluster_dns = cluster_dns
        self.pod_names_file = pod_names_file
        self.published_pod_names: str | None = None
        # The unshare that runs pods in namespaces of their own; None where this machine cannot (checked once).
        self.unshare: str | None = None

    # ---- API helpers (the client is synchronous: run it in threads) ----
    async def _raw(self, method: str, path: str, body=None, content_type: str = "application/json",
                   query: dict | None = None):
        return await asyncio.to_thread(self.kube.request, method, path, body, content_type, query)

    def lookup(self, kind: str, namespace: str, name: str) -> dict | None:
        """configMap/secret data for env and volumes (synchronous; called from planning threads)."""
        obj = self.kube.get(object_path("v1", "configmaps" if kind == "configmap" else "secrets", namespace, name))
        if obj is None:
            return None
        if kind == "configmap":
            return dict(obj.get("data") or {})
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}

    # ---- identity and nodes ----
    async def verify_identity(self) -> None:
        host = urlparse(self.api.configuration.host).hostname
        if host not in ("127.0.0.1", "localhost"):
            raise RefusedCluster(f"apiserver {self.api.configuration.host} is not on 127.0.0.1: the local "
                                 "process runner only ever acts for the local cluster it belongs to")
        live = (await self._raw("GET", "/api/v1/namespaces/kube-system"))["metadata"]["uid"]
        if live != self.cluster_id:
            raise RefusedCluster(f"kube-system UID {live} differs from the recorded local cluster "
                                 f"{self.cluster_id}: refusing to run pods for a cluster that is not ours")

    async def refresh_nodes(self) -> None:
        listing = await self._raw("GET", "/api/v1/nodes", query={"labelSelector": f"{RUNTIME_LABEL}={PROCESS}"})
        nodes = {}
        for node in listing["items"]:
            annotations = node["metadata"].get("annotations") or {}
            if annotations.get(CLUSTER_ANNOTATION) != self.cluster_id:
                log.warning("ignoring node %s: its %s does not name this cluster", node["metadata"]["name"],
                            CLUSTER_ANNOTATION)
                continue
            nodes[node["metadata"]["name"]] = node
        self.nodes = nodes

    async def heartbeat(self) -> None:
        while not self.stopping.is_set():
            try:
                await self.refresh_nodes()
                for name in list(self.nodes):
                    await self._renew_lease(name)
                    await self._node_ready(name)
            except Exception:  # noqa: BLE001 - a missed heartbeat is retried on the next beat
                log.exception("heartbeat failed")
            try:
                await asyncio.wait_for(self.stopping.wait(), HEARTBEAT_SECONDS)
            except asyncio.TimeoutError:
                pass

    async def _renew_lease(self, node: str) -> None:
        micro = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        body = {"spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro}}
        try:
            await self._raw("PATCH", path, body, "application/merge-patch+json")
        except ApiError as exc:
            if exc.status != 404:
                raise
            owner = self.nodes[node]["metadata"]
            body["metadata"] = {"name": node, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner["uid"]}]}
            await self._raw("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body)

    async def _node_ready(self, node: str) -> None:
        stamp = now_iso()
        conditions = [
            {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": m,
             "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
            for t, r, m in (("MemoryPressure", "SufficientMemory", "local process runner"),
                            ("DiskPressure", "NoDiskPressure", "local process runner"),
                            ("PIDPressure", "SufficientPID", "local process runner"))
        ]
        previous = {c["type"]: c for c in self.nodes[node].get("status", {}).get("conditions") or []}
        ready_since = previous.get("Ready", {}).get("lastTransitionTime") if previous.get("Ready", {}).get(
            "status") == "True" else stamp
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                           "message": "drafter-operator local process runner is posting ready status",
                           "lastHeartbeatTime": stamp, "lastTransitionTime": ready_since})
        for c in conditions[:-1]:
            c["lastTransitionTime"] = previous.get(c["type"], {}).get("lastTransitionTime", stamp)
        body = {"status": {"conditions": conditions}}
        if self.kubelet_port:
            body["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kubelet_port}}
        await self._raw("PATCH", f"/api/v1/nodes/{node}/status", body, "application/strategic-merge-patch+json")

    # ---- pods ----
    def _allocate_ip(self, node: str) -> str:
        cidr = ipaddress.ip_network(self.nodes[node]["spec"]["podCIDR"])
        for host in list(cidr.hosts())[1:]:  # .1 stays reserved, like a node's gateway
            if str(host) not in self.used_ips:
                self.used_ips.add(str(host))
                return str(host)
        raise RuntimeError(f"no free pod IP in {cidr} on node {node}")

    async def list_pods(self) -> dict[str, dict]:
        pods = {}
        for node in list(self.nodes):
            listing = await self._raw("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})
            for pod in listing["items"]:
                pods[pod["metadata"]["uid"]] = pod
        return pods

    async def sync_pods(self) -> None:
        while not self.stopping.is_set():
            try:
                pods = await self.list_pods()
                for uid, pod in pods.items():
                    run = self.runs.get(uid)
                    if run is None:
                        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                            continue  # finished before this runner started: nothing to run
                        if pod["metadata"].get("deletionTimestamp"):
                            await self._finish_delete(pod)
                            continue
                        run = await self._admit(pod)
                    else:
                        run.pod = pod
                    await self._drive(run)
                for uid in [u for u in self.runs if u not in pods]:
                    await self._forget(self.runs[uid], "pod deleted")
            except Exception:  # noqa: BLE001 - keep serving the other pods; the next tick retries
                log.exception("pod sync failed")
            try:
                await asyncio.wait_for(self.stopping.wait(), TICK_SECONDS)
            except asyncio.TimeoutError:
                pass

    async def _admit(self, pod: dict) -> PodRun:
        meta = pod["metadata"]
        ip = self._allocate_ip(pod["spec"]["nodeName"])
        directory = self.pods_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        directory.mkdir(parents=True, exist_ok=True)
        containers = [ContainerRun(spec=c, init=True) for c in pod["spec"].get("initContainers") or []]
        containers += [ContainerRun(spec=c) for c in pod["spec"]["containers"]]
        run = PodRun(uid=meta["uid"], namespace=meta["namespace"], name=meta["name"], pod=pod, ip=ip,
                     directory=directory, containers=containers)
        self.runs[run.uid] = run
        try:
            await asyncio.to_thread(self._prepare_volumes, run)
        except Exception as exc:  # noqa: BLE001 - report it on the pod, like a kubelet's mount failure
            run.failed_reason, run.failed_message = "VolumeSetupFailed", str(exc)
        try:
            run.dns = await asyncio.to_thread(self._prepare_dns, run)
        except (launch.LaunchError, OSError) as exc:  # a kubelet fails such a pod's sandbox the same way
            run.failed_reason, run.failed_message = "PodDNSSetupFailed", str(exc)
        log.info("admitted pod %s/%s on %s with IP %s", run.namespace, run.name, pod["spec"]["nodeName"], ip)
        return run

    def _prepare_dns(self, run: PodRun) -> PodDNS:
        """The pod's /etc/hosts and /etc/resolv.conf, written once at admission as the kubelet does."""
        hosts = run.directory / "etc-hosts"
        hosts.write_text(launch.hosts_file(run.pod, run.ip, _read("/etc/hosts")))
        content = launch.resolv_conf(run.pod, self.cluster_dns, _read("/etc/resolv.conf"))
        resolv = None
        if content is not None:
            resolv = run.directory / "resolv.conf"
            resolv.write_text(content)
        return PodDNS(launch.uts_hostname(run.pod, socket.gethostname()), hosts, resolv)

    def _in_pod(self, run: PodRun, argv: list[str]) -> list[str]:
        """argv inside the pod's own namespaces, or as it is where this machine cannot make them."""
        if self.unshare is None or run.dns is None:
            return argv
        return launch.in_pod_namespaces(argv, run.dns.hostname, run.dns.hosts, run.dns.resolv, self.unshare)

    async def check_pod_namespaces(self) -> None:
        """Once at start: can a pod get a mount and UTS namespace of its own here? If not, say so once, with
        the fix, and run pods in the host's (no pod hostname, /etc/hosts or cluster DNS inside pods)."""
        unshare = shutil.which("unshare")
        problem = "no `unshare` on PATH" if not unshare else None
        if unshare:
            probe = self.pods_dir / ".namespace-probe"
            probe.mkdir(parents=True, exist_ok=True)
            (probe / "hosts").write_text("127.0.0.1\tlocalhost\n")
            (probe / "resolv.conf").write_text("nameserver 127.0.0.1\n")
            argv = launch.in_pod_namespaces(["true"], "drafter-probe", probe / "hosts", probe / "resolv.conf", unshare)
            try:
                proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                            stderr=asyncio.subprocess.STDOUT,
                                                            stdin=asyncio.subprocess.DEVNULL)
                output, _ = await asyncio.wait_for(proc.communicate(), 10)
                if proc.returncode != 0:
                    problem = output.decode(errors="replace").strip() or f"exit {proc.returncode}"
            except (OSError, asyncio.TimeoutError) as exc:
                problem = str(exc) or type(exc).__name__
        if problem:
            log.warning("pods run WITHOUT namespaces of their own: no pod hostname, /etc/hosts or /etc/resolv.conf "
                        "inside pods, so cluster names (<pod>.<service>, <service>.<namespace>.svc.cluster.local) do "
                        "not resolve there (%s). Fix: run the local cluster as root on Linux with util-linux's "
                        "`unshare` and `mount` (in a container: CAP_SYS_ADMIN, e.g. --privileged)", problem)
            return
        self.unshare = unshare
        log.info("pods run in mount and UTS namespaces of their own; cluster DNS %s", self.cluster_dns or "none")

    def _prepare_volumes(self, run: PodRun) -> None:
        paths = launch.volume_host_paths(run.pod, run.directory, self.state_dir)
        for volume in run.pod["spec"].get("volumes") or []:
            target = paths[volume["name"]]
            if "hostPath" in volume:
                continue
            target.mkdir(parents=True, exist_ok=True)
            files: dict[str, str] = {}
            if "configMap" in volume or "secret" in volume:
                kind = "configmap" if "configMap" in volume else "secret"
                ref = volume.get("configMap") or volume.get("secret")
                data = self.lookup(kind, run.namespace, ref.get("name") or ref.get("secretName")) or {}
                files.update(self._project(data, ref.get("items")))
            for source in (volume.get("projected") or {}).get("sources") or []:
                if "serviceAccountToken" in source:
                    files[source["serviceAccountToken"]["path"]] = self._token(run, source["serviceAccountToken"])
                elif "configMap" in source:
                    data = self.lookup("configmap", run.namespace, source["configMap"]["name"]) or {}
                    files.update(self._project(data, source["configMap"].get("items")))
                elif "downwardAPI" in source:
                    for item in source["downwardAPI"].get("items") or []:
                        files[item["path"]] = launch._field_value(run.pod, item["fieldRef"]["fieldPath"], run.ip)
            for rel, content in files.items():
                path = target / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)

    @staticmethod
    def _project(data: dict[str, str], items: list | None) -> dict[str, str]:
        if not items:
            return dict(data)
        return {item["path"]: data[item["key"]] for item in items if item["key"] in data}

    def _token(self, run: PodRun, source: dict) -> str:
        sa = run.pod["spec"].get("serviceAccountName") or "default"
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
            "audiences": [source["audience"]] if source.get("audience") else [],
            "expirationSeconds": source.get("expirationSeconds", 3607),
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": run.name, "uid": run.uid}}}
        path = object_path("v1", "serviceaccounts", run.namespace, sa, "token")
        return self.kube.request("POST", path, request)["status"]["token"]

    def _training_python(self) -> str | None:
        """The training environment recorded by `drafter-operator cluster training-env` (read per container)."""
        recorded = self.state_dir / "training-python"
        return recorded.read_text().strip() if recorded.exists() else None

    async def _start(self, run: PodRun, container: ContainerRun) -> None:
        try:
            container.plan = await asyncio.to_thread(
                launch.plan, run.pod, container.spec, run.ip, run.directory, self.apiserver_port, self.lookup,
                launch.volume_host_paths(run.pod, run.directory, self.state_dir),
                training_python=self._training_python())
        except (launch.LaunchError, ApiError) as exc:
            container.waiting_reason, container.waiting_message = "CreateContainerConfigError", str(exc)
            if run.pod["spec"].get("restartPolicy", "Always") == "Never" or isinstance(exc, launch.LaunchError):
                run.failed_reason, run.failed_message = "CreateContainerError", str(exc)
            return
        plan = container.plan
        if launch.is_emulated(plan.argv):
            # The emulated engine's outputs may depend on the GPU it "runs" on (emulator/outputs.py), as a real
            # engine's kernels do: it learns it from the node, as a real engine would from the device.
            node = self.nodes.get(run.pod["spec"].get("nodeName") or "") or {}
            product = (node.get("metadata", {}).get("labels") or {}).get(GPU_PRODUCT_LABEL)
            if product:
                plan.env.setdefault(EMULATOR_GPU_PRODUCT_ENV, product)
        plan.termination_path.unlink(missing_ok=True)
        Path(plan.cwd).mkdir(parents=True, exist_ok=True)
        for host_path in plan.path_map.values():
            if host_path != str(plan.termination_path):
                Path(host_path).mkdir(parents=True, exist_ok=True)
        logfile = open(plan.log_path, "ab")
        try:
            container.proc = await asyncio.create_subprocess_exec(
                *self._in_pod(run, plan.argv), env=plan.env, cwd=plan.cwd, stdout=logfile,
                stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            container.waiting_reason, container.waiting_message = "RunContainerError", str(exc)
            run.failed_reason, run.failed_message = "RunContainerError", str(exc)
            return
        finally:
            logfile.close()
        container.started_at, container.started_mono = now_iso(), time.monotonic()
        container.waiting_reason = container.waiting_message = None
        container.terminated = None if container.restart_count == 0 else container.terminated
        container.started = "startupProbe" not in container.spec
        container.ready = False
        container.probes = {}
        log.info("started %s/%s[%s] pid %s: %s", run.namespace, run.name, plan.container, container.proc.pid,
                 launch.describe(plan))

    def _collect_exit(self, run: PodRun, container: ContainerRun) -> None:
        proc = container.proc
        if proc is None or proc.returncode is None:
            return
        code = proc.returncode
        container.proc = None
        plan = container.plan
        message = ""
        if plan and plan.termination_path.exists():
            message = plan.termination_path.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(errors="replace")
        if (not message and code != 0 and plan
                and container.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"):
            lines = plan.log_path.read_bytes()[-2048:].decode(errors="replace").splitlines()[-80:]
            message = "\n".join(lines)
        exit_code = code if code >= 0 else 128 + (-code)
        reason = container.killed_for or ("Completed" if exit_code == 0 else "Error")
        container.terminated = {"exitCode": exit_code, "reason": reason, "startedAt": container.started_at,
                                "finishedAt": now_iso(), **({"message": message} if message else {})}
        container.ready = False
        container.started = False
        container.killed_for = None
        log.info("%s/%s[%s] exited %s (%s)", run.namespace, run.name, container.spec["name"], exit_code, reason)
        policy = run.pod["spec"].get("restartPolicy", "Always")
        if container.sidecar:
            policy = "Always"  # a sidecar restarts whatever the pod's policy
        elif container.init:
            policy = "Never" if policy == "Never" else "OnFailure"
        if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
            backoff = min(MAX_BACKOFF_SECONDS, 2.0 ** container.restart_count)
            container.restart_at = time.monotonic() + backoff
            container.waiting_reason = "CrashLoopBackOff" if exit_code != 0 else None
            container.waiting_message = f"back-off {backoff:.0f}s restarting failed container" if exit_code else None

    async def _drive(self, run: PodRun) -> None:
        if run.pod["metadata"].get("deletionTimestamp"):
            await self._delete(run)
            return
        policy = run.pod["spec"].get("restartPolicy", "Always")
        for container in run.containers:
            self._collect_exit(run, container)
        if not run.failed_reason:
            terminal = phase_of(run, policy) in ("Succeeded", "Failed")  # a finished pod starts nothing again
            for container in run.containers:
                if container.sidecar:
                    if container.proc is None and not terminal and time.monotonic() >= container.restart_at:
                        container.restart_count += 1 if container.terminated else 0
                        await self._start(run, container)
                    if container.proc is not None and container.started:
                        continue  # started: the next init container (or the main ones) may start
                    break
                if container.init:
                    done = container.terminated and container.terminated["exitCode"] == 0 and container.proc is None
                    if done:
                        continue
                    if container.proc is None and time.monotonic() >= container.restart_at and not (
                            container.terminated and policy == "Never"):
                        # A retried init container counts its restarts and keeps its last termination
                        # (lastState) as a kubelet does: the failure stays readable while it runs again.
                        container.restart_count += 1 if container.terminated else 0
                        await self._start(run, container)
                    break  # init containers run one at a time, in order
            else:
                for container in (c for c in run.containers if not c.init):
                    finished = container.terminated is not None and container.proc is None
                    may_restart = policy == "Always" or (
                        policy == "OnFailure" and finished and container.terminated["exitCode"] != 0)
                    if container.proc is None and (not finished or may_restart) and \
                            time.monotonic() >= container.restart_at:
                        container.restart_count += 1 if finished else 0
                        await self._start(run, container)
        for container in run.containers:
            if container.proc is not None and (not container.init or container.sidecar):
                self._schedule_probes(run, container)
        await self._report(run, policy)

    # ---- probes ----
    def _schedule_probes(self, run: PodRun, container: ContainerRun) -> None:
        now = time.monotonic()
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.spec.get(kind)
            if not probe:
                continue
            if kind != "startupProbe" and not container.started:
                continue
            if kind == "startupProbe" and container.started:
                continue
            state = container.probes.setdefault(kind, ProbeState(next_at=container.started_mono + probe.get(
                "initialDelaySeconds", 0)))
            if state.running or now < state.next_at:
                continue
            state.running = True
            state.next_at = now + probe.get("periodSeconds", 10)
            asyncio.create_task(self._probe(run, container, kind, probe, state))
        if "readinessProbe" not in container.spec and container.started:
            container.ready = True

    async def _probe(self, run: PodRun, container: ContainerRun, kind: str, probe: dict, state: ProbeState) -> None:
        try:
            ok = await self._check(run, container, probe)
        finally:
            state.running = False
        if container.proc is None:
            return
        if ok:
            state.successes, state.failures = state.successes + 1, 0
        else:
            state.successes, state.failures = 0, state.failures + 1
        threshold_ok = probe.get("successThreshold", 1)
        threshold_fail = probe.get("failureThreshold", 3)
        if kind == "startupProbe":
            if ok:
                container.started = True
            elif state.failures >= threshold_fail:
                await self._kill(container, "Error", grace=1.0)
        elif kind == "readinessProbe":
            if state.successes >= threshold_ok:
                container.ready = True
            elif state.failures >= threshold_fail:
                container.ready = False
        elif kind == "livenessProbe" and state.failures >= threshold_fail:
            await self._kill(container, "Error", grace=float(probe.get("terminationGracePeriodSeconds") or 2))

    async def _check(self, run: PodRun, container: ContainerRun, probe: dict) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = self._port(container, get["port"])
            scheme = get.get("scheme", "HTTP").lower()
            host = get.get("host") or run.ip
            url = f"{scheme}://{host}:{port}{get.get('path', '/')}"
            try:
                resp = await self.http.get(url, timeout=timeout, headers={
                    h["name"]: h["value"] for h in get.get("httpHeaders") or []})
                return 200 <= resp.status_code < 400
            except httpx.HTTPError:
                return False
        if "tcpSocket" in probe:
            port = self._port(container, probe["tcpSocket"]["port"])
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(run.ip, port), timeout)
                writer.close()
                return True
            except (OSError, asyncio.TimeoutError):
                return False
        if "exec" in probe:
            try:
                argv = self._in_pod(run, launch.host_argv(probe["exec"]["command"]))
                env = container.plan.env if container.plan else None
                proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.DEVNULL,
                                                            stderr=asyncio.subprocess.DEVNULL)
                return await asyncio.wait_for(proc.wait(), timeout) == 0
            except (launch.LaunchError, OSError, asyncio.TimeoutError):
                return False
        return True

    @staticmethod
    def _port(container: ContainerRun, port) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for declared in container.spec.get("ports") or []:
            if declared.get("name") == port:
                return int(declared["containerPort"])
        raise ValueError(f"named port {port!r} is not declared by container {container.spec['name']!r}")

    # ---- stopping ----
    async def _kill(self, container: ContainerRun, reason: str, grace: float) -> None:
        proc = container.proc
        if proc is None or proc.returncode is not None:
            return
        container.killed_for = reason
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except asyncio.TimeoutError:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
        # The whole process group goes: the emulator or a shell may have children of its own.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    async def _delete(self, run: PodRun) -> None:
        grace = float(run.pod["spec"].get("terminationGracePeriodSeconds", 30))
        deadline_grace = min(grace, float(run.pod["metadata"].get("deletionGracePeriodSeconds", grace)))
        # As a kubelet does: the main containers first, then the sidecars, so a sidecar sees what they did last.
        started = time.monotonic()
        await asyncio.gather(*(self._kill(c, "Completed", deadline_grace) for c in run.containers if not c.sidecar))
        await asyncio.gather(*(self._kill(c, "Completed", max(deadline_grace - (time.monotonic() - started), 2.0))
                               for c in run.containers if c.sidecar))
        for c in run.containers:
            self._collect_exit(run, c)
        # As a kubelet does (KEP-3329): a deleted pod reaches a terminal phase before its object goes. The Job
        # controller of a Job with a podFailurePolicy replaces a pod only once it is terminal.
        await self._report(run, run.pod["spec"].get("restartPolicy", "Always"), deleting=True)
        await self._finish_delete(run.pod)
        await self._forget(run, "deleted")

    async def _finish_delete(self, pod: dict) -> None:
        """What a kubelet does last: delete the pod object for good, guarded by its UID."""
        meta = pod["metadata"]
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}}
        try:
            await self._raw("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    async def _forget(self, run: PodRun, why: str) -> None:
        await asyncio.gather(*(self._kill(c, "Completed", 2.0) for c in run.containers))
        self.runs.pop(run.uid, None)
        self.used_ips.discard(run.ip)
        shutil.rmtree(run.directory, ignore_errors=True)
        log.info("forgot pod %s/%s (%s)", run.namespace, run.name, why)

    # ---- status ----
    def _container_status(self, c: ContainerRun) -> dict:
        status = {"name": c.spec["name"], "image": c.spec.get("image", ""), "imageID": "",
                  "containerID": f"drafter-process://{c.proc.pid}" if c.proc else "",
                  "ready": c.ready and c.proc is not None, "restartCount": c.restart_count,
                  "started": c.started and c.proc is not None}
        if c.proc is not None:
            status["state"] = {"running": {"startedAt": c.started_at}}
        elif c.waiting_reason or (c.terminated is None):
            status["state"] = {"waiting": {"reason": c.waiting_reason or "ContainerCreating",
                                           **({"message": c.waiting_message} if c.waiting_message else {})}}
        else:
            status["state"] = {"terminated": c.terminated}
        if c.terminated and "running" in status["state"] or (c.terminated and "waiting" in status["state"]):
            status["lastState"] = {"terminated": c.terminated}
        return status

    async def _report(self, run: PodRun, policy: str, deleting: bool = False) -> None:
        phase = phase_of(run, policy)
        main = [c for c in run.containers if not c.init]
        if deleting and phase not in ("Succeeded", "Failed"):
            succeeded = bool(main) and all(c.terminated and c.terminated["exitCode"] == 0 for c in main)
            phase = "Succeeded" if succeeded and policy != "Always" else "Failed"
        if phase in ("Succeeded", "Failed") and any(c.proc is not None for c in run.containers):
            # As a kubelet's status manager does: a pod is written terminal only once none of its containers
            # runs. Its main containers finished; what still runs (its sidecars, or what a failure stops) is
            # stopped first, a sidecar with the pod's grace period to finish its last work.
            grace = float(run.pod["spec"].get("terminationGracePeriodSeconds", 30))
            await asyncio.gather(*(self._kill(c, "Completed", grace if c.sidecar else 1.0) for c in run.containers))
            for c in run.containers:
                self._collect_exit(run, c)
        inits = [c for c in run.containers if c.init]
        inits_done = all(c.proc is not None and c.started if c.sidecar else c.terminated and c.terminated["exitCode"] == 0
                         for c in inits)
        sidecars = [c for c in inits if c.sidecar]
        all_ready = bool(main) and all(c.ready and c.proc is not None for c in main + sidecars)
        previous = {c["type"]: c for c in run.pod.get("status", {}).get("conditions") or []}

        def condition(kind: str, ok: bool, reason: str | None = None) -> dict:
            status = "True" if ok else "False"
            old = previous.get(kind)
            since = old["lastTransitionTime"] if old and old.get("status") == status and old.get(
                "lastTransitionTime") else now_iso()
            return {"type": kind, "status": status, "lastTransitionTime": since, "lastProbeTime": None,
                    **({"reason": reason} if reason and not ok else {})}

        conditions = [condition("PodReadyToStartContainers", True), condition("Initialized", inits_done,
                                                                                "ContainersNotInitialized"),
                      condition("ContainersReady", all_ready, "ContainersNotReady"),
                      condition("Ready", all_ready, "ContainersNotReady")]
        if "PodScheduled" in previous:
            conditions.append(previous["PodScheduled"])
        status = {
            "phase": phase, "podIP": run.ip, "podIPs": [{"ip": run.ip}], "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}], "startTime": run.start_time, "conditions": conditions,
            "containerStatuses": [self._container_status(c) for c in main],
            "qosClass": run.pod.get("status", {}).get("qosClass", "BestEffort"),
        }
        if inits:
            status["initContainerStatuses"] = [self._container_status(c) for c in inits]
        if run.failed_reason:
            status["reason"], status["message"] = run.failed_reason, run.failed_message
        comparable = json.dumps(status, sort_keys=True)
        if run.last_status == comparable:
            return
        try:
            await self._raw("PATCH", f"/api/v1/namespaces/{run.namespace}/pods/{run.name}/status",
                            {"status": status}, "application/merge-patch+json")
            run.last_status = comparable
        except ApiError as exc:
            if exc.status != 404:
                raise

    # ---- service proxy ----
    async def proxy_services(self) -> None:
        while not self.stopping.is_set():
            try:
                await self._sync_listeners()
            except Exception:  # noqa: BLE001
                log.exception("service proxy sync failed")
            try:
                await asyncio.wait_for(self.stopping.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def _sync_listeners(self) -> None:
        services = (await self._raw("GET", "/api/v1/services"))["items"]
        wanted: dict[tuple[str, int], dict] = {}
        for svc in services:
            ip = svc["spec"].get("clusterIP")
            if not ip or ip == "None" or not svc["spec"].get("selector"):
                continue
            if not ipaddress.ip_address(ip).is_loopback:
                continue  # never listen on anything but loopback
            for port in svc["spec"].get("ports") or []:
                if port.get("protocol", "TCP") == "TCP":
                    wanted[(ip, port["port"])] = {"namespace": svc["metadata"]["namespace"],
                                                  "selector": svc["spec"]["selector"],
                                                  "targetPort": port.get("targetPort", port["port"])}
        for key in [k for k in self.listeners if k not in wanted]:
            server, _ = self.listeners.pop(key)
            server.close()
        # The routes first, and whatever the names' publication meets never holds them back: a selector that moved
        # (a BlueGreen switch) must move the connections that follow at once, as kube-proxy's rules do.
        for key, route in wanted.items():
            if key in self.listeners:
                self.listeners[key][1].update(route)
                continue
            route = dict(route)
            try:
                server = await asyncio.start_server(
                    lambda r, w, route=route: self._forward(r, w, route), host=key[0], port=key[1])
            except OSError as exc:
                log.warning("cannot listen on %s:%s for a Service: %s", key[0], key[1], exc)
                continue
            self.listeners[key] = (server, route)
        try:
            await asyncio.to_thread(self._publish_pod_names, services)
        except Exception:  # noqa: BLE001 - one pod's odd record must not stop the next sync
            log.exception("publishing the pods' names for CoreDNS failed")

    def _publish_pod_names(self, services: list[dict]) -> None:
        """Write the names of pods behind headless Services for CoreDNS (its hosts plugin rereads the file
        every second), replacing the file whole so that CoreDNS never reads half of it."""
        if self.pod_names_file is None:
            return
        pods = []
        for run in list(self.runs.values()):
            if phase_of(run, run.pod["spec"].get("restartPolicy", "Always")) in ("Succeeded", "Failed"):
                continue  # an endpoint is never a finished pod
            main = [c for c in run.containers if not c.init]
            pods.append((run.pod, run.ip, bool(main) and all(c.ready and c.proc for c in main)))
        text = launch.pod_name_records(services, pods)
        if text == self.published_pod_names:
            return
        self.pod_names_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.pod_names_file.with_name(self.pod_names_file.name + ".partial")
        partial.write_text(text)
        os.replace(partial, self.pod_names_file)
        self.published_pod_names = text

    def _backends(self, route: dict) -> list[tuple[str, int]]:
        backends = []
        for run in self.runs.values():
            labels = run.pod["metadata"].get("labels") or {}
            if run.namespace != route["namespace"] or any(labels.get(k) != v for k, v in route["selector"].items()):
                continue
            main = [c for c in run.containers if not c.init]
            if not main or not all(c.ready and c.proc for c in main) or run.pod["metadata"].get("deletionTimestamp"):
                continue
            target = route["targetPort"]
            try:
                port = next(self._port(c, target) for c in main
                            if isinstance(target, int) or any(p.get("name") == target for p in c.spec.get("ports") or []))
            except (StopIteration, ValueError):
                continue
            backends.append((run.ip, port))
        return sorted(backends)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: dict) -> None:
        backends = self._backends(route)
        if not backends:
            writer.close()  # kube-proxy rejects connections to a Service without ready endpoints
            return
        route["next"] = (route.get("next", -1) + 1) % len(backends)
        host, port = backends[route["next"]]
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                try:
                    dst.close()
                except RuntimeError:
                    pass

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    # ---- kubelet API: `kubectl logs` ----
    async def serve_kubelet_api(self) -> web.AppRunner | None:
        """HTTPS on 127.0.0.1 for the apiserver's log requests, client certificates from our CA only."""
        if not self.kubelet_port:
            return None
        pki = self.state_dir / "pki"
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "runner-serving.crt"), str(pki / "runner-serving.key"))
        context.verify_mode = ssl.CERT_REQUIRED
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.kubelet_port, ssl_context=context).start()
        return runner

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        namespace, pod, name = (request.match_info[k] for k in ("namespace", "pod", "container"))
        run = next((r for r in self.runs.values() if r.namespace == namespace and r.name == pod), None)
        container = next((c for c in run.containers if c.spec["name"] == name), None) if run else None
        if container is None or container.plan is None or not container.plan.log_path.exists():
            raise web.HTTPNotFound(text=f"no logs for container {name!r} of pod {namespace}/{pod} on this node")
        data = await asyncio.to_thread(container.plan.log_path.read_bytes)  # engine logs can be large
        if "tailLines" in request.query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(request.query["tailLines"]):]) if int(request.query["tailLines"]) else b""
        if "limitBytes" in request.query:
            data = data[: int(request.query["limitBytes"])]
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(data)
        if request.query.get("follow") in ("true", "1"):
            offset = container.plan.log_path.stat().st_size
            while container.proc is not None and not self.stopping.is_set():
                await asyncio.sleep(0.5)
                size = container.plan.log_path.stat().st_size
                if size > offset:
                    with open(container.plan.log_path, "rb") as handle:
                        handle.seek(offset)
                        await response.write(handle.read(size - offset))
                    offset = size
        await response.write_eof()
        return response

    # ---- main ----
    async def run(self) -> None:
        await self.verify_identity()
        await self.refresh_nodes()
        await self.check_pod_namespaces()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        kubelet_api = await self.serve_kubelet_api()
        log.info("local process runner for cluster %s: nodes %s", self.cluster_id, sorted(self.nodes))
        await asyncio.gather(self.heartbeat(), self.sync_pods(), self.proxy_services())
        if kubelet_api:
            await kubelet_api.cleanup()
        await asyncio.gather(*(self._kill(c, "Completed", 5.0) for r in self.runs.values() for c in r.containers))
        for server, _ in self.listeners.values():
            server.close()
        await self.http.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drafter-operator-local-runner")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--kubelet-port", type=int, default=0, help="HTTPS port of the kubelet API (kubectl logs)")
    parser.add_argument("--cluster-dns", default=None,
                        help="the cluster DNS address of pods with dnsPolicy ClusterFirst")
    parser.add_argument("--pod-names-file", default=None, help="hosts file the runner writes for CoreDNS: the "
                                                               "names of pods behind headless Services")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    state_dir = Path(args.state_dir)
    record = json.loads((state_dir / "cluster.json").read_text())
    api = config.new_client_from_config(config_file=args.kubeconfig)
    runner = Runner(api, state_dir, record["cluster_id"], record["ports"]["apiserver"], args.kubelet_port,
                    args.cluster_dns, Path(args.pod_names_file) if args.pod_names_file else None)
    try:
        asyncio.run(runner.run())
    except RefusedCluster as exc:
        log.error("refusing to run: %s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
