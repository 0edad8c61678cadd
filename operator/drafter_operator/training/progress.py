"""How far a running DrafterTraining stage is, read from its commands' output (pure).

``drafter-operator run-stage`` (stage_runner.py) feeds every output line of its commands to
``advance`` and prints one normalized line whenever the progress changes (``format_line``)::

    drafter-progress {"stage":"Extract","samplesDone":12,"samplesTotal":24,"percent":50.0,...}

The operator reads the last of them from the stage pod's log tail (``latest_status``) into
status.progress and status.hiddenStates.bytesWritten. The frameworks print their progress in their
own formats, none of them meant for machines; these are the ones recognized (each from real output,
tests/unit/data/training_logs/):

* Generate: tqdm bars ``Map (num_proc=N): ... n/N`` (speculators ``prepare-data`` rendering the
  conversations) and ``Generating responses: ... n/N`` (speculators ``regenerate-responses``), and
  ``regenerated n/N samples`` (our own ``drafter-operator regenerate``, training/regenerate.py, which
  answers the prompts through the target's engine pod with spec.data.generation): samples.
* Extract: the CPU adapter's ``hf_hidden_states: extracted n/N samples``; a tqdm bar without a
  description (speculators ``generate-offline-data``, SpecForge's ``prepare_hidden_states.py``):
  samples.
* Train: SpecForge's ``step N: {... 'loss': X ...}`` (every ``log_interval`` steps: step, loss;
  SpecForge prints neither the epoch nor the total steps when stderr is not a terminal);
  speculators' ``Training epoch i/n started`` (epoch), ``train/loss=X`` and ``global_step=N`` of its
  metric records (loss, step), and its epoch bar ``Epoch k 100% ━━━ n/N`` (steps per epoch: total
  steps from then on).
* Export: the ``Writing model shards: ... n/N`` bar (SpecForge export, percent only).

Plan hints (``start``): the samples asked for (``--num-samples``, ``--max-samples``,
``--sample-size``, ``--limit``) and the epochs (``--epochs``, or ``training.num_epochs`` of a YAML
config file) are known before any output; what the output says overrides them. A Train that resumes
from a checkpoint (the plan's ``resumedFrom``, run-stage's: training/checkpoints.py) says so on every
line: ``resumedFromStep`` and the summary's "resumed from step N" (or "after epoch E" where the
framework did not record the step).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import NamedTuple

from drafter_operator import timestamps

PREFIX = "drafter-progress "
#: status.progress's fields (api/training.py TrainingProgress), in the line's camelCase.
PROGRESS_FIELDS = ("samplesDone", "samplesTotal", "epoch", "epochs", "step", "steps", "loss", "etaSeconds",
                   "percent", "summary", "updated", "resumedFromStep")
_COUNTS = ("samplesDone", "samplesTotal", "epoch", "epochs", "step", "steps", "etaSeconds", "bytesWritten", "estimatedBytes",
           "tokens", "resumedFromStep")
SAMPLE_STAGES = ("Generate", "Extract")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUMBER = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"
_EXTRACTED = re.compile(r"hf_hidden_states: extracted (\d+)/(\d+) samples")
_REGENERATED = re.compile(r"^regenerated (\d+)/(\d+) samples$")  # regenerate.Progress.report
_SPECFORGE_STEP = re.compile(r"^step (\d+): \{.*'loss': " + _NUMBER)
_SPECULATORS_EPOCH = re.compile(r"\b(Training|Validation) epoch (\d+)/(\d+) (started|completed)")
_SPECULATORS_LOSS = re.compile(r"(?:^|[\s,])train/loss=" + _NUMBER)
_SPECULATORS_STEP = re.compile(r"(?:^|[\s,])global_step=(\d+)")
_SPECULATORS_BAR = re.compile(r"^Epoch \d+ +\d+% .*?(\d+)/(\d+) +\[")
_TQDM = re.compile(r"^(?P<desc>[^|]*?):?\s*\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[")
_SAMPLE_FLAGS = ("--num-samples", "--max-samples", "--sample-size", "--limit")


@dataclass(frozen=True)
class Progress:
    """What the output of a stage said so far, plus the first and latest (time, units done) seen."""

    samples_done: int | None = None
    samples_total: int | None = None
    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    steps: int | None = None
    loss: float | None = None
    shards_done: int | None = None
    shards_total: int | None = None
    #: speculators' validation pass: its bar counts validation batches, not training steps.
    validating: bool = False
    steps_per_epoch: int | None = None
    #: Where a resumed Train started: its checkpoint's optimizer step and (speculators) epoch.
    resumed_from_step: int | None = None
    resumed_from_epoch: int | None = None
    #: (seconds, units done) when the units first moved, and now: the rate is measured between them.
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None

    def done_and_total(self) -> tuple[int | None, int | None]:
        """The stage's units: samples (Generate, Extract), training steps, or export shards."""
        if self.samples_done is not None:
            return self.samples_done, self.samples_total
        if self.step is not None:
            return self.step, self.steps
        return self.shards_done, self.shards_total

    def rate(self) -> float | None:
        """Units per second since the units were first seen moving."""
        if self.first is None or self.last is None or self.last[0] <= self.first[0] or self.last[1] <= self.first[1]:
            return None
        return (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])

    def percent(self) -> float | None:
        done, total = self.done_and_total()
        if done is not None and total:
            return round(min(100.0, 100.0 * done / total), 1)
        if self.epoch and self.epochs:  # speculators before its first epoch ends: the epochs behind
            return round(min(100.0, 100.0 * (self.epoch - 1) / self.epochs), 1)
        return None

    def eta_seconds(self) -> int | None:
        done, total = self.done_and_total()
        rate = self.rate()
        if done is None or not total or not rate:
            return None
        return max(0, math.ceil((total - done) / rate))

    def summary(self) -> str | None:
        """Short text for kubectl's printer column, e.g. "12/24 samples" or "epoch 1/5 step 40/200 loss 2.31"."""
        if self.samples_done is not None:
            return f"{self.samples_done}/{self.samples_total} samples" if self.samples_total else \
                f"{self.samples_done} samples"
        parts = []
        if self.epoch is not None:
            parts.append(f"epoch {self.epoch}/{self.epochs}" if self.epochs else f"epoch {self.epoch}")
        if self.step is not None:
            parts.append(f"step {self.step}/{self.steps}" if self.steps else f"step {self.step}")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.3g}")
        if not parts and self.shards_done is not None:
            parts.append(f"shards {self.shards_done}/{self.shards_total}")
        if self.resumed_from_step is not None:
            parts.append(f"(resumed from step {self.resumed_from_step})")
        elif self.resumed_from_epoch is not None:
            parts.append(f"(resumed after epoch {self.resumed_from_epoch + 1})")
        return " ".join(parts) or None


def _flag(argv: list[str], names: tuple[str, ...]) -> int | None:
    for i, arg in enumerate(argv[:-1]):
        if arg in names and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return None


def _yaml_epochs(text: str) -> int | None:
    import yaml

    try:
        content = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    training = content.get("training") if isinstance(content, dict) else None
    epochs = training.get("num_epochs") if isinstance(training, dict) else None
    return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 0 else None


def start(plan: Mapping) -> Progress:
    """The progress known from a stage plan (stage_runner.stage_plan) before its commands print anything."""
    stage = plan.get("stage")
    argvs = [list(c.get("argv") or []) for c in plan.get("commands") or [] if not c.get("server")]
    if stage in SAMPLE_STAGES:
        totals = [n for argv in argvs if (n := _flag(argv, _SAMPLE_FLAGS)) is not None]
        return Progress(samples_total=totals[-1] if totals else None)
    if stage == "Train":
        epochs = [n for argv in argvs if (n := _flag(argv, ("--epochs",))) is not None]
        epochs += [n for f in plan.get("files") or [] if str(f.get("name", "")).endswith((".yaml", ".yml"))
                   if (n := _yaml_epochs(str(f.get("text", "")))) is not None]
        resumed = plan.get("resumedFrom") or {}
        step, epoch = resumed.get("step"), resumed.get("epoch")
        step = step if isinstance(step, int) and step >= 0 else None
        return Progress(epochs=epochs[0] if epochs else None, step=step, resumed_from_step=step,
                        resumed_from_epoch=epoch if isinstance(epoch, int) and epoch >= 0 else None)
    return Progress()


def clean(line: str) -> str:
    """A line without colour codes or trailing blanks."""
    return _ANSI.sub("", line).rstrip()


def _moved(state: Progress, now: float) -> Progress:
    """Record (now, units done) for the rate."""
    done, _total = state.done_and_total()
    if done is None:
        return state
    if state.first is None or (state.last is not None and done < state.last[1]):
        return replace(state, first=(now, done), last=(now, done))  # first sight, or a restart from fewer
    return replace(state, last=(now, done))


def _number(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _advance_one(state: Progress, line: str, stage: str) -> Progress:
    if match := _EXTRACTED.search(line):
        return replace(state, samples_done=int(match[1]), samples_total=int(match[2]))
    if stage == "Generate" and (match := _REGENERATED.match(line)):
        return replace(state, samples_done=int(match[1]), samples_total=int(match[2]))
    if stage == "Train":
        if match := _SPECFORGE_STEP.search(line):
            return replace(state, step=int(match[1]), loss=_number(match[2]))
        if match := _SPECULATORS_EPOCH.search(line):
            validating = match[1] == "Validation" and match[4] == "started"
            if match[1] == "Training" and match[4] == "started":
                state = replace(state, epoch=int(match[2]), epochs=int(match[3]))
            return replace(state, validating=validating)
        if match := _SPECULATORS_BAR.search(line):
            if state.validating:
                return state
            # Steps done, plus this epoch's length for each epoch left: an estimate (speculators packs
            # sequences, so epochs differ by a step or so); exact once the last epoch's bar is out.
            per_epoch, done = int(match[2]), state.step or 0
            left = max(0, state.epochs - state.epoch) if state.epochs and state.epoch else None
            return replace(state, steps_per_epoch=per_epoch, steps=done + per_epoch * left if left is not None else None)
        if not state.validating:
            if match := _SPECULATORS_LOSS.search(line):
                state = replace(state, loss=_number(match[1]))
            if "Resuming" not in line and (match := _SPECULATORS_STEP.search(line)):
                step = int(match[1]) + 1  # logged before the count moves: 0 = the first step done
                # The estimate from the last epoch's length may run short: never fewer steps than done.
                state = replace(state, step=step, steps=max(state.steps, step) if state.steps else None)
        return state
    if match := _TQDM.search(line):
        desc, done, total = match["desc"].strip(), int(match["n"]), int(match["total"])
        if (stage == "Generate" and desc.startswith(("Map", "Generating responses"))) or (stage == "Extract" and not desc):
            return replace(state, samples_done=done, samples_total=total)
        if stage == "Export" and desc.startswith("Writing model shards"):
            return replace(state, shards_done=done, shards_total=total)
    return state


def advance(state: Progress, text: str, stage: str, now: float) -> Progress:
    """``state`` after one output line (or several, or tqdm's carriage-return updates) of ``stage``'s
    commands, seen at ``now`` (seconds on any steady clock)."""
    for line in re.split(r"[\r\n]+", text):
        line = clean(line)
        if line and not line.startswith(PREFIX):
            state = _moved(_advance_one(state, line, stage), now)
    return state


def rfc3339(at: datetime) -> str:
    return timestamps.format_seconds(at)


@dataclass(frozen=True)
class OutputBytes:
    """What a stage's outputs hold: ``written`` since it started (None: not grown yet), ``estimated`` when
    done (the plan's estimate, None without one)."""

    written: int | None = None
    estimated: int | None = None


def record(state: Progress, stage: str, at: datetime, output: OutputBytes = OutputBytes(),
           outcome: str | None = None, cost: Mapping | None = None) -> dict:
    """The JSON of a ``drafter-progress`` line: the TrainingProgress fields that are known, in
    camelCase, plus ``stage``, ``bytesWritten`` and ``estimatedBytes``; ``outcome`` ("Succeeded", "Failed") on the last;
    ``cost``, the run's estimate (training/cost.py: ``gpuSeconds`` by stage, ``tokens``, ``basis``)."""
    percent, eta = state.percent(), state.eta_seconds()
    if outcome == "Succeeded":
        percent, eta = 100.0, 0
    fields = {
        "stage": stage,
        "samplesDone": state.samples_done, "samplesTotal": state.samples_total,
        "epoch": state.epoch, "epochs": state.epochs, "step": state.step, "steps": state.steps,
        "loss": state.loss, "etaSeconds": eta, "percent": percent,
        "summary": state.summary() or (f"{stage} {outcome.lower()}" if outcome else f"{stage} running"),
        "updated": rfc3339(at), "bytesWritten": output.written, "estimatedBytes": output.estimated, "outcome": outcome,
        "cost": dict(cost) if cost else None, "resumedFromStep": state.resumed_from_step,
    }
    return {k: v for k, v in fields.items() if v is not None}


def format_line(payload: Mapping) -> str:
    """One log line: the prefix and compact JSON (no newline inside)."""
    return PREFIX + json.dumps(dict(payload), separators=(",", ":"), sort_keys=True)


class LatestProgress(NamedTuple):
    """The last progress line of a log tail, as the controller writes it."""

    stage: str | None
    #: status.progress (camelCase TrainingProgress fields; ``updated`` always set).
    progress: dict
    #: Bytes the stage's outputs grew to (status.hiddenStates.bytesWritten for Extract), or None.
    bytes_written: int | None
    #: What the stage expects to write in all (status.hiddenStates.estimatedBytes for Extract), or None.
    estimated_bytes: int | None = None
    #: The run's cost estimate the stage runner computed (training/cost.py), or None.
    cost: dict | None = None


def _valid(name: str, value) -> bool:
    if name in _COUNTS:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if name in ("loss", "percent"):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, str)


def _valid_cost(cost) -> bool:
    """``{"gpuSeconds": {stage: seconds}, "tokens": n, "basis": text}`` with finite, non-negative numbers."""
    if not isinstance(cost, dict) or not isinstance(cost.get("basis"), str) or not _valid("tokens", cost.get("tokens")):
        return False
    seconds = cost.get("gpuSeconds")
    return isinstance(seconds, dict) and all(
        isinstance(stage, str) and isinstance(value, (int, float)) and not isinstance(value, bool)
        and math.isfinite(value) and value >= 0 for stage, value in seconds.items())


def _parse_time(text) -> datetime | None:
    return timestamps.parse_aware(text)


def latest_status(log_text: str, now: datetime) -> LatestProgress | None:
    """The last well-formed ``drafter-progress`` line of ``log_text`` (e.g. a pod's log tail), or None.

    Fields of the wrong type are dropped, never guessed. ``etaSeconds`` is counted from ``now`` (the
    line's estimate less the time since it was printed); ``updated`` is the line's time, else ``now``.
    """
    for line in reversed(re.split(r"[\r\n]+", log_text)):
        start = line.find(PREFIX)
        if start < 0:
            continue
        try:
            payload = json.loads(line[start + len(PREFIX):])
        except ValueError:
            continue
        if not isinstance(payload, dict):
            continue
        progress = {k: payload[k] for k in PROGRESS_FIELDS if k in payload and _valid(k, payload[k])}
        at = _parse_time(progress.get("updated"))
        progress["updated"] = rfc3339(at or now)
        if "etaSeconds" in progress and at is not None:
            progress["etaSeconds"] = max(0, progress["etaSeconds"] - max(0, int((now - at).total_seconds())))
        if "percent" in progress:
            progress["percent"] = min(100.0, max(0.0, float(progress["percent"])))
        written, estimated = payload.get("bytesWritten"), payload.get("estimatedBytes")
        stage = payload.get("stage")
        cost = payload.get("cost")
        return LatestProgress(stage if isinstance(stage, str) else None, progress,
                              written if _valid("bytesWritten", written) else None,
                              estimated if _valid("estimatedBytes", estimated) else None,
                              cost if _valid_cost(cost) else None)
    return None
