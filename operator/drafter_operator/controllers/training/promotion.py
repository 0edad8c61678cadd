"""Evaluate and Promote, the last two DrafterTraining stages, as pure functions.

Evaluate measures what the new drafter has to beat: a DrafterBenchmark of promote.servingRef as it
serves now (its current drafter), against the promote gate's baseline when it has one, with the
gate's prompt settings. Promote then patches that serving's drafter to the new checkpoint (its model
and the content digest Export recorded: a new export at the same path is a new revision) and sets
the one-shot annotation `drafter.dev/promotion` (promotion_gate.py): a BlueGreen swap to that
drafter's revision whose gate is promote.gate plus `minTokensPerSecond` = the current drafter's
measured throughput. The new drafter takes traffic only if it passes the gate *and* beats the current
one; otherwise the serving's swap machinery keeps the old revision serving and records why. The
serving's spec.swap is never written: later swaps follow it as the user left it. The training reads
the outcome from the serving's revisions (the one with the new model *and* digest), and the serving
carries the annotation `drafter.dev/promoted-by` naming the training (and the training records the
revision), and `drafter.dev/trained-length` with the length it trained the drafter at (serving/length.py).

Both benchmarks measure the same prompts: promote.gate.prompts when the gate names some, else, for a drafter
trained on a serving's capture (spec.data.capture), the captured prompts Generate held out (never trained on),
each tagged with its traffic category, read by the benchmark from the capture's claim; else the built-in set. With held-out
captured prompts both also measure by category (unless the gate says acceptanceByCategory: false), and
status.evaluation.byCategory sets the two drafters side by side: the traffic that drifted is what the new drafter
must serve better, and a category it serves worse is there to read before the promotion lands.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from drafter_operator import timestamps
from drafter_operator.api import DrafterServing
from drafter_operator.api.training import DrafterTrainingSpec, training_problems
from drafter_operator.controllers.promotion_gate import promotion_annotation
from drafter_operator.controllers.serving.length import trained_length_annotation
from drafter_operator.constants import (
    API_GROUP_VERSION,
    PROMOTED_BY_ANNOTATION,
    PROMOTION_ANNOTATION,
    REVISION_LABEL,
    STAGE_LABEL,
    TRAINED_LENGTH_ANNOTATION,
)
from drafter_operator.controllers.training.stages import StageJob
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.families import FAMILIES
from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES
from drafter_operator.resources.training import evaluate_benchmark_name, training_labels

def held_out_prompts(spec: DrafterTrainingSpec, now: dt.datetime) -> dict | None:
    """spec.prompts of a DrafterBenchmark that sends the captured prompts this training held out: the benchmark
    reads the capture's claim itself and keeps the held-out side of the same split (a hash of each prompt, so
    the side Generate left out), never a copy the operator made. ``capturedBefore`` (``now``) pins the set: the
    gate that measures the new drafter later sends the same prompts, not those captured since. None without a
    capture or with nothing held out."""
    if spec.data.capture is None or Decimal(str(spec.data.capture.held_out_fraction)) == 0:
        return None
    return {"capture": {"claimName": spec.data.capture.claim_name,
                        "heldOutFraction": str(spec.data.capture.held_out_fraction),
                        "capturedBefore": timestamps.format_seconds(now)}}


def measured_prompts(spec: DrafterTrainingSpec, now: dt.datetime) -> dict:
    """The prompt settings of the Evaluate benchmark, which the promotion gate copies (``prompts``,
    ``acceptanceByCategory``), so the current and the new drafter are measured on the same set: the gate's own
    prompts, else the held-out captured ones (by category unless the gate turns that off), else none (the
    built-in set)."""
    gate = spec.promote.gate
    settings: dict = {}
    if gate is not None and gate.prompts is not None:
        settings["prompts"] = gate.prompts.to_json()
    elif (held_out := held_out_prompts(spec, now)) is not None:
        settings.update(prompts=held_out, acceptanceByCategory=True)
    if gate is not None and gate.acceptance_by_category is not None:
        settings["acceptanceByCategory"] = gate.acceptance_by_category
    return settings


#: The Evaluate benchmark's settings the promotion gate copies, so both drafters are measured on the same prompts.
MEASURED_SETTINGS = ("prompts", "acceptanceByCategory")


def evaluate_benchmark(namespace: str, training: str, spec: DrafterTrainingSpec, generation: int,
                       now: dt.datetime) -> dict:
    """The DrafterBenchmark of the serving's current drafter (what the new one must beat), on the prompts the
    gate will measure the new one on."""
    gate = spec.promote.gate
    benchmark: dict = {"servingRef": {"name": spec.promote.serving_ref.name},
                       "numPrompts": gate.num_prompts if gate else 5, "maxTokens": gate.max_tokens if gate else 512,
                       **measured_prompts(spec, now)}
    if gate and gate.baseline:
        benchmark["baseline"] = gate.baseline.to_json()
    return {"apiVersion": API_GROUP_VERSION, "kind": "DrafterBenchmark",
            "metadata": {"name": evaluate_benchmark_name(training, generation), "namespace": namespace,
                         "labels": {**training_labels(training), STAGE_LABEL: "Evaluate"}},
            "spec": benchmark}


def serving_problems(spec: DrafterTrainingSpec, serving: dict | None) -> list[str]:
    """Why the drafter cannot go into promote.servingRef (missing, another target, invalid)."""
    if serving is None:
        return training_problems(spec, serving=None)
    name = spec.promote.serving_ref.name
    try:
        serving_spec = DrafterServing.model_validate(serving).spec
    except ValueError as exc:
        return [f"spec.promote.servingRef: DrafterServing {name!r} is invalid: {exc}"]
    problems = training_problems(spec, serving=serving_spec)
    # The serving as Promote would leave it: its engine must serve the trained family with the knobs kept.
    promoted = {**serving, "spec": {**serving["spec"], "drafter": {
        key: value for key, value in promoted_drafter(serving, spec, None).items() if value is not None}}}
    try:
        DrafterServing.model_validate(promoted)
    except ValueError as exc:
        problems.append(f"spec.method: DrafterServing {name!r} could not serve the trained {spec.method} drafter "
                        f"({exc}): promote it into a serving whose engine serves {spec.method}, or change spec.method")
    return problems


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


def exported_digest(artifacts: list[dict] | None, output_path: str) -> str | None:
    """The content digest Export recorded for the drafter at ``output_path`` (status.artifacts)."""
    return next((a.get("contentDigest") for a in artifacts or []
                 if a.get("stage") == "Export" and a.get("path") == output_path and a.get("contentDigest")), None)


def points_at(serving: dict | None, output_path: str, digest: str | None) -> bool:
    """The serving's drafter is this export: the same model and the same content digest (a new export at
    the same path is not the drafter the serving already loads)."""
    drafter = ((serving or {}).get("spec") or {}).get("drafter") or {}
    return drafter.get("model") == output_path and drafter.get("contentDigest") == digest


def promoted_by(training: str, generation: int) -> str:
    """Who a promotion is by, as the serving's annotations record it."""
    return f"{training} (generation {generation})"


def promotion_patch(serving: dict, spec: DrafterTrainingSpec, by: str, current_tokens_per_second: float | None,
                    digest: str | None = None, measured: dict | None = None) -> dict | None:
    """The merge patch that swaps the new drafter (``digest``: what Export wrote) into the serving
    through a one-shot gate; None once the serving already points at it (a repeated reconcile, or a
    restarted operator, patches nothing). spec.swap is left as the user set it. ``by``: promoted_by's;
    ``measured``: the Evaluate benchmark's prompt settings, which the gate measures the new drafter with."""
    if points_at(serving, spec.output.path, digest):
        return None
    gate = {**(spec.promote.gate.to_json() if spec.promote.gate else {}), **(measured or {})}
    if current_tokens_per_second:
        # Beat the current drafter under the same settings, as well as any threshold of promote.gate.
        floor = Decimal(f"{current_tokens_per_second:.2f}")
        gate["minTokensPerSecond"] = str(max(floor, Decimal(gate.get("minTokensPerSecond") or "0")))
    return {"metadata": {"annotations": {
                PROMOTED_BY_ANNOTATION: by,
                PROMOTION_ANNOTATION: promotion_annotation(by, spec.output.path, digest, gate),
                # The length it was trained at, bound to this drafter: the serving's LengthCovered holds its
                # maxModelLen to it (no drafter checkpoint records it).
                TRAINED_LENGTH_ANNOTATION: trained_length_annotation(by, spec.output.path, digest,
                                                                     spec.train.max_length)}},
            "spec": {"drafter": promoted_drafter(serving, spec, digest)}}


#: The serving's drafter settings a promotion keeps whatever family it ran: the depth the user chose for this
#: serving (vLLM needs one for dflash; every model-based family takes it) and the known-bad override.
KEPT_ALWAYS = ("numSpeculativeTokens", "allowKnownBad")
#: The settings a promotion keeps only where the serving already ran the trained family (SGLang's tree shape,
#: the schedule, DSpark's own settings): another family's would not mean the same.
KEPT_WITHIN_FAMILY = ("numSteps", "eagleTopk", "numDraftTokens", "dynamic",
                      *(f.settings for f in FAMILIES if f.trained and f.settings))


def promoted_drafter(serving: dict, spec: DrafterTrainingSpec, digest: str | None) -> dict:
    """The serving's spec.drafter as a merge patch that puts the trained drafter in: replaced whole (every old
    key set to None: a merge patch only adds keys), served with the method it was trained for."""
    drafter = (serving.get("spec") or {}).get("drafter") or {}
    new_drafter = {key: None for key in drafter}
    new_drafter.update(method=spec.method, model=spec.output.path, contentDigest=digest)
    same_family = drafter.get("method") == spec.method
    for kept in KEPT_ALWAYS + (KEPT_WITHIN_FAMILY if same_family else ()):
        if kept in drafter:
            new_drafter[kept] = drafter[kept]
    return new_drafter


def promotion_outcome(serving: dict, output_path: str, digest: str | None = None) -> Outcome:
    """The Promote stage from the serving: the newest revision that runs the new drafter (its model and
    content digest: an older export at the same path never counts), once it is active (Succeeded) or its
    gate refused it (Failed: the old revision keeps serving)."""
    status = serving.get("status") or {}
    revisions = [r for r in status.get("revisions") or []
                 if (r.get("drafterSpec") or {}).get("model") == output_path
                 and (r.get("drafterSpec") or {}).get("contentDigest") == digest]
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


@dataclass(frozen=True)
class PromotionSeen:
    """Evaluate's and Promote's outcomes this cycle (from the benchmark and the serving), status.evaluation
    as they leave it, and the content digest Export recorded."""

    stages: dict[str, StageJob]  # "Evaluate" / "Promote" -> its state, once there is one to read
    evaluation: dict
    digest: str | None
    measured: dict = field(default_factory=dict)  # the Evaluate benchmark's prompt settings (MEASURED_SETTINGS)


def observe_promotion(state: TrainingState, spec: DrafterTrainingSpec) -> PromotionSeen:
    """Read Evaluate from this generation's benchmark and Promote from the serving, when spec.promote is set."""
    meta = state.training["metadata"]
    generation = meta.get("generation") or 1
    status = state.training.get("status") or {}
    this_generation = status.get("observedGeneration") == generation
    evaluation = dict(status.get("evaluation") or {}) if this_generation else {}
    stages: dict[str, StageJob] = {}
    # What Export wrote (its content digest): the serving runs the new drafter only with model *and* digest.
    digest = exported_digest(status.get("artifacts") if this_generation else None, spec.output.path)
    if spec.promote is None:
        return PromotionSeen(stages, evaluation, digest)
    evaluate_name = evaluate_benchmark_name(meta["name"], generation)
    benchmark = next((b for b in state.benchmarks if b["metadata"]["name"] == evaluate_name), None)
    measured = {key: value for key, value in ((benchmark or {}).get("spec") or {}).items() if key in MEASURED_SETTINGS}
    if benchmark is not None:
        outcome = evaluation_outcome(benchmark)
        stages["Evaluate"] = StageJob("Evaluate", outcome.state, outcome.message)
        evaluation.update(outcome.figures or {}, benchmark=evaluate_name)
    gate = None
    if state.serving is not None and points_at(state.serving, spec.output.path, digest):
        outcome = promotion_outcome(state.serving, spec.output.path, digest)
        stages["Promote"] = StageJob("Promote", outcome.state, outcome.message)
        evaluation.update(outcome.figures or {})
        revision = (outcome.figures or {}).get("revision")
        gate = next((b for b in state.gate_benchmarks
                     if (b["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision), None)
    by_category = category_comparison(benchmark, gate)
    if by_category:
        evaluation["byCategory"] = by_category
    return PromotionSeen(stages, evaluation, digest, measured)


#: What status.evaluation.byCategory sets side by side, per drafter: a result row's field -> the row's suffix.
COMPARED = {"acceptanceLength": "AcceptanceLength", "speedup": "Speedup", "tokensPerSecond": "TokensPerSecond"}


def category_comparison(current: dict | None, new: dict | None) -> list[dict]:
    """status.evaluation.byCategory (pure): per traffic category either benchmark measured, the serving's current
    drafter's figures (the Evaluate benchmark, ``current``) beside the new drafter's (the gate benchmark of its
    revision, ``new``), measured on the same prompts; categories in the vocabulary's order."""
    rows: dict[str, dict] = {}
    for side, benchmark in (("current", current), ("new", new)):
        result = ((benchmark or {}).get("status") or {}).get("result") or {}
        for measured in result.get("acceptanceByCategory") or ():
            row = rows.setdefault(measured["category"], {"category": measured["category"]})
            row.setdefault("prompts", measured.get("prompts"))
            row.update({f"{side}{suffix}": measured[field] for field, suffix in COMPARED.items()
                        if measured.get(field) is not None})
    return [{k: v for k, v in rows[c].items() if v is not None} for c in TRAFFIC_CATEGORIES if c in rows]


def category_summary(rows) -> str:
    """status.evaluation.byCategory's acceptance lengths in a line a person reads, e.g. "code 3.10 -> 3.02,
    nonEnglish 1.21 -> 2.87" (a side that was not measured shows "?")."""
    def length(value) -> str:
        return f"{value:.2f}" if isinstance(value, (int, float)) else "?"
    return ", ".join(f"{row['category']} {length(row.get('currentAcceptanceLength'))} -> "
                     f"{length(row.get('newAcceptanceLength'))}" for row in rows
                     if row.get("currentAcceptanceLength") is not None or row.get("newAcceptanceLength") is not None)
