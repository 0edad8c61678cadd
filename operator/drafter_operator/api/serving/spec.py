"""DrafterServingSpec: the sections together, and the rules that span them (engine against drafter settings,
thresholds against the draft length, model paths against the volumes)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from drafter_operator.api.common import DECIMAL_PATTERN, ApiModel, Image, Rule, cel_in, path_on_mount, spoken
from drafter_operator.constants import METHODS_IN_TARGET, Engine
from drafter_operator.engines import engines_without, vllm
from drafter_operator.api.pod import EnvFromSources, EnvVars, Placement, PodPolicy
from drafter_operator.api.serving.acceptance import AcceptanceSpec
from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.api.serving.retraining import RetrainingSpec
from drafter_operator.api.serving.drafter import DrafterSpec
from drafter_operator.api.serving.parallel_rules import PARALLEL_RULES
from drafter_operator.api.serving.sglang_rules import SGLANG_DRAFTER_RULES
from drafter_operator.api.serving.rollout import ResourcesSpec, StartupSpec, StorageSpec, SwapSpec
from drafter_operator.api.serving.target import TargetSpec
from drafter_operator.api.traffic import TrafficSpec

#: The engine whose drafter settings the vLLM rules below hold (its name, as the CRD's CEL compares self.engine
#: to it).
VLLM: str = vllm.ENGINE
#: The engines without a per-batch-size schedule: spec.drafter.dynamic is refused on them.
ENGINES_WITHOUT_DYNAMIC: tuple[str, ...] = engines_without("SUPPORTS_DYNAMIC_SCHEDULE")


def _cel_engine_not_in(engines: tuple[str, ...]) -> str:
    """CEL for "self.engine is none of ``engines``" (one engine: a plain comparison)."""
    if len(engines) == 1:
        return f"self.engine != '{engines[0]}'"
    return f"!({cel_in('self.engine', engines)})"


class DrafterServingSpec(ApiModel):
    """Desired state of a DrafterServing."""

    rules = (
        Rule(
            cel=("(has(self.resources.nodesPerReplica) && self.resources.nodesPerReplica > 1) "
                 "|| self.resources.gpusPerReplica % self.target.tensorParallelSize == 0"),
            message=(
                "spec.target.tensorParallelSize must divide spec.resources.gpusPerReplica (default 8) on one node: "
                "e.g. tensorParallelSize 8 with gpusPerReplica 8 (a tensor-parallel group wider than a node needs "
                "spec.resources.nodesPerReplica)"
            ),
            check=lambda s: (s.resources.nodes_per_replica or 1) > 1
            or s.resources.gpus_per_replica % s.target.tensor_parallel_size == 0,
            field_path=".target.tensorParallelSize",
        ),
        *PARALLEL_RULES,
        Rule(
            cel=f"self.engine != '{VLLM}' || (!has(self.drafter.numSteps) && !has(self.drafter.eagleTopk) && !has(self.drafter.numDraftTokens))",
            message=(
                "spec.drafter.numSteps, eagleTopk and numDraftTokens are SGLang settings: with engine vllm use "
                "spec.drafter.numSpeculativeTokens instead"
            ),
            check=lambda s: s.engine != VLLM
            or (s.drafter.num_steps is None and s.drafter.eagle_topk is None and s.drafter.num_draft_tokens is None),
            field_path=".drafter",
            reason="FieldValueForbidden",
        ),
        *SGLANG_DRAFTER_RULES,
        # Every pinned engine renders a load schedule today; an engine without one would be refused here.
        *((Rule(
            cel=f"{_cel_engine_not_in(ENGINES_WITHOUT_DYNAMIC)} || !has(self.drafter.dynamic)",
            message=(
                f"spec.drafter.dynamic is not offered with engine {spoken(ENGINES_WITHOUT_DYNAMIC, 'or')}: it has no "
                "per-batch-size control of the draft length; remove dynamic or use another engine"
            ),
            check=lambda s: s.engine not in ENGINES_WITHOUT_DYNAMIC or s.drafter.dynamic is None,
            field_path=".drafter.dynamic",
            reason="FieldValueForbidden",
        ),) if ENGINES_WITHOUT_DYNAMIC else ()),
        Rule(
            cel=(
                f"self.engine != '{VLLM}' || !({cel_in('self.drafter.method', vllm.METHODS_NEEDING_K)}) "
                "|| has(self.drafter.numSpeculativeTokens)"
            ),
            message=(
                "spec.drafter.numSpeculativeTokens is required with engine vllm and methods "
                f"{spoken(vllm.METHODS_NEEDING_K)}: set the tokens drafted per step (1-16, e.g. 5)"
            ),
            check=lambda s: s.engine != VLLM or s.drafter.method not in vllm.METHODS_NEEDING_K
            or s.drafter.num_speculative_tokens is not None,
            field_path=".drafter",
            reason="FieldValueRequired",
        ),
        Rule(
            cel=f"self.engine != '{VLLM}' || self.drafter.method != '{vllm.K_FROM_BLOCK_SIZE}' || has(self.drafter.model) "
                "|| has(self.drafter.numSpeculativeTokens)",
            message=(
                "spec.drafter.numSpeculativeTokens is required with engine vllm and method dspark without "
                "drafter.model: vLLM 0.33.0 drafts with the target's bundled DSpark weights only when k is given; "
                "set it (e.g. 7), or set drafter.model to a DSpark draft (k then defaults to its block size)"
            ),
            check=lambda s: s.engine != VLLM or s.drafter.method != vllm.K_FROM_BLOCK_SIZE or s.drafter.model is not None
            or s.drafter.num_speculative_tokens is not None,
            field_path=".drafter.numSpeculativeTokens",
            reason="FieldValueRequired",
        ),
        Rule(
            cel=(
                f"{cel_in('self.drafter.method', METHODS_IN_TARGET)} || !has(self.drafter.model) "
                "|| self.drafter.model != self.target.model"
            ),
            message=(
                "spec.drafter.model must differ from spec.target.model (only methods "
                f"{spoken(METHODS_IN_TARGET)} draft with the target's own weights): point it at the drafter checkpoint"
            ),
            check=lambda s: s.drafter.method in METHODS_IN_TARGET or s.drafter.model is None
            or s.drafter.model != s.target.model,
            field_path=".drafter.model",
        ),
        Rule(
            cel="!has(self.retraining) || !has(self.retraining.minNewSamples) || has(self.capture)",
            message=(
                "spec.retraining.minNewSamples counts the prompts spec.capture keeps: set spec.capture (e.g. "
                '{sampleRate: "0.05", claimName: captured}) or remove minNewSamples'
            ),
            check=lambda s: s.retraining is None or s.retraining.min_new_samples is None or s.capture is not None,
            field_path=".retraining.minNewSamples",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="!has(self.acceptance) || self.drafter.method != 'none'",
            message=(
                "spec.acceptance needs speculation but spec.drafter.method is none: remove spec.acceptance or "
                "choose a drafter method"
            ),
            check=lambda s: s.acceptance is None or s.drafter.method != "none",
            field_path=".acceptance",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=(
                "!has(self.acceptance) || !has(self.acceptance.minAcceptanceLength) "
                f"|| !self.acceptance.minAcceptanceLength.matches(r'{DECIMAL_PATTERN}') "
                "|| (has(self.drafter.numSpeculativeTokens) "
                "? double(self.acceptance.minAcceptanceLength) <= double(self.drafter.numSpeculativeTokens + 1) "
                ": (!has(self.drafter.numSteps) || double(self.acceptance.minAcceptanceLength) <= double(self.drafter.numSteps + 1)))"
            ),
            message=(
                "spec.acceptance.minAcceptanceLength cannot exceed the tokens one step can yield "
                "(numSpeculativeTokens + 1 on vLLM, numSteps + 1 on SGLang): lower it, draft more tokens, or use \"auto\""
            ),
            check=lambda s: _min_length_ok(s),
            field_path=".acceptance.minAcceptanceLength",
        ),
        Rule(
            cel="!has(self.swap.gate) || !has(self.swap.gate.minAcceptanceRate) || self.drafter.method != 'none'",
            message=(
                "spec.swap.gate.minAcceptanceRate needs speculation but spec.drafter.method is none: remove it or "
                "gate on minSpeedup / minTokensPerSecond"
            ),
            check=lambda s: s.swap.gate is None or s.swap.gate.min_acceptance_rate is None or s.drafter.method != "none",
            field_path=".swap.gate.minAcceptanceRate",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=(
                "!has(self.storage) || !has(self.storage.modelClaim) || !self.target.model.startsWith('/') "
                "|| self.target.model.startsWith(self.storage.mountPath + '/')"
            ),
            message=(
                "spec.target.model is an absolute path outside spec.storage.mountPath, so it is not on the model "
                "volume: use a path under mountPath (e.g. /models/Kimi-K2.5) or change mountPath"
            ),
            check=lambda s: s.storage is None or s.storage.model_claim is None
            or path_on_mount(s.target.model, s.storage.mount_path),
            field_path=".target.model",
        ),
        Rule(
            cel=(
                "!has(self.storage) || !has(self.storage.modelClaim) || !has(self.drafter.model) "
                "|| !self.drafter.model.startsWith('/') || self.drafter.model.startsWith(self.storage.mountPath + '/')"
            ),
            message=(
                "spec.drafter.model is an absolute path outside spec.storage.mountPath, so it is not on the model "
                "volume: use a path under mountPath (e.g. /models/drafters/kimi-eagle3) or a hub id"
            ),
            check=lambda s: s.storage is None or s.storage.model_claim is None
            or path_on_mount(s.drafter.model, s.storage.mount_path),
            field_path=".drafter.model",
        ),
        Rule(
            cel=(
                "!has(self.storage) || !has(self.storage.offline) || !self.storage.offline "
                "|| has(self.storage.cacheClaim) || (self.target.model.startsWith('/') "
                "&& (!has(self.drafter.model) || self.drafter.model.startsWith('/')))"
            ),
            message=(
                "spec.storage.offline is true but a model is a hub id and there is no spec.storage.cacheClaim to find "
                "it in: put the model on the model volume and use its path, or set cacheClaim to a cache that holds it"
            ),
            check=lambda s: s.storage is None or not s.storage.offline or s.storage.cache_claim is not None
            or all(m is None or m.startswith("/") for m in (s.target.model, s.drafter.model)),
            field_path=".storage.offline",
        ),
    )

    engine: Engine
    """Serving engine: vllm or sglang."""
    image: Image | None = None
    """Engine container image; defaults per engine from the operator's configuration."""
    target: TargetSpec
    """The model being served."""
    drafter: DrafterSpec
    """The speculative drafter ({method: none} for plain serving)."""
    replicas: Annotated[int, Field(ge=0, le=64)] = 1
    """Engine pods of the active revision (0 stops serving but keeps the object)."""
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """Resources of one replica (of each of its pods when it spans nodes)."""
    placement: Placement | None = None
    """Where the engine pods may run."""
    storage: StorageSpec | None = None
    """Model volume and /dev/shm."""
    startup: StartupSpec = Field(default_factory=StartupSpec)
    """How long a revision may take to load."""
    swap: SwapSpec = Field(default_factory=SwapSpec)
    """How a new revision replaces the running one."""
    acceptance: AcceptanceSpec | None = None
    """Live acceptance monitoring (needs a drafter)."""
    traffic: TrafficSpec | None = None
    """The traffic the serving is asked, by category (see TrafficSpec); not part of a revision: it changes only what the load schedule is predicted for."""
    env: EnvVars | None = None
    """Variables of the engine container (Kubernetes EnvVar: value, or valueFrom a Secret or ConfigMap key), e.g. NCCL and engine tuning flags. The operator's own win: HF_HUB_OFFLINE (from storage.offline) and HF_HOME (with storage.cacheClaim). Like replicas, a change restarts the active revision's pods in place; it never makes a new revision."""
    env_from: EnvFromSources | None = None
    """Every key of a Secret or ConfigMap as a variable of the engine container, e.g. {secretRef: {name: hf-token}} for the hub token HF_TOKEN (its value never appears in this object, its status or the operator's logs)."""
    pod: PodPolicy | None = None
    """Pod settings a cluster's policies may require: labels, annotations, serviceAccountName, imagePullSecrets, priorityClassName, runtimeClassName (e.g. nvidia), security contexts. Applied to the active revision in place."""
    capture: CaptureSpec | None = None
    """Keep a sample of the served requests on a claim in the namespace (see CaptureSpec): the engine logs its requests into a spool in the pod, a sidecar keeps the sample. Like env, a change restarts the active revision's pods in place; it never makes a new revision."""
    retraining: RetrainingSpec | None = None
    """Start DrafterTrainings from a template when the drafter drifts, on an interval or a cron schedule, or when asked (the drafter.dev/retrain annotation), one at a time, and promote what passes spec.retraining.gate (see RetrainingSpec). Read by the operator's retraining controller only: a change starts no new revision."""


def _min_length_ok(s: DrafterServingSpec) -> bool:
    if s.acceptance is None or s.acceptance.min_acceptance_length is None:
        return True
    if not re.match(DECIMAL_PATTERN, s.acceptance.min_acceptance_length):
        return True
    value = float(s.acceptance.min_acceptance_length)
    if s.drafter.num_speculative_tokens is not None:
        return value <= s.drafter.num_speculative_tokens + 1
    if s.drafter.num_steps is not None:
        return value <= s.drafter.num_steps + 1
    return True
