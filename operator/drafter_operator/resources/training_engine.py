"""Pure builders for the engine that serves the target while a DrafterTraining regenerates its data.

With ``spec.data.generation`` the Generate stage does not start an engine inside its Job: the target
serves from a Deployment (one replica) and a Service like a DrafterServing with method ``none``, and
the stage's ``drafter-operator regenerate`` (training/regenerate.py) sends it the dataset's prompts
through the OpenAI API at :func:`generation_endpoint`. The pod is the one a DrafterServing would run:
it is built by the serving's own builders (resources/engine.py) from a DrafterServing made of the
training spec (:func:`serving_for`), with the engine command rendered by engines/. Only the names and
labels differ: the training's labels plus a component label, never the serving label (the
DrafterServing controller would take the objects for a serving's own).

Names carry the spec generation like the stage Jobs (``<training>-gen-g<N>``), so a changed spec
never talks to an engine started for the old one. The name is a DNS-1035 label (the Service's): a
training name of at most 52 characters leaves room for generations up to 99999 before resources/names.py
shortens it.
"""

from __future__ import annotations

from drafter_operator.api import DrafterServing
from drafter_operator.constants import (
    API_GROUP_VERSION,
    COMPONENT_LABEL,
    ENGINE_ANNOTATION,
    TRAINING_GENERATION_LABEL,
    TRAINING_LABEL,
)
from drafter_operator.engines import engine as engine_module
from drafter_operator.resources import pod_policy
from drafter_operator.resources.engine import EngineHttp, engine_deployment, engine_pod_spec, serving_service
from drafter_operator.resources.names import DEPLOYMENT_NAME_MAX, SERVICE_NAME_MAX, child_name
from drafter_operator.resources.training import training_labels
from drafter_operator.resources.training_job import pod_security_context
from drafter_operator.training.regenerate import SERVED_MODEL_NAME

GENERATION_ENGINE = "generation-engine"


def engine_name(training: str, generation: int) -> str:
    """The Deployment's and the Service's name (a DNS-1035 label, the Service's rule)."""
    return child_name(training, f"gen-g{generation}", min(SERVICE_NAME_MAX, DEPLOYMENT_NAME_MAX))


def engine_selector(training: str, generation: int) -> dict[str, str]:
    """The minimal selector of this generation's engine pods (immutable on a Deployment)."""
    return {TRAINING_LABEL: training, COMPONENT_LABEL: GENERATION_ENGINE, TRAINING_GENERATION_LABEL: str(generation)}


def engine_labels(training: str, generation: int) -> dict[str, str]:
    return {**training_labels(training), **engine_selector(training, generation)}


def serving_for(namespace: str, training: str, spec, generation: int) -> DrafterServing:
    """The DrafterServing (method none) whose engine pod serves ``spec``'s target for regeneration.

    The target, its tensor parallelism, the model volume, hub cache, placement, env, envFrom, pod
    policy and cpu/memory are the training's. The engine gets tensorParallelSize GPUs, the ones it
    shards the target over: one replica of a DrafterServing uses no more (spec.resources.gpus sizes
    the stage pods).
    """
    resources = spec.resources.to_json()
    resources.pop("gpus", None)
    resources.pop("nodes", None)  # the stage pods' count: Generate's engine is one replica
    storage = spec.storage
    body: dict = {
        "engine": spec.data.generation.engine,
        "target": {"model": spec.target.model, "tensorParallelSize": spec.target.tensor_parallel_size,
                   "servedModelName": SERVED_MODEL_NAME},
        "drafter": {"method": "none"},
        "replicas": 1,
        "resources": {**resources, "gpusPerReplica": spec.target.tensor_parallel_size},
        "storage": {"modelClaim": storage.model_claim, "mountPath": storage.mount_path},
    }
    if storage.cache_claim:
        body["storage"].update(cacheClaim=storage.cache_claim, cachePath=storage.cache_path)
    if spec.placement is not None:
        body["placement"] = spec.placement.to_json()
    if spec.pod is not None:
        body["pod"] = spec.pod.to_json()
    if spec.env:
        body["env"] = [variable.to_json() for variable in spec.env]
    if spec.env_from:
        body["envFrom"] = [source.to_json() for source in spec.env_from]
    # Named after the training (a serving name is at most 52 characters); the builders' names are replaced.
    return DrafterServing.model_validate({
        "apiVersion": API_GROUP_VERSION, "kind": "DrafterServing",
        "metadata": {"name": training, "namespace": namespace}, "spec": body})


def generation_engine(namespace: str, training: str, spec, generation: int, image: str) -> list[dict]:
    """The Deployment and the Service serving ``spec``'s target (``spec.data.generation`` must be set);
    ``image`` is spec.data.generation.image or the operator's default for the engine."""
    if spec.data.generation is None:
        raise ValueError("spec.data.generation is unset: the dataset's answers are used as they are, no engine runs")
    serving = serving_for(namespace, training, spec, generation)
    engine = engine_module(serving.spec.engine)
    name, labels = engine_name(training, generation), engine_labels(training, generation)
    # Method none loads no drafter: the serving's drafter preflight never runs here, so it needs no image.
    pod_spec = engine_pod_spec(serving, image, engine.render_command(serving.spec), EngineHttp.of(engine),
                               preflight_image="")
    deployment = engine_deployment(serving, f"g{generation}", 1, pod_spec, annotations={ENGINE_ANNOTATION: serving.spec.engine})
    deployment["metadata"].update(name=name, labels=labels)
    deployment["spec"]["selector"] = {"matchLabels": engine_selector(training, generation)}
    deployment["spec"]["template"]["metadata"] = pod_policy.template_metadata(labels, spec.pod)
    # The stage pods' fsGroup: the engine shares the hub cache with them, and what it downloads there
    # must stay the trainer's group.
    deployment["spec"]["template"]["spec"]["securityContext"] = pod_security_context(spec.pod)
    service = serving_service(serving, f"g{generation}", engine.DEFAULT_PORT)
    service["metadata"].update(name=name, labels=labels)
    service["spec"]["selector"] = engine_selector(training, generation)
    return [deployment, service]


def generation_endpoint(namespace: str, training: str, spec, generation: int) -> str:
    """The engine's OpenAI base URL, as ``drafter-operator regenerate --endpoint`` takes it (the Service's
    port is the engine's own: 8000 for vLLM, 30000 for SGLang)."""
    port = engine_module(spec.data.generation.engine).DEFAULT_PORT
    return f"http://{engine_name(training, generation)}.{namespace}.svc.cluster.local:{port}/v1"


def generation_engine_ready(deployment: dict | None) -> bool:
    """Whether the engine Deployment has a Ready pod of its current template (the Generate Job may start)."""
    if not deployment:
        return False
    status = deployment.get("status") or {}
    current = status.get("observedGeneration", 0) >= (deployment.get("metadata") or {}).get("generation", 0)
    return current and (status.get("readyReplicas") or 0) >= 1

