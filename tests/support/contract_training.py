"""The training frameworks run on a tiny target in their environments (the contract tier): the stage
command lines, the pipeline run, and what vLLM makes of the drafter it produced."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from drafter_operator.api.training import DrafterTraining, DrafterTrainingSpec
from drafter_operator.resources.training_job import rendezvous
from drafter_operator.training import RenderOptions, Stage, TrainingPaths, export
from drafter_operator.training.adapters import ADAPTERS_DIR
from drafter_operator.training.checkpoints import Checkpoint
from drafter_testbed.code_roots import source_pythonpath
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
SEED_EXAMPLE = ROOT / "examples" / "training-kimi-k25-eagle3.yaml"
CHECK_TIMEOUT = 300
STAGE_TIMEOUT = 600
SERVER_START_TIMEOUT = 180
TINY_LAYERS = [1, 2, 3]  # vLLM ids on the 4-layer tiny target (SpecForge: 0, 1, 2)
TINY_DRAFT_VOCAB = 256
CONVERSATIONS = 24
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu",
       "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore", "WANDB_MODE": "disabled"}


def run_env(python: str) -> dict[str, str]:
    bin_dir = str(Path(python).parent)
    return {**os.environ, **ENV, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


CHECKER = r'''
import contextlib, io, json, os, sys, tempfile, traceback
cases = json.load(sys.stdin)
results = []


def specforge_train(case, d):
    from specforge.config import Config
    from specforge.application import resolve_run
    cfg = Config.from_file(os.path.join(d, case["config"]))
    resolve_run(cfg)
    import specforge.cli
    out = io.StringIO()
    saved = dict(os.environ)
    os.environ.update(case.get("env") or {})  # a torchrun worker's environment, when the case is one rank
    try:
        with contextlib.redirect_stdout(out):
            code = specforge.cli.main(case["argv"] + ["--plan"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"code": code, "plan": out.getvalue()[-2000:], "mode": cfg.mode,
            "config": json.loads(cfg.model_dump_json())}


def specforge_export(case, d):
    import specforge.cli, specforge.export.to_hf as hf, specforge.export.to_sglang as sg
    seen = {}
    hf.export_to_hf = lambda *a, **k: seen.update(to="hf", args=list(a), kwargs=k)
    sg.export_to_sglang = lambda *a, **k: seen.update(to="sglang", args=list(a), kwargs=k)
    code = specforge.cli.main(case["argv"])
    return {"code": code, "call": seen}


def specforge_extract(case, d):
    sys.path.insert(0, case["adapters"])
    import hf_hidden_states
    ns = hf_hidden_states.specforge_parser().parse_args(case["argv"])
    return {"args": vars(ns)}


def speculators_train(case, d):
    from speculators.train.config import TrainConfig
    cfg = TrainConfig.resolve(case["argv"])
    return {"config": json.loads(cfg.model_dump_json()), "backend": {k: str(v) for k, v in cfg.backend_args.items()}}


def speculators_command(case, d):
    import typer.main
    from speculators.cli import app
    group = typer.main.get_command(app)
    name, *args = case["argv"]
    command = group.commands[name]
    ctx = command.make_context(name, list(args))
    return {"params": {k: (v if isinstance(v, (int, float, str, bool, list, type(None))) else str(v))
                       for k, v in ctx.params.items()}}


def vllm_serve(case, d):
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    ns = parser.parse_args(case["argv"])
    validate_parsed_serve_args(ns)
    out = {"model_tag": ns.model_tag, "port": ns.port}
    for key in ("speculative_config", "kv_transfer_config", "tensor_parallel_size", "data_parallel_size"):
        value = getattr(ns, key, None)
        out[key] = value if isinstance(value, (dict, int, type(None))) else str(value)
    return out


def sglang_server(case, d):
    from sglang.srt.server_args import prepare_server_args
    args = prepare_server_args(case["argv"])
    return {"model_path": args.model_path, "tp_size": args.tp_size, "port": args.port}


def torchrun(case, d):
    from torch.distributed.run import config_from_args, get_args_parser
    args = get_args_parser().parse_args(case["argv"])
    config, _, _ = config_from_args(args)
    return {"nnodes": [config.min_nodes, config.max_nodes], "nproc_per_node": config.nproc_per_node,
            "rdzv_backend": config.rdzv_backend, "rdzv_endpoint": config.rdzv_endpoint, "run_id": config.run_id,
            "max_restarts": config.max_restarts, "module": args.module, "script": args.training_script,
            "script_args": args.training_script_args}

KINDS = {"sglang-server": sglang_server, "torchrun": torchrun, "specforge-train": specforge_train, "specforge-export": specforge_export,
         "specforge-extract": specforge_extract, "speculators-train": speculators_train,
         "speculators-command": speculators_command, "vllm-serve": vllm_serve}

for case in cases:
    with tempfile.TemporaryDirectory() as d:
        for name, text in case.get("files", {}).items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        case["argv"] = [a.replace("@FILES@", d) for a in case["argv"]]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                results.append({"id": case["id"], "ok": KINDS[case["kind"]](case, d)})
        except SystemExit as exc:
            results.append({"id": case["id"], "error": f"SystemExit({exc.code})", "stderr": err.getvalue()[-3000:]})
        except BaseException as exc:
            results.append({"id": case["id"], "error": f"{type(exc).__name__}: {exc}",
                            "trace": traceback.format_exc()[-3000:], "stderr": err.getvalue()[-1500:]})
print(json.dumps(results, default=str))
'''


def check(python: str, cases: list[dict]) -> dict[str, dict]:
    proc = subprocess.run([python, "-c", CHECKER], input=json.dumps(cases), capture_output=True, text=True,
                          env=run_env(python), timeout=CHECK_TIMEOUT)
    assert proc.returncode == 0, f"checker failed ({proc.returncode}):\n{proc.stderr[-5000:]}"
    results = {r["id"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}
    failed = {k: v for k, v in results.items() if "error" in v}
    assert not failed, json.dumps(failed, indent=1)[:8000]
    return {k: v["ok"] for k, v in results.items()}


def seed_spec(framework: str) -> DrafterTrainingSpec:
    raw = yaml.safe_load(SEED_EXAMPLE.read_text())
    raw["spec"]["framework"] = framework
    return DrafterTraining.model_validate(raw).spec


KIMI_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
               "text_config": {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
                               "num_attention_heads": 64, "num_key_value_heads": 64, "intermediate_size": 18432,
                               "vocab_size": 163840, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
                               "rope_theta": 50000.0, "hidden_act": "silu", "bos_token_id": 163584,
                               "eos_token_id": 163585}}
KIMI_BASE_DRAFTER = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 7168,
                     "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 64,
                     "intermediate_size": 18432, "vocab_size": 163840, "draft_vocab_size": 32000,
                     "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                     "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}}


def variants(framework: str) -> dict[str, tuple[DrafterTrainingSpec, RenderOptions]]:
    """The seed example as written (fine-tune, regenerated data), from scratch on a hub preset, on the CPU, and
    both of the last across two nodes."""
    seed = seed_spec(framework)
    scratch = seed.model_copy(update={"base_drafter": None, "data": seed.data.model_copy(
        update={"dataset": "sharegpt", "generation": None})})
    cpu = scratch.model_copy(update={"data": scratch.data.model_copy(update={"dataset": "/models/datasets/chat.jsonl"})})
    options = RenderOptions(chat_template="kimi-k2-instruct", target_config=KIMI_TARGET,
                            base_drafter_config=KIMI_BASE_DRAFTER, generation_endpoint=GENERATION_ENDPOINT)
    found = {"seed": (seed, options), "scratch": (scratch, options),
             "cpu": (cpu, RenderOptions(**{**options.__dict__, "cpu": True}))}
    # Across nodes: Train under torchrun's c10d rendezvous, on GPUs and on the CPU.
    two = {"resources": seed.resources.model_copy(update={"nodes": 2})}
    meet = {"rendezvous": rendezvous("kimi-ft", 1, 2)}
    found["nodes"] = (scratch.model_copy(update=two), RenderOptions(**{**options.__dict__, **meet}))
    found["cpu-nodes"] = (cpu.model_copy(update=two), RenderOptions(**{**options.__dict__, **meet, "cpu": True}))
    if framework == "specforge":  # speculators resumes by itself: its command line does not change
        # Train started again from its run's last checkpoint (training/checkpoints.py): the seed fine-tunes a base.
        found["resumed"] = (seed, RenderOptions(**{**options.__dict__, "resume": RESUMED}))
    return found


PATHS = TrainingPaths(files="@FILES@", adapters=str(ADAPTERS_DIR))
RESUMED = Checkpoint("drafter-step312", 312)
GENERATION_ENDPOINT = "http://kimi-ft-gen-g1.team.svc.cluster.local:30000/v1"


def wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"server not ready at {url} in {SERVER_START_TIMEOUT}s:\n{log.read_text()[-4000:]}")


def run_stage(stage: Stage, python: str, files_dir: Path, logs: Path) -> float:
    """Write the stage's files, run its commands in order (servers in the background); wall seconds."""
    files_dir.mkdir(parents=True, exist_ok=True)
    for config in stage.files:
        (files_dir / config.name).write_text(config.text())
    servers: list[subprocess.Popen] = []
    started = time.monotonic()
    publish = stage.publish  # Export: written beside the output, renamed into place as run-stage does
    if publish is not None:
        Path(publish.path).parent.mkdir(parents=True, exist_ok=True)  # the volume's owner creates it (docs/training.md)
        export.prepare(publish.path, publish.staging, publish.overwrite)
    try:
        for i, command in enumerate(stage.commands):
            log = logs / f"{stage.name}-{i}.log"
            env = {**run_env(python), **command.env}
            with log.open("w") as out:
                if command.server:
                    proc = subprocess.Popen(list(command.argv), stdout=out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
                    servers.append(proc)
                    wait_ready(proc, command.ready_url, log)
                    continue
                try:
                    proc = subprocess.run(list(command.argv), stdout=out, stderr=subprocess.STDOUT, env=env,
                                          timeout=STAGE_TIMEOUT)
                except subprocess.TimeoutExpired:
                    raise AssertionError(f"{stage.name}: {command.argv[:4]} timed out:\n{log.read_text()[-4000:]}")
            assert proc.returncode == 0, \
                f"{stage.name}: {' '.join(command.argv[:4])} failed ({proc.returncode}):\n{log.read_text()[-6000:]}"
        if publish is not None:
            export.publish(publish.path, publish.staging, publish.overwrite, publish.tag)
    finally:
        for proc in servers:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return time.monotonic() - started


@pytest.fixture(scope="module")


def tiny(training_python: str, tmp_path_factory) -> Path:
    """The tiny target and dataset, under a root that is the specs' storage.mountPath."""
    root = tmp_path_factory.mktemp("training")
    env = {**run_env(training_python), "PYTHONPATH": source_pythonpath()}
    for argv in (["target", str(root / "target")],
                 ["dataset", str(root / "chats.jsonl"), "--conversations", str(CONVERSATIONS)]):
        subprocess.run([training_python, "-m", "drafter_testbed.tiny_target", *argv], env=env, check=True,
                       capture_output=True, timeout=CHECK_TIMEOUT)
    assert (root / "target" / "model.safetensors.index.json").is_file()
    return root


def tiny_spec(root: Path, framework: str, name: str, base_drafter: str | None = None) -> DrafterTrainingSpec:
    return DrafterTrainingSpec.model_validate({
        "target": {"model": str(root / "target"), "tensorParallelSize": 1},
        "framework": framework,
        "baseDrafter": base_drafter,
        "storage": {"modelClaim": "models", "mountPath": str(root)},
        "data": {"dataset": str(root / "chats.jsonl"), "numSamples": CONVERSATIONS, "maxTokens": 256,
                 "chatTemplate": "qwen"},  # SpecForge's name for the tiny target's ChatML; speculators ignores it
        "hiddenStates": {"layers": TINY_LAYERS, "storage": {"size": "1Gi"}},
        "train": {"epochs": 1, "learningRate": "1e-4", "batchSize": 1, "maxLength": 512},
        "output": {"path": str(root / "drafters" / name)},
        "resources": {"gpus": 1},
    })


def tiny_options(root: Path, **extra) -> RenderOptions:
    config = json.loads((root / "target" / "config.json").read_text())
    return RenderOptions(cpu=True, draft_vocab_size=TINY_DRAFT_VOCAB, chat_template="qwen", target_config=config,
                         port=free_port(), **extra)


def tiny_paths(root: Path, python: str, work: str) -> TrainingPaths:
    return TrainingPaths(work=str(root / work), files=str(root / work / "files"), adapters=str(ADAPTERS_DIR),
                         python=python)


def run_all(stages: list[Stage], python: str, paths: TrainingPaths, only: tuple[str, ...] = ()) -> dict[str, float]:
    logs = Path(paths.work) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return {stage.name: run_stage(stage, python, Path(paths.files), logs)
            for stage in stages if not only or stage.name in only}


def read_safetensors(path: Path) -> dict[str, tuple[tuple[int, ...], bytes]]:
    """name -> (shape, raw bytes), from the file's own header (8-byte length + JSON): no safetensors here."""
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    return {name: (tuple(h["shape"]), data[8 + size + h["data_offsets"][0]:8 + size + h["data_offsets"][1]])
            for name, h in header.items()}


VLLM_CHECK = r'''
import contextlib, json, sys
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
target, drafters = sys.argv[1], sys.argv[2:]
with contextlib.redirect_stdout(sys.stderr):
    model = ModelConfig(model=target, tokenizer=target, skip_tokenizer_init=True)
read = []
for drafter in drafters:
    with contextlib.redirect_stdout(sys.stderr):
        spec = SpeculativeConfig(method="eagle3", model=drafter, num_speculative_tokens=3, target_model_config=model,
                                 target_parallel_config=ParallelConfig(tensor_parallel_size=1))
    hf = spec.draft_model_config.hf_config
    read.append({"method": spec.method, "k": spec.num_speculative_tokens,
                 "draft_vocab_size": getattr(hf, "draft_vocab_size", None),
                 "layer_ids": getattr(hf, "eagle_aux_hidden_state_layer_ids", None)
                              or (getattr(hf, "eagle_config", None) or {}).get("eagle_aux_hidden_state_layer_ids")})
print(json.dumps(read))
'''


def vllm_accepts_all(training_python: str, target: Path, drafters: list[Path]) -> list[dict]:
    """What vLLM's SpeculativeConfig reads of each EAGLE-3 drafter beside ``target``, in one process: importing
    vLLM and inspecting the target (a subprocess of vLLM's own) is most of a check's cost."""
    python = os.environ.get("DRAFTER_ENGINE_PYTHON") or training_python
    proc = subprocess.run([python, "-c", VLLM_CHECK, str(target), *map(str, drafters)], capture_output=True, text=True,
                          env=run_env(python), timeout=CHECK_TIMEOUT)
    assert proc.returncode == 0, f"vLLM refused one of {[str(d) for d in drafters]}:\n{proc.stderr[-4000:]}"
    read = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(read) == len(drafters), read
    return read


def vllm_accepts(training_python: str, target: Path, drafter: Path) -> dict:
    return vllm_accepts_all(training_python, target, [drafter])[0]


def report(framework: str, times: dict[str, float], sizes: dict[str, int]) -> None:
    print(f"\n[training e2e] {framework}: " + ", ".join(f"{k} {v:.1f}s" for k, v in times.items())
          + "; " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sizes.items()), file=sys.stderr)


@dataclasses.dataclass


class PipelineRun:
    """One framework's stages run on the tiny target: where it worked and how long each stage took."""
    work: Path
    times: dict[str, float]
