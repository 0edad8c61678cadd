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
    python bench/gpu_training.py train DIR --device cuda --out gpu.json --drafters gpu-drafters.tar.gz
        # ... and each run's Export: the GPU-trained drafters packed, to be read by the engines where they are
    python bench/gpu_training.py compare cpu.json gpu.json
    python bench/gpu_training.py extract DIR --device cuda --out extract.json   # the capture on the GPU vs here
    python bench/gpu_training.py standin DIR2 --device cuda --out standin.json  # throughput, a ~315M stand-in

DIR holds everything the Train stages read; it travels to the GPU machine as it is (a few MB). Runs: speculators
eagle3 and dflash, SpecForge eagle3 (``--runs`` picks). ``extract`` runs each framework's Extract stage (the
transformers capture, on the device named) over DIR's prepared data and compares every hidden-state tensor with the
CPU capture ``prepare`` wrote. ``standin`` builds the ~315M-parameter stand-in target and longer conversations where
it runs, then times Extract and each framework's Train on that device: the tokens per second per GPU the operator's
cost estimate (drafter_operator/training/cost.py) is calibrated on. docs/training.md has the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
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
#: The capture's line per batch (SpecForge) or sample (speculators).
EXTRACTED = re.compile(r"hf_hidden_states: extracted [0-9]+/[0-9]+ samples")


def steady_rate(tokens: int, times: list[float]) -> float | None:
    """Tokens per second between the first and the last timed line: the share of ``tokens`` those lines' units
    cover (all but the first, on average) over that time, so start-up and compilation do not count."""
    if len(times) < 3 or times[-1] <= times[0]:
        return None
    return round(tokens * (len(times) - 1) / len(times) / (times[-1] - times[0]), 1)


def spec(root: Path, framework: str, method: str, name: str, samples: int = CONVERSATIONS, max_length: int = 512,
         layers: list[int] = LAYERS) -> DrafterTrainingSpec:
    return DrafterTrainingSpec.model_validate({
        "target": {"model": str(root / "target"), "tensorParallelSize": 1}, "framework": framework, "method": method,
        "storage": {"modelClaim": "models", "mountPath": str(root)},
        "data": {"dataset": str(root / "chats.jsonl"), "numSamples": samples, "maxTokens": 256,
                 "chatTemplate": "qwen"},
        "hiddenStates": {"layers": layers, "storage": {"size": "1Gi"}},
        "train": {"epochs": 1, "learningRate": "1e-4", "batchSize": 1, "maxLength": max_length},
        "output": {"path": str(root / "drafters" / name)}, "resources": {"gpus": 1}})


def options(root: Path, cpu: bool, port: int = 38123) -> RenderOptions:
    config = json.loads((root / "target" / "config.json").read_text())
    return RenderOptions(cpu=cpu, draft_vocab_size=DRAFT_VOCAB, chat_template="qwen", target_config=config, port=port,
                         seed=SEED)


def paths(root: Path, work: str) -> TrainingPaths:
    return TrainingPaths(work=str(root / work), files=str(root / work / "files"), adapters=str(ADAPTERS_DIR),
                         python=sys.executable)


def run_stage(stage: Stage, training: TrainingPaths, log: Path, env: dict[str, str],
              times: list[float] | None = None, timed: re.Pattern = LOSS) -> float:
    """The stage's files and commands in order (a server in the background until the stage ends); wall seconds.
    ``times`` receives the monotonic time of every output line that ``timed`` matches (a loss, by default)."""
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
                run_logged(list(command.argv), out, full, times, timed)
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=60)
    return time.monotonic() - started


def run_logged(argv: list[str], out, env: dict[str, str], times: list[float] | None, timed: re.Pattern) -> None:
    """Run ``argv`` to the end, its output into ``out``, noting when each line ``timed`` matches arrived."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1)
    for line in process.stdout:
        out.write(line)
        if times is not None and timed.search(line):
            times.append(time.monotonic())
    if process.wait(timeout=1800):
        raise subprocess.CalledProcessError(process.returncode, argv)


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


def train(root: Path, device: str, runs: list[str], loss_flags: tuple[str, ...] = (),
          drafters: Path | None = None) -> dict:
    """Each run's Train stage rendered for ``device``, from the prepared data, one loss line per step. With
    ``drafters``, each run's Export stage too, and the exported drafters packed into that tar file (one
    ``<run>/`` directory each; SpecForge's in both formats, ``specforge-eagle3-hf/`` beside the sglang one)."""
    results = {}
    exported: dict[str, Path] = {}
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
        if drafters is not None:
            formats = {name: "sglang", f"{name}-hf": "hf"} if framework == "specforge" else {name: "sglang"}
            for label, export_to in formats.items():
                exported[label] = export(root, framework, method, label, training, device, export_to, log)
                results[name].setdefault("exports", {})[label] = sorted(p.name for p in exported[label].iterdir())
    if drafters is not None:
        with tarfile.open(drafters, "w:gz") as archive:
            for label, path in exported.items():
                archive.add(path, arcname=label)
    return results


def export(root: Path, framework: str, method: str, label: str, training: TrainingPaths, device: str,
           export_to: str, log: Path) -> Path:
    """The run's Export stage as the operator renders it, staged and published as the stage runner does
    (training/export.py); returns the published drafter's directory."""
    from drafter_operator.training import export as publication

    options_ = dataclasses.replace(options(root, device == "cpu"), export_to=export_to)
    (stage,) = [s for s in render(spec(root, framework, method, label), training, options_) if s.name == "Export"]
    Path(stage.publish.path).parent.mkdir(parents=True, exist_ok=True)
    publication.prepare(stage.publish.path, stage.publish.staging, overwrite=True)
    run_stage(stage, training, log, {})
    publication.publish(stage.publish.path, stage.publish.staging, overwrite=True, tag=stage.publish.tag)
    return Path(stage.publish.path)


def with_train_flags(stage: Stage, flags: tuple[str, ...]) -> Stage:
    """speculators' train command with ``flags`` appended (its parser takes the last of a repeated flag)."""
    *before, last = stage.commands
    return dataclasses.replace(stage, commands=(*before, dataclasses.replace(last, argv=(*last.argv, *flags))))


def every_step(stage: Stage, framework: str) -> Stage:
    """One loss line per optimizer step (SpecForge logs every 50 by default; speculators logs every step)."""
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


def extract(root: Path, device: str) -> dict:
    """Each framework's Extract stage with the capture on ``device``, over the data ``prepare`` wrote, and every
    hidden-state tensor against the CPU capture: the largest absolute difference and that over the largest value."""
    results = {}
    for framework in ("speculators", "specforge"):
        work = root / f"extract-{framework}-{device}"
        training = paths(root, work.name)
        work.mkdir(parents=True, exist_ok=True)
        if not (work / "data").exists():
            (work / "data").symlink_to(root / f"data-{framework}" / "data")
        (stage,) = [s for s in render(spec(root, framework, "eagle3", "unused"), training, options(root, cpu=True))
                    if s.name == "Extract"]
        seconds = run_stage(stage, training, work / "extract.log", {"HF_HIDDEN_STATES_DEVICE": device})
        results[framework] = {"device": device, "seconds": round(seconds, 2),
                              **hidden_state_difference(root / f"data-{framework}" / "hidden_states",
                                                        work / "hidden_states")}
        print(f"{framework} Extract on {device}: {results[framework]}")
    return results


def hidden_state_files(directory: Path) -> dict[str, Path]:
    return {str(p.relative_to(directory)): p for p in sorted(directory.rglob("*"))
            if p.suffix in (".ckpt", ".safetensors")}


def load_tensors(path: Path) -> dict:
    import torch
    from safetensors.torch import load_file

    return load_file(str(path)) if path.suffix == ".safetensors" else torch.load(path, map_location="cpu")


def hidden_state_difference(reference: Path, other: Path) -> dict:
    """Files compared, tokens, and for the floating tensors the largest absolute difference and the largest
    magnitude; integer tensors (ids, masks) must be equal."""
    ours, theirs = hidden_state_files(reference), hidden_state_files(other)
    if set(ours) != set(theirs):
        return {"error": f"different files: {sorted(set(ours) ^ set(theirs))[:5]}"}
    worst = largest = 0.0
    tokens = unequal = 0
    for name, path in ours.items():
        a, b = load_tensors(path), load_tensors(theirs[name])
        for key, x in a.items():
            y = b[key]
            if not x.is_floating_point():
                unequal += int(not bool((x == y).all()))
                tokens += x.numel() if key in ("input_ids", "token_ids") else 0
                continue
            worst = max(worst, float((x.float() - y.float()).abs().max()))
            largest = max(largest, float(x.float().abs().max()))
    return {"files": len(ours), "tokens": tokens, "max_abs_difference": worst, "max_abs_value": largest,
            "relative": worst / largest if largest else 0.0, "integer_tensors_unequal": unequal}


def captured_tokens(directory: Path) -> int:
    """Tokens a capture holds (the ids of every record)."""
    total = 0
    for path in hidden_state_files(directory).values():
        tensors = load_tensors(path)
        total += next(int(t.numel()) for k, t in tensors.items() if k in ("input_ids", "token_ids"))
    return total


STANDIN_CONVERSATIONS = 256
STANDIN_EXCHANGES = ("8", "12")
STANDIN_LAYERS = [2, 12, 21]  # vLLM's ids on the stand-in's 24 layers: 2, N/2, N-3 as launch_vllm.py picks


def standin_prepare(root: Path) -> None:
    """Here, where vLLM is: the stand-in's conversations and speculators' Generate over them (``prepare-data``
    asks vLLM's render server to apply the chat template, and the device image has no vLLM). The tiny target
    stands in for the stand-in there: both carry the same tokenizer, and Generate reads nothing else."""
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **ENV}
    subprocess.run([sys.executable, "-m", "drafter_testbed.tiny_target", "target", str(root / "target")], check=True, env=env)
    write_standin_dataset(root, env)
    training = paths(root, "standin-speculators-eagle3")
    standin_spec = spec(root, "speculators", "eagle3", "speculators-eagle3", STANDIN_CONVERSATIONS, 2048, STANDIN_LAYERS)
    generate = next(s for s in render(standin_spec, training, options(root, cpu=True)) if s.name == "Generate")
    run_stage(generate, training, root / "standin-prepare.log", {})
    shutil.rmtree(root / "target")


def write_standin_dataset(root: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "drafter_testbed.tiny_target", "dataset", str(root / "chats.jsonl"),
                    "--conversations", str(STANDIN_CONVERSATIONS), "--exchanges", *STANDIN_EXCHANGES],
                   check=True, env=env)


STANDIN_RUNS = ("specforge-eagle3", "speculators-eagle3")


def standin(root: Path, device: str, runs: tuple[str, ...] = STANDIN_RUNS, shape: str = "standin") -> dict:
    """The stand-in target and long conversations, Generate and Extract (capture on ``device``), then each framework's
    Train rendered for ``device``: wall seconds and tokens per second per GPU of Extract and of Train's steady state
    (from the second loss line to the last, the steps' tokens over that time)."""
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **ENV}
    subprocess.run([sys.executable, "-m", "drafter_testbed.tiny_target", "target", str(root / "target"),
                    "--shape", shape], check=True, env=env)
    if not (root / "chats.jsonl").exists():  # standin_prepare wrote it where vLLM is
        write_standin_dataset(root, env)
    config = json.loads((root / "target" / "config.json").read_text())
    results: dict = {"target": {k: config[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                                         "vocab_size")}}
    layers = STANDIN_LAYERS if config["num_hidden_layers"] > max(STANDIN_LAYERS) else LAYERS
    for name in runs:
        framework, method = RUNS[name]
        training = paths(root, f"standin-{name}")
        Path(training.work).mkdir(parents=True, exist_ok=True)
        standin_spec = spec(root, framework, method, name, STANDIN_CONVERSATIONS, 2048, layers)
        # Generate and Extract as the CPU render spells them (the capture is transformers', which
        # HF_HIDDEN_STATES_DEVICE places on the device: the GPU render's capture is SGLang or vLLM, not carried here);
        # Train as the device's render spells it (the frameworks' GPU kernels).
        stages = {s.name: s for s in render(standin_spec, training, options(root, cpu=True))}
        stages["Train"] = next(s for s in render(standin_spec, training, options(root, cpu=device == "cpu"))
                               if s.name == "Train")
        log = Path(training.work) / "stages.log"
        record: dict = {}
        try:
            if "Generate" in stages and not (Path(training.work) / "data").exists():
                run_stage(stages["Generate"], training, log, {})
            times: list[float] = []
            seconds = run_stage(stages["Extract"], training, log, {"HF_HIDDEN_STATES_DEVICE": device}, times, EXTRACTED)
            tokens = captured_tokens(Path(training.work) / "hidden_states")
            record["extract"] = {"seconds": round(seconds, 2), "tokens": tokens, "progress_lines": len(times),
                                 "steady_tokens_per_second": steady_rate(tokens, times)}
            times = []
            train_stage = every_step(stages["Train"], framework)
            if framework == "speculators" and device == "cuda":
                train_stage = with_train_flags(train_stage, ("--loss-implementation", "eager"))
            seconds = run_stage(train_stage, training, log, {"SPECFORGE_DEVICE": device} if framework == "specforge" else {},
                                times)
            record["train"] = {"seconds": round(seconds, 2), "loss_lines": len(times), "tokens": tokens,
                               "steady_tokens_per_second": steady_rate(tokens, times)}
            Path(standin_spec.output.path).parent.mkdir(parents=True, exist_ok=True)
            run_stage(stages["Export"], training, log, {})
            # Export writes into its staging directory (run-stage publishes it to the output path atomically).
            record["export"] = json.loads((Path(stages["Export"].publish.staging) / "config.json").read_text())
        except subprocess.CalledProcessError as exc:
            errors = [line for line in log.read_text().splitlines() if "Error" in line]
            record["failed"] = {"returncode": exc.returncode, "error": errors[-3:]}
        results[name] = record
        print(f"stand-in {name} on {device}: {record}", flush=True)
    return results


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
    trainer.add_argument("--drafters", type=Path,
                         help="also run each run's Export and pack the exported drafters into this tar.gz")
    trainer.add_argument("--speculators-loss", choices=("fused", "eager"), default="fused",
                         help="speculators' loss on the GPU: its fused Triton kernel (the GPU default), or eager where "
                              "the kernel does not compile (speculators 0.9.0's under torch 2.11: docs/training.md)")
    sub.add_parser("standin-prepare").add_argument("root", type=Path)
    for verb in ("extract", "standin"):
        other = sub.add_parser(verb)
        other.add_argument("root", type=Path)
        other.add_argument("--device", choices=("cpu", "cuda"), required=True)
        other.add_argument("--out", type=Path, required=True)
        if verb == "standin":
            other.add_argument("--runs", nargs="+", choices=STANDIN_RUNS, default=list(STANDIN_RUNS))
            other.add_argument("--shape", choices=("standin", "wide"), default="standin",
                               help="wide: Kimi-K2.5's hidden size at 4 layers (its drafter's width)")
    versus = sub.add_parser("compare")
    versus.add_argument("cpu", type=Path)
    versus.add_argument("gpu", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "prepare":
        prepare(args.root.resolve())
    elif args.verb == "standin-prepare":
        standin_prepare(args.root.resolve())
    elif args.verb == "train":
        loss = ("--loss-implementation", "eager") if args.device == "cuda" and args.speculators_loss == "eager" else ()
        results = train(args.root.resolve(), args.device, args.runs, loss, args.drafters)
        args.out.write_text(json.dumps(results, indent=1))
    elif args.verb in ("extract", "standin"):
        results = (extract(args.root.resolve(), args.device) if args.verb == "extract"
                   else standin(args.root.resolve(), args.device, tuple(args.runs), args.shape))
        args.out.write_text(json.dumps(results, indent=1))
    else:
        compare(json.loads(args.cpu.read_text()), json.loads(args.gpu.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
