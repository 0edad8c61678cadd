"""Where Train starts: from the last checkpoint its own run wrote, or afresh (run in the stage container).

A Train pod starts again after a disruption (a drained node: the operator starts the stage again), after Kueue
preempted its Job (the Job is suspended, then resumed: a new pod), or after a spec change that kept what Train
reads (training/inputs.py). Each time it must go on from the last checkpoint written, never from step 0, and
never from another run's checkpoints (a training created again under the same name on a retained claim, a
changed learning rate). Each framework's layout, as its installed code writes and reads it:

* SpecForge 0.2.0 (``specforge.training.checkpoint.CheckpointManager``): ``<output_dir>/<run_id>-step<N>/`` holding
  ``training_state.pt`` once complete, and ``<run_id>-latest`` pointing at the last; ``training.resume_from``
  (a checkpoint directory) restores model, optimizer, counters and data position. It saves only every
  ``training.save_interval`` steps (0: never before the end), so the renderer sets one (specforge.py).
* speculators 0.9.0 (``speculators.train.checkpointer``): ``<save_path>/<epoch>/`` per saved epoch, with
  ``training_state.json`` (epoch, local_step, global_step) when written; ``speculators train`` resumes from the
  highest epoch by itself unless ``--no-resume-from-checkpoint``.

The directory holds a marker naming the run that owns it (``RUN_MARKER``: the training's uid and Train's input
digest); a directory of another run is emptied before Train starts, so nothing of it is resumed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

#: The file naming the run whose checkpoints a Train directory holds.
RUN_MARKER = ".drafter-run.json"
#: SpecForge's complete-checkpoint file (specforge.training.checkpoint.STATE_FILE).
SPECFORGE_STATE = "training_state.pt"
#: speculators' per-epoch counters (speculators.train.trainer._training_state_path).
SPECULATORS_STATE = "training_state.json"
_PARTIAL_MARKER = re.compile(re.escape(RUN_MARKER) + r"\..+\.partial$")
_SPECFORGE_STEP = re.compile(r"^(?P<run>.+)-step(?P<step>\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint Train can resume from: its directory's name inside the Train directory, the optimizer steps
    done when it was written (None where the framework did not record them) and, for speculators, its epoch."""

    name: str
    step: int | None
    epoch: int | None = None


def run_id(training_uid: str | None, train_inputs: str) -> str:
    """The run a Train directory belongs to: this training (its uid: a training created again under the same
    name is another run) with these Train inputs (training/inputs.py)."""
    return f"{training_uid or 'unknown'}/{train_inputs}"


def specforge_latest(train_dir: Path, run: str = "drafter") -> Checkpoint | None:
    """The checkpoint SpecForge would resume: ``<run>-latest`` when it points at a complete checkpoint, else the
    highest complete ``<run>-step<N>`` (CheckpointManager.resolve_resume_dir's order)."""
    latest = train_dir / f"{run}-latest"
    if latest.is_symlink() or latest.is_dir():
        resolved = latest.resolve()
        match = _SPECFORGE_STEP.match(resolved.name)
        if match and (resolved / SPECFORGE_STATE).is_file() and resolved.parent == train_dir.resolve():
            return Checkpoint(resolved.name, int(match["step"]))
    steps = sorted((int(m["step"]), p.name) for p in train_dir.iterdir() if p.is_dir() and not p.is_symlink()
                   and (m := _SPECFORGE_STEP.match(p.name)) and m["run"] == run and (p / SPECFORGE_STATE).is_file()) \
        if train_dir.is_dir() else []
    return Checkpoint(steps[-1][1], steps[-1][0]) if steps else None


def speculators_latest(train_dir: Path) -> Checkpoint | None:
    """The epoch checkpoint speculators would resume (the highest numbered directory), with its global step when
    its training_state.json says it."""
    epochs = sorted(int(p.name) for p in train_dir.iterdir() if p.is_dir() and not p.is_symlink()
                    and p.name.isdigit()) if train_dir.is_dir() else []
    if not epochs:
        return None
    where = train_dir / str(epochs[-1])
    try:
        state = json.loads((where / SPECULATORS_STATE).read_text())
    except (OSError, ValueError):
        state = {}
    step = state.get("global_step") if isinstance(state, dict) else None
    return Checkpoint(where.name, step if isinstance(step, int) and step >= 0 else None, epochs[-1])


def latest(framework: str, train_dir: Path) -> Checkpoint | None:
    return specforge_latest(train_dir) if framework == "specforge" else speculators_latest(train_dir)


def _unless_gone(function, path, exc_info) -> None:
    """shutil.rmtree's error handler: an entry another pod removed first is no error; anything else is."""
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]


def claim_run(framework: str, train_dir: Path, run: str) -> Checkpoint | None:
    """Make ``train_dir`` this run's, then the checkpoint to resume from (None: start afresh).

    A directory marked for another run, or with files but no marker, is emptied first: its checkpoints are not
    this run's to resume. The marker is written before Train writes anything.

    Every pod of a Train across nodes calls this at once on the shared directory, so each writes its marker
    through a file of its own (another pod's emptying never removes it) and an entry another pod removed first
    is no error: they all write the same marker, and no checkpoint exists before they all meet at torchrun's
    rendezvous."""
    marker = train_dir / RUN_MARKER
    try:
        owner = json.loads(marker.read_text()).get("run")
    except (OSError, ValueError, AttributeError):
        owner = None
    if owner != run and train_dir.is_dir():
        for entry in train_dir.iterdir():
            if _PARTIAL_MARKER.match(entry.name):
                continue  # another pod's marker on its way in
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, onerror=_unless_gone)
            else:
                entry.unlink(missing_ok=True)
    train_dir.mkdir(parents=True, exist_ok=True)
    if owner != run:
        partial = train_dir / f"{RUN_MARKER}.{socket.gethostname()}.{os.getpid()}.partial"
        partial.write_text(json.dumps({"run": run}))
        partial.replace(marker)
        return None
    return latest(framework, train_dir)
