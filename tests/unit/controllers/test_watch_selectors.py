"""The operator's watches of Pods, Deployments, Services and Jobs select only its own children in the apiserver.

Two halves of one promise: every watch the handlers open on those kinds carries the managed-by selector
(so other workloads' events never reach the operator, bench/foreign_churn.py), and every such object the
operator creates, and every pod its Deployments and Jobs create, carries that label (so none of its own
children is filtered out with them).
"""

from __future__ import annotations

from pathlib import Path

import kopf
import yaml
from kopf._cogs.structs.references import Resource

from drafter_operator.api import DrafterServing, DrafterTraining
from drafter_operator.controllers import handlers
from drafter_operator.controllers.training.stages import JOB_STAGES
from drafter_operator.resources.benchmark_job import BenchPod, benchmark_job
from drafter_operator.resources.engine import engine_deployment, serving_service
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.training_engine import generation_engine
from drafter_operator.resources.training_job import StageCommand, StageRun, stage_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CHILD_KINDS = {"Pod", "Deployment", "Service", "Job"}


def _child_handlers():
    registry = kopf.get_default_registry()
    for handler in [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]:
        if handler.selector.group != "drafter.dev":
            yield handler


def test_every_watch_of_a_child_kind_selects_the_operators_own_objects():
    settings = kopf.OperatorSettings()
    handlers.select_own_children(settings)
    watched = {(h.selector.group, h.selector.version, h.selector.any_name) for h in _child_handlers()}
    assert watched == set(handlers.CHILD_RESOURCES)  # a new child kind needs its selector too
    for group, version, plural in watched:
        assert settings.watching.label_selectors.collect(Resource(group, version, plural)) == [
            handlers.CHILD_SELECTOR]
    assert handlers.CHILD_SELECTOR == "app.kubernetes.io/managed-by=drafter-operator"
    # The operator's own kinds are watched whole: users create those.
    assert settings.watching.label_selectors.collect(Resource("drafter.dev", "v1alpha1", "drafterservings")) == []


def _children() -> list[dict]:
    def example(name: str) -> dict:
        return yaml.safe_load((EXAMPLES / name).read_text())

    serving = DrafterServing.model_validate(example("serving-vllm-kimi-k25-eagle3.yaml"))
    serving.metadata["namespace"] = "ml"
    training = DrafterTraining.model_validate(example("training-kimi-k25-eagle3.yaml"))
    assert training.spec.data.generation is not None  # the example runs a Generate engine
    return [engine_deployment(serving, "abc1234567", 1, {"containers": []}),
            serving_service(serving, "abc1234567", 8000),
            benchmark_job("ml", "kimi-bench", 1, BenchPod("operator:1", ["--help"]), 600),
            *(stage_job("ml", "kimi-ft", training.spec, StageRun(stage, 1), StageCommand("trainer:1")) for stage in JOB_STAGES),
            *generation_engine("ml", "kimi-ft", training.spec, 1, "vllm:1")]


def test_every_child_and_every_pod_of_its_template_carries_the_selected_label():
    children = _children()
    assert {c["kind"] for c in children} == CHILD_KINDS - {"Pod"}  # pods come from the templates
    for child in children:
        assert MANAGED_BY.items() <= child["metadata"]["labels"].items(), child["metadata"]["name"]
        template = child.get("spec", {}).get("template")
        if template is not None:
            assert MANAGED_BY.items() <= template["metadata"]["labels"].items(), child["metadata"]["name"]
