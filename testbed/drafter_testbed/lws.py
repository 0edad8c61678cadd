"""LeaderWorkerSet (LWS) v0.9.0, built from its Go module and run for real beside the local cluster: one
serving replica as a group of pods (a leader and its workers) that is created, addressed and restarted as one.

`build` compiles LWS's manager into the toolchain's bin directory; `install` puts it into a running local
cluster (its release manifests' CRDs and webhook configurations, rendered from the module by kustomize, a
Configuration file, a webhook serving certificate from the cluster CA, a kubeconfig) and starts it as a host
process; `stop` stops it. `leader_worker_set` writes the object a test needs.

LWS here differs from LWS installed with its release manifests (config/default) only where the local cluster
forces it, and each difference is commented where it is made: no Service can reach it (webhooks and CRD
conversion call 127.0.0.1 by URL), no internal certificate rotation (the cluster CA signs its serving
certificate), one manager without leader election, the admin identity instead of its RBAC, and listeners on
127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import yaml

from drafter_testbed import cluster, host_manager, processes
from drafter_testbed.build import BuildError, _go_env, _run, _wrapper_module, check_go
from drafter_testbed.host_manager import HostManagerError, loopback_client_config
from drafter_testbed.versions import PINS, bin_dir, toolchain_dir

MODULE = "sigs.k8s.io/lws"
VERSION = PINS.lws
#: The manager's main package (cmd/main.go); `go install` would name its binary `cmd`.
MAIN_PACKAGE = f"{MODULE}/cmd"
#: The API of LeaderWorkerSet objects (the only version its CRD serves).
API_VERSION = "leaderworkerset.x-k8s.io/v1"
#: The Configuration API its `--config` file is decoded with (api/config/v1alpha1, strict decoding).
CONFIG_API_VERSION = "config.lws.x-k8s.io/v1alpha1"
#: The labels LWS puts on every pod of a group (api/leaderworkerset/v1/leaderworkerset_types.go).
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: The environment its pod webhook puts first in every container (pkg/utils/pod/pod_utils.go, AddLWSVariables).
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
#: The process name: its pid file, its log (<state>/logs/lws.log). `cluster down` stops it (cluster.COMPONENTS).
PROCESS = "lws"
#: The release manifests' namespace; LWS keeps nothing there here, but it is its leader-election namespace
#: (utils.GetOperatorNamespace's fallback off-cluster), so it exists as on a real install.
NAMESPACE = "lws-system"
#: The kustomization the release manifests are rendered from (namespace lws-system, name prefix lws-).
RELEASE_KUSTOMIZATION = "config/default"
#: The kinds of the release manifests installed here; the rest run LWS as a Deployment (below, `release_objects`).
INSTALLED_KINDS = ("Namespace", "CustomResourceDefinition", "MutatingWebhookConfiguration",
                   "ValidatingWebhookConfiguration")
FIELD_MANAGER = "drafter-lws"


class LwsError(HostManagerError):
    """An LWS step failed; the message names the step and the fix."""


# ---------------------------------------------------------------------------------------------- build


def stamp(version: str = VERSION) -> str:
    """Marks a bin directory's lws as this version (outside the toolchain's cache key, like kueue's)."""
    return f".lws-{version}"


def ldflags(version: str = VERSION, commit: str = "") -> str:
    """LWS's Makefile sets its version package; without it the manager logs gitVersion v0.0.0-main and commit
    abcd01234."""
    flags = f"-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion={version}"
    return flags + (f" -X sigs.k8s.io/lws/pkg/version.GitCommit={commit}" if commit else "")


def build(version: str = VERSION, out: Path | None = None) -> Path:
    """`lws` (the manager, cmd/main.go) into the toolchain's bin directory; skipped when its stamp is there.
    Built through a wrapper module that requires the pinned version rather than `go install module/cmd@version`:
    that names the binary after the package (`cmd`), and it asks the module proxy for the module's version list
    (a deprecation check), which a proxy serving pinned versions only refuses. Returns the binary's path."""
    out = out or bin_dir()
    binary = out / "lws"
    if binary.is_file() and (out / stamp(version)).is_file():
        return binary
    check_go()
    out.mkdir(parents=True, exist_ok=True)
    download = host_manager.module_download(MODULE, version)
    go_mod = (Path(download["Dir"]) / "go.mod").read_text()
    replaces = host_manager.go_mod_replaces(go_mod)
    if replaces:
        raise BuildError(f"step 'lws {version}': its go.mod has replace directives ({replaces[:3]}); a module that "
                         "requires it does not see them. Fix: copy them into the wrapper module's go.mod.")
    work = toolchain_dir() / "src" / "lws"
    go_line = next(line.split()[1] for line in go_mod.splitlines() if line.startswith("go "))
    _wrapper_module(work, "drafter.dev/build/lws", go_line, f"{MODULE} {version}", [], [MAIN_PACKAGE])
    env = _go_env(work)
    _run("lws: resolve modules", ["go", "mod", "tidy"], work, env, "check network access to the Go module proxy")
    commit = (download.get("Origin") or {}).get("Hash", "")
    _run(f"lws {version}: compile", ["go", "build", "-v", "-trimpath", "-ldflags", ldflags(version, commit), "-o",
                                     str(binary), MAIN_PACKAGE], work, env,
         "read the compiler error above; LWS v0.9.0 declares go 1.26.0")
    (out / stamp(version)).write_text(f"{version}\n")
    return binary


# -------------------------------------------------------------------------------------- configuration


#: Where LWS's listeners start above the cluster's port base (after Kueue's (kueue.PORT_OFFSET), so both can run).
PORT_OFFSET = 23


def ports_of(base: int) -> host_manager.ManagerPorts:
    """LWS's listeners on 127.0.0.1 for a cluster of port base ``base``."""
    return host_manager.ManagerPorts(base, PORT_OFFSET)


def lws_layout(layout: cluster.Layout) -> host_manager.ManagerLayout:
    return host_manager.ManagerLayout(layout.root / "lws")


def configuration(ports: host_manager.ManagerPorts, cert_dir: Path) -> dict:
    """LWS's Configuration file (config.lws.x-k8s.io/v1alpha1, decoded strictly: an unknown field stops it).
    The release's (config/manager/controller_manager_config.yaml) sets leader election and internal certificate
    management on; everything it leaves unset keeps LWS's defaults here too (client qps and burst 500)."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        # One LWS per local cluster (the release runs two replicas behind a Lease); a Lease would only add
        # requests and a start-up delay.
        "leaderElection": {"leaderElect": False},
        # The release rotates a self-signed certificate into the Secret its Deployment mounts and injects the CA
        # into its webhooks; here the cluster CA signs it (serving_certificate) and the webhook configurations
        # carry that CA (release_objects).
        "internalCertManagement": {"enable": False},
        # The release listens on every address of its pod (webhook 9443, health 8081, metrics 8443); a host
        # process listens on loopback only, on ports derived from the cluster's.
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
    }


def command(binary: Path, config: Path) -> list[str]:
    """The release Deployment's arguments (--config, --zap-log-level=2) with this cluster's configuration file."""
    return [str(binary), f"--config={config}", "--zap-log-level=2"]


def render_release(source: Path) -> list[dict]:
    """The release manifests, as LWS's `make manifests` / kustomize build writes them: `kubectl kustomize
    config/default` of the module's source (the pinned kubectl embeds kustomize)."""
    proc = subprocess.run([str(bin_dir() / "kubectl"), "kustomize", str(source / RELEASE_KUSTOMIZATION)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise LwsError(f"step 'lws release manifests' failed: {proc.stderr.strip()}\n"
                       f"Fix: `kubectl kustomize {source / RELEASE_KUSTOMIZATION}` must render; check the pinned kubectl")
    return [m for m in yaml.safe_load_all(proc.stdout) if m]


def release_objects(manifests: list[dict], port: int, ca_bundle: bytes) -> list[dict]:
    """The release manifests this cluster installs: its Namespace, CRDs and webhook configurations (all their
    webhooks, the pod ones already limited by the release to pods labelled leaderworkerset.sigs.k8s.io/name),
    every `clientConfig` that names the webhook Service rewritten to call 127.0.0.1:<port> by URL with the
    cluster CA (a Service cannot reach a host process). Left out, as LWS runs as a host process: the
    Deployment, its ServiceAccount and RBAC (it uses the admin identity), the manager ConfigMap (a file here),
    the webhook and metrics Services and the certificate Secret (the cluster CA signs its certificate)."""
    out = []
    for manifest in manifests:
        if manifest.get("kind") not in INSTALLED_KINDS:
            continue
        manifest = json.loads(json.dumps(manifest))  # a copy: the caller's manifests stay as read
        if manifest["kind"] == "CustomResourceDefinition":
            webhook = ((manifest["spec"].get("conversion") or {}).get("webhook") or {})
            if "service" in webhook.get("clientConfig", {}):
                webhook["clientConfig"] = loopback_client_config(webhook["clientConfig"], port, ca_bundle)
        for hook in manifest.get("webhooks", []):
            hook["clientConfig"] = loopback_client_config(hook["clientConfig"], port, ca_bundle)
        out.append(manifest)
    return out


#: The release's webhook configurations (config/default: name prefix `lws-`), unregistered by `stop`.
WEBHOOK_CONFIGURATIONS = ("mutatingwebhookconfiguration/lws-mutating-webhook-configuration",
                          "validatingwebhookconfiguration/lws-validating-webhook-configuration")


def serving_certificate(pki: Path, cert_dir: Path) -> None:
    host_manager.serving_certificate(pki, cert_dir, "lws-webhook")


# ---------------------------------------------------------------------------------------------- builders


def leader_worker_set(namespace: str, name: str, replicas: int, size: int, pod_spec: dict,
                      restart_policy: str = "RecreateGroupOnPodRestart") -> dict:
    """A LeaderWorkerSet of `replicas` groups of `size` pods (a leader and size-1 workers), every pod from
    `pod_spec` (no separate leader template). LWS's default restart policy is named explicitly."""
    return {"apiVersion": API_VERSION, "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {
                "size": size, "restartPolicy": restart_policy,
                "workerTemplate": {"metadata": {}, "spec": json.loads(json.dumps(pod_spec))}}}}


# ------------------------------------------------------------------------------------- install and stop


def running(layout: cluster.Layout | None = None) -> int | None:
    """The pid of this cluster's LWS, or None."""
    layout = layout or cluster.Layout()
    return processes.running_pid(PROCESS, layout.run)


def _readyz(ports: host_manager.ManagerPorts) -> bool:
    return host_manager.readyz(ports.health)


def _webhooks_answer(layout: cluster.Layout) -> bool:
    """A server-side dry run of a LeaderWorkerSet passes LWS's mutating and validating webhooks."""
    probe = leader_worker_set("default", "drafter-lws-probe", 1, 1,
                              {"containers": [{"name": "main", "image": "busybox"}]})
    return host_manager.dry_run_passes(layout, probe)


def install(layout: cluster.Layout | None = None, version: str = VERSION, timeout: float = 120) -> dict:
    """Build (once), then install and start LWS in the running local cluster and wait until its readyz
    answers and the apiserver reaches its webhooks. A no-op when it runs already. Returns what it did."""
    layout = layout or cluster.Layout()
    started = time.monotonic()
    record = host_manager.running_cluster(layout, "lws install")
    ports = ports_of(record["port_base"])
    llayout = lws_layout(layout)
    with cluster.exclusive(layout, "lws"):
        pid = running(layout)
        if pid is not None:
            if host_manager.answers(lambda: _readyz(ports)):
                return {"pid": pid, "ports": ports.all(), "started": False, "seconds": 0.0}
            raise LwsError(f"step 'lws install': LWS runs (pid {pid}) but its readyz on 127.0.0.1:{ports.health} "
                           f"does not answer. Fix: read {layout.logs / 'lws.log'}; `drafter_testbed.lws.stop()` then "
                           "install again.")
        host_manager.check_ports_free("lws ports", ports.all())
        binary = build(version)
        source = host_manager.source_dir(MODULE, version)
        ca = (layout.pki / "ca.crt").read_bytes()
        serving_certificate(layout.pki, llayout.certs)
        llayout.root.mkdir(parents=True, exist_ok=True)
        llayout.config.write_text(yaml.safe_dump(configuration(ports, llayout.certs)))
        # The admin identity (system:masters) instead of the release's ServiceAccount and ClusterRoles: a host
        # process has no ServiceAccount token, and what this cluster shows is what LWS does, not its RBAC.
        host_manager.write_admin_kubeconfig(layout, record, llayout.kubeconfig)
        objects = release_objects(render_release(source), ports.webhook, ca)
        definitions = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        hooks = [o for o in objects if o["kind"].endswith("WebhookConfiguration")]
        rest = [o for o in objects if o not in definitions and o not in hooks]
        host_manager.apply(layout, "lws CRDs", definitions + rest, FIELD_MANAGER,
                           f"the CRDs are rendered from {source / RELEASE_KUSTOMIZATION}; `cluster down --wipe` "
                           "starts afresh")
        host_manager.wait_established(layout, "lws CRDs established", definitions, timeout)
        host_manager.apply(layout, "lws webhook configurations", hooks, FIELD_MANAGER,
                           "read the apiserver's message above")
        env = dict(os.environ, KUBECONFIG=str(llayout.kubeconfig))
        pid = processes.start(PROCESS, command(binary, llayout.config), layout.run, layout.logs, env=env)
        log = layout.logs / f"{PROCESS}.log"
        alive = lambda: running(layout) is not None  # noqa: E731
        hint = "`drafter_testbed.lws.stop()`"
        try:
            host_manager.wait("lws readyz", lambda: _readyz(ports), timeout, log, hint, alive)
            host_manager.wait("lws webhooks", lambda: _webhooks_answer(layout), timeout, log, hint, alive)
        except BaseException:
            stop(layout)
            raise
    return {"pid": pid, "ports": ports.all(), "started": True, "seconds": round(time.monotonic() - started, 2)}


def stop(layout: cluster.Layout | None = None) -> bool:
    """Stop this cluster's LWS and unregister its webhooks (failurePolicy Fail: while nothing answers them,
    every LeaderWorkerSet and every pod labelled with one would be refused). True if an LWS process was
    stopped. CRDs and LeaderWorkerSets stay: the next install finds them."""
    layout = layout or cluster.Layout()
    stopped = processes.stop(PROCESS, layout.run)
    if cluster.is_up(layout):
        cluster.kubectl(layout, "delete", *WEBHOOK_CONFIGURATIONS, "--ignore-not-found")
    return stopped
