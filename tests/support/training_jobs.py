"""The training example as a DrafterTraining, for the builders of its Jobs."""
from __future__ import annotations

from pathlib import Path

import yaml

from drafter_operator.api import DrafterTraining

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "training-kimi-k25-eagle3.yaml"


def seed(**spec) -> DrafterTraining:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].update(spec)
    return DrafterTraining.model_validate(body)
