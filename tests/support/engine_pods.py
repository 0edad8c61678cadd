"""The examples as DrafterServing specs, for the builders of a revision's pods."""
from __future__ import annotations

from pathlib import Path

import yaml

from drafter_operator.api import DrafterServing

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OPERATOR_IMAGE = "ghcr.io/drafter-dev/drafter-operator:0.1.0"


def example(name: str) -> DrafterServing:
    return DrafterServing.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))


def with_spec(serving: DrafterServing, **changes) -> DrafterServing:
    body = serving.model_dump(mode="json", by_alias=True, exclude_none=True)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = body["spec"]
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return DrafterServing.model_validate(body)
