"""Whether the serving's context length stays within the length its drafter was trained at (pure): the
LengthCovered condition, its Events, and the annotation a DrafterTraining's Promote leaves to say that length.

A drafter trained on sequences of at most N tokens has never seen a position past N: on longer generations its
acceptance falls, and on long contexts speculation can cost more than it saves. The length is known only where
the drafter was trained: a DrafterTraining's spec.train.maxLength. The checkpoint does not record it (speculators
and SpecForge copy ``max_position_embeddings`` from the target's config, so it is the target's length, not the
trained one), so the condition is set only for a drafter a DrafterTraining promoted, which records its length in
the ``drafter.dev/trained-length`` annotation bound to the drafter's model and content digest (a drafter changed
by hand afterwards is not the trained one).
"""

from __future__ import annotations

import json

from drafter_operator.constants import TRAINED_LENGTH_ANNOTATION
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.swap import Verdict

CONDITION = "LengthCovered"
COVERED = "WithinTrainedLength"
LONGER = "LongerThanTrained"
UNSET = "MaxModelLenUnset"
UNKNOWN = "TrainedLengthUnknown"


def trained_length_annotation(by: str, model: str, content_digest: str | None, max_length: int) -> str:
    """The annotation's value: who trained ``model`` (at ``content_digest``) and at what length."""
    record = {"by": by, "model": model, "contentDigest": content_digest, "maxLength": max_length}
    return json.dumps({k: v for k, v in record.items() if v is not None}, sort_keys=True, separators=(",", ":"))


def trained_length(annotations: dict | None, drafter) -> tuple[int, str] | None:
    """(length, who trained it) when the annotation describes ``drafter`` (its model and content digest), else
    None: no promotion recorded it, it names another drafter, or it is unreadable (written by hand)."""
    raw = (annotations or {}).get(TRAINED_LENGTH_ANNOTATION)
    if not raw or drafter is None or not drafter.model:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    length = record.get("maxLength") if isinstance(record, dict) else None
    if not isinstance(length, int) or isinstance(length, bool) or length <= 0:
        return None
    if (record.get("model"), record.get("contentDigest")) != (drafter.model, drafter.content_digest):
        return None
    return length, str(record.get("by") or "a DrafterTraining")


def length_verdict(spec, annotations: dict | None, condition: dict | None) -> Verdict | None:
    """LengthCovered for the drafter that runs (``spec``: the running spec), None to leave it absent: True when
    spec.target.maxModelLen is within the trained length, False (a Warning) when it exceeds it, Unknown when
    maxModelLen is unset (the engine's default is the target's own length, which the operator does not read) or,
    once the condition exists, when the trained length is no longer known."""
    known = trained_length(annotations, spec.drafter)
    if known is None:
        return Verdict("Unknown", UNKNOWN, (
            f"the length drafter {spec.drafter.model or spec.drafter.method} was trained at is not known: only a "
            "DrafterTraining's Promote records it")) if condition is not None else None
    trained, by = known
    model, wanted = spec.drafter.model, spec.target.max_model_len
    if wanted is None:
        return Verdict("Unknown", UNSET, (
            f"spec.target.maxModelLen is unset: the engine serves the target's own context length, which the "
            f"operator does not read; {by} trained drafter {model} at {trained} tokens. Set spec.target.maxModelLen "
            f"to at most {trained}, or train the drafter at the longer length (DrafterTraining spec.train.maxLength)"))
    if wanted > trained:
        return Verdict("False", LONGER, (
            f"spec.target.maxModelLen {wanted} is longer than the {trained} tokens {by} trained drafter {model} at "
            f"(its spec.train.maxLength): past {trained} tokens the drafter meets positions it never learned and its "
            f"acceptance falls. Lower spec.target.maxModelLen to {trained}, or train the drafter at {wanted} with a "
            f"DrafterTraining (spec.train.maxLength: {wanted}) and promote it"))
    return Verdict("True", COVERED, f"spec.target.maxModelLen {wanted} is within the {trained} tokens {by} trained "
                                    f"drafter {model} at")


def length_events(before: list[dict] | None, after: list[dict]) -> list[Event]:
    """A Warning LongerThanTrained when the condition turns False."""
    old = next((c for c in before or [] if c.get("type") == CONDITION), {})
    new = next((c for c in after if c.get("type") == CONDITION), {})
    if new.get("status") == "False" and old.get("status") != "False":
        return [("Warning", LONGER, new["message"])]
    return []
