"""How a revision's pods run and how a new revision replaces the running one: spec.resources, storage,
startup and swap."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from drafter_operator.api.benchmark_gate import BenchmarkGate
from drafter_operator.api.common import (
    MOUNT_PATH_PATTERN,
    ApiModel,
    Duration,
    ObjectName,
    Quantity,
    Rule,
    duration_range_rule,
)
from drafter_operator.api.pod import ContainerResources

_SYSTEM_PATH_PATTERN = r"^/(dev|proc|sys)(/|$)"


class ResourcesSpec(ContainerResources):
    """Resources of one replica: its GPUs, and CPU and memory beside them."""

    gpus_per_replica: Annotated[int, Field(ge=1, le=64)] = 8
    """nvidia.com/gpu of each engine pod: the replica's GPUs on one node (a replica that spans nodes has one pod per node, each with these GPUs: gpusPerReplica x nodesPerReplica in all)."""
    nodes_per_replica: Annotated[int, Field(ge=1, le=16)] | None = None
    """Nodes one replica spans, one engine pod on each (a leader that serves the API and workers that join its process group); unset: 1. Above 1, spec.target's tensorParallelSize x pipelineParallelSize x dataParallelSize must equal gpusPerReplica x nodesPerReplica."""


class StorageSpec(ApiModel):
    """Volumes of the engine pods."""

    rules = (
        Rule(
            cel=f"!self.mountPath.matches(r'{_SYSTEM_PATH_PATTERN}')",
            message="spec.storage.mountPath must not be under /dev, /proc or /sys (the operator mounts /dev/shm itself): use e.g. /models",
            check=lambda s: not re.match(_SYSTEM_PATH_PATTERN, s.mount_path),
            field_path=".mountPath",
        ),
        Rule(
            cel=f"!self.cachePath.matches(r'{_SYSTEM_PATH_PATTERN}')",
            message="spec.storage.cachePath must not be under /dev, /proc or /sys: use e.g. /var/cache/huggingface",
            check=lambda s: not re.match(_SYSTEM_PATH_PATTERN, s.cache_path),
            field_path=".cachePath",
        ),
        Rule(
            cel=("self.cachePath != self.mountPath && !self.cachePath.startsWith(self.mountPath + '/') "
                 "&& !self.mountPath.startsWith(self.cachePath + '/')"),
            message=("spec.storage.cachePath and spec.storage.mountPath overlap (the model volume is read-only, the "
                     "cache is written): use separate paths, e.g. /models and /var/cache/huggingface"),
            check=lambda s: s.cache_path != s.mount_path and not s.cache_path.startswith(s.mount_path + "/")
            and not s.mount_path.startswith(s.cache_path + "/"),
            field_path=".cachePath",
        ),
    )

    model_claim: ObjectName | None = None
    """PersistentVolumeClaim holding the target and drafter checkpoints, mounted read-only at mountPath."""
    mount_path: Annotated[str, StringConstraints(pattern=MOUNT_PATH_PATTERN, max_length=256)] = "/models"
    """Where the model volume is mounted in the engine pods."""
    shm_size: Quantity | None = None
    """Size limit of the in-memory /dev/shm volume (NCCL needs a large one with tensor parallelism), e.g. "64Gi"."""
    cache_claim: ObjectName | None = None
    """PersistentVolumeClaim for the Hugging Face cache, mounted read-write at cachePath with HF_HOME pointing at it: a hub id in target.model or drafter.model is downloaded there once, and every later revision finds it there (a swap does not download the target again). Use a ReadWriteMany claim when BlueGreen revisions may run on different nodes."""
    cache_path: Annotated[str, StringConstraints(pattern=MOUNT_PATH_PATTERN, max_length=256)] = "/var/cache/huggingface"
    """Where the cache volume is mounted (HF_HOME)."""
    offline: bool | None = None
    """Run the engine with HF_HUB_OFFLINE=1: a model that is not on the volumes fails the start in seconds, naming it, instead of a download or a wait for spec.startup.timeout. Default: on when every model is an absolute path (all on the model volume), off when a hub id must be downloaded."""


class StartupSpec(ApiModel):
    """How long a revision may take to start."""

    rules = (
        duration_range_rule(
            "timeout", "1m", "48h",
            'spec.startup.timeout must be between 1m and 48h, e.g. "45m" (loading a 1T-parameter model takes about 30 minutes)',
        ),
        duration_range_rule(
            "placementTimeout", "1m", "48h",
            'spec.startup.placementTimeout must be between 1m and 48h, e.g. "30m" (a node autoscaler adds a GPU node in minutes)',
        ),
        duration_range_rule(
            "downloadTimeout", "0s", "48h",
            'spec.startup.downloadTimeout must be between 0s and 48h, e.g. "1h"',
        ),
    )

    timeout: Duration = "45m"
    """How long the model may take to load before the revision is marked failed (sizes the startupProbe)."""
    download_timeout: Duration = "1h"
    """Added to timeout when a model is a hub id the engine may have to download (not offline): a 547 GB target takes about an hour at 1.2 Gbit/s."""
    placement_timeout: Duration = "30m"
    """How long a revision's pods may wait to be scheduled (GPU nodes added by an autoscaler, GPUs freed) before the revision fails. spec.startup.timeout counts from the scheduling, not from the revision's creation."""
    engine_restarts: Annotated[int, Field(ge=0, le=10)] = 2
    """How often an engine that exits before it was ever Ready is restarted before its revision fails: a transient exit (a GPU reset, a slow mount) should not fail a 30-minute load. A failed drafter preflight fails at once."""


class SwapSpec(ApiModel):
    """How a new revision (a changed engine, target or drafter) replaces the running one."""

    rules = (
        Rule(
            cel="!has(self.gate) || self.strategy == 'BlueGreen'",
            message=(
                "spec.swap.gate needs spec.swap.strategy BlueGreen (with Recreate the old revision is gone before the "
                "gate runs): set strategy: BlueGreen or remove the gate"
            ),
            check=lambda s: s.gate is None or s.strategy == "BlueGreen",
            field_path=".gate",
        ),
        duration_range_rule(
            "drainTimeout", "0s", "24h",
            'spec.swap.drainTimeout must be at most 24h, e.g. "5m" (the longest stream a client may have in flight at a switch)',
        ),
        duration_range_rule(
            "gateTimeout", "1m", "48h",
            'spec.swap.gateTimeout must be between 1m and 48h, e.g. "30m" (a gate benchmark of 5 prompts takes minutes)',
        ),
    )

    strategy: Literal["Recreate", "BlueGreen"] = "Recreate"
    """Recreate stops the old revision first (no extra GPUs, downtime); BlueGreen starts the new one beside it and switches traffic when it is ready (needs the capacity)."""
    gate: BenchmarkGate | None = None
    """Optional benchmark the new revision must pass (BlueGreen only)."""
    drain_timeout: Duration = "5m"
    """How long the revision traffic left may keep running for the requests in flight at the switch: it is stopped as soon as its engines report none running or waiting (after a short drain for proxies to stop sending), at the latest after this. The default lets a 4,000-token stream finish at 15 tokens/s."""
    gate_timeout: Duration = "30m"
    """With a gate: how long a Ready new revision may wait for its gate's verdict, from when its gating began (status.gating.since). Past it the revision fails (GateTimedOut) and its GPUs are freed; the active revision keeps serving."""
