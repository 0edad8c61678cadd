"""The Job that runs one DrafterBenchmark: `drafter-operator bench` in the operator's own image.

A pure builder. The Job prefers CPU nodes (spec.placement.nodePreference): a benchmark client on a GPU
node shares the machine an engine runs on. It still runs on a cluster of GPU nodes only (it tolerates
their taint and prefers, not requires, the others), and it never requests a GPU (nor sees one: the
NVIDIA runtime exposes none to it). Its cpu and memory always have requests and limits, so a namespace
whose LimitRange or ResourceQuota demands them admits it. It never retries (`backoffLimit: 0`):
a second attempt would measure a different moment and mix into the same result. Its result travels
in the container's termination message (at most 4 KiB), which the controller copies into status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drafter_operator.api.pod import parse_kube_quantity
from drafter_operator.constants import BENCHMARK_LABEL, INSTANCE_LABEL, NAME_LABEL
from drafter_operator.resources import pod_policy
from drafter_operator.resources.engine import GPU_TOLERATION, file_annotations, files_volume
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.names import JOB_NAME_MAX, SUBDOMAIN_NAME_MAX, child_name

if TYPE_CHECKING:
    from drafter_operator.api.benchmark import BenchmarkPlacement
    from drafter_operator.api.pod import ContainerResources, PodPolicy

CONTAINER = "bench"
PROMPTS_VOLUME = "prompts"
PROMPTS_DIR = "/etc/drafter/prompts"
#: Inline or categorized prompts (spec.prompts) as the pod reads them: a file the template carries in an annotation
#: and the downward API projects, like an engine's files (no object of its own to create or collect).
INLINE_PROMPTS_FILE = f"{PROMPTS_DIR}/prompts.json"
#: A claim holding the prompts file (spec.prompts.persistentVolumeClaim), mounted read-only here: a directory of its
#: own, apart from PROMPTS_DIR, so the claim's files never shadow or mix with a ConfigMap's.
PROMPTS_CLAIM_VOLUME = "prompts-claim"
PROMPTS_CLAIM_DIR = "/etc/drafter/prompts-claim"
#: Labels a GPU node carries (NVIDIA GPU feature discovery); the Job's affinity avoids them.
GPU_NODE_LABEL = "nvidia.com/gpu.present"
#: A small async client: its CPU is a few percent of one core per 1,000 tokens/s (docs/performance.md). The
#: cpu limit is two cores: one Python event loop cannot use more, so it never throttles the measurement.
DEFAULT_RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
#: How much the scheduler prefers a CPU node (the most it allows: only the user's own terms compete).
CPU_NODE_WEIGHT = 100
#: The operator's image runs as a non-root user and needs nothing from the kernel.
DEFAULT_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65532,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def job_name(benchmark: str, generation: int) -> str:
    """One Job per spec generation: a changed spec is a new run, never a re-labelled old one."""
    return child_name(benchmark, f"bench-g{generation}", JOB_NAME_MAX)


def result_config_map_name(benchmark: str) -> str:
    """The ConfigMap that holds the full result (controllers/benchmark/decide.py result_config_map)."""
    return child_name(benchmark, "result", SUBDOMAIN_NAME_MAX)


def claim_prompts_file(path: str) -> str:
    """Where the pod reads spec.prompts.persistentVolumeClaim's file: ``path`` (relative, no '..': the API refuses
    others) under the claim's mount."""
    return f"{PROMPTS_CLAIM_DIR}/{path}"


def benchmark_labels(benchmark: str) -> dict[str, str]:
    return {NAME_LABEL: "drafter-benchmark", INSTANCE_LABEL: benchmark,
            **MANAGED_BY, BENCHMARK_LABEL: benchmark}


def benchmark_resources(resources=None) -> dict:
    """requests and limits of cpu and memory, always both: the spec's (api/pod.py ContainerResources), each
    one unset filled from DEFAULT_RESOURCES. A filled request is at most the spec's limit and a filled limit at
    least the spec's request, so filling never makes a limit below its request."""
    chosen = resources.to_json() if resources is not None else {}
    requests, limits = dict(chosen.get("requests") or {}), dict(chosen.get("limits") or {})
    for name in ("cpu", "memory"):
        default_request, default_limit = DEFAULT_RESOURCES["requests"][name], DEFAULT_RESOURCES["limits"][name]
        if name not in requests:
            requests[name] = min(default_request, limits.get(name, default_request), key=parse_kube_quantity)
        if name not in limits:
            limits[name] = max(default_limit, requests[name], key=parse_kube_quantity)
    return {"requests": requests, "limits": limits}


def node_placement(placement=None) -> dict:
    """affinity and tolerations from spec.placement (api/benchmark.py BenchmarkPlacement); None: the defaults."""
    preference = placement.node_preference if placement is not None else "PreferCPUNodes"
    cpu_node = {"matchExpressions": [{"key": GPU_NODE_LABEL, "operator": "DoesNotExist"}]}
    fields: dict = {}
    if preference == "RequireCPUNodes":
        fields["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [cpu_node]}}}
    elif preference == "PreferCPUNodes":
        fields["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": CPU_NODE_WEIGHT, "preference": cpu_node}]}}
    # A GPU node is a fallback only if the pod tolerates its taint (GKE: nvidia.com/gpu=present:NoSchedule).
    tolerations = [] if preference == "RequireCPUNodes" else [dict(GPU_TOLERATION)]
    tolerations += [t.to_json() for t in (placement.tolerations or [])] if placement is not None else []
    if tolerations:
        fields["tolerations"] = tolerations
    return fields


@dataclass(frozen=True)
class BenchPod:
    """The pod that runs a benchmark: ``image``'s ``drafter-operator bench`` with ``argv`` (its command line after
    ``bench``); ``prompts_config_map`` (name, key) mounts that key at PROMPTS_DIR/<key>, ``prompts_claim`` (a
    PersistentVolumeClaim's name) mounts that claim read-only at PROMPTS_CLAIM_DIR, ``inline_prompts`` (the
    spec's own prompts, as a --prompts-file reads them) rides in the template to INLINE_PROMPTS_FILE; ``resources``, ``policy``
    and ``placement`` are the spec's (api/pod.py ContainerResources and PodPolicy, api/benchmark.py
    BenchmarkPlacement)."""

    image: str
    argv: Sequence[str]
    prompts_config_map: tuple[str, str] | None = None
    inline_prompts: str | None = None
    resources: ContainerResources | None = None
    policy: PodPolicy | None = None
    placement: BenchmarkPlacement | None = None
    prompts_claim: str | None = None


def benchmark_job(namespace: str, benchmark: str, generation: int, pod: BenchPod, timeout_seconds: int) -> dict:
    """The Job of a benchmark's run (its spec ``generation``): ``pod``, ended after ``timeout_seconds``."""
    image, argv, prompts_config_map = pod.image, pod.argv, pod.prompts_config_map
    resources, policy, placement = pod.resources, pod.policy, pod.placement
    labels = benchmark_labels(benchmark)
    container = {
        "name": CONTAINER, "image": image, "command": ["drafter-operator", "bench", *argv],
        "terminationMessagePolicy": "File",
        # On a GPU node, an NVIDIA runtime that reads this variable would otherwise expose every GPU to a
        # container that requested none (the device plugin's envvar strategy): "void" exposes none.
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "resources": benchmark_resources(resources),
        "securityContext": pod_policy.container_security(policy, DEFAULT_SECURITY_CONTEXT),
    }
    pod_spec: dict = {
        "restartPolicy": "Never",
        "containers": [container],
        **node_placement(placement),
        **pod_policy.pod_fields(policy),
    }
    volumes: list[dict] = []
    mounts: list[dict] = []
    if prompts_config_map:
        name, key = prompts_config_map
        volumes.append({"name": PROMPTS_VOLUME, "configMap": {"name": name, "items": [{"key": key, "path": key}]}})
        mounts.append({"name": PROMPTS_VOLUME, "mountPath": PROMPTS_DIR, "readOnly": True})
    if pod.prompts_claim:
        # Read-only twice over: the volume (the kubelet mounts it so) and the mount (the container sees it so).
        volumes.append({"name": PROMPTS_CLAIM_VOLUME,
                        "persistentVolumeClaim": {"claimName": pod.prompts_claim, "readOnly": True}})
        mounts.append({"name": PROMPTS_CLAIM_VOLUME, "mountPath": PROMPTS_CLAIM_DIR, "readOnly": True})
    template = pod_policy.template_metadata(labels, policy)
    if pod.inline_prompts is not None:
        files = {INLINE_PROMPTS_FILE: pod.inline_prompts}
        template["annotations"] = {**template.get("annotations", {}), **file_annotations(files)}
        volume, mount = files_volume(files, PROMPTS_VOLUME)
        volumes.append(volume)
        mounts.append(mount)
    if volumes:
        pod_spec["volumes"], container["volumeMounts"] = volumes, mounts
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(benchmark, generation), "namespace": namespace, "labels": labels},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": timeout_seconds,
                 "template": {"metadata": template, "spec": pod_spec}},
    }
