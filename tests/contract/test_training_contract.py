"""Contract tier: the rendered DrafterTraining stages against the real SpecForge 0.2.0 and speculators 0.9.0.

Two kinds of checks, both in the environment `.ci/training-env` builds (DRAFTER_TRAINING_PYTHON; every
test here skips without it):

* Parsers and schemas: every rendered command line and config file of a few specs (the seed example,
  a from-scratch spec, the CPU variants) goes through the framework's own code without running it:
  SpecForge's ``Config.from_file`` + ``specforge train --plan`` (typed config, algorithm resolution,
  launch plan) and its CLI parser for ``export``; speculators' ``TrainConfig.resolve`` (its train CLI)
  and the click commands behind ``prepare-data``, ``generate-offline-data`` and ``convert``; vLLM
  0.33.0's ``serve`` parser for the render and hidden-state servers, and SGLang's or vLLM's for the
  engine pod that serves the target during regeneration (resources/training_engine.py); our own parser
  for ``drafter-operator regenerate``. SpecForge's repository scripts are not in its wheel:
  ``prepare_hidden_states.py``'s arguments are checked against the adapter's copy of its parser,
  ``prepare_data.py`` not at all (docs/training.md).
* End to end, on a tiny random Llama target (drafter_testbed/tiny_target.py) in a temporary directory, one
  process on the CPU with the adapters of training/adapters: every stage the renderer gives, in order
  (data, hidden states, train one epoch, export), then the exported drafter's config and tensors, and
  vLLM 0.33.0's SpeculativeConfig building from it on the CPU (in DRAFTER_ENGINE_PYTHON when set, else
  the training environment, which contains vLLM). speculators also fine-tunes from SpecForge's export
  (``convert`` + ``--from-pretrained``) and must keep its vocabulary mapping. speculators' Generate also
  runs with regeneration: ``drafter-operator regenerate`` against the engine emulator, whose
  conversations ``prepare-data`` must take.

Stage wall times and artifact sizes are printed (``-s``) for docs/training.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from drafter_operator.api.training import DrafterTraining, DrafterTrainingSpec
from drafter_operator.cli import build_parser
from drafter_operator.resources.training_engine import generation_engine
from drafter_operator.resources.training_job import rendezvous
from drafter_operator.training import Stage, export, render, specforge_layer_ids
from drafter_operator.training import checkpoints
from drafter_operator.training.checkpoints import Checkpoint
from drafter_operator.training.inputs import stage_inputs
from drafter_operator.training.adapters import ADAPTERS_DIR
from drafter_operator.training.regenerate import SERVED_MODEL_NAME
from drafter_operator.training.specforge import DRAFT_CONFIG, TRAIN_CONFIG
from tests.processes import free_port, listening_process
from tests.support.contract_training import (GENERATION_ENDPOINT, PATHS, PipelineRun, TINY_DRAFT_VOCAB, TINY_LAYERS,
                                             check, read_safetensors, report, run_all, tiny, tiny_options, tiny_paths,
                                             tiny_spec, variants, vllm_accepts, vllm_accepts_all)

# One worker runs the module: the fine-tuning tests start from the pipelines' exports (module fixtures),
# which another worker would have to run again.
# The hang guard covers a test's setup too, and the first test of each framework sets up its whole CPU
# pipeline (a module fixture: 413 s of SpecForge stages in one loaded run, then 187 s of the test's own
# fine-tune hit the suite's 600 s). Each stage keeps its own STAGE_TIMEOUT; this bounds a test with its pipeline.
pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("training-frameworks"), pytest.mark.timeout(1800)]


# --------------------------------------------------------------------------------------------------
# Parsers and schemas
# --------------------------------------------------------------------------------------------------


def files_of(stage: Stage) -> dict[str, str]:
    return {f.name: f.text() for f in stage.files}


def regenerate_args(argv: tuple[str, ...]) -> dict:
    """``drafter-operator regenerate`` as our own CLI parses it (it runs in the trainer image, not a framework)."""
    assert argv[:2] == ("drafter-operator", "regenerate")
    args = build_parser().parse_args(list(argv[1:]))
    return {"endpoint": args.endpoint, "model": args.model, "input": args.input, "output": args.output,
            "num_samples": args.num_samples, "max_tokens": args.max_tokens}


def engine_argv(spec: DrafterTrainingSpec, engine: str) -> list[str]:
    """The command of the engine pod that serves the target during regeneration."""
    spec = spec.model_copy(update={"data": spec.data.model_copy(
        update={"generation": spec.data.generation.model_copy(update={"engine": engine})})})
    deployment, _ = generation_engine("team", "kimi-ft", spec, 1, "image")
    return deployment["spec"]["template"]["spec"]["containers"][0]["command"]


def test_specforge_commands_and_configs_parse(training_python: str) -> None:
    cases: list[dict] = []
    for name, (spec, options) in variants("specforge").items():
        stages = {s.name: s for s in render(spec, PATHS, options)}
        train = stages["Train"]
        argv = list(train.commands[-1].argv)
        cli = argv[argv.index("train"):]
        case = {"id": f"{name}/train", "kind": "specforge-train", "argv": cli, "files": files_of(train),
                "config": TRAIN_CONFIG}
        if "torch.distributed.run" in argv:  # across nodes: each pod's rank runs SpecForge's CLI as a torchrun worker
            launcher = argv[argv.index("torch.distributed.run") + 1:]
            cases.append({"id": f"{name}/torchrun", "kind": "torchrun", "argv": launcher})
            world = spec.resources.nodes * (1 if options.cpu else spec.resources.gpus)
            case["env"] = {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": str(world), "MASTER_ADDR": "kimi-ft-train-g1-0",
                           "MASTER_PORT": "29400", "LOCAL_WORLD_SIZE": "1" if options.cpu else str(spec.resources.gpus)}
        cases.append(case)
        export = stages["Export"].commands[0].argv
        assert export[:2] == ("specforge", "export")
        cases.append({"id": f"{name}/export", "kind": "specforge-export", "argv": list(export[1:])})
        extract = list(stages["Extract"].commands[0].argv)
        start = extract.index("--target-model-path")
        cases.append({"id": f"{name}/extract", "kind": "specforge-extract", "argv": extract[start:],
                      "adapters": str(ADAPTERS_DIR)})
    seed_training, seed_options = variants("specforge")["seed"]
    argv = engine_argv(seed_training, "sglang")
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    cases.append({"id": "seed/engine", "kind": "sglang-server", "argv": argv[3:]})
    results = check(training_python, cases)

    seed = results["seed/train"]
    assert seed["code"] == 0 and seed["mode"] == "offline"
    model = seed["config"]["model"]
    assert model["aux_hidden_state_layer_ids"] == [1, 29, 57]  # spec [2, 30, 58] in SpecForge's ids
    assert model["draft_checkpoint_path"] == "AQ-MedAI/Kimi-K2-Instruct-eagle3"
    assert model["vocab_mapping_path"].endswith("base_vocab_mapping.pt")
    assert seed["config"]["deployment"]["trainer"]["nproc_per_node"] == 8
    assert seed["config"]["training"]["num_epochs"] == 5 and seed["config"]["data"]["max_length"] == 4096
    # About four checkpoints an epoch (SpecForge's own default saves none before the end), two kept.
    assert seed["config"]["training"]["save_interval"] == 312 and seed["config"]["training"]["max_checkpoints"] == 2
    # Resumed: SpecForge's full resume from the run's checkpoint, which it refuses beside a weights-only warm start.
    resumed = results["resumed/train"]
    assert resumed["code"] == 0 and resumed["config"]["training"]["resume_from"] == "/work/train/drafter-step312"
    assert resumed["config"]["model"]["draft_checkpoint_path"] is None
    assert resumed["config"]["model"]["draft_model_config"].endswith(DRAFT_CONFIG)
    cpu = results["cpu/train"]["config"]
    assert cpu["training"]["attention_backend"] == "sdpa" and cpu["training"]["fsdp_sharding"] == "NO_SHARD"
    assert cpu["deployment"]["trainer"]["nproc_per_node"] == 1
    # Across nodes: SpecForge's topology names the group, its first node the rendezvous host, and a rank under
    # torchrun is a worker of that group (no launcher of SpecForge's own nested in it).
    meet = rendezvous("kimi-ft", 1, 2)
    for case, processes in (("nodes", 8), ("cpu-nodes", 1)):
        trainer = results[f"{case}/train"]["config"]["deployment"]["trainer"]
        assert trainer == {"nnodes": 2, "nproc_per_node": processes, "node_rank": None,
                           "master_addr": meet.endpoint.rsplit(":", 1)[0], "master_port": 29400}
        assert results[f"{case}/train"]["code"] == 0 and "torch.distributed.run" not in results[f"{case}/train"]["plan"]
        launch = results[f"{case}/torchrun"]
        assert launch["nnodes"] == [2, 2] and launch["nproc_per_node"] == processes
        assert launch["rdzv_backend"] == "c10d" and launch["rdzv_endpoint"] == meet.endpoint
    assert results["nodes/torchrun"]["module"] and results["nodes/torchrun"]["script"] == "specforge.cli"
    assert results["cpu-nodes/torchrun"]["script"].endswith("eager_loss.py")
    assert "torch.distributed.run" in results["scratch/train"]["plan"]  # one node: SpecForge launches its own ranks
    assert results["seed/export"]["call"]["to"] == "sglang"
    assert results["seed/engine"] == {"model_path": "/models/Kimi-K2.5", "tp_size": 8, "port": 30000}
    stages = {s.name: s for s in render(seed_training, PATHS, seed_options)}
    (regenerate,) = stages["Generate"].commands
    assert regenerate_args(regenerate.argv) == {
        "endpoint": GENERATION_ENDPOINT, "model": SERVED_MODEL_NAME, "input": "/models/datasets/prompts.jsonl",
        "output": "/work/data/regenerated.jsonl", "num_samples": 10000, "max_tokens": 2048}
    assert results["seed/extract"]["args"]["data_path"] == "/work/data/regenerated.jsonl"
    extract = results["seed/extract"]["args"]
    assert extract["chat_template"] == "kimi-k2-instruct" and extract["tp_size"] == 8
    assert extract["num_samples"] == 10000 and extract["max_length"] == 4096


def test_speculators_commands_parse(training_python: str) -> None:
    cases: list[dict] = []
    regenerated: dict[str, dict] = {}
    for name, (spec, options) in variants("speculators").items():
        for stage in render(spec, PATHS, options):
            for i, command in enumerate(stage.commands):
                argv = list(command.argv)
                case_id = f"{name}/{stage.name}/{i}"
                if argv[0] == "drafter-operator":
                    regenerated[case_id] = regenerate_args(command.argv)
                elif argv[0] == "speculators":
                    cases.append({"id": case_id, "kind": "speculators-command", "argv": argv[1:]})
                elif "vllm.entrypoints.cli.main" in argv:
                    rest = argv[argv.index("vllm.entrypoints.cli.main") + 1:]
                    rest = rest[2:] if rest[:2] == ["launch", "render"] else rest[1:]
                    cases.append({"id": case_id, "kind": "vllm-serve", "argv": rest})
                elif "speculators.train" in argv or any(a.endswith("cpu_trainer.py") for a in argv):
                    flags = argv[argv.index("speculators.train") + 1:] if "speculators.train" in argv \
                        else argv[argv.index("train") + 1:]
                    cases.append({"id": case_id, "kind": "speculators-train", "argv": flags})
                    if "torch.distributed.run" in argv:
                        cases.append({"id": f"{case_id}/torchrun", "kind": "torchrun",
                                      "argv": argv[argv.index("torch.distributed.run") + 1:]})
                elif argv[1].endswith("hf_hidden_states.py") or argv[0] in ("mkdir", "cp"):
                    continue
                else:
                    raise AssertionError(f"no check for {argv}")
    argv = engine_argv(variants("speculators")["seed"][0], "vllm")
    assert argv[:2] == ["vllm", "serve"]
    cases.append({"id": "seed/engine", "kind": "vllm-serve", "argv": argv[2:]})
    results = check(training_python, cases)
    assert results["seed/engine"]["model_tag"] == "/models/Kimi-K2.5"
    assert results["seed/engine"]["speculative_config"] is None and results["seed/engine"]["tensor_parallel_size"] == 8
    # The seed regenerates, then prepare-data reads the regenerated file.
    assert regenerated == {"seed/Generate/0": {
        "endpoint": GENERATION_ENDPOINT, "model": SERVED_MODEL_NAME, "input": "/models/datasets/prompts.jsonl",
        "output": "/work/data/regenerated.jsonl", "num_samples": 10000, "max_tokens": 2048}}
    assert results["seed/Generate/2"]["params"]["data"] == ["/work/data/regenerated.jsonl"]
    train = results["seed/Train/1"]["config"]
    # speculators resumes from the highest epoch under --save-path by itself (training/checkpoints.py): never told not to.
    assert train["trainer"]["no_resume_from_checkpoint"] is False
    assert train["draft"]["target_layer_ids"] == [2, 30, 58]
    assert train["draft"]["from_pretrained"].endswith("base_drafter")
    assert train["draft"]["draft_vocab_size"] is None  # the converted base keeps its mapping
    assert train["trainer"]["epochs"] == 5 and train["optimizer"]["lr"] == 1e-4
    assert train["data"]["total_seq_len"] == 4096
    scratch = results["scratch/Train/0"]["config"]
    assert scratch["draft"]["draft_vocab_size"] == 32000
    cpu = results["cpu/Train/0"]["config"]
    assert cpu["draft"]["draft_attn_impl"] == "sdpa" and cpu["loss"]["loss_implementation"] == "eager"
    server = results["seed/Extract/0"]
    assert server["speculative_config"]["method"] == "extract_hidden_states"
    assert server["speculative_config"]["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == \
        [2, 30, 58, 61]
    assert server["tensor_parallel_size"] == 8 and server["data_parallel_size"] == 1
    # One node: torchrun's own loopback rendezvous on every GPU of the pod.
    assert results["scratch/Train/0/torchrun"]["nnodes"] == [1, 1]
    assert results["scratch/Train/0/torchrun"]["nproc_per_node"] == 8
    # Across nodes: every pod's agent meets at pod 0's name through the headless Service, the whole group or none.
    meet = rendezvous("kimi-ft", 1, 2)
    for case, processes in (("nodes/Train/0/torchrun", 8), ("cpu-nodes/Train/0/torchrun", 1)):
        launch = results[case]
        assert launch["nnodes"] == [2, 2] and launch["nproc_per_node"] == processes
        assert launch["rdzv_backend"] == "c10d" and launch["rdzv_endpoint"] == meet.endpoint
        assert launch["run_id"] == meet.run_id and launch["max_restarts"] == 0
    assert results["nodes/Train/0/torchrun"]["module"] and results["nodes/Train/0/torchrun"]["script"] == "speculators.train"
    assert results["cpu-nodes/Train/0/torchrun"]["script"].endswith("cpu_trainer.py")
    assert results["cpu-nodes/Train/0/torchrun"]["script_args"][0] == "train"
    assert results["nodes/Train/0"]["config"]["trainer"]["epochs"] == 5
    convert = results["seed/Train/0"]["params"]
    assert convert["model"] == "AQ-MedAI/Kimi-K2-Instruct-eagle3" and convert["algorithm"] == "eagle3"


# --------------------------------------------------------------------------------------------------
# End to end on the tiny target
# --------------------------------------------------------------------------------------------------

def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def tensors(path: Path) -> dict[str, tuple[int, ...]]:
    return {name: shape for name, (shape, _) in read_safetensors(path).items()}


@pytest.fixture(scope="module")
def specforge_run(training_python: str, tiny: Path) -> PipelineRun:
    """SpecForge's whole pipeline with the hf export, then the sglang export of the same checkpoint. A fixture,
    not a test, because the fine-tuning tests start from its export: were it to fail, they error with it
    instead of skipping."""
    spec = tiny_spec(tiny, "specforge", "specforge-hf")
    paths = tiny_paths(tiny, training_python, "specforge")
    stages = render(spec, paths, tiny_options(tiny, export_to="hf"))
    assert [s.name for s in stages] == ["Extract", "Train", "Export"]  # a local JSONL needs no preparation
    times = run_all(stages, training_python, paths)
    # The sglang export of the same checkpoint (no embedding).
    sglang_spec = tiny_spec(tiny, "specforge", "specforge-sglang")
    times["Export (sglang)"] = run_all(render(sglang_spec, paths, tiny_options(tiny)), training_python, paths,
                                       only=("Export",))["Export"]
    return PipelineRun(Path(paths.work), times)


def test_specforge_end_to_end(training_python: str, tiny: Path, specforge_run: PipelineRun) -> None:
    work = specforge_run.work
    assert list((work / "hidden_states").glob("rows_*/data_*.ckpt"))
    names = ("specforge-hf", "specforge-sglang")
    accepted_by_vllm = vllm_accepts_all(training_python, tiny / "target", [tiny / "drafters" / n for n in names])
    for name, accepted in zip(names, accepted_by_vllm):
        out = tiny / "drafters" / name
        config = json.loads((out / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert config["draft_vocab_size"] == TINY_DRAFT_VOCAB
        assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == specforge_layer_ids(TINY_LAYERS)
        shapes = tensors(out / "model.safetensors")
        assert shapes["d2t"] == (TINY_DRAFT_VOCAB,) and shapes["t2d"] == (4096,)
        assert shapes["lm_head.weight"] == (TINY_DRAFT_VOCAB, 64) and shapes["fc.weight"] == (64, 3 * 64)
        assert ("embed_tokens.weight" in shapes) == (name == "specforge-hf")
        assert accepted["method"] == "eagle3" and accepted["draft_vocab_size"] == TINY_DRAFT_VOCAB
        # vLLM reads SpecForge's ids as written (SpecForge's convention, one below vLLM's): see docs/training.md.
        assert accepted["layer_ids"] == specforge_layer_ids(TINY_LAYERS)
    report("specforge", specforge_run.times, {"hidden states": du(work / "hidden_states"), "checkpoint": du(work / "train"),
                                "export hf": du(tiny / "drafters" / "specforge-hf"),
                                "export sglang": du(tiny / "drafters" / "specforge-sglang")})


def test_specforge_fine_tunes_its_export(training_python: str, tiny: Path, specforge_run: PipelineRun) -> None:
    """baseDrafter = SpecForge's own hf export: weights-only warm start, the base's vocabulary mapping kept."""
    base = tiny / "drafters" / "specforge-hf"
    spec = tiny_spec(tiny, "specforge", "specforge-ft", base_drafter=str(base))
    paths = tiny_paths(tiny, training_python, "specforge-ft")
    Path(paths.work).mkdir(parents=True, exist_ok=True)
    (Path(paths.work) / "hidden_states").symlink_to(specforge_run.work / "hidden_states")
    options = tiny_options(tiny, base_drafter_config=json.loads((base / "config.json").read_text()))
    times = run_all(render(spec, paths, options), training_python, paths, only=("Train", "Export"))
    out = tiny / "drafters" / "specforge-ft"
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == specforge_layer_ids(TINY_LAYERS)
    before, after = read_safetensors(base / "model.safetensors"), read_safetensors(out / "model.safetensors")
    assert before["d2t"] == after["d2t"] and before["t2d"] == after["t2d"]
    assert before["fc.weight"] != after["fc.weight"]  # trained further
    report("specforge fine-tune", times, {"drafter": du(out)})


@pytest.fixture(scope="module")
def speculators_run(training_python: str, tiny: Path) -> PipelineRun:
    """speculators' whole pipeline (a fixture for the reason specforge_run is one)."""
    spec = tiny_spec(tiny, "speculators", "speculators")
    paths = tiny_paths(tiny, training_python, "speculators")
    stages = render(spec, paths, tiny_options(tiny))
    assert [s.name for s in stages] == ["Generate", "Extract", "Train", "Export"]
    return PipelineRun(Path(paths.work), run_all(stages, training_python, paths))


def test_speculators_end_to_end(training_python: str, tiny: Path, speculators_run: PipelineRun) -> None:
    work = speculators_run.work
    assert (work / "data" / "prepared" / "token_freq.pt").is_file()
    assert list((work / "hidden_states").glob("hs_*.safetensors"))
    out = tiny / "drafters" / "speculators"
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["draft_vocab_size"] == TINY_DRAFT_VOCAB
    assert config["eagle_aux_hidden_state_layer_ids"] == TINY_LAYERS
    assert config["speculators_config"]["algorithm"] == "eagle3"
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(tiny / "target")
    shapes = tensors(out / "model.safetensors")
    assert shapes["d2t"] == (TINY_DRAFT_VOCAB,) and shapes["t2d"] == (4096,)
    accepted = vllm_accepts(training_python, tiny / "target", out)
    assert accepted["method"] == "eagle3" and accepted["layer_ids"] == TINY_LAYERS
    report("speculators", speculators_run.times, {"prepared data": du(work / "data"),
                                                  "hidden states": du(work / "hidden_states"),
                                                  "checkpoints": du(work / "train"), "drafter": du(out)})


def test_speculators_prepares_regenerated_conversations(training_python: str, tiny: Path) -> None:
    """Generate with spec.data.generation: ``drafter-operator regenerate`` against the engine emulator serving
    the tiny target (what the engine pod runs on the local cluster), then prepare-data on its conversations."""
    raw = tiny_spec(tiny, "speculators", "speculators-regenerated").to_json()
    raw["data"].update(maxTokens=32, generation={"engine": "vllm"})
    spec = DrafterTrainingSpec.model_validate(raw)
    paths = tiny_paths(tiny, training_python, "speculators-regenerated")
    port = free_port()
    # The engine pod's own command (resources/training_engine.py), on a free loopback port.
    from drafter_operator.resources.training_engine import generation_engine

    deployment, _ = generation_engine("ns", "t", spec, 1, "vllm/vllm-openai:v0.33.0")
    argv = list(deployment["spec"]["template"]["spec"]["containers"][0]["command"])
    argv[argv.index("--port") + 1] = str(port)
    emulate = [sys.executable, "-m", "drafter_operator.cli", "emulate", *argv]
    env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.01"}
    with listening_process(emulate, env, port):  # listening first: the render server's free port is another
        stages = render(spec, paths, tiny_options(tiny, generation_endpoint=f"http://127.0.0.1:{port}/v1"))
        generate = next(s for s in stages if s.name == "Generate")
        regenerate = generate.commands[0]
        assert regenerate.argv[:2] == ("drafter-operator", "regenerate")
        # The trainer image has the drafter-operator command; here it is this checkout's module.
        local = dataclasses.replace(regenerate, argv=(sys.executable, "-m", "drafter_operator.cli",
                                                      *regenerate.argv[1:]))
        times = run_all([dataclasses.replace(generate, commands=(local, *generate.commands[1:]))],
                        training_python, paths)

    work = Path(paths.work)
    rows = [json.loads(line) for line in (work / "data" / "regenerated.jsonl").read_text().splitlines()]
    source = [json.loads(line) for line in (tiny / "chats.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in source)
    assert all(m["content"].strip() for r in rows for m in r["conversations"] if m["role"] == "assistant")
    assert (work / "data" / "prepared" / "token_freq.pt").is_file()
    report("speculators regenerated", times, {"regenerated": du(work / "data" / "regenerated.jsonl"),
                                              "prepared data": du(work / "data" / "prepared")})


def test_specforge_resumes_train_from_its_runs_last_checkpoint(training_python: str, tiny: Path,
                                                             specforge_run: PipelineRun) -> None:
    """A Train started again (a drained node, Kueue's preemption) goes on from its run's last checkpoint: the stage
    runner's decision (training/checkpoints.py on the Train directory), rendered, and run by SpecForge itself,
    fine-tuning a base drafter (whose resume SpecForge checks hardest: the draft config and vocabulary mapping
    it was written with must be the same files, unchanged)."""
    base = tiny / "drafters" / "specforge-hf"
    spec = tiny_spec(tiny, "specforge", "specforge-resumed", base_drafter=str(base))
    paths = tiny_paths(tiny, training_python, "specforge-resumed")
    work = Path(paths.work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "hidden_states").symlink_to(specforge_run.work / "hidden_states")
    options = tiny_options(tiny, base_drafter_config=json.loads((base / "config.json").read_text()))
    run = checkpoints.run_id("t-1", stage_inputs(spec.to_json(), "Train"))
    assert checkpoints.claim_run("specforge", work / "train", run) is None  # the first attempt starts afresh
    first = run_all(render(spec, paths, options), training_python, paths, only=("Train",))
    done = sorted((int(p.name.rsplit("step", 1)[1]), p) for p in (work / "train").glob("drafter-step*")
                  if (p / checkpoints.SPECFORGE_STATE).is_file())
    assert len(done) >= 2, f"SpecForge kept fewer than two checkpoints: {done}"
    # The pod was killed after its next-to-last checkpoint: what it wrote after is not there.
    (last_step, last), (step, kept) = done[-1], done[-2]
    shutil.rmtree(last)
    (work / "train" / "drafter-latest").unlink()
    (work / "train" / "drafter-latest").symlink_to(kept.name)
    written = (kept / checkpoints.SPECFORGE_STATE).stat().st_mtime_ns
    mapping = (work / "base_vocab_mapping.pt").stat().st_mtime_ns
    resume = checkpoints.claim_run("specforge", work / "train", run)
    assert resume == Checkpoint(kept.name, step)
    again = run_all(render(spec, paths, dataclasses.replace(options, resume=resume)), training_python, paths,
                    only=("Train",))
    # SpecForge went on from the checkpoint: it never saved that step again (a run from step 0 deletes every step
    # at or after the one it saves, then rewrites them), logged no step up to it, and reached the end.
    assert (kept / checkpoints.SPECFORGE_STATE).stat().st_mtime_ns == written
    log = (work / "logs" / "Train-1.log").read_text()
    assert all(int(n) > step for n in re.findall(r"^step (\d+):", log, re.M)), log[-3000:]
    assert (work / "train" / f"drafter-step{last_step}" / checkpoints.SPECFORGE_STATE).is_file()
    # The base drafter's mapping was left as it was (SpecForge's resume checks its size and time).
    assert (work / "base_vocab_mapping.pt").stat().st_mtime_ns == mapping
    report("specforge resumed", {"Train": first["Train"], "Train (resumed)": again["Train"]},
           {"checkpoints": du(work / "train")})


def test_speculators_fine_tunes_specforge_export(training_python: str, tiny: Path, specforge_run: PipelineRun,
                                                 speculators_run: PipelineRun) -> None:
    """baseDrafter = SpecForge's hf export: convert + --from-pretrained keep its vocabulary mapping."""
    base = tiny / "drafters" / "specforge-hf"
    spec = tiny_spec(tiny, "speculators", "speculators-ft", base_drafter=str(base))
    paths = tiny_paths(tiny, training_python, "speculators-ft")
    # The same data and hidden states; a fresh save path (the trainer resumes from one that has checkpoints).
    Path(paths.work).mkdir(parents=True, exist_ok=True)
    for name in ("data", "hidden_states"):
        (Path(paths.work) / name).symlink_to(speculators_run.work / name)
    times = run_all(render(spec, paths, tiny_options(tiny)), training_python, paths, only=("Train", "Export"))
    out = tiny / "drafters" / "speculators-ft"
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["eagle_aux_hidden_state_layer_ids"] == TINY_LAYERS

    before, after = read_safetensors(base / "model.safetensors"), read_safetensors(out / "model.safetensors")
    assert before["d2t"] == after["d2t"] and before["t2d"] == after["t2d"]
    vllm_accepts(training_python, tiny / "target", out)
    report("speculators fine-tune", times, {"drafter": du(out)})
