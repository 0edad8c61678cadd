"""The writes of a DrafterServing reconcile, built pure: create or patch a revision's Deployment (its pod
template rewritten only when the pod settings changed), scale one, create its gate benchmark, and the
merge patch of the status (`changed_fields`). The Service, the traffic pointer, is `pointer.py`'s.
"""

from __future__ import annotations

import kopf

from drafter_operator.constants import (
    API_GROUP_VERSION,
    BENCHMARK_PLURAL,
    POD_SETTINGS_ANNOTATION,
    SERVING_GENERATION_ANNOTATION,
)
from drafter_operator.controllers.plan import Write
from drafter_operator.controllers.serving.observe import Observed
from drafter_operator.controllers.swap import Verdict
from drafter_operator.kube import object_path
from drafter_operator.resources.gate import GatedPod, gate_benchmark
from drafter_operator.resources.workloads import GROUP, deployment_path, group_path, kind_of, workload_path


def deployment_write(owner: dict, manifest: dict, existing: dict | None) -> Write | None:
    """Create, or bring the active revision's Deployment to the spec in place. The pod template is
    rewritten only when the pod settings themselves changed (env, pod policy, placement, resources,
    storage, startup): neither a replicas change nor an operator upgrade that renders templates
    differently may restart a running engine (a 30-minute load each); a new rendering applies with the
    next revision or settings change. A settings change rolls one pod at a time (the Deployment's
    strategy), so a serving of several replicas keeps serving. A Deployment from before the settings
    annotation falls back to the generation it was rendered for, and gets both recorded."""
    adopt(manifest, owner)
    if manifest["kind"] == GROUP.kind:
        return group_write(manifest, existing)
    path = deployment_path(manifest["metadata"]["namespace"])
    if existing is None:
        return Write("create", "deployments", path, manifest)
    current = existing["spec"]
    wanted, recorded, settings_changed = recorded_settings(manifest, existing)
    patch: dict = {}
    if current.get("replicas") != manifest["spec"]["replicas"]:
        patch["replicas"] = manifest["spec"]["replicas"]
    if current.get("strategy") != manifest["spec"]["strategy"]:
        patch["strategy"] = manifest["spec"]["strategy"]  # restarts nothing: only the next rollout uses it
    if settings_changed and template_differs(current["template"], manifest["spec"]["template"]):
        patch["template"] = merge_overlay(removed_from_template(current["template"], manifest["spec"]["template"]),
                                          manifest["spec"]["template"])
        patch["progressDeadlineSeconds"] = manifest["spec"]["progressDeadlineSeconds"]
    return settings_patch("deployments", f"{path}/{manifest['metadata']['name']}", (wanted, recorded), patch)


def recorded_settings(manifest: dict, existing: dict) -> tuple[dict, dict, bool]:
    """The pod-settings annotations a workload should carry, those it carries, and whether the settings changed
    (a workload from before the settings annotation: the generation it was rendered for)."""
    wanted = {key: manifest["metadata"]["annotations"][key] for key in (SERVING_GENERATION_ANNOTATION,
                                                                        POD_SETTINGS_ANNOTATION)}
    recorded = {key: (existing["metadata"].get("annotations") or {}).get(key) for key in wanted}
    if recorded[POD_SETTINGS_ANNOTATION] is not None:
        return wanted, recorded, recorded[POD_SETTINGS_ANNOTATION] != wanted[POD_SETTINGS_ANNOTATION]
    generation = recorded[SERVING_GENERATION_ANNOTATION]
    return wanted, recorded, generation is not None and generation != wanted[SERVING_GENERATION_ANNOTATION]


def settings_patch(plural: str, path: str, annotations: tuple[dict, dict], patch: dict) -> Write | None:
    """The merge patch of a workload's spec changes and its settings annotations; None when nothing changes."""
    wanted, recorded = annotations
    if not patch and recorded == wanted:
        return None
    return Write("patch", plural, path, {"metadata": {"annotations": wanted}, **({"spec": patch} if patch else {})})


def group_write(manifest: dict, existing: dict | None) -> Write | None:
    """Create, or bring the active revision's LeaderWorkerSet to the spec in place, as ``deployment_write`` does a
    Deployment: its groups' count always, its pod templates (leader's and workers') only when the pod settings
    changed (LWS rolls one group at a time: the set's rolloutStrategy)."""
    path = group_path(manifest["metadata"]["namespace"])
    if existing is None:
        return Write("create", GROUP.plural, path, manifest)
    current, wanted_spec = existing["spec"], manifest["spec"]
    wanted, recorded, settings_changed = recorded_settings(manifest, existing)
    patch: dict = {}
    if current.get("replicas") != wanted_spec["replicas"]:
        patch["replicas"] = wanted_spec["replicas"]
    if settings_changed:
        templates = current.get("leaderWorkerTemplate") or {}
        if any(template_differs(templates.get(key) or {}, wanted_spec["leaderWorkerTemplate"][key])
               for key in ("leaderTemplate", "workerTemplate")):
            patch["leaderWorkerTemplate"] = wanted_spec["leaderWorkerTemplate"]
    return settings_patch(GROUP.plural, f"{path}/{manifest['metadata']['name']}", (wanted, recorded), patch)


def gate_write(owner: dict, spec, gate, revision: str | None, observed: Observed, port: int) -> Write | None:
    """The gate benchmark of a Ready new revision, once per attempt (it is a record: never changed; a failed
    one from before a retry is deleted first, `stale_gate`)."""
    if revision is None or revision in observed.gates or not observed.ready_pod_ips.get(revision):
        return None
    namespace, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
    attempt = (owner.get("status") or {}).get("retryRequest")
    manifest = gate_benchmark(namespace, name, spec, GatedPod(revision, observed.ready_pod_ips[revision][0], port),
                              gate=gate, attempt=attempt)
    adopt(manifest, owner)
    return Write("create", BENCHMARK_PLURAL, object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, namespace),
                 manifest)


def scale_write(namespace: str, workload: dict, replicas: int) -> Write | None:
    """A revision's Deployment or LeaderWorkerSet to ``replicas`` (pods or groups)."""
    if workload["spec"].get("replicas") == replicas:
        return None
    kind = kind_of(workload)
    return Write("patch", kind.plural, workload_path(namespace, kind, workload["metadata"]["name"]),
                 {"spec": {"replicas": replicas}})


def changed_fields(current: dict, desired: dict) -> dict:
    """The fields of ``desired`` a JSON merge patch must carry to make ``current`` equal it (a null deletes,
    so a null where ``current`` has nothing is no change)."""
    return {k: v for k, v in desired.items() if current.get(k) != _without_nulls(v)}


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


# Pod template fields the spec may set and later unset (pod policy, placement): a comparison of what we
# set alone would miss their removal. The apiserver defaults none of them in a Deployment's template.
OWNED_POD_FIELDS = ("affinity", "topologySpreadConstraints", "nodeSelector", "tolerations", "serviceAccountName",
                    "imagePullSecrets", "priorityClassName", "runtimeClassName", "securityContext",
                    "initContainers")  # the preflight goes when the model claim does (not a new revision)
OWNED_CONTAINER_FIELDS = ("env", "envFrom", "securityContext", "resources")


def removed_from_template(current: dict, wanted: dict) -> dict:
    """A merge-patch overlay deleting what the current template has and the wanted one no longer does:
    pod labels and annotations, owned pod fields; a removed container field shows as {"containers": None}
    (merge patch replaces the containers list whole, so the wanted list alone removes it)."""
    overlay: dict = {}
    for key in ("labels", "annotations"):
        gone = set((current.get("metadata") or {}).get(key) or {}) - set((wanted.get("metadata") or {}).get(key) or {})
        if gone:
            overlay.setdefault("metadata", {})[key] = dict.fromkeys(sorted(gone))
    have, want = current.get("spec") or {}, wanted.get("spec") or {}
    gone_fields = [f for f in OWNED_POD_FIELDS if have.get(f) and f not in want]
    if gone_fields:
        overlay["spec"] = dict.fromkeys(gone_fields)
    wanted_containers = {c.get("name"): c for c in want.get("containers") or []}
    for container in have.get("containers") or []:
        other = wanted_containers.get(container.get("name"), {})
        if any(container.get(f) and f not in other for f in OWNED_CONTAINER_FIELDS):
            overlay.setdefault("spec", {})["containers"] = None
    return overlay


def merge_overlay(overlay: dict, wanted: dict) -> dict:
    """``wanted`` with the deletions of ``overlay`` (None values) wherever ``wanted`` does not set the key."""
    out = dict(wanted)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overlay(value, out[key])
        elif key not in out:
            out[key] = value
    return out


def template_differs(current: dict, wanted: dict) -> bool:
    """Compare only what we set (the apiserver adds defaults: imagePullPolicy, dnsPolicy, ...), and
    whether something we set before is gone."""
    def subset(want, have) -> bool:
        if isinstance(want, dict):
            return isinstance(have, dict) and all(subset(v, have.get(k)) for k, v in want.items())
        if isinstance(want, list):
            return isinstance(have, list) and len(want) == len(have) and all(map(subset, want, have))
        return want == have or (isinstance(want, (int, str)) and str(want) == str(have))
    return not subset(wanted, current) or bool(removed_from_template(current, wanted))


def adopt(manifest: dict, owner: dict) -> None:
    """Owner reference (garbage collection on delete) and namespace; our own labels, not the owner's."""
    kopf.append_owner_reference(manifest, owner=owner)
    kopf.adjust_namespace(manifest, namespace=owner["metadata"]["namespace"], forced=True)


def name_conflicts(writes: list[Write], observed: Observed) -> tuple[list[Write], Verdict | None]:
    """The writes without the creates whose names another owner holds, and the Progressing verdict that
    says so (None when there is none)."""
    blocked_by = [w for w in writes if w.verb == "create" and (w.plural, w.body["metadata"]["name"]) in observed.foreign]
    if not blocked_by:
        return writes, None
    return [w for w in writes if w not in blocked_by], Verdict("False", "NameConflict", name_conflict_message(blocked_by))


def name_conflict_message(blocked_by: list[Write]) -> str:
    names = ", ".join(f"{w.kind} {w.body['metadata']['namespace']}/{w.body['metadata']['name']}" for w in blocked_by)
    return (f"{names} exists and is not owned by this DrafterServing (left by a deleted serving of the same name, or "
            "made by hand): delete it, or rename the serving")
