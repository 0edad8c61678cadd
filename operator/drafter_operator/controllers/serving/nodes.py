"""The GPU product of the nodes a serving's pods run on: the nvidia.com/gpu.product label, read with a GET of
the node only when a known-bad row keyed by GPU product waits for it (decide.py's plan.read_nodes).

A node's label is remembered for `ttl`: its GPUs do not change under a running pod, and one read per node serves
every serving placed there. Node reads need a cluster-wide grant (get nodes): the chart's ClusterRole has it,
namespaced mode has no ClusterRole. Denied once, the operator stops asking and says so in DrafterCompatible
(spec.placement.gpuProduct is then the way to have those rows checked).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from drafter_operator.controllers.serving.observe import Observed
from drafter_operator.kube import ApiError, Kube, object_path
from drafter_operator.resources.engine import GPU_PRODUCT_LABEL

log = logging.getLogger("drafter.serving")

#: What DrafterCompatible says of pending rows when the operator may not read nodes.
NODES_FORBIDDEN = "the operator may not get nodes (namespaced mode grants no cluster-wide read)"


@dataclass
class NodeProducts:
    kube: Kube
    ttl: dt.timedelta = dt.timedelta(minutes=10)
    read_at: dict[str, tuple[str, dt.datetime]] = field(default_factory=dict)  # node -> (product, when read)
    forbidden: str | None = None

    def fill(self, observed: Observed, now: dt.datetime) -> None:
        """Put what is remembered of the observed revisions' nodes into ``observed``."""
        placed = {node for nodes in observed.nodes.values() for node in nodes}
        observed.node_products = {node: product for node, (product, at) in self.read_at.items()
                                  if node in placed and now - at < self.ttl}
        observed.nodes_unreadable = self.forbidden

    def read(self, nodes: tuple[str, ...], now: dt.datetime) -> bool:
        """GET each node and remember its product ("" without the label); whether anything new was learnt. A node
        that is gone is left unread: its pods are rescheduled, and their new node is read then."""
        learnt = False
        for name in nodes:
            try:
                node = self.kube.get(object_path("v1", "nodes", None, name))
            except ApiError as exc:
                if exc.status != 403:
                    raise
                log.warning("may not get node %s (403): known-bad rows keyed by GPU product are checked only against "
                            "spec.placement.gpuProduct", name)
                self.forbidden, learnt = NODES_FORBIDDEN, True
                break
            if node is not None:
                self.read_at[name] = ((node["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL, ""), now)
                learnt = True
        return learnt
