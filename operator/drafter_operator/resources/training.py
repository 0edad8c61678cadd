"""Pure builders for what a DrafterTraining owns besides its stage Jobs: the hidden-state claim (its size
estimate is the training's own: training/hidden_state_size.py).

The hidden states are the pipeline's largest artifact (the seed wrote 828 GB for 10k samples of a
7168-wide target), so the claim is sized from the spec, its fill is reported against the estimate,
and it is deleted once the training succeeded unless the user keeps it.
"""

from __future__ import annotations

from drafter_operator.constants import INSTANCE_LABEL, NAME_LABEL, TRAINING_LABEL
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.names import CUSTOM_RESOURCE_NAME_MAX, SUBDOMAIN_NAME_MAX, child_name



def training_labels(training: str) -> dict[str, str]:
    return {NAME_LABEL: "drafter-training", INSTANCE_LABEL: training, **MANAGED_BY,
            TRAINING_LABEL: training}


def hidden_states_claim_name(training: str, spec) -> str:
    """The claim the extraction writes to: the spec's own, else the one the operator creates."""
    return spec.hidden_states.storage.claim_name or child_name(training, "hidden-states", SUBDOMAIN_NAME_MAX)


def evaluate_benchmark_name(training: str, generation: int) -> str:
    """The Evaluate stage's DrafterBenchmark, one per spec generation: a custom resource name, so at most
    52 characters ("<training>-evaluate-g<N>" up to a 40-character training name, shortened beyond)."""
    return child_name(training, f"evaluate-g{generation}", CUSTOM_RESOURCE_NAME_MAX)


def owns_hidden_states_claim(spec) -> bool:
    """The operator creates (and may delete) the claim only when the spec names none."""
    return spec.hidden_states.storage.claim_name is None


def hidden_states_access_mode(spec) -> str:
    """ReadWriteMany when pods on several nodes use the claim together (Train's ranks read it, speculators'
    Extract shares write it), else ReadWriteOnce."""
    return "ReadWriteMany" if spec.resources.nodes > 1 else "ReadWriteOnce"


def hidden_states_claim(namespace: str, training: str, spec) -> dict | None:
    """The PersistentVolumeClaim for the hidden states, when the operator creates it (else None)."""
    storage = spec.hidden_states.storage
    if not owns_hidden_states_claim(spec):
        return None
    claim: dict = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": hidden_states_claim_name(training, spec), "namespace": namespace,
                     "labels": training_labels(training)},
        # One stage writes it, the next reads it; they never run at once, possibly on different nodes. An
        # Extract across nodes writes it from all of them at once.
        "spec": {"accessModes": [hidden_states_access_mode(spec)], "resources": {"requests": {"storage": storage.size}}},
    }
    if storage.storage_class_name:
        claim["spec"]["storageClassName"] = storage.storage_class_name
    return claim
