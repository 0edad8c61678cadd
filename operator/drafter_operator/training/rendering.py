"""What a framework's rendering is made of, shared by the renderers (specforge.py, speculators.py) and the
package's `render` that picks one: the stages and their commands, config files and publish step, the paths
and options a render takes, and the helpers every framework uses (layer ids, Export's staging, the
regeneration command). The package re-exports each name: `drafter_operator.training.Stage` is this `Stage`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.capture.dataset_command import command_line as captured_dataset_command
from drafter_operator.training.checkpoints import Checkpoint
from drafter_operator.training.torchrun import Rendezvous

FRAMEWORKS = ("specforge", "speculators")
#: The captured prompts' sets in the work volume's data directory (spec.data.capture; capture/dataset.py).
CAPTURED_TRAIN, CAPTURED_HELD_OUT = "captured-train.jsonl", "captured-held-out.jsonl"


@dataclass(frozen=True)
class Command:
    """One process of a stage: argv, extra environment, and whether later commands wait for it.

    A ``server`` command runs in the background for the rest of its stage: the next command starts
    once ``ready_url`` answers 200, and the server is stopped when the stage's last command ends.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    server: bool = False
    ready_url: str | None = None


@dataclass(frozen=True)
class ConfigFile:
    """A file a stage reads, rendered from a dict: ``format`` is ``yaml`` or ``json``."""

    name: str
    content: Mapping[str, Any]
    format: str = "yaml"

    def text(self) -> str:
        if self.format == "json":
            return json.dumps(self.content, indent=2, sort_keys=True) + "\n"
        import yaml

        return yaml.safe_dump(dict(self.content), sort_keys=False)


@dataclass(frozen=True)
class Publish:
    """Export's publication (training/export.py): the commands write ``staging`` (beside ``path``, named after
    the spec generation); the stage runner renames it to ``path`` once they all succeeded."""

    path: str
    staging: str
    overwrite: bool = False
    tag: str = "g1"


@dataclass(frozen=True)
class Stage:
    """One stage (one Job): its commands in order and the files they read (under paths.files)."""

    name: str
    commands: tuple[Command, ...]
    files: tuple[ConfigFile, ...] = ()
    #: What the stage leaves behind (artifact name -> path), for status.artifacts.
    outputs: Mapping[str, str] = field(default_factory=dict)
    #: Export only: where its commands write and where the runner moves that when they succeeded.
    publish: Publish | None = None


@dataclass(frozen=True)
class TrainingPaths:
    """Where things are inside the stage containers."""

    #: Working directory on the hidden-states volume (data, hidden states, training checkpoints).
    work: str = "/work"
    #: Where the rendered ConfigFiles are mounted.
    files: str = "/etc/drafter-training"
    #: Where the adapters of training/adapters are mounted (only used with cpu=True, and base_vocab_mapping).
    adapters: str = "/opt/drafter-training/adapters"
    #: SpecForge's repository scripts (prepare_data.py, prepare_hidden_states.py: not in its wheel) inside
    #: the trainer image.
    specforge_scripts: str = "/opt/SpecForge/scripts"
    #: The trainer image's python.
    python: str = "python"
    #: Where a Generate stage mounts the claim of spec.data.capture, read-only.
    capture: str = "/capture"


@dataclass(frozen=True)
class RenderOptions:
    """What the spec does not say (docs/training.md: "What the spec lacks")."""

    #: The substitutions a CPU-only machine needs (see the module docstring).
    cpu: bool = False
    #: Draft vocabulary (the N most frequent target tokens); both frameworks' default is 32000.
    draft_vocab_size: int = 32000
    #: SpecForge's chat template name (specforge.data.template), e.g. "qwen" or "kimi-k2-instruct".
    chat_template: str | None = None
    #: The target's config.json (SpecForge's draft config is derived from it as SpecForge derives it).
    target_config: Mapping[str, Any] | None = None
    #: The base drafter's config.json when spec.baseDrafter is set (SpecForge exports with it).
    base_drafter_config: Mapping[str, Any] | None = None
    #: SpecForge export format: "sglang" (no embedding; SGLang and vLLM load it) or "hf".
    export_to: str = "sglang"
    #: Loopback port of the engine server a stage starts (render, hidden states); run-stage takes a free one
    #: (stage_runner.free_loopback_port), so that pods sharing a network namespace never meet.
    port: int = 30000
    #: The OpenAI base URL (``.../v1``) of the engine pod serving the target for spec.data.generation
    #: (resources/training_engine.generation_endpoint); required exactly when generation is set.
    generation_endpoint: str | None = None
    seed: int = 0
    #: The DrafterTraining's spec generation (run-stage --generation): Export's staging directory is named
    #: after it, so an older generation's Export pod never writes into a newer one's.
    generation: int = 1
    #: This pod's share of a data-parallel Extract (spec.resources.nodes above 1): (index, count), from the Indexed
    #: Job's JOB_COMPLETION_INDEX; None on one node.
    shard: tuple[int, int] | None = None
    #: Where Train's pods meet when it spans spec.resources.nodes pods (training/torchrun.py): run-stage
    #: --rendezvous-endpoint and --rendezvous-id, which the operator gives every stage Job of such a run (each
    #: renders the whole pipeline); None on one node.
    rendezvous: Rendezvous | None = None
    #: The checkpoint of this run Train resumes from (training/checkpoints.py: run-stage finds it in the Train
    #: directory before rendering); None: Train starts afresh.
    resume: Checkpoint | None = None


def specforge_layer_ids(layers: list[int] | tuple[int, ...]) -> list[int]:
    """spec.hiddenStates.layers (vLLM's ids) as SpecForge/SGLang name the same tensors."""
    if any(layer < 1 for layer in layers):
        raise ValueError(f"spec.hiddenStates.layers {list(layers)}: layer 0 (the embeddings) has no SpecForge id")
    return [layer - 1 for layer in layers]


def export_publish(spec: DrafterTrainingSpec, options: RenderOptions) -> Publish:
    """Where the Export stage's commands write (a staging directory beside spec.output.path) and what the
    runner then does with it (training/export.py)."""
    from drafter_operator.training.export import staging_path

    tag = f"g{options.generation}"
    return Publish(path=spec.output.path, staging=staging_path(spec.output.path, tag),
                   overwrite=spec.output.overwrite, tag=tag)


def is_local(ref: str | None) -> bool:
    """A path on a volume (a hub id is not; nor is an unset dataset, whose source is a capture)."""
    return ref is not None and ref.startswith("/")


def captured_source(spec: DrafterTrainingSpec, paths: TrainingPaths) -> tuple[Command, str] | None:
    """With spec.data.capture: the Generate command that writes the captured prompts' train and held-out sets to
    the work volume, and the train set's path (what the regeneration answers); None for a dataset."""
    if spec.data.capture is None:
        return None
    train = f"{paths.work}/data/{CAPTURED_TRAIN}"
    return Command(captured_dataset_command(paths.capture, train, f"{paths.work}/data/{CAPTURED_HELD_OUT}",
                                spec.data.capture.held_out_fraction)), train


def regeneration(spec: DrafterTrainingSpec, options: RenderOptions, source: str, output: str) -> Command:
    """The Generate command that writes ``output``: ``source``'s answers regenerated by the target's engine pod."""
    from drafter_operator.training.regenerate import SERVED_MODEL_NAME, command_line

    if not options.generation_endpoint:
        raise ValueError("spec.data.generation is set but no engine endpoint was given: the target's answers come "
                         "from its engine pod (RenderOptions.generation_endpoint, run-stage --generation-endpoint)")
    return Command(command_line(options.generation_endpoint, SERVED_MODEL_NAME, source, output,
                                spec.data.num_samples, spec.data.max_tokens))
