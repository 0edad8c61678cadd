"""DrafterServing: a target model served by vLLM or SGLang with (or without) a speculative drafter."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints

from drafter_operator.api.common import (
    CONDITIONS_SCHEMA_EXTRA,
    DECIMAL_PATTERN,
    RATIO_PATTERN,
    ApiModel,
    BenchmarkGate,
    Condition,
    Duration,
    Engine,
    Image,
    ModelRef,
    ObjectName,
    Quantity,
    Ratio,
    Rule,
    StatusModel,
    Url,
    cel_decimal_range,
    cel_duration_range,
    decimal_ok,
    duration_ok,
)
from drafter_operator.api.kind import KindModel
from drafter_operator.api.pod import ContainerResources, EnvFromSources, EnvVars, Placement, PodPolicy
from drafter_operator.engines import DEFAULT_IMAGES, owned_spellings
from drafter_operator.engines import engine as engine_module
from drafter_operator.images import image_repository

DrafterMethod = Literal["eagle3", "eagle", "mtp", "ngram", "draftModel", "none"]
DRAFTER_METHODS: tuple[str, ...] = ("eagle3", "eagle", "mtp", "ngram", "draftModel", "none")
# Methods that load a separate drafter checkpoint (drafter.model required).
METHODS_WITH_MODEL: tuple[str, ...] = ("eagle3", "eagle", "draftModel")
# Methods for which the user must give vLLM's num_speculative_tokens (for mtp the renderer defaults it to 1,
# one MTP layer as in DeepSeek-V3/Kimi; vLLM 0.33.0 requires it, see tests/contract).
METHODS_NEEDING_K_ON_VLLM: tuple[str, ...] = ("eagle3", "eagle", "draftModel", "ngram")

# Exact spellings of the flags the operator owns, on either engine (from the engines' flag tables),
# checked at admission by CEL. Every other spelling the engines accept (unique prefixes, vLLM's
# underscores and dotted keys) is refused by the operator before any pod starts (serving_problems).
OWNED_FLAG_SPELLINGS: tuple[str, ...] = tuple(f for f in owned_spellings() if not f.startswith("--speculative"))
# Every --speculative* flag (and its --no- form) belongs to spec.drafter; -sc.<key> is vLLM's dotted form.
OWNED_FLAG_PREFIXES: tuple[str, ...] = ("--speculative", "--no-speculative", "-sc.")


def owned_flag(arg: str) -> bool:
    """True when an extraArgs item is an exact spelling of a flag the operator owns (the admission check)."""
    return arg.split("=")[0] in OWNED_FLAG_SPELLINGS or arg.startswith(OWNED_FLAG_PREFIXES)


_OWNED_LIST_CEL = "[" + ", ".join(f"'{flag}'" for flag in OWNED_FLAG_SPELLINGS) + "]"
_OWNED_CEL = (f"(a.split('=')[0] in {_OWNED_LIST_CEL} || "
              + " || ".join(f"a.startsWith('{prefix}')" for prefix in OWNED_FLAG_PREFIXES) + ")")

MOUNT_PATH_PATTERN = r"^(/[A-Za-z0-9._-]+)+$"
_SYSTEM_PATH_PATTERN = r"^/(dev|proc|sys)(/|$)"

#: The name of an operator-configured endpoint (a key of the chart's prometheus.endpoints).
EndpointName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", min_length=1, max_length=63)]
ParserName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", min_length=1, max_length=64)]

#: spec.acceptance thresholds may say "auto": the break-even threshold learned from the serving's last
#: benchmark (monitoring/break_even.py). The range rules below skip it (it does not match their patterns).
AUTO = "auto"
RATIO_OR_AUTO_PATTERN = "^(auto|" + RATIO_PATTERN[1:-1] + ")$"
DECIMAL_OR_AUTO_PATTERN = "^(auto|" + DECIMAL_PATTERN[1:-1] + ")$"
RatioOrAuto = Annotated[str, StringConstraints(pattern=RATIO_OR_AUTO_PATTERN, max_length=6)]
"""A decimal between 0 and 1 written as a string (e.g. "0.5"), or "auto"."""
DecimalOrAuto = Annotated[str, StringConstraints(pattern=DECIMAL_OR_AUTO_PATTERN, max_length=11)]
"""A non-negative decimal written as a string (e.g. "2.0"), or "auto"."""


CONTENT_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
ContentDigest = Annotated[str, StringConstraints(pattern=CONTENT_DIGEST_PATTERN, max_length=71)]
"""A checkpoint's content digest, "sha256:<64 lowercase hex>" (what a DrafterTraining's Export records)."""


# ---------------------------------------------------------------------------------------------------
# spec


class TargetSpec(ApiModel):
    """The model being served and how the engine loads it."""

    rules = (
        Rule(
            cel=f"!has(self.extraArgs) || !self.extraArgs.exists(a, {_OWNED_CEL})",
            message=(
                "spec.target.extraArgs must not set flags the operator owns (--model, --host, --port, "
                "--tensor-parallel-size, --max-model-len, --gpu-memory-utilization, --trust-remote-code, parsers, "
                "--served-model-name, --enable-metrics, --speculative-*, --config, ...): use the matching spec field instead"
            ),
            check=lambda t: not any(owned_flag(a) for a in t.extra_args or []),
            field_path=".extraArgs",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=cel_decimal_range("self.gpuMemoryUtilization", RATIO_PATTERN, minimum=0.0, exclusive_minimum=True),
            message='spec.target.gpuMemoryUtilization must be above 0 and at most 1, e.g. "0.9"',
            check=lambda t: decimal_ok(t.gpu_memory_utilization, RATIO_PATTERN, minimum=0.0, exclusive_minimum=True),
            field_path=".gpuMemoryUtilization",
        ),
    )

    model: ModelRef
    """The target model: an absolute path on the model volume (e.g. /models/Kimi-K2.5) or a hub id ("org/name")."""
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] = 8
    """GPUs one model instance is sharded over (vLLM --tensor-parallel-size, SGLang --tp-size); must divide resources.gpusPerReplica."""
    max_model_len: Annotated[int, Field(ge=128, le=16777216)] | None = None
    """Context length in tokens (vLLM --max-model-len, SGLang --context-length); engine default when unset."""
    gpu_memory_utilization: Ratio | None = None
    """Fraction of GPU memory the engine may use, e.g. "0.95" (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static)."""
    trust_remote_code: bool = False
    """Run the model repository's own Python code (needed by Kimi and other custom architectures)."""
    tool_call_parser: ParserName | None = None
    """Tool-call parser name, e.g. kimi_k2 (--tool-call-parser; vLLM also gets --enable-auto-tool-choice)."""
    reasoning_parser: ParserName | None = None
    """Reasoning parser name, e.g. kimi_k2 (--reasoning-parser)."""
    served_model_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_./:-]*$", max_length=128)] | None = None
    """The model name clients send and every engine metric is labelled with (--served-model-name); defaults to model."""
    extra_args: Annotated[list[Annotated[str, StringConstraints(min_length=1, max_length=256)]], Field(max_length=64)] | None = None
    """Extra engine flags, one argument per item (["--max-num-seqs", "8"]), checked against the engine's own parser: flags the operator owns are refused under any spelling the engine accepts."""


class DrafterSpec(ApiModel):
    """The speculative drafter. method none serves without speculation: the baseline every speedup is measured against."""

    rules = (
        Rule(
            cel=(
                "self.method != 'none' || (!has(self.model) && !has(self.numSpeculativeTokens) && !has(self.numSteps) "
                "&& !has(self.eagleTopk) && !has(self.numDraftTokens))"
            ),
            message=(
                "spec.drafter.method none serves without speculation: remove drafter.model, numSpeculativeTokens, "
                "numSteps, eagleTopk and numDraftTokens, or choose a method"
            ),
            check=lambda d: d.method != "none" or all(
                v is None for v in (d.model, d.num_speculative_tokens, d.num_steps, d.eagle_topk, d.num_draft_tokens)
            ),
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="!(self.method in ['eagle3', 'eagle', 'draftModel']) || has(self.model)",
            message=(
                "spec.drafter.model is required for methods eagle3, eagle and draftModel: set it to the drafter "
                "checkpoint (a path on the model volume or a hub id)"
            ),
            check=lambda d: d.method not in METHODS_WITH_MODEL or d.model is not None,
            field_path=".model",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.method != 'ngram' || !has(self.model)",
            message="spec.drafter.model must be empty for method ngram (n-gram speculation drafts from the prompt): remove it",
            check=lambda d: d.method != "ngram" or d.model is None,
            field_path=".model",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=(
                "!has(self.eagleTopk) || self.eagleTopk != 1 || !has(self.numSteps) || !has(self.numDraftTokens) "
                "|| self.numDraftTokens == self.numSteps + 1"
            ),
            message=(
                "spec.drafter.numDraftTokens must equal numSteps + 1 when eagleTopk is 1 (SGLang would silently "
                "change it): e.g. numSteps 3, eagleTopk 1, numDraftTokens 4"
            ),
            check=lambda d: d.eagle_topk != 1 or d.num_steps is None or d.num_draft_tokens is None
            or d.num_draft_tokens == d.num_steps + 1,
            field_path=".numDraftTokens",
        ),
        Rule(
            cel="!has(self.contentDigest) || has(self.model)",
            message="spec.drafter.contentDigest names what is at drafter.model: set drafter.model or remove contentDigest",
            check=lambda d: d.content_digest is None or d.model is not None,
            field_path=".contentDigest",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.method != 'none' || !has(self.dynamic)",
            message="spec.drafter.dynamic needs speculation but spec.drafter.method is none: remove dynamic or choose a method",
            check=lambda d: d.method != "none" or d.dynamic is None,
            field_path=".dynamic",
            reason="FieldValueForbidden",
        ),
    )

    method: DrafterMethod
    """eagle3, eagle, mtp (the target's own multi-token-prediction layers), ngram (prompt lookup), draftModel (a small LLM), or none."""
    model: ModelRef | None = None
    """The drafter checkpoint: a path on the model volume or a hub id. Required for eagle3, eagle and draftModel."""
    content_digest: ContentDigest | None = None
    """What is at drafter.model, as "sha256:<64 hex>": set by a DrafterTraining's Promote to the digest its Export recorded (drafter-digest.json beside the weights). Part of the revision's identity, so changing it starts a new revision even at the same path (a retrained drafter exported over the old one); the operator does not read the files to check it."""
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)] | None = None
    """vLLM only: tokens drafted per step (num_speculative_tokens), e.g. 5. Required on vLLM except for mtp."""
    num_steps: Annotated[int, Field(ge=1, le=32)] | None = None
    """SGLang only: draft steps per verification (--speculative-num-steps), e.g. 3. Unset: SGLang chooses steps, eagleTopk and numDraftTokens together (3, 1, 4 for DeepSeek-V3/Kimi), so set it whenever you set either of the others. Not for ngram (SGLang derives it)."""
    eagle_topk: Annotated[int, Field(ge=1, le=64)] | None = None
    """SGLang only: branching factor of the draft tree (--speculative-eagle-topk), e.g. 1. Not for ngram: SGLang replaces it with its n-gram BFS breadth (10)."""
    num_draft_tokens: Annotated[int, Field(ge=1, le=256)] | None = None
    """SGLang only: tokens verified per step (--speculative-num-draft-tokens), e.g. 4; numSteps + 1 when eagleTopk is 1. The one ngram setting on SGLang (default 12; steps become numDraftTokens // 10)."""
    dynamic: Literal["fromBenchmark"] | None = None
    """vLLM only: load-aware speculation. fromBenchmark drafts numSpeculativeTokens below the break-even of the serving's last gate benchmark with a load sweep (where the speedup crosses 1.0 between the last level at or above 1.0x and the first below, which the sweep brackets within 10%) and none from it upwards (vLLM's num_speculative_tokens_per_batch_size). Until such a sweep exists the static k is served; status.speculationSchedule says which. SGLang has no per-batch-size control."""
    allow_known_bad: bool = True
    """Serve a combination listed as known-bad (engine version x method x architecture) with a warning; false refuses it."""


class ResourcesSpec(ContainerResources):
    """Resources of one replica: its GPUs, and CPU and memory beside them."""

    gpus_per_replica: Annotated[int, Field(ge=1, le=64)] = 8
    """nvidia.com/gpu per replica (one engine pod)."""


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
        Rule(
            cel=cel_duration_range("self.timeout", "1m", "48h"),
            message='spec.startup.timeout must be between 1m and 48h, e.g. "45m" (loading a 1T-parameter model takes about 30 minutes)',
            check=lambda s: duration_ok(s.timeout, "1m", "48h"),
            field_path=".timeout",
        ),
        Rule(
            cel=cel_duration_range("self.placementTimeout", "1m", "48h"),
            message='spec.startup.placementTimeout must be between 1m and 48h, e.g. "30m" (a node autoscaler adds a GPU node in minutes)',
            check=lambda s: duration_ok(s.placement_timeout, "1m", "48h"),
            field_path=".placementTimeout",
        ),
        Rule(
            cel=cel_duration_range("self.downloadTimeout", "0s", "48h"),
            message='spec.startup.downloadTimeout must be between 0s and 48h, e.g. "1h"',
            check=lambda s: duration_ok(s.download_timeout, "0s", "48h"),
            field_path=".downloadTimeout",
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
        Rule(
            cel=cel_duration_range("self.drainTimeout", "0s", "24h"),
            message='spec.swap.drainTimeout must be at most 24h, e.g. "5m" (the longest stream a client may have in flight at a switch)',
            check=lambda s: duration_ok(s.drain_timeout, "0s", "24h"),
            field_path=".drainTimeout",
        ),
        Rule(
            cel=cel_duration_range("self.gateTimeout", "1m", "48h"),
            message='spec.swap.gateTimeout must be between 1m and 48h, e.g. "30m" (a gate benchmark of 5 prompts takes minutes)',
            check=lambda s: duration_ok(s.gate_timeout, "1m", "48h"),
            field_path=".gateTimeout",
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


class AcceptanceSpec(ApiModel):
    """Live acceptance monitoring: when the drafter's acceptance stays below threshold, the serving becomes Degraded."""

    rules = (
        Rule(
            cel="has(self.minAcceptanceRate) || has(self.minAcceptanceLength)",
            message=(
                "spec.acceptance needs a threshold: set minAcceptanceRate (e.g. \"0.5\") or minAcceptanceLength "
                "(e.g. \"2.0\"), or \"auto\" for the break-even threshold learned from the serving's last benchmark"
            ),
            check=lambda a: a.min_acceptance_rate is not None or a.min_acceptance_length is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            cel=cel_decimal_range("self.minAcceptanceLength", DECIMAL_PATTERN, minimum=1.0),
            message='spec.acceptance.minAcceptanceLength must be at least 1 (it counts the bonus token), e.g. "2.0", or "auto"',
            check=lambda a: decimal_ok(a.min_acceptance_length, DECIMAL_PATTERN, minimum=1.0),
            field_path=".minAcceptanceLength",
        ),
        Rule(
            cel=cel_duration_range("self.window", "30s", "24h"),
            message='spec.acceptance.window must be between 30s and 24h, e.g. "5m"',
            check=lambda a: duration_ok(a.window, "30s", "24h"),
            field_path=".window",
        ),
        Rule(
            cel=cel_duration_range("self.__for__", "0s", "24h"),  # `for` is a CEL keyword, escaped
            message='spec.acceptance.for must be at most 24h, e.g. "10m"',
            check=lambda a: duration_ok(a.for_, "0s", "24h"),
            field_path=".for",
        ),
        # A URL of the tenant's choosing made the operator fetch it from inside the cluster (SSRF) and
        # report what came back: tenants now name an endpoint the operator's configuration allows.
        Rule(
            cel="!has(self.prometheusUrl)",
            message=("spec.acceptance.prometheusUrl is no longer accepted (the operator would fetch any URL): "
                     "remove it and set spec.acceptance.prometheus to the name of a Prometheus endpoint the "
                     "operator is configured with (chart value prometheus.endpoints; docs/security.md)"),
            check=lambda a: a.prometheus_url is None,
            field_path=".prometheusUrl",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.source != 'prometheus' || has(self.prometheus)",
            message=("spec.acceptance.prometheus is required with source prometheus: set it to the name of a "
                     "Prometheus endpoint the operator is configured with (chart value prometheus.endpoints, "
                     "e.g. default), or use source engine"),
            check=lambda a: a.source != "prometheus" or a.prometheus is not None,
            field_path=".prometheus",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.source == 'prometheus' || !has(self.prometheus)",
            message="spec.acceptance.prometheus is only used with source prometheus: set source: prometheus or remove it",
            check=lambda a: a.source == "prometheus" or a.prometheus is None,
            field_path=".prometheus",
            reason="FieldValueForbidden",
        ),
    )

    min_acceptance_rate: RatioOrAuto | None = None
    """Lowest acceptable acceptance rate (accepted / drafted tokens over the window), e.g. "0.5"; "auto" is the break-even mean length below expressed per drafted token, (length - 1) / k."""
    min_acceptance_length: DecimalOrAuto | None = None
    """Lowest acceptable mean acceptance length (tokens per verification step, bonus token included), e.g. "2.0"; "auto" is where speculation stops paying, learned from status.lastBenchmark of the active revision (break-even 1 + k x draft cost, plus 5%; see status.acceptanceThreshold)."""
    window: Duration = "5m"
    """Window the rate and length are computed over (deltas of the engine's counters)."""
    min_draft_tokens: Annotated[int, Field(ge=0, le=1000000000)] = 1000
    """No verdict while fewer tokens than this were drafted in the window (too little data)."""
    for_: Duration = Field(default="5m", alias="for")
    """How long acceptance must stay below threshold before the serving is Degraded."""
    source: Literal["engine", "prometheus"] = "engine"
    """engine scrapes the engine pods' /metrics directly; prometheus queries the Prometheus endpoint named by prometheus."""
    prometheus: EndpointName | None = None
    """For source prometheus: the name of a Prometheus endpoint the operator is configured with (chart value prometheus.endpoints, e.g. default); the administrator, not the tenant, chooses the URLs the operator queries."""
    prometheus_url: Url | None = None
    """Removed: refused (it let a tenant make the operator fetch any URL). Use prometheus, an endpoint name."""
    on_degraded: Literal["Alert", "Rollback", "DisableSpeculation"] = "Alert"
    """Alert (condition, event and metric only), Rollback (to the last good drafter) or DisableSpeculation (serve with method none)."""


def _under(path: str | None, mount: str) -> bool:
    return path is None or not path.startswith("/") or path.startswith(mount + "/")


class DrafterServingSpec(ApiModel):
    """Desired state of a DrafterServing."""

    rules = (
        Rule(
            cel="self.resources.gpusPerReplica % self.target.tensorParallelSize == 0",
            message=(
                "spec.target.tensorParallelSize must divide spec.resources.gpusPerReplica (default 8): e.g. "
                "tensorParallelSize 8 with gpusPerReplica 8"
            ),
            check=lambda s: s.resources.gpus_per_replica % s.target.tensor_parallel_size == 0,
            field_path=".target.tensorParallelSize",
        ),
        Rule(
            cel="self.engine != 'vllm' || (!has(self.drafter.numSteps) && !has(self.drafter.eagleTopk) && !has(self.drafter.numDraftTokens))",
            message=(
                "spec.drafter.numSteps, eagleTopk and numDraftTokens are SGLang settings: with engine vllm use "
                "spec.drafter.numSpeculativeTokens instead"
            ),
            check=lambda s: s.engine != "vllm"
            or (s.drafter.num_steps is None and s.drafter.eagle_topk is None and s.drafter.num_draft_tokens is None),
            field_path=".drafter",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.engine != 'sglang' || !has(self.drafter.numSpeculativeTokens)",
            message=(
                "spec.drafter.numSpeculativeTokens is a vLLM setting: with engine sglang use numSteps, eagleTopk "
                "and numDraftTokens instead"
            ),
            check=lambda s: s.engine != "sglang" or s.drafter.num_speculative_tokens is None,
            field_path=".drafter.numSpeculativeTokens",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.engine != 'sglang' || !has(self.drafter.dynamic)",
            message=(
                "spec.drafter.dynamic is vLLM only: SGLang 0.5.23 has no per-batch-size control of the draft "
                "length; remove dynamic or use engine vllm"
            ),
            check=lambda s: s.engine != "sglang" or s.drafter.dynamic is None,
            field_path=".drafter.dynamic",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=(
                "self.engine != 'vllm' || !(self.drafter.method in ['eagle3', 'eagle', 'draftModel', 'ngram']) "
                "|| has(self.drafter.numSpeculativeTokens)"
            ),
            message=(
                "spec.drafter.numSpeculativeTokens is required with engine vllm and methods eagle3, eagle, "
                "draftModel and ngram: set the tokens drafted per step (1-16, e.g. 5)"
            ),
            check=lambda s: s.engine != "vllm" or s.drafter.method not in METHODS_NEEDING_K_ON_VLLM
            or s.drafter.num_speculative_tokens is not None,
            field_path=".drafter",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.drafter.method == 'mtp' || !has(self.drafter.model) || self.drafter.model != self.target.model",
            message="spec.drafter.model must differ from spec.target.model: point it at the drafter checkpoint",
            check=lambda s: s.drafter.method == "mtp" or s.drafter.model is None or s.drafter.model != s.target.model,
            field_path=".drafter.model",
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
            or _under(s.target.model, s.storage.mount_path),
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
            or _under(s.drafter.model, s.storage.mount_path),
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
    """Resources of one replica."""
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
    env: EnvVars | None = None
    """Variables of the engine container (Kubernetes EnvVar: value, or valueFrom a Secret or ConfigMap key), e.g. NCCL and engine tuning flags. The operator's own win: HF_HUB_OFFLINE (from storage.offline) and HF_HOME (with storage.cacheClaim). Like replicas, a change restarts the active revision's pods in place; it never makes a new revision."""
    env_from: EnvFromSources | None = None
    """Every key of a Secret or ConfigMap as a variable of the engine container, e.g. {secretRef: {name: hf-token}} for the hub token HF_TOKEN (its value never appears in this object, its status or the operator's logs)."""
    pod: PodPolicy | None = None
    """Pod settings a cluster's policies may require: labels, annotations, serviceAccountName, imagePullSecrets, priorityClassName, runtimeClassName (e.g. nvidia), security contexts. Applied to the active revision in place."""


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


# ---------------------------------------------------------------------------------------------------
# status


class RevisionStatus(StatusModel):
    """One immutable configuration (engine + target + drafter) the serving has run."""

    name: str
    """Revision name: a hash of the engine, target and drafter configuration."""
    drafter: str | None = None
    """The drafter of this revision, e.g. "eagle3:/models/drafters/kimi-eagle3" or "none"."""
    engine: str | None = None
    """The engine of this revision."""
    since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When this revision was created."""
    good: bool | None = None
    """Whether this revision became Ready and was not Degraded: a Rollback target."""
    degraded: bool | None = None
    """This revision went Degraded: it is never chosen again automatically (no rollback ping-pong)."""
    failed_reason: str | None = None
    """Why the revision failed, when not the startup timeout (e.g. the gate's figures)."""
    image: str | None = None
    """The engine image this revision runs."""
    drafter_spec: DrafterSpec | None = None
    """The drafter exactly as this revision runs it: what a Rollback to this revision restores."""


class ReplicaAcceptanceStatus(StatusModel):
    """One replica's acceptance over the window (listed when the replicas differ)."""

    pod: str
    """The engine pod."""
    rate: float | None = None
    """Accepted / drafted tokens of this replica."""
    mean_length: float | None = None
    """Tokens per verification step of this replica."""
    draft_tokens: int | None = None
    """Tokens this replica drafted in the window."""


class AcceptanceStatus(StatusModel):
    """Acceptance over the last complete window."""

    rate: float | None = None
    """Accepted / drafted tokens."""
    mean_length: float | None = None
    """Mean acceptance length: tokens per verification step, bonus token included."""
    draft_tokens: int | None = None
    """Tokens drafted in the window (SGLang: verify calls x draft steps, an estimate)."""
    drafts: int | None = None
    """Verification steps in the window."""
    window_seconds: int | None = None
    """Length of the window the figures cover."""
    window_end: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """End of the window."""
    source: Literal["engine", "prometheus"] | None = None
    """Where the figures came from: the engine pods' /metrics or a Prometheus query."""
    replicas: list[ReplicaAcceptanceStatus] | None = None
    """Per-replica figures, when the replicas' rates differ by more than a percentage point."""
    revision: str | None = None
    """The revision the figures were measured on."""


class DegradedActionStatus(StatusModel):
    """What onDegraded did about a Degraded revision; in force while the spec asks for that same revision."""

    action: Literal["Rollback", "DisableSpeculation"]
    """Rollback (serving an earlier drafter) or DisableSpeculation (serving the target with method none)."""
    degraded_revision: str
    """The revision that went Degraded."""
    revision: str
    """The revision served instead."""
    spec_revision: str
    """The revision the spec asked for when the action was taken. A spec change to any other revision ends the action."""
    drafter_spec: DrafterSpec
    """The drafter served instead."""
    image: str
    """The engine image served instead."""
    message: str
    """Why, with the figures that made the revision Degraded."""
    since: str = Field(json_schema_extra={"format": "date-time"})
    """When the action was taken."""


class LastBenchmarkStatus(StatusModel):
    """The latest DrafterBenchmark of this serving."""

    name: str | None = None
    """Name of the DrafterBenchmark."""
    tokens_per_second: float | None = None
    """Single-stream decode throughput it measured."""
    speedup: float | None = None
    """Speedup against its baseline."""
    acceptance_length: float | None = None
    """Mean acceptance length it measured (tokens per verification step, bonus token included)."""
    num_speculative_tokens: int | None = None
    """Draft tokens per verification step (k) of the revision it measured."""
    revision: str | None = None
    """The revision it measured (the gate benchmark of the active revision)."""


class ScheduleRangeStatus(StatusModel):
    """One inclusive batch-size range of a speculation schedule and the tokens drafted in it."""

    start: int
    """First batch size of the range."""
    end: int
    """Last batch size of the range (the last range ends at 65536: vLLM clamps it to --max-num-seqs)."""
    num_speculative_tokens: int
    """Tokens drafted per step at these batch sizes: k, or 0 (no speculation)."""


class SpeculationScheduleStatus(StatusModel):
    """spec.drafter.dynamic: the draft length per batch size the engine runs, and where it came from."""

    source: str | None = None
    """"benchmark <name>" (the schedule comes from that benchmark's load sweep: a gate's or one run by hand) or "static" (no sweep yet: the static k)."""
    revision: str | None = None
    """The revision the sweep measured (the static-k revision of the current spec)."""
    scheduled_revision: str | None = None
    """The revision that runs the schedule (a new engine process, so a new name); its auto thresholds learn from the sweep's revision too."""
    crossover_concurrency: int | None = None
    """The first measured concurrency whose speedup is below 1.0; unset when speculation paid at every level."""
    above_concurrency: int | None = None
    """The highest measured concurrency under crossoverConcurrency (speedup 1.0 or more): the break-even lies between the two."""
    break_even_concurrency: float | None = None
    """Streams where the speedup crosses 1.0, interpolated between aboveConcurrency and crossoverConcurrency; speculation is off from the first batch size at or above it."""
    ranges: Annotated[list[ScheduleRangeStatus], Field(max_length=16)] | None = None
    """The schedule rendered into --speculative-config (num_speculative_tokens_per_batch_size); unset with source static."""
    message: str | None = None
    """Why this schedule (e.g. why the static k is served)."""


class AcceptanceThresholdStatus(StatusModel):
    """The acceptance thresholds in force; with "auto", the break-even threshold learned from status.lastBenchmark."""

    source: str | None = None
    """"spec" (numbers from spec.acceptance) or "benchmark <name>" (a threshold is auto, learned from that benchmark)."""
    min_acceptance_rate: float | None = None
    """The acceptance-rate threshold applied; for auto, (minAcceptanceLength - 1) / k."""
    min_acceptance_length: float | None = None
    """The mean-acceptance-length threshold applied; for auto, breakEvenLength x (1 + margin)."""
    draft_cost: float | None = None
    """auto: cost of one draft token in target steps the benchmark implies, (length / speedup - 1) / k (at least 0)."""
    break_even_length: float | None = None
    """auto: the mean acceptance length at which speculation is as fast as none, 1 + k x draftCost."""
    margin: float | None = None
    """auto: how far above break-even the threshold sits (relative; 0.05 is 5%)."""
    revision: str | None = None
    """auto: the revision the benchmark measured (a threshold is learned only from the active revision's)."""


class GatingStatus(StatusModel):
    """A gated revision waiting for its gate's verdict (spec.swap.gateTimeout counts from since)."""

    revision: str | None = None
    """The revision being gated."""
    since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When its gating began."""
    source: str | None = None
    """Whose gate it is: "spec.swap.gate", or "the gate of drafter.dev/promotion by <training> (generation <n>)" for the one-shot gate of a DrafterTraining's Promote."""


class PromotionStatus(StatusModel):
    """The drafter.dev/promotion annotation acted on: a one-shot BlueGreen swap with its own gate, for one revision."""

    request: str | None = None
    """A short hash of the annotation's value: a new value is a new promotion."""
    by: str | None = None
    """Who asked, e.g. "train-kimi (generation 2)"."""
    revision: str | None = None
    """The revision it applies to (without a learned schedule; the scheduled revision of the same drafter too). Every other swap follows spec.swap."""


class ServingNowStatus(StatusModel):
    """What receives traffic now: the active revision as it runs (after an onDegraded action, not the spec's drafter)."""

    revision: str | None = None
    """The revision the Service selects."""
    engine: str | None = None
    """Its engine."""
    drafter: str | None = None
    """Its drafter, e.g. "eagle3:/models/drafters/kimi-eagle3 k=5", or "none" (no speculation)."""
    method: str | None = None
    """Its drafter method (the DRAFTER column), "none" without speculation."""
    num_speculative_tokens: int | None = None
    """Tokens it drafts per step (k), when it speculates."""
    image: str | None = None
    """Its engine image."""


class EndpointStatus(StatusModel):
    """Where clients reach the serving."""

    host: str | None = None
    """Service DNS name."""
    port: int | None = None
    """Service port."""
    url: str | None = None
    """OpenAI-compatible base URL, e.g. http://kimi.default.svc:8000/v1."""


class DrafterServingStatus(StatusModel):
    """Observed state of a DrafterServing."""

    observed_generation: int | None = None
    """The metadata.generation the status reflects."""
    conditions: Annotated[list[Condition], Field(json_schema_extra=CONDITIONS_SCHEMA_EXTRA)] | None = None
    """Ready, Progressing, Degraded, DrafterCompatible."""
    active_revision: str | None = None
    """Revision the Service points at."""
    previous_revision: str | None = None
    """Revision that served before the active one."""
    revisions: Annotated[list[RevisionStatus], Field(max_length=10)] | None = None
    """Revisions known to the serving, newest last."""
    acceptance: AcceptanceStatus | None = None
    """Acceptance over the last window."""
    speculation_disabled: str | None = None
    """Set while onDegraded DisableSpeculation serves without speculation: why. A spec change to another revision (the drafter, target, engine or image) re-enables speculation."""
    degraded_action: DegradedActionStatus | None = None
    """The Rollback or DisableSpeculation in force, if any."""
    last_benchmark: LastBenchmarkStatus | None = None
    """The newest finished DrafterBenchmark of the active revision (its gate or one run by hand): where auto thresholds learn."""
    speculation_schedule: SpeculationScheduleStatus | None = None
    """With spec.drafter.dynamic: the draft length per batch size in force, and its source."""
    acceptance_threshold: AcceptanceThresholdStatus | None = None
    """The acceptance thresholds in force (with "auto": learned from lastBenchmark, and how)."""
    gating: GatingStatus | None = None
    """While a Ready new revision is benchmarked by its gate: which, and since when."""
    retry_request: str | None = None
    """The last value of the drafter.dev/retry annotation acted on: a new value starts a failed revision again."""
    promotion: PromotionStatus | None = None
    """The DrafterTraining promotion (drafter.dev/promotion annotation) in force, and the revision it applies to."""
    serving: ServingNowStatus | None = None
    """What receives traffic now (the active revision): the printer columns describe it, not the spec."""
    endpoint: EndpointStatus | None = None
    """Where clients reach the serving."""


class DrafterServing(KindModel):
    """A target model served by vLLM or SGLang with a speculative drafter (or none, as a baseline)."""

    kind_name: ClassVar[str] = "DrafterServing"
    plural: ClassVar[str] = "drafterservings"
    singular: ClassVar[str] = "drafterserving"
    short_names: ClassVar[tuple[str, ...]] = ("dsv",)
    printer_columns: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Engine", "type": "string", "jsonPath": ".status.serving.engine"},
        {"name": "Drafter", "type": "string", "jsonPath": ".status.serving.method"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Degraded", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Degraded")].status'},
        {"name": "Acceptance", "type": "number", "jsonPath": ".status.acceptance.rate"},
        {"name": "Speedup", "type": "number", "jsonPath": ".status.lastBenchmark.speedup"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Revision", "type": "string", "jsonPath": ".status.activeRevision", "priority": 1},
        {"name": "TP", "type": "integer", "jsonPath": ".spec.target.tensorParallelSize", "priority": 1},
    )

    api_version: Literal["drafter.dev/v1alpha1"] = "drafter.dev/v1alpha1"
    """drafter.dev/v1alpha1"""
    kind: Literal["DrafterServing"] = "DrafterServing"
    """DrafterServing"""
    spec: DrafterServingSpec
    """Desired state."""
    status: DrafterServingStatus | None = None
    """Observed state, written by the operator."""


# ---------------------------------------------------------------------------------------------------
# What the operator checks and the apiserver cannot (filed as a condition by the controller).

_LABEL_KEY_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_KEY_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why a label key is invalid, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "has more than one '/'"
    if prefix and (len(prefix) > 253 or not _LABEL_KEY_PREFIX.match(prefix)):
        return "has an invalid prefix (a lowercase DNS subdomain of at most 253 characters)"
    if not name or len(name) > 63 or not _LABEL_KEY_NAME.match(name):
        return "has an invalid name (at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric)"
    return None


# What serving_problems() checks, for docs/api.md (one line per check).
SERVING_OPERATOR_CHECKS: tuple[str, ...] = (
    "spec.target.extraArgs starts with a --flag (a leading value would be taken as the model or a stray argument).",
    "spec.target.extraArgs has no item holding a flag and its value separated by a space (split them into two items).",
    "spec.target.extraArgs sets no flag twice.",
    "spec.target.extraArgs parses with the engine's own rules (flag table of vLLM 0.33.0 / SGLang 0.5.23: unique "
    "prefixes, vLLM's underscores, dotted keys and --no- forms) and reaches no destination the operator owns "
    "(flags unknown to that version are refused only with the default image).",
    "spec.target.toolCallParser and reasoningParser are names the engine registers.",
    "spec.drafter with method ngram on sglang sets neither numSteps nor eagleTopk (SGLang replaces both); "
    "on sglang, numSteps is set whenever eagleTopk or numDraftTokens is.",
    "spec.image is not named after the other engine (e.g. an sglang image with engine vllm).",
    "spec.placement.nodeSelector keys are valid label keys.",
    "spec.resources.gpusPerReplica fits on one node (multi-node replicas are not supported yet).",
)


def serving_problems(spec: DrafterServingSpec, *, gpus_per_node: int | None = None) -> list[str]:
    """Problems the apiserver cannot detect, each naming the field and the fix. Empty means valid.

    `gpus_per_node` (the GPU count of the nodes the serving may use, when the caller knows it) enables
    the capacity checks. The apiserver has already enforced everything in the CRD schema.
    """
    problems: list[str] = []
    target = spec.target

    # extraArgs: shape of the argument list.
    args = target.extra_args or []
    seen: dict[str, int] = {}
    other = "sglang" if spec.engine == "vllm" else "vllm"
    shape_ok = True
    for index, arg in enumerate(args):
        where = f"spec.target.extraArgs[{index}]"
        if index == 0 and not arg.startswith("-"):
            problems.append(f"{where} {arg!r} is not a flag: extraArgs must start with a --flag (values follow their flag)")
            shape_ok = False
        if arg.startswith("--") and " " in arg.split("=")[0]:
            # The flag only: the value may be a secret, and this message reaches status and Events.
            problems.append(f"{where} {arg.split(' ', 1)[0]!r} holds a flag and its value in one item: split it into two items")
            shape_ok = False
            continue
        if not arg.startswith("--"):
            continue
        flag = arg.split("=")[0]
        if flag in seen:
            problems.append(f"{where} repeats {flag} (first at extraArgs[{seen[flag]}]): keep one")
        else:
            seen[flag] = index

    # What the engine itself would refuse or reinterpret (its flag table and parser registries).
    module = engine_module(spec.engine)
    if shape_ok:
        default_image = spec.image is None or spec.image == DEFAULT_IMAGES[spec.engine]
        problems += module.extra_args_problems(list(args), known_flags_only=default_image)
    problems += module.spec_problems(spec)

    # image vs engine: an image named after the other engine is almost certainly a mistake.
    if spec.image:
        repository = image_repository(spec.image).lower()
        if other in repository and spec.engine not in repository:
            problems.append(f"spec.image {spec.image!r} looks like a {other} image but spec.engine is {spec.engine}: fix one of them")

    # node selector keys (values are checked by the schema).
    for key in (spec.placement.node_selector or {}) if spec.placement else {}:
        reason = label_key_problem(key)
        if reason:
            problems.append(f"spec.placement.nodeSelector key {key!r} {reason}: use a valid label key such as nvidia.com/gpu.product")

    # capacity: one replica is one pod on one node.
    if gpus_per_node is not None:
        if spec.resources.gpus_per_replica > gpus_per_node:
            problems.append(
                f"spec.resources.gpusPerReplica {spec.resources.gpus_per_replica} exceeds the {gpus_per_node} GPUs of one node: "
                "multi-node replicas are not supported yet; lower gpusPerReplica and tensorParallelSize"
            )
    return problems
