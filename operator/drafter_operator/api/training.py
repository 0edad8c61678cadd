"""DrafterTraining: train (or fine-tune) an EAGLE-3 drafter for a target, stage by stage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, StringConstraints

from drafter_operator.api.common import (
    CONDITIONS_SCHEMA_EXTRA,
    PATH_FIX,
    AbsPath,
    ApiModel,
    BenchmarkGate,
    Condition,
    Engine,
    Image,
    LocalObjectReference,
    ModelRef,
    ObjectName,
    Quantity,
    Rule,
    StatusModel,
    cel_decimal_range,
    cel_path_normalised,
    cel_paths_overlap,
    decimal_ok,
    path_normalised,
    paths_overlap,
)
from drafter_operator.api.kind import KindModel
from drafter_operator.api.pod import ContainerResources, EnvFromSources, EnvVars, Placement, PodPolicy
from drafter_operator.api.serving import MOUNT_PATH_PATTERN

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

    engine: Engine = "sglang"
    """Engine that serves the target during generation."""
    image: Image | None = None
    """Engine image; defaults per engine from the operator's configuration."""


class DataSpec(ApiModel):
    """Training data."""

    dataset: ModelRef
    """Prompt dataset: a path on the model volume (JSONL conversations) or a hub dataset id, e.g. "sharegpt"."""
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
    """Offline extraction of the target's hidden states the EAGLE-3 drafter learns from."""

    rules = (
        Rule(
            cel="!has(self.layers) || self.layers.isSorted()",
            message="spec.hiddenStates.layers must be in ascending order (low, middle, high), e.g. [2, 30, 58]",
            check=lambda h: h.layers is None or list(h.layers) == sorted(h.layers),
            field_path=".layers",
        ),
    )

    layers: Annotated[
        list[Annotated[int, Field(ge=0, le=1023)]],
        Field(min_length=3, max_length=3, json_schema_extra={"x-kubernetes-list-type": "set"}),
        AfterValidator(_unique),
    ] | None = None
    """The three target layers (low, middle, high) whose hidden states EAGLE-3 fuses, e.g. [2, 30, 58]; default: the framework's choice."""
    storage: HiddenStatesStorage
    """Where the hidden states are written."""


class TrainSpec(ApiModel):
    """Training hyper-parameters."""

    rules = (
        Rule(
            cel=cel_decimal_range("self.learningRate", LEARNING_RATE_PATTERN, minimum=0.0, maximum=1.0, exclusive_minimum=True),
            message='spec.train.learningRate must be above 0 and at most 1, e.g. "1e-4"',
            check=lambda t: decimal_ok(t.learning_rate, LEARNING_RATE_PATTERN, minimum=0.0, maximum=1.0, exclusive_minimum=True),
            field_path=".learningRate",
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


class TrainingResources(ContainerResources):
    """Resources of each stage pod: GPUs for the GPU stages, CPU and memory for all."""

    gpus: Annotated[int, Field(ge=1, le=64)] = 8
    """nvidia.com/gpu per stage pod; must be a multiple of target.tensorParallelSize."""


def _under(path: str | None, mount: str) -> bool:
    return path is None or not path.startswith("/") or path.startswith(mount + "/")


def _apart(output: str, other: str | None) -> bool:
    """output.path neither is, contains nor lies under ``other`` (unset or a hub id: nothing to overwrite)."""
    return other is None or not other.startswith("/") or not paths_overlap(output, other)


def _normalised_rule(field: str, attr: Callable[[Any], str | None], example: str, optional: bool = False) -> Rule:
    """The rule that the path field ``field`` (JSON path under spec) is normalised."""
    cel = cel_path_normalised(f"self.{field}")
    return Rule(
        cel=f"!has(self.{field}) || {cel}" if optional else cel,
        message=f"spec.{field} must be a normalised absolute path ({PATH_FIX}): e.g. {example}",
        check=lambda s: path_normalised(attr(s)),
        field_path=f".{field}",
    )


def _under_mount_rule(field: str, attr: Callable[[Any], str | None], optional: bool = False) -> Rule:
    cel = f"!self.{field}.startsWith('/') || self.{field}.startsWith(self.storage.mountPath + '/')"
    return Rule(
        cel=f"!has(self.{field}) || {cel}" if optional else cel,
        message=f"spec.{field} is an absolute path outside spec.storage.mountPath: put it under mountPath or use a hub id",
        check=lambda s: _under(attr(s), s.storage.mount_path),
        field_path=f".{field}",
    )


def _apart_rule(field: str, attr: Callable[[Any], str | None], optional: bool = False) -> Rule:
    cel = f"!self.{field}.startsWith('/') || !{cel_paths_overlap('self.output.path', f'self.{field}')}"
    return Rule(
        cel=f"!has(self.{field}) || {cel}" if optional else cel,
        message=(f"spec.output.path must not overwrite spec.{field}: it is, contains or lies under it; "
                 "choose a directory of its own, e.g. /models/drafters/my-drafter"),
        check=lambda s: _apart(s.output.path, attr(s)),
        field_path=".output.path",
    )


class DrafterTrainingSpec(ApiModel):
    """Desired training run."""

    rules = (
        Rule(
            cel="self.resources.gpus % self.target.tensorParallelSize == 0",
            message="spec.target.tensorParallelSize must divide spec.resources.gpus (default 8): e.g. 8 and 8",
            check=lambda s: s.resources.gpus % s.target.tensor_parallel_size == 0,
            field_path=".target.tensorParallelSize",
        ),
        Rule(
            cel="self.output.path.startsWith(self.storage.mountPath + '/')",
            message=(
                "spec.output.path must be under spec.storage.mountPath (the drafter is written to the model volume, "
                "where servings load it): e.g. /models/drafters/kimi-k25-eagle3"
            ),
            check=lambda s: s.output.path.startswith(s.storage.mount_path + "/"),
            field_path=".output.path",
        ),
        Rule(
            # Export may write only the output's parent directory (resources/training_job.py): that must
            # not be the volume's root, where the target and every other model live.
            cel="!self.output.path.startsWith(self.storage.mountPath + '/') || self.output.path.lastIndexOf('/') > size(self.storage.mountPath)",
            message=(
                "spec.output.path must be in a directory of its own under spec.storage.mountPath (Export may write "
                "only the output's parent directory, never the volume's root): e.g. /models/drafters/kimi-k25-eagle3"
            ),
            check=lambda s: not s.output.path.startswith(s.storage.mount_path + "/")
            or s.output.path.rfind("/") > len(s.storage.mount_path),
            field_path=".output.path",
        ),
        _normalised_rule("output.path", lambda s: s.output.path, "/models/drafters/kimi-k25-eagle3"),
        _normalised_rule("target.model", lambda s: s.target.model, "/models/Kimi-K2.5"),
        _normalised_rule("baseDrafter", lambda s: s.base_drafter, "/models/drafters/kimi-k2-eagle3", optional=True),
        _normalised_rule("data.dataset", lambda s: s.data.dataset, "/models/datasets/prompts.jsonl"),
        _under_mount_rule("target.model", lambda s: s.target.model),
        _under_mount_rule("baseDrafter", lambda s: s.base_drafter, optional=True),
        _under_mount_rule("data.dataset", lambda s: s.data.dataset),
        Rule(
            cel="self.framework != 'specforge' || has(self.data.chatTemplate)",
            message="spec.data.chatTemplate is required with framework specforge (its loss masks follow the target's template): e.g. kimi-k2-instruct, deepseek-v3, qwen or llama3",
            check=lambda s: s.framework != "specforge" or s.data.chat_template is not None,
            field_path=".data.chatTemplate",
            reason="FieldValueRequired",
        ),
        _apart_rule("target.model", lambda s: s.target.model),
        _apart_rule("baseDrafter", lambda s: s.base_drafter, optional=True),
        _apart_rule("data.dataset", lambda s: s.data.dataset),
    )

    target: TrainingTarget
    """The target model."""
    base_drafter: ModelRef | None = None
    """A drafter checkpoint to fine-tune from (path or hub id), e.g. AQ-MedAI/Kimi-K2-Instruct-eagle3; unset trains from scratch."""
    framework: Literal["specforge", "speculators"] = "specforge"
    """Training framework: specforge (SGLang's) or speculators (vLLM's)."""
    image: Image | None = None
    """Trainer image; defaults from the operator's configuration."""
    storage: TrainingStorage
    """The model volume."""
    data: DataSpec
    """Training data."""
    hidden_states: HiddenStatesSpec
    """Hidden-state extraction."""
    train: TrainSpec = Field(default_factory=TrainSpec)
    """Hyper-parameters."""
    output: OutputSpec
    """Where the drafter goes."""
    promote: PromoteSpec | None = None
    """Optional: benchmark and swap the new drafter into a serving."""
    resources: TrainingResources = Field(default_factory=TrainingResources)
    """Resources of each stage pod."""
    placement: Placement | None = None
    """Where the stage pods may run."""
    env: EnvVars | None = None
    """Variables of the stage containers (Kubernetes EnvVar), e.g. NCCL settings or HF_TOKEN from a Secret through valueFrom."""
    env_from: EnvFromSources | None = None
    """Every key of a Secret or ConfigMap as a variable of the stage containers, e.g. {secretRef: {name: hf-token}}."""
    pod: PodPolicy | None = None
    """Pod settings of the stage pods: labels, annotations, serviceAccountName, imagePullSecrets, priorityClassName, runtimeClassName, security contexts."""


class TrainingProgress(StatusModel):
    """How far the current stage is."""

    samples_done: int | None = None
    """Samples generated or extracted so far."""
    samples_total: int | None = None
    """Samples to generate or extract."""
    epoch: int | None = None
    """Current training epoch (1-based)."""
    epochs: int | None = None
    """Training epochs in total."""
    step: int | None = None
    """Optimizer steps done in training."""
    steps: int | None = None
    """Optimizer steps in the whole training, when the framework says."""
    loss: float | None = None
    """The latest training loss the framework reported."""
    eta_seconds: int | None = None
    """Estimated seconds until the current stage ends, from its rate so far."""
    percent: float | None = None
    """Overall progress of the current stage, 0-100."""
    updated: str | None = None
    """When the stage last reported progress (RFC 3339)."""
    summary: str | None = None
    """Short text for kubectl get, e.g. "6200/10000 samples" or "epoch 3/5"."""


class Artifact(StatusModel):
    """Something a stage produced."""

    stage: str
    """The stage that produced it."""
    path: str
    """Where it is."""
    size_bytes: int | None = None
    """Its size."""
    content_digest: str | None = None
    """Export's drafter: "sha256:<hex>" over its files' relative paths and bytes (also in drafter-digest.json inside it), so a new export at the same path is told from the old one."""


class EvaluationResult(StatusModel):
    """The new drafter's benchmark."""

    benchmark: str | None = None
    """Name of the DrafterBenchmark."""
    tokens_per_second: float | None = None
    """Throughput with the new drafter."""
    speedup: float | None = None
    """Speedup against the baseline."""
    acceptance_rate: float | None = None
    """Accepted / drafted tokens."""
    acceptance_length: float | None = None
    """Mean acceptance length."""
    current_tokens_per_second: float | None = None
    """Throughput of the serving's current drafter under the same settings (the Evaluate benchmark)."""
    baseline_tokens_per_second: float | None = None
    """No-speculation throughput the speedups are measured against, when the promote gate has a baseline."""
    current_speedup: float | None = None
    """The current drafter's speedup against that baseline."""
    revision: str | None = None
    """The serving revision the new drafter's figures come from (its gate benchmark)."""


class HiddenStatesStatus(StatusModel):
    """The hidden-state volume: how much the extraction wrote against what it will need."""

    claim_name: str | None = None
    """The PersistentVolumeClaim holding them."""
    bytes_written: int | None = None
    """Bytes the extraction has written so far."""
    estimated_bytes: int | None = None
    """What the whole extraction will write: samples x tokens x (layers + 1) x hidden size x 2 bytes."""
    deleted: bool | None = None
    """The operator deleted its claim after the training succeeded (storage.retain unset)."""


class DrafterTrainingStatus(StatusModel):
    """Observed state of a DrafterTraining."""

    observed_generation: int | None = None
    """The metadata.generation the status reflects."""
    conditions: Annotated[list[Condition], Field(json_schema_extra=CONDITIONS_SCHEMA_EXTRA)] | None = None
    """One per stage (Generated, Extracted, Trained, Exported, Evaluated, Promoted), plus Ready."""
    stage: Literal["Pending", "Generate", "Extract", "Train", "Export", "Evaluate", "Promote", "Succeeded", "Failed"] | None = None
    """The stage running now (or the final outcome)."""
    job_name: str | None = None
    """The Job of the current stage."""
    progress: TrainingProgress | None = None
    """Progress of the current stage."""
    artifacts: list[Artifact] | None = None
    """What the stages produced."""
    evaluation: EvaluationResult | None = None
    """The new drafter's benchmark."""
    hidden_states: HiddenStatesStatus | None = None
    """The hidden-state volume: claim, bytes written, estimate."""
    promoted: bool | None = None
    """Whether the drafter was swapped into promote.servingRef."""
    promoted_revision: str | None = None
    """The revision of promote.servingRef that serves this training's drafter (also in that serving's annotation drafter.dev/promoted-by)."""


class DrafterTraining(KindModel):
    """Train or fine-tune an EAGLE-3 drafter: generate -> extract -> train -> export -> evaluate -> promote."""

    kind_name: ClassVar[str] = "DrafterTraining"
    plural: ClassVar[str] = "draftertrainings"
    singular: ClassVar[str] = "draftertraining"
    short_names: ClassVar[tuple[str, ...]] = ("dtrain",)
    printer_columns: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Stage", "type": "string", "jsonPath": ".status.stage"},
        {"name": "Progress", "type": "string", "jsonPath": ".status.progress.summary"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    api_version: Literal["drafter.dev/v1alpha1"] = "drafter.dev/v1alpha1"
    """drafter.dev/v1alpha1"""
    kind: Literal["DrafterTraining"] = "DrafterTraining"
    """DrafterTraining"""
    spec: DrafterTrainingSpec
    """Desired training run."""
    status: DrafterTrainingStatus | None = None
    """Observed state, written by the operator."""


# What training_problems() checks, for docs/api.md (one line per check).
TRAINING_OPERATOR_CHECKS: tuple[str, ...] = (
    "spec.promote.servingRef names an existing DrafterServing.",
    "the promote DrafterServing serves spec.target.model.",
    "spec.hiddenStates.layers lie inside the target's layers (from its config.json).",
    "spec.data.maxTokens is below spec.train.maxLength (answers would be cut in training).",
    "spec.output.path neither is, contains nor lies under a path a DrafterServing of the namespace loads on the same "
    "claim (spec, revisions, degraded action), before every Job stage (OutputInUse; overwrite does not lift it).",
    "in the stage pods: spec.output.path does not exist unless spec.output.overwrite (OutputExists), and its parent "
    "directory exists, writable by UID/GID 1000 (OutputParentNotWritable), checked by every stage before Export and "
    "again by Export.",
)


def training_problems(spec: DrafterTrainingSpec, *, serving: Any = None, num_target_layers: int | None = None) -> list[str]:
    """Problems the apiserver cannot detect, each naming the field and the fix.

    `serving` is the DrafterServingSpec that spec.promote.servingRef names (None when not found);
    `num_target_layers` is the target's num_hidden_layers from its config.json, when known.
    """
    problems: list[str] = []
    if spec.promote is not None:
        if serving is None:
            problems.append(
                f"spec.promote.servingRef: DrafterServing {spec.promote.serving_ref.name!r} not found in this namespace: "
                "create it or fix the name"
            )
        elif serving.target.model != spec.target.model:
            problems.append(
                f"spec.promote.servingRef: DrafterServing {spec.promote.serving_ref.name!r} serves {serving.target.model!r}, "
                f"not spec.target.model {spec.target.model!r}: a drafter only fits the target it was trained for"
            )
    if num_target_layers is not None and spec.hidden_states.layers:
        outside = [layer for layer in spec.hidden_states.layers if layer >= num_target_layers]
        if outside:
            problems.append(
                f"spec.hiddenStates.layers {outside} lie outside the target's {num_target_layers} layers "
                f"(0-{num_target_layers - 1}): choose layers below {num_target_layers}"
            )
    if spec.data.max_tokens >= spec.train.max_length:
        problems.append(
            f"spec.data.maxTokens {spec.data.max_tokens} is not below spec.train.maxLength {spec.train.max_length}: "
            "generated answers would be cut in training; raise train.maxLength or lower data.maxTokens"
        )
    return problems
