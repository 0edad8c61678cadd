"""Evaluate and Promote, the last two DrafterTraining stages, as pure functions.

Evaluate measures what the new drafter has to beat: a DrafterBenchmark of promote.servingRef as it
serves now (its current drafter), against the promote gate's baseline when it has one, with the
gate's prompt settings. Promote then patches that serving's drafter to the new checkpoint with a
BlueGreen swap whose gate is promote.gate plus `minTokensPerSecond` = the current drafter's measured
throughput: the new drafter takes traffic only if it passes the gate *and* beats the current one;
otherwise the serving's swap machinery keeps the old revision serving and records why. The
training reads the outcome from the serving's revisions, and the serving carries the annotation
`drafter.dev/promoted-by` naming the training (and the training records the revision).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from drafter_operator.api import DrafterServing
from drafter_operator.api.training import DrafterTrainingSpec, training_problems
from drafter_operator.resources.training import evaluate_benchmark_name, training_labels
from drafter_operator.resources.training_job import STAGE_LABEL

PROMOTED_BY = "drafter.dev/promoted-by"
#: The method a trained EAGLE-3 drafter is served with.
TRAINED_METHOD = "eagle3"


def evaluate_benchmark(namespace: str, training: str, spec: DrafterTrainingSpec, generation: int) -> dict:
    """The DrafterBenchmark of the serving's current drafter (what the new one must beat)."""
    gate = spec.promote.gate
    benchmark: dict = {"servingRef": {"name": spec.promote.serving_ref.name},
                       "numPrompts": gate.num_prompts if gate else 5, "maxTokens": gate.max_tokens if gate else 512}
    if gate and gate.baseline:
        benchmark["baseline"] = gate.baseline.to_json()
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
            "metadata": {"name": evaluate_benchmark_name(training, generation), "namespace": namespace,
                         "labels": {**training_labels(training), STAGE_LABEL: "Evaluate"}},
            "spec": benchmark}


def serving_problems(spec: DrafterTrainingSpec, serving: dict | None) -> list[str]:
    """Why the drafter cannot go into promote.servingRef (missing, another target, invalid)."""
    if serving is None:
        return training_problems(spec, serving=None)
    try:
        serving_spec = DrafterServing.model_validate(serving).spec
    except ValueError as exc:
        return [f"spec.promote.servingRef: DrafterServing {spec.promote.serving_ref.name!r} is invalid: {exc}"]
    return training_problems(spec, serving=serving_spec)


@dataclass(frozen=True)
class Outcome:
    state: str  # Running, Succeeded or Failed
    message: str = ""
    figures: dict | None = None  # status.evaluation fields


def evaluation_outcome(benchmark: dict) -> Outcome:
    """The Evaluate stage from its DrafterBenchmark: the current drafter's figures once it finished."""
    status = benchmark.get("status") or {}
    state = status.get("state")
    if state == "Failed":
        reason = next((c.get("message") for c in status.get("conditions") or [] if c.get("type") == "Failed"), None)
        return Outcome("Failed", f"benchmark {benchmark['metadata']['name']} failed: {reason or 'no reason given'}")
    if state != "Succeeded":
        return Outcome("Running")
    result = status.get("result") or {}
    if not result.get("tokensPerSecond"):
        return Outcome("Failed", f"benchmark {benchmark['metadata']['name']} measured no throughput")
    figures = {"currentTokensPerSecond": result["tokensPerSecond"],
               "baselineTokensPerSecond": result.get("baselineTokensPerSecond"),
               "currentSpeedup": result.get("speedup")}
    return Outcome("Succeeded", f"the current drafter measured {result['tokensPerSecond']:.1f} tok/s",
                   {k: v for k, v in figures.items() if v is not None})


def promotion_patch(serving: dict, spec: DrafterTrainingSpec, training: str, generation: int,
                    current_tokens_per_second: float | None) -> dict | None:
    """The merge patch that swaps the new drafter into the serving through its gate; None once the
    serving already points at it (a repeated reconcile, or a restarted operator, patches nothing)."""
    drafter = (serving.get("spec") or {}).get("drafter") or {}
    if drafter.get("model") == spec.output.path:
        return None
    gate = spec.promote.gate.to_json() if spec.promote.gate else {}
    if current_tokens_per_second:
        # Beat the current drafter under the same settings, as well as any threshold of promote.gate.
        floor = Decimal(f"{current_tokens_per_second:.2f}")
        gate["minTokensPerSecond"] = str(max(floor, Decimal(gate.get("minTokensPerSecond") or "0")))
    # The drafter is replaced whole (a merge patch only adds keys): the method's own knobs stay.
    new_drafter = {key: None for key in drafter}
    new_drafter.update(method=TRAINED_METHOD, model=spec.output.path)
    for kept in ("numSpeculativeTokens", "dynamic", "allowKnownBad"):
        if kept in drafter and drafter.get("method") == TRAINED_METHOD:
            new_drafter[kept] = drafter[kept]
    return {"metadata": {"annotations": {PROMOTED_BY: f"{training} (generation {generation})"}},
            "spec": {"drafter": new_drafter, "swap": {"strategy": "BlueGreen", "gate": gate or None}}}


def promotion_outcome(serving: dict, output_path: str) -> Outcome:
    """The Promote stage from the serving: the newest revision that runs the new drafter, once it is
    active (Succeeded) or its gate refused it (Failed: the old revision keeps serving)."""
    status = serving.get("status") or {}
    revisions = [r for r in status.get("revisions") or []
                 if ((r.get("drafterSpec") or {}).get("model")) == output_path]
    if not revisions:
        return Outcome("Running", "the serving has not started a revision with the new drafter yet")
    revision = revisions[-1]
    name = revision["name"]
    last = status.get("lastBenchmark") or {}
    figures = {"revision": name}
    if last.get("revision") == name:
        figures.update({k: v for k, v in {"benchmark": last.get("name"), "tokensPerSecond": last.get("tokensPerSecond"),
                                           "speedup": last.get("speedup"),
                                           "acceptanceLength": last.get("acceptanceLength")}.items() if v is not None})
    if revision.get("good") is False:
        return Outcome("Failed", f"revision {name} {revision.get('failedReason') or 'failed'}; "
                                 f"revision {status.get('activeRevision')} keeps serving", figures)
    if status.get("activeRevision") == name and revision.get("good"):
        return Outcome("Succeeded", f"revision {name} serves the new drafter", figures)
    return Outcome("Running", f"revision {name} is starting or being benchmarked", figures)
