"""What `kubectl drafter retry`, `retrain`, `rollback` and `benchmark` ask of the cluster, pure: the API the
operator already honours, nothing new.

- retry: a new value of the `drafter.dev/retry` annotation starts the failed desired revision again
  (controllers/serving/status.py retry_request).
- retrain: a new value of the `drafter.dev/retrain` annotation asks spec.retraining for a training now
  (controllers/retraining/decide.py).
- rollback: the spec of the last good revision, restored from what the serving's status recorded of it
  (engine, image, drafter exactly as it ran). The revision name is a hash of that configuration
  (controllers/serving/revisions.py), so the restored spec names the same revision and the operator swaps back
  to it like any spec change. Checked here before anything is written: when the revision also differed
  in what the status does not record (the target, GPUs per replica) the hash says so and nothing changes.
- benchmark: a DrafterBenchmark whose servingRef is the serving.
"""

from __future__ import annotations

import copy

from drafter_operator.api import DrafterServingSpec
from drafter_operator.constants import API_GROUP_VERSION, RETRAIN_ANNOTATION, RETRY_ANNOTATION
from drafter_operator.controllers.serving.revisions import revision_hash


class PluginError(Exception):
    """A request the plugin refuses, with what to do instead."""


def retry_annotation(serving: dict, value: str) -> dict:
    """The metadata patch that retries the serving's failed newest revision; PluginError when it has none."""
    name = serving["metadata"]["name"]
    status = serving.get("status") or {}
    records = status.get("revisions") or []
    if not records or records[-1].get("good") is not False:
        newest = records[-1]["name"] if records else None
        raise PluginError(f"{name}: nothing to retry: its newest revision {newest or '(none yet)'} has not failed "
                          "(a failed revision shows Failed in `kubectl drafter get`)")
    if (serving["metadata"].get("annotations") or {}).get(RETRY_ANNOTATION) == value:
        raise PluginError(f"{name}: {RETRY_ANNOTATION} is already {value!r}: retry needs a new value")
    return {"metadata": {"annotations": {RETRY_ANNOTATION: value}}}


def retrain_annotation(serving: dict, value: str) -> dict:
    """The metadata patch that asks the serving's spec.retraining for a training now; PluginError when it has no
    spec.retraining (nothing would read the annotation)."""
    name = serving["metadata"]["name"]
    if not (serving.get("spec") or {}).get("retraining"):
        raise PluginError(f"{name}: it has no spec.retraining, so nothing would start a training: add spec.retraining "
                          "(docs/serving.md, Retraining), or apply a DrafterTraining yourself")
    if (serving["metadata"].get("annotations") or {}).get(RETRAIN_ANNOTATION) == value:
        raise PluginError(f"{name}: {RETRAIN_ANNOTATION} is already {value!r}: retrain needs a new value")
    return {"metadata": {"annotations": {RETRAIN_ANNOTATION: value}}}


def rollback_target(status: dict) -> dict:
    """The newest revision record before the active one that served well and never went Degraded."""
    active = status.get("activeRevision")
    for record in reversed(status.get("revisions") or []):
        if record.get("name") != active and record.get("good") is True and not record.get("degraded"):
            return record
    raise PluginError("no revision to roll back to: none besides the active one served well (good) without "
                      "going Degraded; edit spec.drafter (or the engine and image) to the configuration you want")


def rollback_patch(serving: dict) -> tuple[list[dict], str]:
    """A JSON patch (RFC 6902) of the spec that names the last good revision again, and that revision's
    name; PluginError when the status does not record enough of it to restore it exactly."""
    name = serving["metadata"]["name"]
    status = serving.get("status") or {}
    target = rollback_target(status)
    if not target.get("drafterSpec") or not target.get("image") or not target.get("engine"):
        raise PluginError(f"{name}: revision {target['name']} has no recorded drafterSpec, image and engine "
                          "(it predates them): edit the spec to its configuration instead")
    spec = copy.deepcopy(serving["spec"])
    spec["engine"] = target["engine"]
    spec["drafter"] = copy.deepcopy(target["drafterSpec"])
    current_image = (status.get("serving") or {}).get("image")
    pin_image = spec.get("image") is not None or target["image"] != current_image
    if pin_image:
        spec["image"] = target["image"]
    restored = revision_hash(DrafterServingSpec.model_validate(spec), target["image"])
    if restored != target["name"]:
        raise PluginError(f"{name}: restoring engine, image and drafter of revision {target['name']} gives "
                          f"revision {restored}: it also differed in its target or GPUs per replica, which the "
                          "status does not record; edit the spec to that configuration instead")
    patch = [{"op": "replace", "path": "/spec/engine", "value": spec["engine"]},
             {"op": "replace", "path": "/spec/drafter", "value": spec["drafter"]}]
    if pin_image:
        patch.append({"op": "add", "path": "/spec/image", "value": spec["image"]})
    return patch, target["name"]


def benchmark_object(serving: str, num_prompts: int, max_tokens: int, concurrency: int) -> dict:
    """A DrafterBenchmark of ``serving`` (named by the apiserver: ``<serving>-bench-<suffix>``)."""
    return {"apiVersion": API_GROUP_VERSION, "kind": "DrafterBenchmark",
            "metadata": {"generateName": f"{serving}-bench-"},
            "spec": {"servingRef": {"name": serving}, "numPrompts": num_prompts, "maxTokens": max_tokens,
                     "concurrency": concurrency}}


def benchmark_line(benchmark: dict) -> str:
    """One line on where a DrafterBenchmark stands (what the follower shows while it waits)."""
    status = benchmark.get("status") or {}
    state = status.get("state") or "Pending"
    complete = next((c for c in status.get("conditions") or [] if c.get("type") == "Complete"), {})
    detail = complete.get("message") if state in ("Pending", "Failed") and complete.get("message") else ""
    job = f" (Job {status['jobName']})" if status.get("jobName") and state == "Running" else ""
    return f"{benchmark['metadata']['name']}: {state}{job}" + (f": {detail}" if detail else "")
