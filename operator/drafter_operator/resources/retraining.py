"""The DrafterTraining a serving's spec.retraining starts (a pure builder): the template's spec, with an output of its
own per run, warm-started from the drafter the serving runs when the template names no base, and promoted into
this serving through spec.retraining.gate."""

from __future__ import annotations

from drafter_operator.api.serving import DrafterServing, DrafterServingSpec
from drafter_operator.constants import API_GROUP_VERSION, RETRAINING_LABEL, RETRAINING_TRIGGER_ANNOTATION
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.names import CUSTOM_RESOURCE_NAME_MAX, child_name


def retraining_name(serving: str, run: int) -> str:
    """Run ``run``'s DrafterTraining: ``<serving>-r<run>``, shortened with a hash for a long serving name."""
    return child_name(serving, f"r{run}", CUSTOM_RESOURCE_NAME_MAX)


def run_output(template_output: str, run: int) -> str:
    """Where run ``run`` exports: beside the template's output (same parent directory, which the API keeps below
    the volume's root), never over an earlier run's or the drafter serving now."""
    return f"{template_output}-r{run}"


def retraining_training(namespace: str, serving: str, serving_uid: str, spec: DrafterServingSpec, run: int,
                        trigger: str) -> dict:
    """The DrafterTraining manifest of run ``run``, started by ``trigger``; owned by the serving (deleted with it)."""
    retraining = spec.retraining
    assert retraining is not None
    template = retraining.template.training_spec()
    body = template.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["output"]["path"] = run_output(template.output.path, run)
    if template.base_drafter is None and spec.drafter.model:
        body["baseDrafter"] = spec.drafter.model  # a retraining costs a fraction of the first from the current drafter
    body["promote"] = {"servingRef": {"name": serving}}
    if retraining.gate is not None:
        body["promote"]["gate"] = retraining.gate.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": "DrafterTraining",
        "metadata": {
            "name": retraining_name(serving, run),
            "namespace": namespace,
            "labels": {RETRAINING_LABEL: serving, **MANAGED_BY},
            "annotations": {RETRAINING_TRIGGER_ANNOTATION: trigger},
            "ownerReferences": [{"apiVersion": API_GROUP_VERSION, "kind": DrafterServing.kind_name, "name": serving,
                                 "uid": serving_uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": body,
    }
