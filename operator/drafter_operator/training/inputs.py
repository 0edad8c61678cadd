"""What each stage of a DrafterTraining reads from its spec, as a digest (pure).

A stage's output depends on some spec fields (what it computes) and not on others (how it runs: the images,
env, pod settings, placement, queue, resources of the pods, deadlines, promote). Each stage reads the fields of
the stages before it too, since it reads their outputs. Two specs with the same digest for a stage would have
it write the same thing, so:

* the operator carries a finished stage over to a new spec generation with the same digest (a corrected image,
  a new queue, more memory) rather than run it again (controllers/training/decide.py);
* Train resumes only from checkpoints its own run wrote: the training's uid and Train's digest name the run
  in the checkpoint directory (training/checkpoints.py), so a changed learning rate starts afresh.

Train also reads the pods' GPUs and nodes: its world size is in its checkpoints (a resume on another world size
would not fit them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

#: The spec fields (dotted JSON paths) each stage reads besides those of the stages before it.
STAGE_READS: dict[str, tuple[str, ...]] = {
    "Generate": ("target", "framework", "data", "storage.modelClaim", "storage.mountPath"),
    "Extract": ("baseDrafter", "method", "hiddenStates.layers", "hiddenStates.storage.claimName",
                "train.maxLength", "train.draftVocabSize"),
    "Train": ("train", "resources.gpus", "resources.nodes"),
    "Export": ("output",),
}
ORDER = tuple(STAGE_READS)
#: Read inside a section a stage reads, yet only how it runs: the engine image of regeneration.
HOW_IT_RUNS = ("data.generation.image",)


def _at(spec: Mapping, path: str):
    value = spec
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _without(value, path: str):
    """``value`` (a section) without the dotted ``path`` inside it (relative)."""
    if not isinstance(value, Mapping):
        return value
    head, _, rest = path.partition(".")
    if not rest:
        return {k: v for k, v in value.items() if k != head}
    return {**value, head: _without(value.get(head), rest)} if head in value else dict(value)


def stage_reads(spec: Mapping, stage: str) -> dict:
    """The values of the fields ``stage`` and the stages before it read, by path (``spec``: the spec's JSON as
    the API model writes it, defaults filled in)."""
    reads: dict = {}
    for name in ORDER[:ORDER.index(stage) + 1]:
        for path in STAGE_READS[name]:
            value = _at(spec, path)
            for skipped in HOW_IT_RUNS:
                if skipped.startswith(path + "."):
                    value = _without(value, skipped[len(path) + 1:])
            reads[path] = value
    return reads


def stage_inputs(spec: Mapping, stage: str) -> str:
    """sha256 (hex, 16 digits) of what ``stage`` reads of ``spec`` (see ``stage_reads``)."""
    text = json.dumps(stage_reads(spec, stage), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
