"""Which objects under a DrafterTraining's child names are its own (pure): it trusts only what it owns.

A stage Job mounts the spec ConfigMap of its generation and the hidden-state claim by name, and Train's pods
across nodes meet through the rendezvous Service by name. An object of that name that this training does not own
(its controller owner UID) must never be used: a ConfigMap someone created first would hand the stage Job
another spec (another output path, past `OutputInUse`), a Service would route the rendezvous elsewhere, a claim
would feed it someone's hidden states. Such an object is a NameConflict: the stage waits (nothing is created or
used), the status names the object and the fix, and the run goes on once it is gone. An object owned by an
earlier DrafterTraining of the same name (deleted, not yet collected) is no conflict: the garbage collector
takes it, and the stage waits for that (observe.leftovers).
"""

from __future__ import annotations

from drafter_operator.constants import API_GROUP

KIND = "DrafterTraining"


def owned_by(obj: dict, uid: str | None) -> bool:
    """``obj`` names the training ``uid`` among its owners."""
    return uid is not None and any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def earlier_ones(obj: dict, training: str) -> bool:
    """Owned by a DrafterTraining of this name (an earlier one, deleted and not yet collected)."""
    return any(r.get("kind") == KIND and r.get("name") == training
               and (r.get("apiVersion") or API_GROUP).split("/")[0] == API_GROUP
               for r in obj["metadata"].get("ownerReferences") or [])


def conflicts(objects: tuple[dict, ...], training: str, uid: str | None) -> list[str]:
    """Each object (under one of this training's child names) that neither it nor an earlier training of its
    name owns, as "<Kind> <name>"."""
    return [f"{obj.get('kind') or 'object'} {obj['metadata']['name']}" for obj in objects
            if not owned_by(obj, uid) and not earlier_ones(obj, training)]


def conflict_message(found: list[str], stage: str) -> str:
    return (f"{stage} waits: {', '.join(found)} already exist{'s' if len(found) == 1 else ''} and "
            f"{'is' if len(found) == 1 else 'are'} not this training's (no owner reference to it): the operator never "
            "uses an object it does not own; delete or rename it, and the run goes on")
