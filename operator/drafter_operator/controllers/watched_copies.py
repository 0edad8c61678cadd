"""The copies of watched objects the operator keeps (kopf indexes, reconcile snapshots), pure.

metadata.managedFields is the largest part of a Deployment's or pod's body (one entry per field manager:
the operator, the controller manager, the node) and nothing in the operator reads it. With 500 servings
the indexes hold 500 Deployments, pods and Services: copying it cost memory and the deep copies' CPU
(bench/fleet_scale.py: deepcopy was the operator's top frame during a 500-serving cold start).
"""

from __future__ import annotations

import copy
from typing import Mapping


def kept_copy(body: Mapping) -> dict:
    """A deep copy of `body` without metadata.managedFields; `body` is left as it is."""
    metadata = body.get("metadata") or {}
    slim = {k: v for k, v in body.items() if k != "metadata"}
    slim["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return copy.deepcopy(slim)
