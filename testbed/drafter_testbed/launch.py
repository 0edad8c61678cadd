"""Turn a pod's container into a host process: the argv, environment and files the runner starts.

Pure functions, no API calls: the runner hands in the pod, its IP and its directory, and gets back a
plan. The command and args first get their `$(VAR)` references expanded from the container's environment, as the
kubelet expands them (env_expansion.py: the node rank and leader address a LeaderWorkerSet's pods read from it). Two
translations then make a container image runnable on a host without containers:
- commands: engine entrypoints (`vllm serve`, `python -m sglang.launch_server`) become the engine
  emulator with the same flags; `drafter-operator` and `python` become this interpreter; a few shell
  tools run as themselves; anything else is refused with a reason, never guessed;
- paths: the termination message path and each volume's mount path are remapped into the pod's own
  directory, in argv and env alike, so two pods never share `/dev/termination-log` or `/dev/shm`.

Pod DNS, as the kubelet gives it: a hostname, a pod-private /etc/hosts and /etc/resolv.conf (their content
here), bind-mounted in a mount + UTS namespace of the pod's own (`in_pod_namespaces`); and the records the
cluster DNS serves for pods behind headless Services (`pod_name_records`), which the runner publishes
because the apiserver refuses loopback addresses in EndpointSlices (docs/testbed.md).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from drafter_operator.container_paths import PATH_MAP_ENV, remap
from drafter_operator.images import TRAINER_REPOSITORY, image_repository
from drafter_testbed.code_roots import source_pythonpath
from drafter_testbed.env_expansion import expand, expand_all

EMULATED_PYTHON_MODULES = ("sglang.launch_server", "vllm.entrypoints.openai.api_server")
HOST_TOOLS = ("sh", "bash", "sleep", "echo", "cat", "true", "false", "env", "ls", "test", "printf")
# Entrypoints of images whose pods may leave `command` empty.
IMAGE_ENTRYPOINTS = {
    "vllm/vllm-openai": ["vllm", "serve"],
    "drafter-operator": ["drafter-operator"],
}
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
# Optional ConfigMap in a pod's namespace that tunes the engine emulator for the pods there (tests and
# demos): DRAFTER_EMULATOR_* keys become env vars, `profile.yaml` becomes DRAFTER_EMULATOR_PROFILE.
EMULATOR_CONFIGMAP = "drafter-emulator"
EMULATOR_ENV_PREFIX = "DRAFTER_EMULATOR_"


class LaunchError(ValueError):
    """The container cannot run on the local process runner; the message says why."""


@dataclass
class LaunchPlan:
    container: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log_path: Path
    termination_path: Path
    path_map: dict[str, str] = field(default_factory=dict)


def container_argv(container: dict, env: dict[str, str] | None = None) -> list[str]:
    """The container's command and args with their `$(VAR)` references expanded from ``env`` (its resolved
    environment), as the kubelet does; an image entrypoint that stands in for an empty command is never expanded."""
    command = expand_all(list(container.get("command") or []), env or {})
    args = expand_all(list(container.get("args") or []), env or {})
    if not command:
        repo = image_repository(container.get("image", ""))
        entry = next((v for k, v in IMAGE_ENTRYPOINTS.items() if repo == k or repo.endswith("/" + k)), None)
        if entry is None:
            raise LaunchError(f"container {container.get('name')!r}: image {container.get('image')!r} has no "
                              "known entrypoint and the pod sets no `command`; set `command` explicitly")
        command = list(entry)
    return command + args


def is_emulated(argv: list[str]) -> bool:
    return len(argv) >= 4 and argv[1:4] == ["-m", "drafter_operator.cli", "emulate"]


def host_argv(argv: list[str], python: str = sys.executable) -> list[str]:
    """Map a container argv onto this host (see module doc)."""
    if not argv:
        raise LaunchError("empty command")
    exe = os.path.basename(argv[0])
    emulate = [python, "-m", "drafter_operator.cli", "emulate"]
    if exe == "vllm":
        return emulate + argv
    if exe in ("sglang",):
        return emulate + argv
    if exe.startswith("python"):
        if len(argv) >= 3 and argv[1] == "-m" and argv[2] in EMULATED_PYTHON_MODULES:
            return emulate + argv
        return [python, *argv[1:]]
    if exe == "drafter-operator":
        return [python, "-m", "drafter_operator.cli", *argv[1:]]
    if exe in HOST_TOOLS:
        return argv
    raise LaunchError(f"command {argv[0]!r} is not available on the local process runner (it runs engine "
                      f"entrypoints, drafter-operator, python and {', '.join(HOST_TOOLS)})")


def _field_value(pod: dict, field_path: str, pod_ip: str) -> str:
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.hostIP": "127.0.0.1",
    }
    if field_path in simple:
        return simple[field_path]
    for kind in ("labels", "annotations"):
        prefix = f"metadata.{kind}['"
        if field_path.startswith(prefix) and field_path.endswith("']"):
            return (meta.get(kind) or {}).get(field_path[len(prefix):-2], "")
    raise LaunchError(f"env fieldRef {field_path!r} is not supported by the local process runner")


def container_env(pod: dict, container: dict, pod_ip: str, lookup) -> dict[str, str]:
    """Resolve a container's env: values, fieldRefs and configMap/secret keys via `lookup(kind, ns, name)`."""
    env: dict[str, str] = {}
    namespace = pod["metadata"]["namespace"]
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or source.get("secretRef")
        kind = "configmap" if "configMapRef" in source else "secret"
        data = lookup(kind, namespace, ref["name"]) or {}
        env.update({source.get("prefix", "") + k: v for k, v in data.items()})
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            # $(VAR) references to earlier variables, as the kubelet expands them.
            env[name] = expand(item["value"], env)
            continue
        source = item.get("valueFrom") or {}
        if "fieldRef" in source:
            env[name] = _field_value(pod, source["fieldRef"]["fieldPath"], pod_ip)
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configmap" if "configMapKeyRef" in source else "secret"
            ref = source.get("configMapKeyRef") or source.get("secretKeyRef")
            data = lookup(kind, namespace, ref["name"]) or {}
            if ref["key"] not in data and not ref.get("optional"):
                raise LaunchError(f"env {name}: key {ref['key']!r} not found in {kind} {ref['name']!r}")
            if ref["key"] in data:
                env[name] = data[ref["key"]]
        elif "resourceFieldRef" in source:
            resource = source["resourceFieldRef"]["resource"]
            kind, _, res = resource.partition(".")
            env[name] = str(((container.get("resources") or {}).get(kind) or {}).get(res, "0"))
        else:
            env[name] = ""
    return env


def volume_host_paths(pod: dict, pod_dir: Path, shared_dir: Path) -> dict[str, Path]:
    """Where each of the pod's volumes lives on the host.

    Pod-private volumes (emptyDir, configMap, secret, projected, downwardAPI) live in the pod's
    directory; a PersistentVolumeClaim maps to one directory per claim shared by every pod that
    mounts it, as a real volume would be; hostPath is the host path itself.
    """
    paths: dict[str, Path] = {}
    namespace = pod["metadata"]["namespace"]
    for volume in pod.get("spec", {}).get("volumes") or []:
        name = volume["name"]
        if "persistentVolumeClaim" in volume:
            paths[name] = shared_dir / "claims" / namespace / volume["persistentVolumeClaim"]["claimName"]
        elif "hostPath" in volume:
            paths[name] = Path(volume["hostPath"]["path"])
        else:
            paths[name] = pod_dir / "volumes" / name
    return paths


def is_trainer(container: dict) -> bool:
    return image_repository(container.get("image", "")).endswith(TRAINER_REPOSITORY)


def plan(pod: dict, container: dict, pod_ip: str, pod_dir: Path, apiserver_port: int, lookup,
         volume_paths: dict[str, Path] | None = None, python: str = sys.executable,
         training_python: str | None = None) -> LaunchPlan:
    name = container["name"]
    termination = pod_dir / f"{name}.termination-log"
    path_map = {container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH: str(termination)}
    volume_paths = volume_paths or {}
    claims = {v["name"] for v in pod.get("spec", {}).get("volumes") or [] if "persistentVolumeClaim" in v}
    private_map = {}  # the pod's own volumes (emptyDir, projected, configMap, ...): never a model's path
    for mount in container.get("volumeMounts") or []:
        host_dir = volume_paths.get(mount["name"], pod_dir / "volumes" / mount["name"])
        if mount.get("subPath"):
            host_dir = Path(host_dir) / mount["subPath"]
        path_map[mount["mountPath"].rstrip("/") or "/"] = str(host_dir)
        if mount["name"] not in claims:
            private_map[mount["mountPath"].rstrip("/") or "/"] = str(host_dir)
    resolved_env = container_env(pod, container, pod_ip, lookup)
    # The executable is the host's (this interpreter, or a host tool), never a path inside the container: not
    # remapped, or an interpreter under a path the pod mounts over (a cache under /tmp, where the operator's pod
    # has an emptyDir) would be looked for in the pod's volume.
    argv = host_argv(container_argv(container, resolved_env), python)
    emulated = is_emulated(argv)
    # The emulator keeps the model volume's paths, so the model name it serves and labels its metrics with is the
    # one clients send (/models/Kimi-K2.5), as on a real cluster; the files it reads (SGLang's adaptive tier config)
    # live in the pod's own volumes, which map to the pod's directory.
    mounts = private_map if emulated else path_map
    argv = [argv[0], *(remap(a, mounts) for a in argv[1:])]
    env = {k: remap(v, path_map) for k, v in resolved_env.items()}
    if emulated:
        env.update(emulator_env(lookup("configmap", pod["metadata"]["namespace"], EMULATOR_CONFIGMAP) or {}, pod_dir))
    search_path = os.environ.get("PATH", "/usr/bin:/bin")
    if is_trainer(container):
        # The trainer image's `python`, `specforge`, `speculators` and `torchrun` are the training
        # environment's (docs/testbed.md); run-stage itself stays on this interpreter.
        if not training_python:
            raise LaunchError(f"container {name!r} runs the trainer image, and this runner has no training "
                              "environment: build it (.ci/training-env) and record it with "
                              "`drafter-operator cluster training-env PYTHON`")
        search_path = f"{os.path.dirname(training_python)}:{search_path}"
    base_env = {
        "PATH": search_path,
        # What the container would see at its mount paths, for tools that build paths inside it.
        PATH_MAP_ENV: json.dumps(path_map, sort_keys=True),
        "HOME": str(pod_dir),
        "HOSTNAME": pod_hostname(pod),  # what a container runtime sets: the pod's hostname, not always its name
        "PYTHONUNBUFFERED": "1",
        # A pod's python runs the runner's own checkout (drafter-operator, drafter-testbed), never whatever the
        # shared virtualenv's editable install was last pointed at by another checkout's `./dev`.
        "PYTHONPATH": source_pythonpath(),
        # In-cluster clients find the apiserver as a kubelet would tell them.
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(apiserver_port),
        # The emulator binds here instead of 0.0.0.0: every pod owns its own loopback address.
        "DRAFTER_EMULATOR_HOST": pod_ip,
        "POD_IP": pod_ip,
    }
    working_dir = container.get("workingDir")
    cwd = remap(working_dir, path_map) if working_dir else str(pod_dir)
    return LaunchPlan(container=name, argv=argv, env={**base_env, **env}, cwd=cwd,
                      log_path=pod_dir / f"{name}.log", termination_path=termination, path_map=path_map)


def emulator_env(settings: dict[str, str], pod_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in settings.items() if k.startswith(EMULATOR_ENV_PREFIX)}
    if "profile.yaml" in settings:
        profile = pod_dir / "emulator-profile.yaml"
        profile.parent.mkdir(parents=True, exist_ok=True)
        profile.write_text(settings["profile.yaml"])
        env[EMULATOR_ENV_PREFIX + "PROFILE"] = str(profile)
    return env


def describe(plan_: LaunchPlan) -> str:
    return shlex.join(plan_.argv)


# ---- pod DNS (kubelet's pkg/kubelet/network/dns and its hosts file) ----
CLUSTER_DOMAIN = "cluster.local"
HOSTNAME_LIMIT = 63  # a DNS label; the kubelet truncates a longer pod name
FQDN_HOSTNAME_LIMIT = 64  # the kernel's limit for setHostnameAsFQDN
MAX_NAMESERVERS = 3  # glibc reads no more; the kubelet drops the rest
MAX_SEARCHES = 32
CLUSTER_DNS_OPTIONS = ("ndots:5",)


def pod_hostname(pod: dict) -> str:
    """spec.hostname or the pod's name, cut to 63 characters without a trailing '-' or '.' (the kubelet's
    truncatePodHostnameIfNeeded: a Job's or StatefulSet's generated name can be longer than a DNS label)."""
    hostname = pod.get("spec", {}).get("hostname") or pod["metadata"]["name"]
    if len(hostname) <= HOSTNAME_LIMIT:
        return hostname
    truncated = hostname[:HOSTNAME_LIMIT].rstrip("-.")
    if not truncated:
        raise LaunchError(f"hostname {hostname!r} is empty once truncated to {HOSTNAME_LIMIT} characters")
    return truncated


def pod_fqdn(pod: dict) -> str | None:
    """<hostname>.<subdomain>.<namespace>.svc.cluster.local when the pod names a subdomain, else None."""
    subdomain = pod.get("spec", {}).get("subdomain")
    if not subdomain:
        return None
    return f"{pod_hostname(pod)}.{subdomain}.{pod['metadata']['namespace']}.svc.{CLUSTER_DOMAIN}"


def uts_hostname(pod: dict, node_hostname: str = "") -> str:
    """The kernel hostname the pod's processes see: the node's on the host network, the FQDN with
    setHostnameAsFQDN, else the short one."""
    if pod.get("spec", {}).get("hostNetwork"):
        return node_hostname
    fqdn = pod_fqdn(pod)
    if pod.get("spec", {}).get("setHostnameAsFQDN") and fqdn:
        if len(fqdn) > FQDN_HOSTNAME_LIMIT:
            raise LaunchError(f"setHostnameAsFQDN: {fqdn!r} is longer than {FQDN_HOSTNAME_LIMIT} characters")
        return fqdn
    return pod_hostname(pod)


def hosts_file(pod: dict, pod_ip: str, node_hosts: str = "") -> str:
    """The kubelet's managed /etc/hosts: loopback names, the pod's own names, then spec.hostAliases; a pod on
    the host network gets the node's file instead, with its hostAliases."""
    aliases = pod.get("spec", {}).get("hostAliases") or []
    alias_lines = ["", "# Entries added by HostAliases."] if aliases else []
    alias_lines += [f"{a['ip']}\t" + "\t".join(a.get("hostnames") or []) for a in aliases]
    if pod.get("spec", {}).get("hostNetwork"):
        return node_hosts + "".join(line + "\n" for line in alias_lines)
    hostname = pod_hostname(pod)
    fqdn = pod_fqdn(pod)
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters",
             f"{pod_ip}\t{fqdn}\t{hostname}" if fqdn else f"{pod_ip}\t{hostname}", *alias_lines]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ResolvConf:
    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def render(self) -> str:
        lines = []
        if self.searches:
            lines.append("search " + " ".join(self.searches))
        lines += [f"nameserver {server}" for server in self.nameservers]
        if self.options:
            lines.append("options " + " ".join(self.options))
        return "\n".join(lines) + "\n"


def parse_resolv_conf(text: str) -> ResolvConf:
    """nameserver, search/domain and options lines of a resolv.conf (the last search or domain line wins, as
    in glibc)."""
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) > 1:
            servers.append(fields[1])
        elif fields[0] in ("search", "domain"):
            searches = fields[1:]
        elif fields[0] == "options":
            options += fields[1:]
    return ResolvConf(tuple(servers), tuple(searches), tuple(options))


def dns_policy(pod: dict, cluster_dns: str | None) -> str:
    """Which resolv.conf a pod gets, as the kubelet's getPodDNSType decides: "cluster" (the cluster DNS),
    "host" (the node's) or "none" (spec.dnsConfig alone). ClusterFirst on the host network, or with no cluster
    DNS configured, falls back to the node's, as the kubelet does."""
    spec = pod.get("spec", {})
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "None":
        return "none"
    if policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst" and not spec.get("hostNetwork")):
        return "cluster" if cluster_dns else "host"
    if policy in ("ClusterFirst", "Default"):
        return "host"
    raise LaunchError(f"dnsPolicy {policy!r} is not one of ClusterFirst, ClusterFirstWithHostNet, Default, None")


def _unique(items) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _merge_options(existing: tuple[str, ...], extra: list[dict]) -> tuple[str, ...]:
    """kubelet's mergeDNSOptions: spec.dnsConfig options replace same-named ones; `name` or `name:value`."""
    merged = {op.partition(":")[0]: op.partition(":")[2] for op in existing}
    for op in extra:
        merged[op["name"]] = op.get("value") or ""
    return tuple(f"{name}:{value}" if value else name for name, value in merged.items())


def resolv_conf(pod: dict, cluster_dns: str | None, host_resolv: str) -> str | None:
    """The pod's /etc/resolv.conf, or None where it keeps the host's unchanged (dnsPolicy Default without a
    dnsConfig). ClusterFirst searches the pod's namespace, then svc and the cluster domain, with ndots:5, as
    the kubelet writes it; the host's search domains are left out (the kubelet adds its node's, but here they
    could only be answered REFUSED: the cluster DNS forwards nothing). spec.dnsConfig is appended, duplicates
    dropped, then cut to the resolver's limits."""
    kind = dns_policy(pod, cluster_dns)
    config = pod.get("spec", {}).get("dnsConfig") or {}
    if kind == "host" and not config:
        return None
    if kind == "cluster":
        namespace = pod["metadata"]["namespace"]
        base = ResolvConf((cluster_dns,), (f"{namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}",
                                           CLUSTER_DOMAIN), CLUSTER_DNS_OPTIONS)
    elif kind == "host":
        base = parse_resolv_conf(host_resolv)
    else:
        base = ResolvConf()
    merged = ResolvConf(_unique([*base.nameservers, *(config.get("nameservers") or [])])[:MAX_NAMESERVERS],
                        _unique([*base.searches, *(config.get("searches") or [])])[:MAX_SEARCHES],
                        _merge_options(base.options, config.get("options") or []))
    if not merged.nameservers and kind == "none":
        raise LaunchError("dnsPolicy None needs spec.dnsConfig.nameservers")
    return merged.render()


# Runs as `sh -c SCRIPT pod-namespaces HOSTNAME HOSTS RESOLV ARGV...` inside `unshare --mount --uts`: the
# hostname and the bind mounts are this pod's alone (a private mount namespace propagates nothing back to
# the host), then `exec` replaces the shell, so the pid the runner tracks and signals is the program's own.
POD_NAMESPACE_SCRIPT = (
    'set -e; hostname "$1"; mount --bind "$2" /etc/hosts; '
    'if [ -n "$3" ]; then mount --bind "$3" /etc/resolv.conf; fi; shift 3; exec "$@"'
)


def in_pod_namespaces(argv: list[str], hostname: str, hosts_path: Path, resolv_path: Path | None,
                      unshare: str = "unshare") -> list[str]:
    """argv run in a mount and UTS namespace of its own with the pod's hostname, /etc/hosts and (when the
    pod has one of its own) /etc/resolv.conf. No --fork: unshare execs, so the pid stays the program's."""
    return [unshare, "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", POD_NAMESPACE_SCRIPT,
            "pod-namespaces", hostname, str(hosts_path), str(resolv_path or ""), *argv]


def _endpoint_name(ip: str) -> str:
    """CoreDNS's name for an endpoint without a hostname: its address with dashes (127.240.0.5 -> 127-240-0-5)."""
    return ip.replace(".", "-")


def pod_name_records(services: list[dict], pods: list[tuple[dict, str, bool]]) -> str:
    """A hosts file of the names a cluster DNS answers from EndpointSlices, for `pods` (pod, IP, ready):
    for each headless Service (clusterIP None) with a selector, `<svc>.<ns>.svc.cluster.local` is each
    selected pod's IP, `<hostname>.<svc>.<ns>.svc.cluster.local` names a pod whose spec.hostname is set and
    whose spec.subdomain is the Service (what the EndpointSlice controller records as the endpoint's
    hostname), and `<a-b-c-d>.<svc>...` one without. Unready pods count only with publishNotReadyAddresses,
    as the EndpointSlice controller decides; so do terminating ones."""
    names: dict[str, set[str]] = {}
    for svc in services:
        spec, meta = svc.get("spec", {}), svc["metadata"]
        selector = spec.get("selector")
        if spec.get("clusterIP") != "None" or not selector:
            continue
        domain = f"{meta['name']}.{meta['namespace']}.svc.{CLUSTER_DOMAIN}"
        publish_unready = bool(spec.get("publishNotReadyAddresses"))
        for pod, ip, ready in pods:
            labels = pod["metadata"].get("labels") or {}
            if pod["metadata"]["namespace"] != meta["namespace"] or any(labels.get(k) != v for k, v in selector.items()):
                continue
            if not publish_unready and (not ready or pod["metadata"].get("deletionTimestamp")):
                continue
            hostname = pod.get("spec", {}).get("hostname")
            endpoint = hostname if hostname and pod["spec"].get("subdomain") == meta["name"] else _endpoint_name(ip)
            for name in (domain, f"{endpoint}.{domain}"):
                names.setdefault(name, set()).add(ip)
    lines = [f"{ip} {name}" for name in sorted(names) for ip in sorted(names[name])]
    return "# Pod names behind headless Services, written by the local process runner.\n" + "".join(
        line + "\n" for line in lines)
