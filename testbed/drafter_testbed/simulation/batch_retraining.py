"""spec.retraining in the batch world (batch.py mixes it in): the serving `kimi` of one scenario in eight
(`RETRAINING_SCENARIOS`) carries a spec.retraining, and the operator runs the real `RetrainingReconciler` (observe,
decide, apply) beside the training and benchmark reconcilers, against the same apiserver, crashing where they crash.

What is modelled, and how:

* The serving's spec.retraining: a template that is one of the world's own training specs (its stages run, fail,
  are disrupted, refused by the allow-list... as every training's, through the real `TrainingReconciler`),
  warm-started from the drafter the serving runs (`resources/retraining.py` renders it; its stages shorter:
  `RETRAINING_STAGE_MAX`), onDrift, a cooldown, a small historyLimit (1 or 2: trimming happens in most scenarios),
  sometimes an interval and minNewSamples (then spec.capture too).
* The operator's loop (`handlers.retraining_serving_event`, `retraining_training_event`): a reconcile on every event
  of the serving and of a training labelled as its retraining, and every `TICK` while the serving has spec.retraining.
* The capture's count (`count_samples`): the operator lists the serving's pods first, as `ask_capture` does (a
  request, where the operator may crash), then the count of prompts captured since the time asked grows with
  simulated time (`SAMPLES_PER_SECOND`); while a `capture` operation holds, no sidecar answers (unreadable).
* A person (`retrain`) annotates drafter.dev/retrain with a fresh value (as `$(date +%s)` would), at times twice
  (the second while the first one's training runs), at times just before the operator dies mid-apply: at its first
  or second request after it created the training (the status write that records the start, the trimming after it).
* The serving controller is not run. Its part is played here, from what it would write: DriftDetected turning True or
  False (`drift`; lastTransitionTime when its status changes), and a promotion. When a training's Promote patches the
  serving's drafter, after a rollout of 1 to 10 minutes a revision running that drafter (model and content digest, as
  the patch set them) is appended to status.revisions: three times in four it passed its gate and is the active
  revision (DriftDetected False again: a new drafter, a new figure at promotion), else it is `good: false` with the
  gate's reason and the old revision keeps serving. The training reads its Promote outcome from that, as it reads a
  real serving's. Not modelled: the swap itself (Deployments, drains, the gate's benchmark), Degraded and its actions,
  the serving deleted or re-created, a person deleting or editing a retraining's training.
"""

from __future__ import annotations

import copy
import datetime as dt
import random

from drafter_operator.acceptance.drift import CONDITION as DRIFT_CONDITION, DRIFTED
from drafter_operator.constants import BENCHMARK_LABEL, RETRAIN_ANNOTATION, RETRAINING_LABEL, TRAINING_LABEL
from drafter_operator.controllers.retraining.decide import NewSamples
from drafter_operator.resources.labels import SERVING_LABEL

#: Where the template exports (each run beside it, at <path>-r<N>).
TEMPLATE_OUTPUT = "/models/drafters/kimi-retrained"
#: The template: one of the world's training configurations, alone on its claim, neither queued nor across nodes
#: (what the slot trainings already exercise), no base drafter of its own (warm-started from what serves).
TEMPLATE_CONFIG = {"output": 0, "user_claim": False, "retain": False, "samples": 1000, "epochs": 1, "base": 0,
                   "framework": "specforge", "nodes": 1, "queued": False, "generation": False, "image": 0}
#: What a scenario's spec.retraining sets, each drawn once.
RETRAINING_FIELDS = {"cooldown": ["1h", "3h"], "historyLimit": [1, 2, 2], "minNewSamples": [None, None, 300, 3000],
                     "interval": [None, "4h"]}
#: One scenario in this many has spec.retraining (its seed RETRAINING_SEED modulo this).
RETRAINING_SCENARIOS, RETRAINING_SEED = 8, 6
#: A retraining's stage pods (and its Evaluate benchmark's) run 30 s to this long (the slot trainings': to 40
#: minutes): warm-started from the drafter that serves, it costs a fraction of a first training
#: (resources/retraining.py). Shorter runs also keep the scenarios' cost low: an unfinished training is reconciled
#: every minute.
RETRAINING_STAGE_MAX = 600.0
CAPTURE = {"sampleRate": "0.05", "claimName": "captured"}
SAMPLES_PER_SECOND = 0.2  # prompts the capture keeps: 720 an hour
PROMOTION_SUCCESS = 0.75


def draw_retraining(seed: int) -> dict | None:
    """The scenario's spec.retraining configuration, from a stream of its own, or None: seeds 6, 14, 22..., clear of
    the seeds the mutant patches record, whose scenarios, as every other seed's, stay drawn as before it existed."""
    if seed % RETRAINING_SCENARIOS != RETRAINING_SEED:
        return None
    rng = random.Random(f"batch-retraining/{seed}")
    return {field: rng.choice(values) for field, values in RETRAINING_FIELDS.items()}


def retraining_spec(config: dict) -> dict:
    """spec.retraining for a configuration (valid by construction: the template is a world training's spec)."""
    from drafter_testbed.simulation.batch import training_spec
    template = training_spec(TEMPLATE_CONFIG, 0)
    template["output"] = {"path": TEMPLATE_OUTPUT}
    spec = {"template": {"spec": template}, "onDrift": True, "cooldown": config["cooldown"],
            "historyLimit": config["historyLimit"]}
    for optional in ("minNewSamples", "interval"):
        if config.get(optional) is not None:
            spec[optional] = config[optional]
    return spec


def with_retraining(spec: dict, config: dict | None) -> dict:
    """The serving's spec, with spec.retraining (and the capture minNewSamples counts) when the scenario has one."""
    if config is None:
        return spec
    spec = {**copy.deepcopy(spec), "retraining": retraining_spec(config)}
    if config.get("minNewSamples") is not None:
        spec["capture"] = dict(CAPTURE)
    return spec


class RetrainingWorld:
    """Mixed into BatchWorld (it has api, clock, rng, track, the serving's key and name)."""

    def init_retraining(self) -> None:
        self.retraining = self.setup.get("retraining")
        self.capture_down_until = 0.0
        self.crash_after_create: int | None = None

    def of_a_retraining(self, pod: dict) -> bool:
        """Is this a pod of a training the serving started (its stages, or its Evaluate benchmark's)?"""
        from drafter_testbed.simulation.batch import BENCHMARKS, TRAININGS
        if not self.retraining:
            return False
        labels = pod["metadata"].get("labels") or {}
        if BENCHMARK_LABEL in labels:  # Evaluate's: the benchmark carries its training's label
            benchmark = self.api.store.get(f"{BENCHMARKS}/{labels[BENCHMARK_LABEL]}") or {"metadata": {}}
            labels = benchmark["metadata"].get("labels") or {}
        training = labels.get(TRAINING_LABEL)
        body = self.api.store.get(f"{TRAININGS}/{training}") if training else None
        return body is not None and RETRAINING_LABEL in (body["metadata"].get("labels") or {})

    # ------------------------------------------------------------------ the capture's count
    def count_samples(self, namespace: str, name: str, since: dt.datetime) -> NewSamples:
        """As `ask_capture`: the serving's pods listed (a request), then a sidecar's count, unless none answers."""
        from drafter_testbed.simulation.batch import PODS
        from drafter_testbed.simulation.clock import T0
        self.api.list(PODS, label_selector=f"{SERVING_LABEL}={name}")
        if self.clock.t < self.capture_down_until:
            return NewSamples(since, None, f"{name}-r1-0: [Errno 111] Connection refused")
        counted = max(0.0, self.clock.t - (since - T0).total_seconds())
        return NewSamples(since, int(SAMPLES_PER_SECOND * counted))

    # ------------------------------------------------------------------ the serving controller's part
    def serving_written(self, actor: str, old: dict | None, new: dict | None) -> None:
        """A training's Promote patched the serving's drafter: the serving controller rolls out its revision."""
        if actor != "operator" or old is None or new is None:
            return
        drafter = (new.get("spec") or {}).get("drafter")
        if drafter != (old.get("spec") or {}).get("drafter"):
            self.clock.after(self.rng.uniform(60, 600), self.serving_rolls_out, self.rng.random() < PROMOTION_SUCCESS)

    def serving_rolls_out(self, passes: bool) -> None:
        from drafter_testbed.simulation.batch import SERVING, SERVINGS
        serving = self.api.store.get(f"{SERVINGS}/{SERVING}")
        spec, status = serving["spec"], dict(serving.get("status") or {})
        revisions = list(status.get("revisions") or [])
        if any(r.get("drafterSpec") == spec["drafter"] for r in revisions):
            return  # already rolled out (a second patch of the same drafter)
        name = f"r{len(revisions) + 1}"
        revision = {"name": name, "engine": spec["engine"], "drafterSpec": copy.deepcopy(spec["drafter"]),
                    "good": passes}
        if passes:
            status["activeRevision"] = name
            status["conditions"] = self._condition(status, DRIFT_CONDITION, False)
        else:
            revision["failedReason"] = "failed its gate: 88.1 tok/s is below minTokensPerSecond 91.50"
        status["revisions"] = revisions + [revision]
        self.api.put("serving-controller", f"{SERVINGS}/{SERVING}", {**serving, "status": status})

    def _condition(self, status: dict, kind: str, true: bool) -> list[dict]:
        """status.conditions with ``kind`` set to ``true`` (lastTransitionTime moves only when its status does)."""
        conditions = [dict(c) for c in status.get("conditions") or []]
        found = next((c for c in conditions if c.get("type") == kind), None)
        value = "True" if true else "False"
        if found is None and not true:
            return conditions
        if found is None:
            found = {"type": kind}
            conditions.append(found)
        if found.get("status") != value:
            found.update(status=value, lastTransitionTime=self.clock.iso())
        found.update(reason=DRIFTED if true else "AcceptanceAtPromotion",
                     message="acceptance below the figure at promotion" if true else "acceptance holds")
        return conditions

    # ------------------------------------------------------------------ operations
    def op_retrain(self, op: dict) -> None:
        """A person asks for a retraining: a fresh value of drafter.dev/retrain; with ``again``, someone asks once more
        that long after (while the first one's training likely runs); with ``crash``, the operator dies at that many
        requests after creating the training the request starts (1: the status write that records it)."""
        self._request(f"sim-{op['salt']}")
        self.crash_after_create = op.get("crash")
        if op.get("again"):
            self.clock.after(op["again"], self._request, f"sim-{op['salt']}-again")

    def _request(self, value: str) -> None:
        from drafter_testbed.simulation.batch import SERVING, SERVINGS
        serving = self.api.store[f"{SERVINGS}/{SERVING}"]
        meta = serving["metadata"]
        self.api.put("user", f"{SERVINGS}/{SERVING}", {**serving, "metadata": {
            **meta, "annotations": {**(meta.get("annotations") or {}), RETRAIN_ANNOTATION: value}}})
        self.track.retrain_requested(value)

    def retraining_created(self, actor: str, old: dict | None, new: dict | None) -> None:
        """The operator created a retraining's training: it dies at its n-th request from now, if a request said so."""
        if actor == "operator" and old is None and new is not None and self.crash_after_create \
                and RETRAINING_LABEL in (new["metadata"].get("labels") or {}) and self.api.faults.crash_in is None:
            self.api.faults.crash_in, self.crash_after_create = self.crash_after_create, None
            self.pending_restart_after = 20.0

    def op_drift(self, op: dict) -> None:
        """The serving controller's DriftDetected turns True (the live acceptance fell) or False."""
        from drafter_testbed.simulation.batch import SERVING, SERVINGS
        serving = self.api.store[f"{SERVINGS}/{SERVING}"]
        status = dict(serving.get("status") or {})
        status["conditions"] = self._condition(status, DRIFT_CONDITION, op["on"])
        self.api.put("serving-controller", f"{SERVINGS}/{SERVING}", {**serving, "status": status})

    def op_capture(self, op: dict) -> None:
        """No capture sidecar answers for a while (restarting, its claim slow): the count is unreadable."""
        self.capture_down_until = max(self.capture_down_until, self.clock.t + op["for"])


#: A scenario with spec.retraining draws its pauses shorter (operations.timeline's split: 150 s, not 300), so that its
#: 50 operations come closer together over about the 6 hours every scenario covers, not 9: the retraining loop's
#: reconcile every minute costs as the hours do.
RETRAINING_SPLIT = 150

#: The operations of a scenario with spec.retraining, beside batch.KINDS.
RETRAINING_KINDS = [("retrain", 5), ("drift", 4), ("capture", 2)]


def draw_retraining_op(rng: random.Random, kind: str, op: dict) -> None:
    if kind == "retrain":
        op["crash"] = rng.choice([None, None, 1, 2])
        op["again"] = rng.choice([None, None, rng.uniform(60, 1200)])
    elif kind == "drift":
        op["on"] = rng.random() < 0.6
    elif kind == "capture":
        op["for"] = rng.uniform(120, 3600)
