"""A training never exports over what a DrafterServing loads (pure): the operator-side half of the
path rules in api/training.py, which CEL cannot check (it sees one object, not the namespace's servings).

A serving loads its target, its drafter, and any drafter its recorded revisions or its degraded action
may bring back (a Rollback restores them). Paths are compared on the volume, not as strings: a path
counts only when it lies under its object's storage.mountPath, and only against the same claim, as its
place relative to the mount (a serving may mount the claim elsewhere). Serving paths are not required to
be normalised, so they are normalised here before the comparison.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from drafter_operator.api.common import paths_overlap


def _on_claim(path: str | None, mount: str) -> str | None:
    """``path``'s place relative to the volume mounted at ``mount`` ('' for the root), or None when it is no
    path on that volume (a hub id, or elsewhere in the pod)."""
    if not path or not path.startswith("/"):
        return None
    path = posixpath.normpath(path)
    if path == mount:
        return ""
    return path[len(mount) + 1:] if path.startswith(mount + "/") else None


def loaded_paths(serving: dict) -> list[tuple[str, str]]:
    """(what, path) for every model a serving loads or may load again: its spec's target and drafter, its
    revisions' drafters, the drafter its degraded action serves."""
    spec, status = serving.get("spec") or {}, serving.get("status") or {}
    found = [("target.model", (spec.get("target") or {}).get("model")),
             ("drafter.model", (spec.get("drafter") or {}).get("model"))]
    found += [(f"revision {r.get('name')}", (r.get("drafterSpec") or {}).get("model"))
              for r in status.get("revisions") or []]
    action = status.get("degradedAction") or {}
    found.append(("its degraded action", (action.get("drafterSpec") or {}).get("model")))
    return [(what, path) for what, path in found if path]


def output_conflicts(spec, servings: Iterable[dict]) -> list[str]:
    """Why spec.output.path must not be exported to now: each DrafterServing path on the same claim that it
    is, contains or lies under (empty when none)."""
    output = _on_claim(spec.output.path, spec.storage.mount_path)
    if output is None:  # the API keeps it under the mount; nothing to compare otherwise
        return []
    problems = []
    for serving in servings:
        storage = (serving.get("spec") or {}).get("storage") or {}
        if storage.get("modelClaim") != spec.storage.model_claim:
            continue
        mount = storage.get("mountPath") or "/models"
        for what, path in loaded_paths(serving):
            place = _on_claim(path, mount)
            if place is not None and (place == "" or paths_overlap("/" + output, "/" + place)):
                problems.append(
                    f"spec.output.path {spec.output.path} overlaps {path}, which DrafterServing "
                    f"{serving['metadata']['name']} loads ({what}): Export would replace what it serves; "
                    "choose a new spec.output.path (spec.promote swaps the new drafter in)")
                break
    return problems
