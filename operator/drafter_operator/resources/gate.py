"""The DrafterBenchmark a gated swap runs on a new revision before it takes traffic (a pure builder).

It targets one Ready pod of the new revision directly (its requests and its /metrics), not the Service,
which still points at the active revision: the gate measures exactly the drafter about to serve.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafter_operator import engines
from drafter_operator.api.benchmark_gate import BenchmarkGate, Gate
from drafter_operator.api.serving import DrafterServingSpec
from drafter_operator.constants import (
    API_GROUP_VERSION,
    DETERMINISTIC_ANNOTATION,
    DRAFTER_ANNOTATION,
    ENGINE_ANNOTATION,
    GATE_ATTEMPT_ANNOTATION,
    GATE_LABEL,
    K_ANNOTATION,
    REVISION_LABEL,
)
from drafter_operator.resources.labels import drafter_summary, serving_labels
from drafter_operator.resources.names import CUSTOM_RESOURCE_NAME_MAX, child_name


#: The BenchmarkGate fields that are thresholds, the gate benchmark's spec.gate: those of Gate. Every other field
#: (baseline, numPrompts, maxTokens, concurrencyLevels, equivalence, prompts, acceptanceByCategory) says how the
#: gate benchmark measures and goes into the DrafterBenchmark's spec as its own field.
THRESHOLD_FIELDS = frozenset(Gate.model_fields)


def gate_name(serving: str, revision: str) -> str:
    """A DrafterBenchmark's name, so at most 52 characters: "<serving>-gate-<revision>" up to a 36-character
    serving name, shortened with a hash beyond."""
    return child_name(serving, f"gate-{revision}", CUSTOM_RESOURCE_NAME_MAX)


@dataclass(frozen=True)
class GatedPod:
    """What a gate measures: the new ``revision``, at the address (``pod_ip``, ``port``) of one of its Ready
    engine pods."""

    revision: str
    pod_ip: str
    port: int


def gate_benchmark(namespace: str, serving: str, spec: DrafterServingSpec, measured: GatedPod,
                   gate: BenchmarkGate | None = None, attempt: str | None = None) -> dict:
    """``gate``: the gate in force for this revision (a promotion's one-shot gate), else spec.swap.gate;
    ``attempt``: the serving's last retry request (status.retryRequest), recorded on the gate."""
    revision, pod_ip, port = measured.revision, measured.pod_ip, measured.port
    gate = gate or spec.swap.gate
    thresholds = gate.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(THRESHOLD_FIELDS))
    k = engines.draft_tokens_per_step(spec.engine, spec.drafter)
    body_spec = {"endpoint": f"http://{pod_ip}:{port}",
                 "model": spec.target.served_model_name or spec.target.model,
                 "numPrompts": gate.num_prompts, "maxTokens": gate.max_tokens}
    if thresholds:  # a gate of the output check alone has none
        body_spec["gate"] = thresholds
    if gate.equivalence is not None:
        body_spec["equivalence"] = gate.equivalence.to_json()
    if gate.baseline is not None:
        body_spec["baseline"] = gate.baseline.to_json()
    if gate.concurrency_levels:
        body_spec["concurrencyLevels"] = list(gate.concurrency_levels)
    if gate.prompts is not None:
        body_spec["prompts"] = gate.prompts.to_json()
    if gate.acceptance_by_category is not None:
        body_spec["acceptanceByCategory"] = gate.acceptance_by_category
    annotations = {ENGINE_ANNOTATION: spec.engine, DRAFTER_ANNOTATION: drafter_summary(spec)}
    if k:
        annotations[K_ANNOTATION] = str(k)
    if engines.deterministic_mode(spec):
        annotations[DETERMINISTIC_ANNOTATION] = "true"
    if attempt:
        annotations[GATE_ATTEMPT_ANNOTATION] = attempt
    return {"apiVersion": API_GROUP_VERSION, "kind": "DrafterBenchmark",
            "metadata": {"name": gate_name(serving, revision), "namespace": namespace,
                         "labels": {**serving_labels(serving), REVISION_LABEL: revision, GATE_LABEL: "true"},
                         "annotations": annotations},
            "spec": body_spec}
