"""Kueue v0.17.0, built from its Go module and run for real beside the local cluster: gang admission of Jobs.

`build` compiles the `kueue` manager into the toolchain's bin directory; `install` puts it into a running
local cluster (CRDs, a Configuration file, a webhook serving certificate from the cluster CA, webhook
configurations that call 127.0.0.1, a kubeconfig) and starts it as a host process; `stop` stops it. The
builders (`resource_flavor`, `cluster_queue`, `local_queue`) write the objects a test or a demo needs.

Kueue here differs from a Kueue installed with its manifests only where the local cluster forces it, and each
difference is commented where it is made: no Service can reach it (webhooks and CRD conversion call
127.0.0.1 by URL), no cert-manager (the cluster CA signs its serving certificate), only the `batch/job`
integration and its webhooks, no visibility API server, and a private mount namespace for the one
certificate path Kueue hard-codes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import yaml

from drafter_testbed import cluster, host_manager, processes
from drafter_testbed.build import BuildError, _run, check_go
from drafter_testbed.host_manager import HostManagerError, loopback_client_config
from drafter_testbed.versions import PINS, bin_dir

MODULE = "sigs.k8s.io/kueue"
VERSION = PINS.kueue
#: The API Kueue v0.17.0 stores and its controllers use (its CRDs serve v1beta1 too, converted by its webhook).
API_VERSION = "kueue.x-k8s.io/v1beta2"
#: The Configuration API its `--config` file is decoded with (apis/config/v1beta2, strict decoding).
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
#: A Job carrying this label is Kueue's to admit; without it Kueue leaves the Job alone
#: (manageJobsWithoutQueueName: false).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The process name: its pid file, its log (<state>/logs/kueue.log). `cluster down` stops it once it is in
#: cluster.COMPONENTS.
PROCESS = "kueue"
#: Kueue's namespace (its Configuration's default); it keeps nothing there with internal certificates off,
#: but some controllers look it up, so it exists as on a real install.
NAMESPACE = "kueue-system"
#: Kueue reads its metrics server's certificate from this path when internal certificate management is
#: off, hard-coded in cmd/kueue/main.go (no flag, no setting), and exits if the files are missing.
METRICS_CERT_PATH = Path("/etc/kueue/metrics/certs")
#: Integrations enabled; only their webhooks (and Kueue's own API's) are registered with the apiserver.
FRAMEWORKS = ("batch/job",)
#: The API groups whose webhooks are kept: Kueue's own objects and Jobs. Every other webhook of the upstream
#: manifests serves an integration that is off (pods, Deployments, StatefulSets, Kubeflow, Ray, ...): with
#: failurePolicy Fail, registering them would route every pod and Deployment in the cluster through Kueue.
WEBHOOK_GROUPS = frozenset({"kueue.x-k8s.io", "batch"})
#: The names of the two webhook configurations, prefixed as Kueue's kustomize overlay prefixes them.
WEBHOOK_PREFIX = "kueue-"
FIELD_MANAGER = "drafter-kueue"


class KueueError(HostManagerError):
    """A Kueue step failed; the message names the step and the fix."""


# ---------------------------------------------------------------------------------------------- build


def stamp(version: str = VERSION) -> str:
    """Marks a bin directory's kueue as this version (outside the toolchain's cache key, like crane's)."""
    return f".kueue-{version}"


def ldflags(version: str = VERSION) -> str:
    """Kueue's Makefile sets its version package; without it the manager logs gitVersion v0.0.0-main."""
    return f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}"


def source_dir(version: str = VERSION) -> Path:
    """The module's source in the Go module cache (downloaded once): its CRDs and webhook manifests."""
    return host_manager.source_dir(MODULE, version)


def build(version: str = VERSION, out: Path | None = None) -> Path:
    """`kueue` (cmd/kueue, the manager) into the toolchain's bin directory; skipped when its stamp is there.
    Returns the binary's path."""
    out = out or bin_dir()
    binary = out / "kueue"
    if binary.is_file() and (out / stamp(version)).is_file():
        return binary
    check_go()
    out.mkdir(parents=True, exist_ok=True)
    replaces = host_manager.go_mod_replaces((source_dir(version) / "go.mod").read_text())
    if replaces:
        raise BuildError(f"step 'kueue {version}': its go.mod has replace directives ({replaces[:3]}), so "
                         "`go install` refuses it. Fix: build it through a wrapper module (build.py's "
                         "_wrapper_module), requiring the module and copying those replaces.")
    env = dict(os.environ, CGO_ENABLED="0", GOBIN=str(out), GOFLAGS="", GOWORK="off")
    _run(f"kueue {version}", ["go", "install", "-v", "-trimpath", "-ldflags", ldflags(version),
                              f"{MODULE}/cmd/kueue@{version}"], out, env,
         "check network access to the Go module proxy and the Go version (Kueue v0.17.0 declares go 1.25)")
    (out / stamp(version)).write_text(f"{version}\n")
    return binary


# -------------------------------------------------------------------------------------- configuration


#: Where Kueue's listeners start above the cluster's port base (beyond the eight ports cluster.Ports takes).
PORT_OFFSET = 20


def ports_of(base: int) -> host_manager.ManagerPorts:
    """Kueue's listeners on 127.0.0.1 for a cluster of port base ``base``."""
    return host_manager.ManagerPorts(base, PORT_OFFSET)


def kueue_layout(layout: cluster.Layout) -> host_manager.ManagerLayout:
    return host_manager.ManagerLayout(layout.root / "kueue")


def configuration(ports: host_manager.ManagerPorts, cert_dir: Path, frameworks: tuple[str, ...] = FRAMEWORKS) -> dict:
    """Kueue's Configuration file (config.kueue.x-k8s.io/v1beta2, decoded strictly: an unknown field stops it)."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "namespace": NAMESPACE,
        # One Kueue per local cluster; a Lease would only add requests and a start-up delay.
        "leaderElection": {"leaderElect": False},
        # No cert-manager and no Service here: the cluster CA signs its certificate (serving_certificate) and
        # the webhook configurations carry that CA (webhook_configurations).
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        # Only Jobs that name a LocalQueue are Kueue's: every other Job of the cluster runs as without Kueue.
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(frameworks)},
        # Kueue's own manifests' rate limits (the Configuration's defaults are 20/30).
        "clientConnection": {"qps": 50, "burst": 100},
        # The visibility API server (beta, on by default) would listen on all addresses, port 8082, with a
        # certificate read from /visibility: off, as nothing here reads pending workloads through it.
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(manifests: list[dict], port: int, ca_bundle: bytes,
                           groups: frozenset[str] = WEBHOOK_GROUPS) -> list[dict]:
    """Kueue's webhook configurations (config/components/webhook/manifests.yaml) as this cluster needs them:
    each webhook calls `https://127.0.0.1:<port><path>` with the cluster CA as its caBundle (the apiserver
    cannot reach a Service here), only the webhooks of `groups` are kept, and the Job webhooks see only
    Jobs that name a LocalQueue (see job_object_selector)."""
    result = []
    for manifest in manifests:
        if not manifest or manifest.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        kept = []
        for hook in manifest.get("webhooks", []):
            hook_groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if not hook_groups or not hook_groups <= groups:
                continue
            hook = json.loads(json.dumps(hook))  # a copy: the caller's manifests stay as read
            hook["clientConfig"] = loopback_client_config(hook["clientConfig"], port, ca_bundle)
            if "batch" in hook_groups:
                hook["objectSelector"] = job_object_selector()
            kept.append(hook)
        out = {"apiVersion": manifest["apiVersion"], "kind": manifest["kind"],
               "metadata": {"name": WEBHOOK_PREFIX + manifest["metadata"]["name"]}, "webhooks": kept}
        result.append(out)
    return result


def job_object_selector() -> dict:
    """Kueue's Job webhooks (failurePolicy Fail) see only Jobs that carry the queue label, so the cluster's
    other Jobs (the operator's training stages, other tests') never wait on Kueue or fail while it is down.
    The cost: LocalQueueDefaulting (a namespace's LocalQueue `default` given to unlabelled Jobs) cannot apply."""
    return {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}


def conversion_crds(kustomization: str) -> list[str]:
    """The CRDs (plural names) Kueue's own CRD kustomization gives a conversion webhook: each `patches/
    webhook_in_<plural>.yaml` it applies (a commented-out line is not applied). Derived from the module, not
    listed by hand: a CRD serving v1beta1 and v1beta2 without it would hand out v1beta2 data as v1beta1."""
    return sorted(re.findall(r"^\s*-\s*path:\s*patches/webhook_in_(\S+)\.yaml\s*$", kustomization, flags=re.M))


def with_conversion(crd: dict, port: int, ca_bundle: bytes) -> dict:
    """A CRD whose versions the apiserver converts by calling Kueue's /convert on 127.0.0.1."""
    crd = json.loads(json.dumps(crd))
    crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
        "clientConfig": loopback_client_config({"service": {"path": "/convert"}}, port, ca_bundle),
        "conversionReviewVersions": ["v1"]}}
    return crd


def crds(source: Path, port: int, ca_bundle: bytes) -> list[dict]:
    """Every CRD of config/components/crd/bases, with conversion by webhook where Kueue's kustomization sets it."""
    converted = set(conversion_crds((source / "config/components/crd/kustomization.yaml").read_text()))
    out = []
    for path in sorted((source / "config/components/crd/bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out.append(with_conversion(crd, port, ca_bundle) if crd["spec"]["names"]["plural"] in converted else crd)
    return out


def command(binary: Path, config: Path, cert_dir: Path, unshare: str = "unshare") -> list[str]:
    """Kueue's command line, in a private mount namespace where cert_dir is bind-mounted at METRICS_CERT_PATH
    (the host's directory stays empty, and two clusters' Kueues each see their own certificate). unshare
    execs (no --fork), so the recorded pid is Kueue's own."""
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script, "kueue-mounts",
            str(cert_dir), str(METRICS_CERT_PATH), str(binary), "--config", str(config), "--zap-log-level", "info"]


def serving_certificate(pki: Path, cert_dir: Path) -> None:
    """tls.crt/tls.key for 127.0.0.1 signed by the cluster CA, kept when present (host_manager.serving_certificate)."""
    host_manager.serving_certificate(pki, cert_dir, "kueue-webhook")


# ---------------------------------------------------------------------------------------------- builders


def resource_flavor(name: str) -> dict:
    """A ResourceFlavor with no node labels: it stands for every node (quota is what gates admission here)."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}}


def cluster_queue(name: str, flavor: str, quotas: dict[str, str], namespace_selector: dict | None = None) -> dict:
    """A ClusterQueue with one flavor and a nominal quota per resource, e.g. {"nvidia.com/gpu": "1", "cpu": "8",
    "memory": "32Gi"}. A Job requesting a resource the queue does not cover is never admitted, so `quotas`
    must name every resource its Jobs request. Every namespace may use it unless `namespace_selector` says."""
    resources = sorted(quotas)
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": namespace_selector if namespace_selector is not None else {},
                     "resourceGroups": [{"coveredResources": resources, "flavors": [
                         {"name": flavor, "resources": [{"name": r, "nominalQuota": quotas[r]} for r in resources]}]}]}}


def local_queue(namespace: str, name: str, cluster_queue: str) -> dict:
    """The namespaced queue Jobs name in their `kueue.x-k8s.io/queue-name` label."""
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue}}


def queued_job(job: dict, queue: str) -> dict:
    """A Job as Kueue admits it: labelled with its LocalQueue and created suspended (Kueue unsuspends it)."""
    job = json.loads(json.dumps(job))
    job.setdefault("metadata", {}).setdefault("labels", {})[QUEUE_LABEL] = queue
    job.setdefault("spec", {})["suspend"] = True
    return job


def condition(obj: dict, kind: str) -> dict | None:
    """The status condition of type `kind` (a Workload's QuotaReserved, Admitted, Finished), or None."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


# ------------------------------------------------------------------------------------- install and stop


def _readyz(ports: host_manager.ManagerPorts) -> bool:
    return host_manager.readyz(ports.health)


def _webhooks_answer(layout: cluster.Layout) -> bool:
    """A server-side dry run of a ResourceFlavor passes Kueue's mutating and validating webhooks."""
    return host_manager.dry_run_passes(layout, resource_flavor("drafter-kueue-probe"))


def running(layout: cluster.Layout | None = None) -> int | None:
    """The pid of this cluster's Kueue, or None."""
    layout = layout or cluster.Layout()
    return processes.running_pid(PROCESS, layout.run)


def install(layout: cluster.Layout | None = None, version: str = VERSION, timeout: float = 120) -> dict:
    """Build (once), then install and start Kueue in the running local cluster and wait until its readyz
    answers and the apiserver reaches its webhooks. A no-op when it runs already. Returns what it did."""
    layout = layout or cluster.Layout()
    started = time.monotonic()
    record = host_manager.running_cluster(layout, "kueue install")
    ports = ports_of(record["port_base"])
    klayout = kueue_layout(layout)
    with cluster.exclusive(layout, "kueue"):
        pid = running(layout)
        if pid is not None:
            if host_manager.answers(lambda: _readyz(ports)):
                return {"pid": pid, "ports": ports.all(), "started": False, "seconds": 0.0}
            raise KueueError(f"step 'kueue install': Kueue runs (pid {pid}) but its readyz on 127.0.0.1:"
                             f"{ports.health} does not answer. Fix: read {layout.logs / 'kueue.log'}; "
                             "`drafter_testbed.kueue.stop()` then install again.")
        host_manager.check_ports_free("kueue ports", ports.all())
        binary = build(version)
        source = source_dir(version)
        unshare = _check_mounts()
        ca = (layout.pki / "ca.crt").read_bytes()
        serving_certificate(layout.pki, klayout.certs)
        klayout.root.mkdir(parents=True, exist_ok=True)
        klayout.config.write_text(yaml.safe_dump(configuration(ports, klayout.certs)))
        # The admin identity (system:masters), not Kueue's own ClusterRoles (config/components/rbac): what this
        # cluster shows is admission, not RBAC.
        host_manager.write_admin_kubeconfig(layout, record, klayout.kubeconfig)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        definitions = crds(source, ports.webhook, ca)
        host_manager.apply(layout, "kueue CRDs", definitions + [namespace], FIELD_MANAGER,
                           f"the CRDs are read from {source}/config/components/crd/bases; `cluster down --wipe` "
                           "starts afresh")
        host_manager.wait_established(layout, "kueue CRDs established", definitions, timeout)
        manifests = list(yaml.safe_load_all((source / "config/components/webhook/manifests.yaml").read_text()))
        host_manager.apply(layout, "kueue webhook configurations", webhook_configurations(manifests, ports.webhook, ca),
                           FIELD_MANAGER, "read the apiserver's message above")
        env = dict(os.environ, KUBECONFIG=str(klayout.kubeconfig))
        pid = processes.start(PROCESS, command(binary, klayout.config, klayout.certs, unshare), layout.run,
                              layout.logs, env=env)
        log = layout.logs / f"{PROCESS}.log"
        alive = lambda: running(layout) is not None  # noqa: E731
        hint = "`drafter_testbed.kueue.stop()`"
        try:
            host_manager.wait("kueue readyz", lambda: _readyz(ports), timeout, log, hint, alive)
            host_manager.wait("kueue webhooks", lambda: _webhooks_answer(layout), timeout, log, hint, alive)
        except BaseException:
            stop(layout)
            raise
    return {"pid": pid, "ports": ports.all(), "started": True, "seconds": round(time.monotonic() - started, 2)}


def _check_mounts() -> str:
    """unshare and the empty mount point METRICS_CERT_PATH (created once on the host; it stays empty)."""
    unshare = shutil.which("unshare")
    try:
        METRICS_CERT_PATH.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KueueError(f"step 'kueue metrics certificate': cannot create the mount point {METRICS_CERT_PATH} "
                         f"({exc}). Fix: run as root, or create it once: sudo mkdir -p {METRICS_CERT_PATH}") from exc
    if not unshare or os.geteuid() != 0:
        raise KueueError("step 'kueue metrics certificate': Kueue reads its metrics certificate from "
                         f"{METRICS_CERT_PATH} only; it is bind-mounted there in a private mount namespace, which "
                         "needs `unshare` (util-linux) and root. Fix: install util-linux and run as root.")
    return unshare


def stop(layout: cluster.Layout | None = None) -> bool:
    """Stop this cluster's Kueue and unregister its webhooks (failurePolicy Fail: while nothing answers them,
    every labelled Job and every Kueue object would be refused). True if a Kueue process was stopped. CRDs
    and queues stay: the next install finds them."""
    layout = layout or cluster.Layout()
    stopped = processes.stop(PROCESS, layout.run)
    if cluster.is_up(layout):
        cluster.kubectl(layout, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                        f"{WEBHOOK_PREFIX}mutating-webhook-configuration",
                        f"{WEBHOOK_PREFIX}validating-webhook-configuration", "--ignore-not-found")
    return stopped
