"""DrafterTraining specs per drafter family (speculators), and the same across several nodes."""
from __future__ import annotations

import yaml

from drafter_operator.api.training import DrafterTraining, DrafterTrainingSpec
from drafter_operator.training import RenderOptions
from tests.support.training_renders import ENDPOINT, KIMI, SEED

OPTIONS = RenderOptions(target_config=KIMI, generation_endpoint=ENDPOINT)


def spec_of(**updates) -> DrafterTrainingSpec:
    raw = yaml.safe_load(SEED.read_text())
    raw["spec"].update({"framework": "speculators", "baseDrafter": None, **updates})
    return DrafterTraining.model_validate(raw).spec


def with_nodes(nodes: int, **updates):
    spec = spec_of(**updates)
    return spec.model_validate({**spec.to_json(), "resources": {**spec.resources.to_json(), "nodes": nodes}})
