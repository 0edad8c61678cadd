"""The Job that runs one DrafterBenchmark: `drafter-operator bench` in the operator's own image.

A pure builder. The Job runs on CPU nodes only: a benchmark client on a GPU node would take a GPU
slot from an engine (and measure a machine the engines share). It never retries (`backoffLimit: 0`):
a second attempt would measure a different moment and mix into the same result. Its result travels
in the container's termination message (at most 4 KiB), which the controller copies into status.
"""

from __future__ import annotations

from drafter_operator.resources import pod_policy
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.names import JOB_NAME_MAX, SUBDOMAIN_NAME_MAX, child_name

BENCHMARK_LABEL = "drafter.dev/benchmark"
CONTAINER = "bench"
PROMPTS_VOLUME = "prompts"
PROMPTS_DIR = "/etc/drafter/prompts"
#: Labels a GPU node carries (NVIDIA GPU feature discovery); the Job's affinity avoids them.
GPU_NODE_LABEL = "nvidia.com/gpu.present"
#: A small async client: its CPU is a few percent of one core per 1,000 tokens/s (docs/performance.md).
DEFAULT_RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
#: The operator's image runs as a non-root user and needs nothing from the kernel.
DEFAULT_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65532,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def job_name(benchmark: str, generation: int) -> str:
    """One Job per spec generation: a changed spec is a new run, never a re-labelled old one."""
    return child_name(benchmark, f"bench-g{generation}", JOB_NAME_MAX)


def result_config_map_name(benchmark: str) -> str:
    """The ConfigMap that holds the full result (controllers/benchmark_decide.py result_config_map)."""
    return child_name(benchmark, "result", SUBDOMAIN_NAME_MAX)


def benchmark_labels(benchmark: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "drafter-benchmark", "app.kubernetes.io/instance": benchmark,
            **MANAGED_BY, BENCHMARK_LABEL: benchmark}


def benchmark_job(namespace: str, benchmark: str, generation: int, image: str, argv: list[str],
                  timeout_seconds: int, prompts_config_map: tuple[str, str] | None = None,
                  resources=None, policy=None) -> dict:
    """`argv` is the bench command line after `drafter-operator bench`; `prompts_config_map`
    (name, key) mounts that key at PROMPTS_DIR/<key>; `resources` and `policy` are the spec's
    (api/pod.py ContainerResources and PodPolicy)."""
    labels = benchmark_labels(benchmark)
    container = {
        "name": CONTAINER, "image": image, "command": ["drafter-operator", "bench", *argv],
        "terminationMessagePolicy": "File",
        "resources": pod_policy.container_resources(resources, default=DEFAULT_RESOURCES),
        "securityContext": pod_policy.container_security(policy, DEFAULT_SECURITY_CONTEXT),
    }
    pod_spec: dict = {
        "restartPolicy": "Never",
        "containers": [container],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": GPU_NODE_LABEL, "operator": "DoesNotExist"}]}]}}},
        **pod_policy.pod_fields(policy),
    }
    if prompts_config_map:
        name, key = prompts_config_map
        pod_spec["volumes"] = [{"name": PROMPTS_VOLUME, "configMap": {"name": name, "items": [{"key": key, "path": key}]}}]
        container["volumeMounts"] = [{"name": PROMPTS_VOLUME, "mountPath": PROMPTS_DIR, "readOnly": True}]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(benchmark, generation), "namespace": namespace, "labels": labels},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": timeout_seconds,
                 "template": {"metadata": pod_policy.template_metadata(labels, policy), "spec": pod_spec}},
    }
