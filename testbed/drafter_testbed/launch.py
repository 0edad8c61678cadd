"""Turn a pod's container into a host process: the argv, environment and files the runner starts.

Pure functions, no API calls: the runner hands in the pod, its IP and its directory, and gets back a
plan. Two translations make a container image runnable on a host without containers:
- commands: engine entrypoints (`vllm serve`, `python -m sglang.launch_server`) become the engine
  emulator with the same flags; `drafter-operator` and `python` become this interpreter; a few shell
  tools run as themselves; anything else is refused with a reason, never guessed;
- paths: the termination message path and each volume's mount path are remapped into the pod's own
  directory, in argv and env alike, so two pods never share `/dev/termination-log` or `/dev/shm`.
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


def container_argv(container: dict) -> list[str]:
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
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
            value = item["value"]
            for known, known_value in env.items():
                value = value.replace(f"$({known})", known_value)
            env[name] = value
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
    for mount in container.get("volumeMounts") or []:
        host_dir = volume_paths.get(mount["name"], pod_dir / "volumes" / mount["name"])
        if mount.get("subPath"):
            host_dir = Path(host_dir) / mount["subPath"]
        path_map[mount["mountPath"].rstrip("/") or "/"] = str(host_dir)
    argv = host_argv(container_argv(container), python)
    emulated = is_emulated(argv)
    if not emulated:
        # The emulator reads no files: it keeps the container's paths, so the model name it serves and
        # labels its metrics with is the one clients send (/models/Kimi-K2.5), as on a real cluster.
        argv = [remap(a, path_map) for a in argv]
    env = {k: remap(v, path_map) for k, v in container_env(pod, container, pod_ip, lookup).items()}
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
        "HOSTNAME": pod["metadata"]["name"],
        "PYTHONUNBUFFERED": "1",
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
