"""SpecForge 0.2.0 (SGLang's training framework): the stages of a DrafterTraining as commands.

Names as SpecForge 0.2.0 defines them (checked against the installed package by
tests/contract/test_training_contract.py):

* ``scripts/prepare_data.py`` (repository script, not in the wheel): ``--dataset <preset>
  --output-path DIR --sample-size N [--data-path FILE]`` writes ``DIR/<preset>_train.jsonl`` of
  ``{id, conversations: [{role, content}]}``. A dataset that is already a path is used as it is (it
  must be in that format).
* Regeneration (spec.data.generation) is ours, not ``scripts/regenerate_train_data.py``: ``drafter-operator
  regenerate`` (training/regenerate.py, the same semantics and file format) against the target's engine
  pod, writing the conversations JSONL the extraction reads.
* ``scripts/prepare_hidden_states.py``: ``--target-model-path --draft-model-config --data-path
  --output-path --chat-template --max-length --num-samples --tp-size --batch-size``, under ``torchrun``;
  writes ``rows_*/data_<i>.ckpt`` and ``vocab_mapping/vocab_mapping.pt``.
* ``specforge train --config run.yaml``: the typed config (``specforge.config.Config``: sections
  model, data, training, tracking, profiling, runtime, deployment, plus run_id and output_dir);
  checkpoints at ``<output_dir>/<run_id>-step<N>`` with ``<run_id>-latest`` pointing at the last, every
  ``training.save_interval`` steps (about ``CHECKPOINTS_PER_EPOCH`` an epoch here; SpecForge's default 0 saves
  only at the end), the newest ``training.max_checkpoints`` kept. ``training.resume_from`` (a checkpoint
  directory: training/checkpoints.py finds this run's last) restores the model, optimizer, counters and data
  position; it excludes ``model.draft_checkpoint_path`` (a base drafter's weights are in the checkpoint then).
* ``specforge export --to sglang|hf --checkpoint --draft-config --output-dir --vocab-mapping
  [--embedding-source TARGET]`` (hf needs the embedding from the target; sglang omits it).
"""

from __future__ import annotations

from typing import Any

from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.training import torchrun
from drafter_operator.training.rendering import (
    Command,
    ConfigFile,
    RenderOptions,
    Stage,
    TrainingPaths,
    captured_source,
    export_publish,
    is_local,
    regeneration,
    specforge_layer_ids,
)

DRAFT_ARCHITECTURE = "LlamaForCausalLMEagle3"
RUN_ID = "drafter"
#: The fields SpecForge copies from the target into a generated draft config
#: (specforge/training/model_loading.py _TARGET_ARCHITECTURE_FIELDS), plus transformers 5's rope_parameters.
TARGET_ARCHITECTURE_FIELDS = (
    "vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "max_position_embeddings", "rms_norm_eps", "hidden_act", "initializer_range", "attention_bias",
    "attention_dropout", "head_dim", "rope_theta", "rope_scaling", "rope_parameters", "bos_token_id",
    "eos_token_id", "pad_token_id", "sliding_window", "use_sliding_window", "max_window_layers",
)
DRAFT_CONFIG = "draft-config.json"
#: Checkpoints an epoch (a preempted or disrupted Train loses at most this fraction of an epoch), and how many
#: SpecForge keeps (each holds the optimizer state: a few GB for a 1T target's drafter).
CHECKPOINTS_PER_EPOCH = 4
KEPT_CHECKPOINTS = 2
TRAIN_CONFIG = "specforge-train.yaml"


def work_paths(paths: TrainingPaths) -> dict[str, str]:
    return {
        "data": f"{paths.work}/data",
        "hidden_states": f"{paths.work}/hidden_states",
        "vocab_mapping": f"{paths.work}/hidden_states/vocab_mapping/vocab_mapping.pt",
        "base_vocab_mapping": f"{paths.work}/base_vocab_mapping.pt",
        "cache": f"{paths.work}/cache",
        "train": f"{paths.work}/train",
        "checkpoint": f"{paths.work}/train/{RUN_ID}-latest",
    }


def conversations_path(spec: DrafterTrainingSpec, paths: TrainingPaths) -> str:
    """The conversations JSONL the hidden states are extracted from."""
    data = work_paths(paths)["data"]
    if spec.data.generation is not None:
        return f"{data}/regenerated.jsonl"
    if is_local(spec.data.dataset):
        return spec.data.dataset
    return f"{data}/{spec.data.dataset}_train.jsonl"


def draft_config(spec: DrafterTrainingSpec, options: RenderOptions) -> dict[str, Any]:
    """The draft model config (draft-config.json): the base drafter's, or derived from the target's.

    Derived as SpecForge derives one when none is given (one Llama layer shaped like the target), with
    ``draft_vocab_size`` and, when spec.hiddenStates.layers is set, ``eagle_config`` in SpecForge's ids.
    """
    if spec.base_drafter is not None:
        if options.base_drafter_config is None:
            raise ValueError("specforge: spec.baseDrafter is set: pass the base drafter's config.json "
                             "(RenderOptions.base_drafter_config)")
        config = dict(options.base_drafter_config)
    else:
        if options.target_config is None:
            raise ValueError("specforge: the draft config is derived from the target's config.json: "
                             "pass it (RenderOptions.target_config)")
        target = dict(options.target_config.get("text_config") or options.target_config)
        config = {name: target[name] for name in TARGET_ARCHITECTURE_FIELDS if target.get(name) is not None}
        config.update({
            "architectures": [DRAFT_ARCHITECTURE], "model_type": "llama", "num_hidden_layers": 1,
            "tie_word_embeddings": False, "use_cache": True, "draft_vocab_size": options.draft_vocab_size,
        })
        config.setdefault("pad_token_id", 0)
    if spec.hidden_states.layers:
        eagle = dict(config.get("eagle_config") or {})
        eagle["eagle_aux_hidden_state_layer_ids"] = specforge_layer_ids(spec.hidden_states.layers)
        eagle.setdefault("use_aux_hidden_state", True)
        config["eagle_config"] = eagle
    return config


def train_config(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> dict[str, Any]:
    """``specforge train``'s typed run config (specforge.config.Config) for offline training."""
    work = work_paths(paths)
    model: dict[str, Any] = {"target_model_path": spec.target.model, "torch_dtype": "bfloat16"}
    if spec.base_drafter is not None:
        # Weights-only warm start from the base drafter, shaped by its config (draft-config.json is rendered
        # from it, as Extract and Export read it). The base drafter's own vocabulary mapping is kept: a mapping
        # regenerated from the new data would not match the base's lm_head rows (acceptance collapses while
        # train accuracy looks fine). Resumed, the weights come from this run's checkpoint instead (SpecForge
        # refuses a warm start beside a resume); the draft config and mapping stay the same files, which
        # SpecForge's resume checks against those the checkpoint was written with.
        model["draft_model_config"] = f"{paths.files}/{DRAFT_CONFIG}"
        model["vocab_mapping_path"] = work["base_vocab_mapping"]
        if options.resume is None:
            model["draft_checkpoint_path"] = spec.base_drafter
    else:
        model["draft_model_config"] = f"{paths.files}/{DRAFT_CONFIG}"
        model["vocab_mapping_path"] = work["vocab_mapping"]
    if spec.hidden_states.layers:
        model["aux_hidden_state_layer_ids"] = specforge_layer_ids(spec.hidden_states.layers)
    training: dict[str, Any] = {
        "strategy": "eagle3",
        "num_epochs": spec.train.epochs,
        "batch_size": spec.train.batch_size,
        "learning_rate": float(spec.train.learning_rate),
        "seed": options.seed,
        "save_interval": save_interval(spec, options),
        "max_checkpoints": KEPT_CHECKPOINTS,
    }
    if options.resume is not None:
        training["resume_from"] = f"{work['train']}/{options.resume.name}"
    if options.cpu:
        training.update({"attention_backend": "sdpa", "fsdp_sharding": "NO_SHARD", "log_interval": 10})
    data: dict[str, Any] = {
        "hidden_states_path": work["hidden_states"],
        "max_length": spec.train.max_length,
        "chat_template": chat_template(options),
        "cache_dir": work["cache"],
    }
    if options.cpu:
        data.update({"build_dataset_num_proc": 1, "dataloader_num_workers": 0})
    return {
        "model": model,
        "data": data,
        "training": training,
        "deployment": {"mode": "local_colocated", "trainer": trainer_topology(spec, options)},
        "run_id": RUN_ID,
        "output_dir": work["train"],
    }


def save_interval(spec: DrafterTrainingSpec, options: RenderOptions) -> int:
    """``training.save_interval``: optimizer steps between checkpoints, about CHECKPOINTS_PER_EPOCH an epoch
    (an epoch is about numSamples / (batchSize x data-parallel ranks) steps: every GPU of every node, one
    process per pod on the CPU)."""
    ranks = spec.resources.nodes * (1 if options.cpu else spec.resources.gpus)
    steps_per_epoch = -(-spec.data.num_samples // (spec.train.batch_size * ranks))
    return max(1, steps_per_epoch // CHECKPOINTS_PER_EPOCH)


def trainer_topology(spec: DrafterTrainingSpec, options: RenderOptions) -> dict[str, Any]:
    """``deployment.trainer``: the world SpecForge checks its ranks against. Across nodes the pods are already
    torchrun workers (training/torchrun.py), which SpecForge's CLI recognises and runs in without launching its
    own; its topology still names the group's first node, which it requires above one node."""
    topology: dict[str, Any] = {"nnodes": spec.resources.nodes, "nproc_per_node": 1 if options.cpu else spec.resources.gpus}
    if spec.resources.nodes > 1:
        if options.rendezvous is None:
            torchrun.launch("", 1, spec.resources.nodes, None)  # raises, naming the fix
        host, port = options.rendezvous.endpoint.rsplit(":", 1)
        topology.update(master_addr=host, master_port=int(port))
    return topology


def chat_template(options: RenderOptions) -> str:
    if not options.chat_template:
        raise ValueError("specforge: the target's chat template name is required (RenderOptions.chat_template, "
                         "one of specforge.data.template's, e.g. 'kimi-k2-instruct'); SpecForge's default "
                         "'llama3' would mask the wrong tokens for another model")
    return options.chat_template


def generate_commands(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> tuple[Command, ...]:
    """Generate: the conversations JSONL (converted from a hub preset, or from a serving's captured prompts;
    answers regenerated by the target). Empty for a local dataset used as it is."""
    generate: list[Command] = []
    source = spec.data.dataset
    if (captured := captured_source(spec, paths)) is not None:
        command, source = captured
        generate.append(command)
    elif not is_local(source):
        work = work_paths(paths)
        generate.append(Command((paths.python, f"{paths.specforge_scripts}/prepare_data.py", "--dataset", source,
                                 "--output-path", work["data"], "--sample-size", str(spec.data.num_samples))))
        source = f"{work['data']}/{source}_train.jsonl"
    if spec.data.generation is not None:
        generate.append(regeneration(spec, options, source, conversations_path(spec, paths)))
    return tuple(generate)


def extract_command(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> Command:
    """Extract: the hidden states (and the vocabulary mapping) of every conversation: SpecForge's script on
    every GPU, or on a CPU the transformers adapter with the same arguments."""
    work = work_paths(paths)
    extract_args = ("--target-model-path", spec.target.model, "--draft-model-config", f"{paths.files}/{DRAFT_CONFIG}",
                    "--data-path", conversations_path(spec, paths), "--output-path", work["hidden_states"],
                    "--chat-template", chat_template(options), "--max-length", str(spec.train.max_length),
                    "--num-samples", str(spec.data.num_samples), "--cache-dir", work["cache"])
    if options.cpu:
        return Command((paths.python, f"{paths.adapters}/hf_hidden_states.py", "specforge", *extract_args,
                        "--tp-size", "1", "--batch-size", "1", "--build-dataset-num-proc", "1"),
                       env={"SPECFORGE_DEVICE": "cpu"})
    return Command((paths.python, "-m", "torch.distributed.run", "--standalone",
                    "--nproc_per_node", str(spec.resources.gpus), f"{paths.specforge_scripts}/prepare_hidden_states.py",
                    *extract_args, "--tp-size", str(spec.target.tensor_parallel_size)))


def train_commands(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> tuple[Command, ...]:
    """Train: (the base drafter's vocabulary mapping,) then ``specforge train``, or on a CPU the eager-loss
    adapter."""
    python = paths.python
    commands: list[Command] = []
    if spec.base_drafter is not None:
        commands.append(Command((python, f"{paths.adapters}/base_vocab_mapping.py", spec.base_drafter,
                                 work_paths(paths)["base_vocab_mapping"])))
    config = ("--config", f"{paths.files}/{TRAIN_CONFIG}")
    nodes = spec.resources.nodes
    if options.cpu:
        # One gloo process per pod: the adapter itself on one node, as torchrun's script across nodes (every rank
        # patched), where SpecForge's CLI runs as the torchrun worker it finds itself to be.
        head = (python,) if nodes == 1 else torchrun.launch(python, 1, nodes, options.rendezvous)
        commands.append(Command((*head, f"{paths.adapters}/eager_loss.py", "train", *config),
                                env={"SPECFORGE_DEVICE": "cpu"}))
    elif nodes == 1:
        commands.append(Command(("specforge", "train", *config)))  # it launches its own ranks on the node
    else:
        commands.append(Command((*torchrun.launch(python, spec.resources.gpus, nodes, options.rendezvous),
                                 "-m", "specforge.cli", "train", *config)))
    return tuple(commands)


def export_command(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions, staging: str) -> Command:
    """Export: ``specforge export`` into ``staging`` beside the output (renamed into place by the runner:
    export.py), with the base drafter's vocabulary mapping when there is one."""
    work = work_paths(paths)
    vocab = work["base_vocab_mapping"] if spec.base_drafter is not None else work["vocab_mapping"]
    export_argv = ["specforge", "export", "--to", options.export_to, "--checkpoint", work["checkpoint"],
                   "--draft-config", f"{paths.files}/{DRAFT_CONFIG}", "--output-dir", staging,
                   "--vocab-mapping", vocab]
    if options.export_to == "hf":
        export_argv += ["--embedding-source", spec.target.model]
    return Command(tuple(export_argv), env={"SPECFORGE_DEVICE": "cpu"} if options.cpu else {})


def render(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> list[Stage]:
    work = work_paths(paths)
    draft = ConfigFile(DRAFT_CONFIG, draft_config(spec, options), "json")
    train = ConfigFile(TRAIN_CONFIG, train_config(spec, paths, options))
    generate = generate_commands(spec, paths, options)
    extract = extract_command(spec, paths, options)
    training = train_commands(spec, paths, options)
    publish = export_publish(spec, options)
    stages = []
    if generate:
        stages.append(Stage("Generate", generate, outputs={"conversations": conversations_path(spec, paths)}))
    stages += [
        Stage("Extract", (extract,), (draft,), {"hiddenStates": work["hidden_states"]}),
        Stage("Train", training, (draft, train), {"checkpoint": work["checkpoint"]}),
        Stage("Export", (export_command(spec, paths, options, publish.staging),), (draft,),
              {"drafter": spec.output.path}, publish=publish),
    ]
    return stages
