"""The training stages' GPU path against their CPU substitutions: the same data, seed and rendered Train stage on
both, and the loss curves side by side.

The CPU adapters (operator/drafter_operator/training/adapters) stand in for the frameworks' GPU kernels on this
machine: speculators' trainer with sdpa attention and its eager loss instead of flex attention and the fused
Triton loss; SpecForge's EAGLE-3 loss in plain torch instead of its Triton kernel. This script measures how
faithful they are: ``prepare`` (here, on the CPU) writes the tiny target, the conversations and the hidden states
the Train stages read (Generate and Extract as the operator renders them with ``cpu=True``); ``train`` renders
the Train stage of each run for the device it is on (``--device cuda``: the operator's GPU commands, torchrun and
``specforge train``, no adapter) with one loss line per step, runs it and records every step's loss, the wall
time and the trained tokens per second; ``compare`` prints the curves side by side with the largest relative
difference.

    python bench/gpu_training.py prepare DIR                  # on this machine (the training environment)
    python bench/gpu_training.py train DIR --device cpu --out cpu.json
    python bench/gpu_training.py train DIR --device cuda --out gpu.json   # where a GPU is (the device tool)
    python bench/gpu_training.py compare cpu.json gpu.json

DIR holds everything the Train stages read; it travels to the GPU machine as it is (a few MB). Runs: speculators
eagle3 and dflash, SpecForge eagle3 (``--runs`` picks). docs/training.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.training import RenderOptions, Stage, TrainingPaths, render
from drafter_operator.training.adapters import ADAPTERS_DIR

RUNS = {"speculators-eagle3": ("speculators", "eagle3"), "speculators-dflash": ("speculators", "dflash"),
        "specforge-eagle3": ("specforge", "eagle3")}
LAYERS = [1, 2, 3]  # vLLM's ids on the tiny target's 4 layers
CONVERSATIONS = 24
DRAFT_VOCAB = 256
SEED = 0
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
       "TOKENIZERS_PARALLELISM": "false", "VLLM_TARGET_DEVICE": "cpu", "PYTHONUNBUFFERED": "1"}
#: speculators logs ``train/loss=0.859`` per step; SpecForge ``step N: {..., 'loss': 0.271..., ...}`` per log interval.
LOSS = re.compile(r"(?:train/loss=|'loss': )(-?[0-9]+\.[0-9]+(?:e[-+]?[0-9]+)?)")


def spec(root: Path, framework: str, method: str, name: str) -> DrafterTrainingSpec:
    return DrafterTrainingSpec.model_validate({
        "target": {"model": str(root / "target"), "tensorParallelSize": 1}, "framework": framework, "method": method,
        "storage": {"modelClaim": "models", "mountPath": str(root)},
        "data": {"dataset": str(root / "chats.jsonl"), "numSamples": CONVERSATIONS, "maxTokens": 256,
                 "chatTemplate": "qwen"},
        "hiddenStates": {"layers": LAYERS, "storage": {"size": "1Gi"}},
        "train": {"epochs": 1, "learningRate": "1e-4", "batchSize": 1, "maxLength": 512},
        "output": {"path": str(root / "drafters" / name)}, "resources": {"gpus": 1}})


def options(root: Path, cpu: bool, port: int = 38123) -> RenderOptions:
    config = json.loads((root / "target" / "config.json").read_text())
    return RenderOptions(cpu=cpu, draft_vocab_size=DRAFT_VOCAB, chat_template="qwen", target_config=config, port=port,
                         seed=SEED)


def paths(root: Path, work: str) -> TrainingPaths:
    return TrainingPaths(work=str(root / work), files=str(root / work / "files"), adapters=str(ADAPTERS_DIR),
                         python=sys.executable)


def run_stage(stage: Stage, training: TrainingPaths, log: Path, env: dict[str, str]) -> float:
    """The stage's files and commands in order (a server in the background until the stage ends); wall seconds."""
    files = Path(training.files)
    files.mkdir(parents=True, exist_ok=True)
    for config in stage.files:
        (files / config.name).write_text(config.text())
    started, servers = time.monotonic(), []
    try:
        with log.open("a") as out:
            for command in stage.commands:
                full = {**os.environ, **ENV, **env, **command.env}
                if command.server:
                    servers.append(subprocess.Popen(list(command.argv), stdout=out, stderr=subprocess.STDOUT, env=full))
                    wait_ready(command.ready_url, servers[-1])
                    continue
                subprocess.run(list(command.argv), stdout=out, stderr=subprocess.STDOUT, env=full, check=True,
                               timeout=1800)
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=60)
    return time.monotonic() - started


def wait_ready(url: str, process: subprocess.Popen, timeout: float = 300) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"no answer from {url}")


def prepare(root: Path) -> None:
    """The tiny target, the conversations, and each framework's Generate and Extract (CPU renders)."""
    root.mkdir(parents=True, exist_ok=True)
    for argv in (["target", str(root / "target")], ["dataset", str(root / "chats.jsonl"),
                                                    "--conversations", str(CONVERSATIONS)]):
        subprocess.run([sys.executable, "-m", "drafter_testbed.tiny_target", *argv], check=True, env={**os.environ, **ENV})
    for framework in ("speculators", "specforge"):
        training = paths(root, f"data-{framework}")
        for stage in render(spec(root, framework, "eagle3", "unused"), training, options(root, cpu=True)):
            if stage.name in ("Generate", "Extract"):
                seconds = run_stage(stage, training, root / f"prepare-{framework}.log", {})
                print(f"{framework} {stage.name}: {seconds:.1f} s")


def train(root: Path, device: str, runs: list[str], loss_flags: tuple[str, ...] = ()) -> dict:
    """Each run's Train stage rendered for ``device``, from the prepared data, one loss line per step."""
    results = {}
    for name in runs:
        framework, method = RUNS[name]
        work = root / f"train-{name}-{device}"
        training = paths(root, work.name)
        work.mkdir(parents=True, exist_ok=True)
        data = root / f"data-{framework}"
        for part in ("data", "hidden_states"):
            if (data / part).exists() and not (work / part).exists():
                (work / part).symlink_to(data / part)
        (stage,) = [s for s in render(spec(root, framework, method, name), training, options(root, device == "cpu"))
                    if s.name == "Train"]
        stage = every_step(stage, framework)
        if loss_flags and framework == "speculators":
            stage = with_train_flags(stage, loss_flags)
        log = work / "train.log"
        log.unlink(missing_ok=True)
        try:
            seconds = run_stage(stage, training, log, {"SPECFORGE_DEVICE": device} if framework == "specforge" else {})
        except subprocess.CalledProcessError as exc:
            errors = [line for line in log.read_text().splitlines() if "Error" in line]
            results[name] = {"device": device, "failed": exc.returncode, "error": errors[-3:]}
            print(f"{name} on {device}: failed ({exc.returncode}): {errors[-1:] or 'see ' + str(log)}")
            continue
        text = log.read_text()
        losses = [float(m) for m in LOSS.findall(text)]
        results[name] = {"device": device, "seconds": round(seconds, 2), "losses": losses,
                         "argv": [" ".join(c.argv) for c in stage.commands]}
        print(f"{name} on {device}: {seconds:.1f} s, {len(losses)} losses, first {losses[:3]}, last {losses[-3:]}")
    return results


def with_train_flags(stage: Stage, flags: tuple[str, ...]) -> Stage:
    """speculators' train command with ``flags`` appended (its parser takes the last of a repeated flag)."""
    import dataclasses

    *before, last = stage.commands
    return dataclasses.replace(stage, commands=(*before, dataclasses.replace(last, argv=(*last.argv, *flags))))


def every_step(stage: Stage, framework: str) -> Stage:
    """One loss line per optimizer step (SpecForge logs every 50 by default; speculators logs every step)."""
    import dataclasses

    if framework != "specforge":
        return stage
    files = []
    for config in stage.files:
        if config.name.endswith(".yaml"):
            content = json.loads(json.dumps(config.content))
            content["training"]["log_interval"] = 1
            config = dataclasses.replace(config, content=content)
        files.append(config)
    return dataclasses.replace(stage, files=tuple(files))


def compare(cpu: dict, gpu: dict) -> None:
    for name in cpu:
        if name not in gpu or "losses" not in gpu[name]:
            print(f"{name}: no GPU curve ({(gpu.get(name) or {}).get('error') or 'not run'})")
            continue
        a, b = cpu[name]["losses"], gpu[name]["losses"]
        steps = min(len(a), len(b))
        worst = max((abs(x - y) / max(abs(x), 1e-9) for x, y in zip(a, b)), default=float("nan"))
        print(f"{name}: {steps} steps compared (cpu {len(a)}, gpu {len(b)}); largest relative loss difference "
              f"{worst:.2%}; cpu {cpu[name]['seconds']} s, gpu {gpu[name]['seconds']} s")
        for i, (x, y) in enumerate(zip(a, b)):
            print(f"  step {i + 1:3d}  cpu {x:.4f}  gpu {y:.4f}  {abs(x - y) / max(abs(x), 1e-9):6.2%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("prepare").add_argument("root", type=Path)
    trainer = sub.add_parser("train")
    trainer.add_argument("root", type=Path)
    trainer.add_argument("--device", choices=("cpu", "cuda"), required=True)
    trainer.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=list(RUNS))
    trainer.add_argument("--out", type=Path, required=True)
    trainer.add_argument("--speculators-loss", choices=("fused", "eager"), default="fused",
                         help="speculators' loss on the GPU: its fused Triton kernel (the GPU default), or eager where "
                              "the kernel does not compile (speculators 0.9.0's under torch 2.11: docs/training.md)")
    versus = sub.add_parser("compare")
    versus.add_argument("cpu", type=Path)
    versus.add_argument("gpu", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "prepare":
        prepare(args.root.resolve())
    elif args.verb == "train":
        loss = ("--loss-implementation", "eager") if args.device == "cuda" and args.speculators_loss == "eager" else ()
        results = train(args.root.resolve(), args.device, args.runs, loss)
        args.out.write_text(json.dumps(results, indent=1))
    else:
        compare(json.loads(args.cpu.read_text()), json.loads(args.gpu.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
