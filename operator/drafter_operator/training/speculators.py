"""speculators 0.9.0 (vLLM's training framework): the stages of a DrafterTraining as commands.

Names as speculators 0.9.0 defines them (checked against the installed package by
tests/contract/test_training_contract.py):

* Regeneration (spec.data.generation) is ours, not ``speculators regenerate-responses`` (which writes
  tokenized boundary rows, not conversations): ``drafter-operator regenerate`` (training/regenerate.py)
  against the target's engine pod writes a conversations JSONL that ``prepare-data`` then renders.
* ``speculators prepare-data --model T --data D --output DIR --seq-length L --max-samples N
  --render-endpoint URL --no-skip-token-freq``: renders each conversation through vLLM's
  ``/v1/chat/completions/render`` (``vllm launch render T``: GPU-less), writes an Arrow dataset and
  ``token_freq.pt`` (the token counts the draft vocabulary is chosen from; skipped by default).
* Hidden states: ``vllm serve T --speculative-config {"method": "extract_hidden_states", ...}
  --kv-transfer-config {"kv_connector": "ExampleHiddenStatesConnector", ...}`` (what speculators'
  ``scripts/launch_vllm.py`` execs: the target layer ids plus the last layer ``num_hidden_layers``),
  then ``speculators generate-offline-data --endpoint URL/v1 --preprocessed-data DIR --output HS``
  writes ``hs_<i>.safetensors``.
* ``speculators train`` (``torchrun -m speculators.train`` on several GPUs, and with a c10d rendezvous across
  spec.resources.nodes pods: training/torchrun.py; data-parallel, DDP) with TrainConfig's flags;
  checkpoints ``<save-path>/<epoch>/{config.json, model.safetensors}``, ``checkpoint_best`` (with
  ``--save-best``) pointing at the lowest validation loss.
* ``speculators convert BASE --algorithm eagle3|dflash --verifier T --output-path DIR``: a base drafter
  in a research format (EAGLE-3's, e.g. AQ-MedAI/Kimi-K2-Instruct-eagle3 or SpecForge's export; z-lab's
  DFlash) into the speculators format that ``train --from-pretrained`` loads, its vocabulary mapping
  kept. A base already in speculators' format (``speculators_model_type`` in its config.json, e.g. an
  earlier DrafterTraining's export) is loaded as it is: convert refuses it. speculators 0.9.0 has no
  DSpark converter, so a DSpark base must be in speculators' format.
* spec.method picks ``--speculator-type`` (eagle3, dflash, dspark): the DFlash family trains from the same
  prepared data and hidden states as EAGLE-3, with speculators' own per-family defaults (a 5-layer Qwen3
  draft; block size 16 for dflash, 8 for dspark).

``spec.train.batchSize`` has no speculators counterpart (it packs sequences up to
``--total-seq-len``, here spec.train.maxLength).
"""

from __future__ import annotations

import json

from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.training import torchrun
from drafter_operator.training.rendering import (Command, RenderOptions, Stage, TrainingPaths, captured_source,
                                                 export_publish, is_local, regeneration)

SPECULATORS = "speculators"
#: ``--max-anchors`` when training on a CPU (the local cluster, the contract tests). A DFlash-family step runs each
#: anchor as a block of block_size positions through the draft layers and the verifier's full-vocabulary head: at
#: speculators' default of 512, one step on the tiny 4-layer target took 42 s of CPU (37 s of it backward), a
#: fine-tune of four steps nearly three minutes. 32 anchors keep a CPU run to seconds and train the same format; a GPU
#: run keeps the default.
CPU_MAX_ANCHORS = 32


def work_paths(paths: TrainingPaths) -> dict[str, str]:
    return {
        "data": f"{paths.work}/data",
        "regenerated": f"{paths.work}/data/regenerated.jsonl",
        "prepared": f"{paths.work}/data/prepared",
        "hidden_states": f"{paths.work}/hidden_states",
        "staging": f"{paths.work}/hidden_states_staging",
        "base": f"{paths.work}/base_drafter",
        "train": f"{paths.work}/train",
        "best": f"{paths.work}/train/checkpoint_best",
    }


def num_target_layers(options: RenderOptions) -> int:
    if options.target_config is None:
        raise ValueError("speculators: vLLM's hidden-state extraction also captures the last layer: "
                         "pass the target's config.json (RenderOptions.target_config)")
    config = options.target_config.get("text_config") or options.target_config
    return int(config["num_hidden_layers"])


def extraction_layer_ids(spec: DrafterTrainingSpec, options: RenderOptions) -> list[int]:
    """The ids vLLM captures, as launch_vllm.py computes them: the three, then num_hidden_layers."""
    n = num_target_layers(options)
    layers = list(spec.hidden_states.layers or [2, n // 2, n - 3])
    return layers if n in layers else [*layers, n]


def extraction_server(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> tuple[str, ...]:
    """``vllm serve`` configured for hidden-state extraction (launch_vllm.py's command)."""
    speculative = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                   "draft_model_config": {"hf_config": {
                       "eagle_aux_hidden_state_layer_ids": extraction_layer_ids(spec, options)}}}
    transfer = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": work_paths(paths)["staging"]}}
    tp = spec.target.tensor_parallel_size
    return (paths.python, "-m", "vllm.entrypoints.cli.main", "serve", spec.target.model,
            "--speculative-config", json.dumps(speculative, sort_keys=True),
            "--kv-transfer-config", json.dumps(transfer, sort_keys=True),
            "--tensor-parallel-size", str(tp), "--data-parallel-size", str(spec.resources.gpus // tp),
            "--max-model-len", str(spec.train.max_length),
            "--host", "127.0.0.1", "--port", str(options.port))


def train_flags(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> list[str]:
    """``speculators train`` flags (TrainConfig's CLI), CPU substitutions included when options.cpu."""
    work = work_paths(paths)
    flags = ["--verifier-name-or-path", spec.target.model, "--speculator-type", spec.method,
             "--data-path", work["prepared"], "--hidden-states-path", work["hidden_states"],
             "--save-path", work["train"], "--epochs", str(spec.train.epochs), "--lr", spec.train.learning_rate,
             "--total-seq-len", str(spec.train.max_length), "--on-missing", "raise", "--save-best",
             "--seed", str(options.seed)]
    if spec.hidden_states.layers:
        flags += ["--target-layer-ids", *map(str, spec.hidden_states.layers)]
    if spec.base_drafter is not None:
        # The (converted) base drafter keeps its d2t/t2d; --draft-vocab-size would derive new ones.
        flags += ["--from-pretrained",
                  spec.base_drafter if base_in_speculators_format(spec, options) else work["base"]]
    else:
        flags += ["--draft-vocab-size", str(options.draft_vocab_size)]
    if options.cpu:
        flags += ["--draft-attn-impl", "sdpa", "--loss-implementation", "eager", "--num-workers", "0",
                  "--max-anchors", str(CPU_MAX_ANCHORS)]
    return flags


def _local_url(options: RenderOptions) -> str:
    """The loopback server a stage starts (render server, extraction server)."""
    return f"http://127.0.0.1:{options.port}"


def generate_commands(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> tuple[Command, ...]:
    """Generate: (regenerate the answers with the target's engine pod,) render and tokenize the conversations."""
    work, url, target = work_paths(paths), _local_url(options), spec.target.model
    generate: list[Command] = []
    data = spec.data.dataset
    if (captured := captured_source(spec, paths)) is not None:
        command, data = captured
        generate.append(command)
    if spec.data.generation is not None:
        if not is_local(data):
            # prepare-data reads speculators' presets itself; regeneration needs the conversations as a file.
            raise ValueError(f"speculators: spec.data.generation regenerates a conversations JSONL, and "
                             f"spec.data.dataset {data!r} is a hub preset: give a path on the model volume "
                             "({id, conversations: [{role, content}]} per line), or unset generation")
        generate.append(regeneration(spec, options, data, work["regenerated"]))
        data = work["regenerated"]
    prepare = [SPECULATORS, "prepare-data", "--model", target, "--data", data, "--output", work["prepared"],
               "--seq-length", str(spec.train.max_length), "--max-samples", str(spec.data.num_samples),
               "--render-endpoint", url, "--no-skip-token-freq", "--seed", str(options.seed)]
    if options.cpu:
        prepare += ["--num-preprocessing-workers", "1"]
    generate += [
        Command((paths.python, "-m", "vllm.entrypoints.cli.main", "launch", "render", target,
                 "--host", "127.0.0.1", "--port", str(options.port)),
                env={"VLLM_TARGET_DEVICE": "cpu"} if options.cpu else {}, server=True, ready_url=f"{url}/health"),
        Command(tuple(prepare)),
    ]
    return tuple(generate)


def extract_commands(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> tuple[Command, ...]:
    """Extract: vLLM's extraction server and speculators' client, or on a CPU the transformers adapter."""
    work, url, samples = work_paths(paths), _local_url(options), str(spec.data.num_samples)
    # A data-parallel Extract: speculators takes this node's contiguous share of the samples itself.
    shard = ("--world-size", str(options.shard[1]), "--rank", str(options.shard[0])) if options.shard else ()
    if options.cpu:
        layer_flags = ["--target-layer-ids", *map(str, spec.hidden_states.layers)] if spec.hidden_states.layers else []
        return (Command((
            paths.python, f"{paths.adapters}/hf_hidden_states.py", "speculators", "--model", spec.target.model,
            *layer_flags, "--preprocessed-data", work["prepared"], "--output", work["hidden_states"],
            "--max-samples", samples, "--validate-outputs", *shard)),)
    return (
        Command(extraction_server(spec, paths, options), server=True, ready_url=f"{url}/health"),
        Command((SPECULATORS, "generate-offline-data", "--endpoint", f"{url}/v1",
                 "--preprocessed-data", work["prepared"], "--output", work["hidden_states"],
                 "--max-samples", samples, "--validate-outputs", *shard)),
    )


#: The algorithms ``speculators convert`` 0.9.0 takes a base drafter from, and the keyword that names the
#: target layers for each (the research formats keep them under other names, or not at all).
CONVERTERS = {"eagle3": "eagle_aux_hidden_state_layer_ids", "dflash": "aux_hidden_state_layer_ids"}


def base_in_speculators_format(spec: DrafterTrainingSpec, options: RenderOptions) -> bool:
    """Whether the base drafter is already a speculators checkpoint of spec.method (loaded as it is); False
    for a research-format base (converted). Unknown (no config read): converted, as for EAGLE-3 bases."""
    config = options.base_drafter_config or {}
    kind = config.get("speculators_model_type")
    if kind is None:
        if spec.method not in CONVERTERS:
            raise ValueError(f"speculators: spec.baseDrafter {spec.base_drafter!r} is not a speculators checkpoint "
                             f"(no speculators_model_type in its config.json), and speculators 0.9.0 converts only "
                             f"{' and '.join(CONVERTERS)} drafters: give a {spec.method} drafter that speculators "
                             "trained (e.g. an earlier DrafterTraining's output), or unset baseDrafter")
        return False
    if kind != spec.method:
        raise ValueError(f"speculators: spec.baseDrafter {spec.base_drafter!r} is a {kind} drafter and spec.method "
                         f"is {spec.method}: fine-tune from a {spec.method} drafter, or set method: {kind}")
    return True


def train_commands(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> tuple[Command, ...]:
    """Train: (convert a research-format base drafter to speculators' format,) then ``speculators train`` on
    every GPU, or the CPU trainer adapter."""
    train: list[Command] = []
    if spec.base_drafter is not None and not base_in_speculators_format(spec, options):
        convert = [SPECULATORS, "convert", spec.base_drafter, "--algorithm", spec.method, "--verifier",
                   spec.target.model, "--output-path", work_paths(paths)["base"]]
        if spec.hidden_states.layers:
            convert += ["--algorithm-kwargs",
                        json.dumps({CONVERTERS[spec.method]: list(spec.hidden_states.layers)})]
        train.append(Command(tuple(convert)))
    flags = train_flags(spec, paths, options)
    nodes = spec.resources.nodes
    if options.cpu:
        # One process per pod on the CPU: the adapter itself on one node, under torchrun (gloo) across nodes.
        head = (paths.python,) if nodes == 1 else torchrun.launch(paths.python, 1, nodes, options.rendezvous)
        train.append(Command((*head, f"{paths.adapters}/cpu_trainer.py", "train", *flags)))
    else:
        train.append(Command((*torchrun.launch(paths.python, spec.resources.gpus, nodes, options.rendezvous),
                              "-m", "speculators.train", *flags)))
    return tuple(train)


def render(spec: DrafterTrainingSpec, paths: TrainingPaths, options: RenderOptions) -> list[Stage]:
    work = work_paths(paths)
    generate = generate_commands(spec, paths, options)
    extract = extract_commands(spec, paths, options)
    train = train_commands(spec, paths, options)
    # Export: the best checkpoint (lowest validation loss) is the drafter, already in speculators format;
    # copied into a staging directory beside the output (the runner creates its parent and removes a stale
    # one, so cp makes it afresh rather than nesting into it) and renamed into place by the runner (export.py).
    publish = export_publish(spec, options)
    export = (Command(("cp", "-rL", work["best"], publish.staging)),)
    return [
        Stage("Generate", generate, outputs={"dataset": work["prepared"]}),
        Stage("Extract", extract, outputs={"hiddenStates": work["hidden_states"]}),
        Stage("Train", train, outputs={"checkpoint": work["best"]}),
        Stage("Export", export, outputs={"drafter": spec.output.path}, publish=publish),
    ]
