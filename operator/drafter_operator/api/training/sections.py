"""The sections of a DrafterTraining's spec: target, storage, data, hidden states, train, output, promote and
resources."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints

from drafter_operator.api.benchmark_gate import BenchmarkGate
from drafter_operator.api.common import (
    MOUNT_PATH_PATTERN,
    PATH_FIX,
    AbsPath,
    ApiModel,
    Image,
    LocalObjectReference,
    ModelRef,
    ObjectName,
    Quantity,
    Duration,
    RATIO_PATTERN,
    Ratio,
    Rule,
    decimal_range_rule,
    duration_range_rule,
    cel_path_normalised,
    needs_rule,
    path_normalised,
)
from drafter_operator.constants import Engine
from drafter_operator.engines import DEFAULT_GENERATION_ENGINE
from drafter_operator.api.pod import ContainerResources

STAGES: tuple[str, ...] = ("Generate", "Extract", "Train", "Export", "Evaluate", "Promote")
LEARNING_RATE_PATTERN = r"^[0-9](\.[0-9]{1,6})?([eE]-?[0-9]{1,2})?$"


def _unique(values: list[int]) -> list[int]:
    if len(set(values)) != len(values):
        duplicate = next(v for v in values if values.count(v) > 1)
        raise ValueError(f"Duplicate value: {duplicate}")
    return values


class TrainingTarget(ApiModel):
    """The target model the drafter is trained for."""

    model: ModelRef
    """The target: an absolute path on the model volume or a hub id."""
    architecture: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", max_length=128)] | None = None
    """The target's architecture as in its config.json, e.g. DeepseekV3ForCausalLM (checked against the model when set)."""
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] = 8
    """GPUs the target is sharded over while generating data and extracting hidden states."""


class TrainingStorage(ApiModel):
    """The model volume: holds the target, the base drafter and receives the trained drafter."""

    rules = (
        Rule(
            cel=cel_path_normalised("self.mountPath"),
            message=f"spec.storage.mountPath must be a normalised path ({PATH_FIX}): e.g. /models",
            check=lambda s: path_normalised(s.mount_path),
            field_path=".mountPath",
        ),
        Rule(
            cel=cel_path_normalised("self.cachePath"),
            message=f"spec.storage.cachePath must be a normalised path ({PATH_FIX}): e.g. /var/cache/huggingface",
            check=lambda s: path_normalised(s.cache_path),
            field_path=".cachePath",
        ),
    )

    model_claim: ObjectName
    """PersistentVolumeClaim with the target (and base drafter); the trained drafter is written to it."""
    mount_path: Annotated[str, StringConstraints(pattern=MOUNT_PATH_PATTERN, max_length=256)] = "/models"
    """Where the volume is mounted in the stage pods."""
    cache_claim: ObjectName | None = None
    """PersistentVolumeClaim for the Hugging Face cache (HF_HOME) of the stage pods: hub ids (target, base drafter, dataset) are downloaded there once for every stage."""
    cache_path: Annotated[str, StringConstraints(pattern=MOUNT_PATH_PATTERN, max_length=256)] = "/var/cache/huggingface"
    """Where the cache volume is mounted (HF_HOME)."""


class GenerationSpec(ApiModel):
    """Regenerate the dataset's answers with the target itself, so the drafter learns the target's distribution."""

    engine: Engine = DEFAULT_GENERATION_ENGINE
    """Engine that serves the target during generation."""
    image: Image | None = None
    """Engine image; defaults per engine from the operator's configuration."""


#: The held-out share of a captured dataset when spec.data.capture.heldOutFraction is unset.
DEFAULT_HELD_OUT_FRACTION = "0.1"


class CapturedData(ApiModel):
    """Prompts a DrafterServing captured (its spec.capture), as the training data: read from the capture's claim,
    de-duplicated, and split by a hash of each prompt into a train set and a held-out set (a prompt stays on its
    side in every retraining from the claim). The target answers them again (spec.data.generation)."""

    rules = (
        decimal_range_rule(
            "heldOutFraction", RATIO_PATTERN,
            'spec.data.capture.heldOutFraction must be at least 0 and below 1 (the share of prompts kept out of '
            'training, for evaluation), e.g. "0.1"',
            minimum=0.0, maximum=0.9999,  # the pattern's four decimals: below 1
        ),
    )

    claim_name: ObjectName
    """The PersistentVolumeClaim a serving's capture writes to (its spec.capture.claimName), in this namespace; the Generate stage mounts it read-only."""
    held_out_fraction: Ratio = DEFAULT_HELD_OUT_FRACTION
    """The share of distinct prompts held out of training, a decimal string at least 0 and below 1, e.g. "0.1"."""


class DataSpec(ApiModel):
    """Training data: a dataset, or a serving's captured prompts."""

    rules = (
        Rule(
            cel="has(self.dataset) != has(self.capture)",
            message="spec.data needs exactly one source: dataset (a JSONL path on the model volume or a hub id, "
                    "e.g. sharegpt) or capture (a serving's captured prompts, e.g. {claimName: kimi-capture})",
            check=lambda d: (d.dataset is None) != (d.capture is None),
            field_path=".dataset",
            reason="FieldValueInvalid",
        ),
        needs_rule("capture", "generation", "spec.data.capture needs spec.data.generation: captured prompts are "
                   "answered again by the target (add generation: {} for the default engine)",
                   field_path=".generation", reason="FieldValueRequired"),
    )

    dataset: ModelRef | None = None
    """Prompt dataset: a path on the model volume (JSONL conversations) or a hub dataset id, e.g. "sharegpt". Unset when capture is the source."""
    capture: CapturedData | None = None
    """A serving's captured prompts as the source instead of dataset (needs generation)."""
    num_samples: Annotated[int, Field(ge=1, le=100000000)]
    """Samples to use, e.g. 10000."""
    max_tokens: Annotated[int, Field(ge=1, le=131072)] = 2048
    """Longest generated answer in tokens."""
    generation: GenerationSpec | None = None
    """Regenerate answers with the target (recommended); unset uses the dataset's answers as they are."""
    chat_template: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)] | None = None
    """SpecForge's name for the target's chat template (its loss masks follow it), e.g. kimi-k2-instruct, deepseek-v3, qwen, llama3; required with framework specforge. speculators renders through the target's own template and ignores it."""


class HiddenStatesStorage(ApiModel):
    """Volume for the extracted hidden states (large: the seed needed 828 GB for 10k samples)."""

    rules = (
        Rule(
            cel="has(self.claimName) || has(self.size)",
            message="spec.hiddenStates.storage needs claimName (an existing PersistentVolumeClaim) or size (the operator creates one), e.g. size: 1Ti",
            check=lambda s: s.claim_name is not None or s.size is not None,
            reason="FieldValueRequired",
        ),
    )

    claim_name: ObjectName | None = None
    """An existing PersistentVolumeClaim to use."""
    size: Quantity | None = None
    """Size of the claim the operator creates when claimName is unset, e.g. "1Ti"."""
    storage_class_name: ObjectName | None = None
    """StorageClass of the claim the operator creates."""
    retain: bool = False
    """Keep the claim the operator created after the training succeeded (by default it is deleted then, never while a stage uses it); a claimName given here is never deleted."""


class HiddenStatesSpec(ApiModel):
    """Offline extraction of the target's hidden states the drafter learns from."""

    rules = (
        Rule(
            cel="!has(self.layers) || self.layers.isSorted()",
            message="spec.hiddenStates.layers must be in ascending order (low to high), e.g. [2, 30, 58]",
            check=lambda h: h.layers is None or list(h.layers) == sorted(h.layers),
            field_path=".layers",
        ),
    )

    layers: Annotated[
        list[Annotated[int, Field(ge=0, le=1023)]],
        Field(min_length=1, max_length=8, json_schema_extra={"x-kubernetes-list-type": "set"}),
        AfterValidator(_unique),
    ] | None = None
    """The target layers whose hidden states the drafter fuses (vLLM's ids), ascending: three for eagle3 (low, middle, high), e.g. [2, 30, 58]; one to eight for dflash and dspark; default: the framework's choice ([2, n/2, n-3] for a target of n layers)."""
    storage: HiddenStatesStorage
    """Where the hidden states are written."""


class TrainSpec(ApiModel):
    """Training hyper-parameters."""

    rules = (
        decimal_range_rule(
            "learningRate", LEARNING_RATE_PATTERN,
            'spec.train.learningRate must be above 0 and at most 1, e.g. "1e-4"',
            minimum=0.0, maximum=1.0, exclusive_minimum=True,
        ),
    )

    epochs: Annotated[int, Field(ge=1, le=100)] = 5
    """Passes over the data."""
    learning_rate: Annotated[str, StringConstraints(pattern=LEARNING_RATE_PATTERN, max_length=16)] = "1e-4"
    """Learning rate as a decimal string, e.g. "1e-4" or "0.0001"."""
    batch_size: Annotated[int, Field(ge=1, le=1024)] = 1
    """Batch size per GPU."""
    max_length: Annotated[int, Field(ge=128, le=131072)] = 2048
    """Longest training sequence in tokens (prompt and answer)."""
    draft_vocab_size: Annotated[int, Field(ge=16, le=1048576)] = 32000
    """Draft vocabulary: the drafter predicts only the N most frequent target tokens (d2t/t2d map them); both frameworks default to 32000. Must not exceed the target's vocabulary. Ignored when fine-tuning (the base drafter's vocabulary is kept)."""


class OutputSpec(ApiModel):
    """Where the trained drafter goes."""

    path: AbsPath
    """Directory on the model volume (in a directory under storage.mountPath, e.g. /models/drafters/my-drafter) for the exported drafter checkpoint. Export writes it beside, as .<name>.tmp-g<generation>, and renames it into place when complete; it must not exist yet unless overwrite is set."""
    overwrite: bool = False
    """Replace an existing output.path (renamed aside once the new drafter is complete, then deleted); never while a DrafterServing of the namespace loads it. Unset, an existing output.path fails the run before any stage works."""
    format: Literal["sglang", "hf"] = "sglang"
    """SpecForge's export format: sglang (the drafter weights only; SGLang and vLLM load it) or hf (with the target's embedding copied in). speculators always writes its own format, which vLLM loads."""


class PromoteSpec(ApiModel):
    """Benchmark the new drafter on a serving and swap it in only if it beats the current one."""

    serving_ref: LocalObjectReference
    """The DrafterServing to promote the drafter into (same target model)."""
    gate: BenchmarkGate | None = None
    """The benchmark the new drafter must pass (besides beating the current drafter) before it is swapped in."""


#: The most pods (nodes) a stage spans.
STAGE_NODES_MAX = 64


class TrainingResources(ContainerResources):
    """Resources of each stage pod: GPUs for the GPU stages, CPU and memory for all."""

    gpus: Annotated[int, Field(ge=1, le=64)] = 8
    """nvidia.com/gpu per stage pod; must be a multiple of target.tensorParallelSize."""
    nodes: Annotated[int, Field(ge=1, le=STAGE_NODES_MAX)] = 1
    """Pods (one per node, each with ``gpus``) that Train spans, and Extract with framework speculators, each such stage an Indexed Job; the hidden-state claim is ReadWriteMany above 1. Train: data-parallel over all the pods' GPUs, the pods meeting at a torchrun c10d rendezvous through a headless Service; a lost pod fails the stage. Extract (speculators): pod i loads the target and captures the i-th contiguous share of the samples; a finished share is never redone. SpecForge's capture runs on one pod (one torch.distributed group)."""


#: How long a stage Job may run (each attempt: a disruption's retry has its own) before it fails DeadlineExceeded,
#: where spec.limits.deadlines does not say: far beyond a healthy run of the seed (10k samples of a 1T target on
#: 8 H200s: Extract about 9 h, Train about 2 days), short enough that a hung stage frees its GPUs within days.
STAGE_DEADLINE_DEFAULTS: dict[str, str] = {"Generate": "24h", "Extract": "48h", "Train": "168h", "Export": "2h"}
_DEADLINE_RANGE = ("1m", "720h")


class StageDeadlines(ApiModel):
    """How long each stage Job may run (from its start; a queued Job's from Kueue's admission), per attempt."""

    rules = tuple(
        duration_range_rule(field, *_DEADLINE_RANGE,
                            f'spec.limits.deadlines.{field} must be between {_DEADLINE_RANGE[0]} and {_DEADLINE_RANGE[1]}, '
                            f'e.g. "{STAGE_DEADLINE_DEFAULTS[field.capitalize()]}"')
        for field in ("generate", "extract", "train", "export"))

    generate: Duration | None = None
    """Generate's bound; default 24h."""
    extract: Duration | None = None
    """Extract's bound; default 48h."""
    train: Duration | None = None
    """Train's bound; default 168h (a week)."""
    export: Duration | None = None
    """Export's bound; default 2h."""


class TrainingLimits(ApiModel):
    """How long stages may run and how often a disrupted one is retried."""

    deadlines: StageDeadlines = Field(default_factory=StageDeadlines)
    """Per stage Job, how long it may run before it fails with reason DeadlineExceeded (the Job's activeDeadlineSeconds)."""
    disruption_retries: Annotated[int, Field(ge=0, le=10)] = 3
    """How often a stage whose pod was disrupted (node drained, pod evicted or preempted: its DisruptionTarget condition) is started again, from what it had written (Train from its last checkpoint), before the run fails; a finished stage is never run again. Kueue's preemption of a queued stage suspends its Job instead, which resumes on readmission and counts no retry."""
