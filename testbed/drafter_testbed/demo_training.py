"""The demo's training chapter: a new drafter trained by a DrafterTraining, benchmarked and promoted.

The stage Jobs run the real speculators 0.9.0 code on the CPU (the adapters of docs/training.md) in
the training environment (`.ci/training-env`, recorded with `drafter-operator cluster training-env`).
Real frameworks need a real target, and Kimi-K2.5 is 547 GB: the demo's model volume holds a tiny
random Llama (drafter_testbed/tiny_target.py) at the Kimi path as a stand-in, which the frameworks train on
and the preflight checks the drafter against. The engine emulator serving "Kimi-K2.5" reads no
weights; it gives the new drafter the acceptance its profile assumes for a drafter trained on
target-regenerated data. What is real: every stage's framework code, the Jobs, the claim, the
progress, the Evaluate benchmark, the gate and the swap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from drafter_testbed import cluster as local
from drafter_testbed import code_roots, tiny_target
from drafter_testbed.volumes import volume_for_claim

TRAINING = "kimi-k25-eagle3-regenerated"
CONVERSATIONS = 24
# What the stage containers need on a machine without GPUs or internet (the spec's env).
CPU_ENV = [{"name": "VLLM_TARGET_DEVICE", "value": "cpu"}, {"name": "TOKENIZERS_PARALLELISM", "value": "false"},
           {"name": "WANDB_MODE", "value": "disabled"}, {"name": "HF_DATASETS_OFFLINE", "value": "1"},
           {"name": "TRANSFORMERS_OFFLINE", "value": "1"}]


#: Where `./dev demo` builds the training environment in the background: a directory that gets ``python`` (the
#: environment's interpreter) and ``status`` (the build's exit status) when the build ends, ``build.log`` meanwhile.
TRAINING_ENV_BUILD = "DRAFTER_TRAINING_ENV_BUILD"
#: How long the training scene waits for that build. A cold one downloads and installs the engines' environment
#: (about 7 GB: about 3 minutes with the wheels in pip's cache, longer where they download) and then the training
#: frameworks' (33 s, docs/training.md).
TRAINING_ENV_WAIT_SECONDS = 45 * 60


def training_python(console: Console | None = None) -> str | None:
    """The training environment: DRAFTER_TRAINING_PYTHON, else the one `./dev demo` builds in the background
    (waited for here, with its progress); None when neither is there or the build failed (said on ``console``)."""
    python = os.environ.get("DRAFTER_TRAINING_PYTHON")
    if python:
        return python if os.access(python, os.X_OK) else None
    build = os.environ.get(TRAINING_ENV_BUILD)
    return wait_for_background_build(Path(build), console or Console()) if build else None


def wait_for_background_build(build: Path, console: Console, timeout: float = TRAINING_ENV_WAIT_SECONDS) -> str | None:
    """The background build's interpreter once it ends, showing its last log line meanwhile; None (with the log's
    tail said) when it failed or did not end within ``timeout``."""
    started = time.monotonic()
    status_file, log = build / "status", build / "build.log"
    with console.status("waiting for the training environment") as shown:
        while not status_file.exists() and time.monotonic() - started < timeout:
            last = next((line for line in reversed(_read(log).splitlines()) if line.strip()), "")
            shown.update(f"waiting for the training environment (built in the background since the demo started; "
                         f"{time.monotonic() - started:.0f} s of up to {timeout / 60:.0f} min here): {last[-100:]}")
            time.sleep(1)
    status = _read(status_file).strip()
    if status == "0" and (build / "python").exists():
        python = _read(build / "python").strip()
        if os.access(python, os.X_OK):
            console.print(f"The training environment is ready ({python}).")
            return python
    why = f"exited with status {status}" if status else f"did not finish within {timeout / 60:.0f} min"
    tail = "\n".join(_read(log).splitlines()[-15:])
    console.print(f"[yellow]The training environment's build {why}[/] (its log: {log}):\n{tail}")
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def prepare(layout: local.Layout, namespace: str, target: str, python: str, kubectl, name: str = TRAINING) -> None:
    """The stand-in target and a chat dataset on the model volume, the training environment recorded for
    the runner, no earlier run's training ``name``, and a volume pre-bound to its hidden-state claim (the local
    cluster has no provisioner)."""
    local.use_training_python(python, layout)
    root = layout.root / "claims" / namespace / "models"
    env = {**os.environ, "PYTHONPATH": code_roots.source_pythonpath(), "HF_HUB_OFFLINE": "1"}
    for argv in (["target", str(root / target.lstrip("/").removeprefix("models/"))],
                 ["dataset", str(root / "datasets" / "chats.jsonl"), "--conversations", str(CONVERSATIONS)]):
        subprocess.run([python, "-m", "drafter_testbed.tiny_target", *argv], env=env, check=True,
                       capture_output=True, timeout=300)
    (root / "drafters").mkdir(exist_ok=True)  # Export writes only into an existing parent (docs/training.md)
    # An earlier run's training goes first: its claim holds the volume, which is then made afresh (a
    # released volume binds to no new claim).
    kubectl("-n", namespace, "delete", "draftertrainings", name, "--ignore-not-found", "--wait=true",
            "--timeout=120s")
    hidden_states_volume(namespace, name, kubectl)


def hidden_states_volume(namespace: str, name: str, kubectl) -> None:
    """A fresh volume pre-bound to training ``name``'s hidden-state claim (an earlier run's claim and volume gone)."""
    kubectl("-n", namespace, "delete", "pvc", f"{name}-hidden-states", "--ignore-not-found", "--wait=true",
            "--timeout=120s")
    volume = volume_for_claim(namespace, f"{name}-hidden-states", f"/tmp/drafter-demo-{namespace}-{name}")
    kubectl("delete", "pv", volume["metadata"]["name"], "--ignore-not-found", "--wait=true", "--timeout=60s")
    kubectl("apply", "-f", "-", input=json.dumps(volume))


def manifest(namespace: str, target: str, output: str, serving: str, gate: dict, placement: dict,
             name: str = TRAINING) -> dict:
    """``placement``: where the GPU stages run (the process nodes: on a kwok node a pod only pretends)."""
    return {
        "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "target": {"model": target, "tensorParallelSize": 1},
            "framework": "speculators",
            "storage": {"modelClaim": "models", "mountPath": "/models"},
            "data": {"dataset": "/models/datasets/chats.jsonl", "numSamples": CONVERSATIONS, "maxTokens": 256},
            "hiddenStates": {"layers": [1, 2, 3], "storage": {"size": "1Gi"}},
            "train": {"epochs": 1, "learningRate": "1e-4", "maxLength": 512, "draftVocabSize": 256},
            # A demo run again replaces the drafter its last run trained (nothing loads it yet at this point: the
            # promotion comes after Export); without overwrite Generate refuses with OutputExists.
            "output": {"path": output, "overwrite": True},
            "promote": {"servingRef": {"name": serving}, "gate": gate},
            # Extract across two pods (an Indexed Job, each capturing its share into the one claim).
            "resources": {"gpus": 1, "nodes": 2, "requests": {"cpu": "100m", "memory": "256Mi"}},
            "placement": placement,
            "env": CPU_ENV,
        },
    }


def run(console: Console, kubectl, namespace: str, body: dict, timeout: float = 900) -> dict:
    """Apply the training and follow it: each stage and its progress as the operator reports them."""
    kubectl("apply", "-f", "-", input=json.dumps(body))  # JSON: YAML would read "1e-4" as a number
    return follow(console, kubectl, namespace, body["metadata"]["name"], timeout)


def follow(console: Console, kubectl, namespace: str, name: str, timeout: float = 900) -> dict:
    """Follow training ``name`` to its end: each stage and its progress as the operator reports them."""
    started = time.monotonic()
    seen: list[tuple[float, str, str]] = []
    stage, state = "Pending", {}
    with console.status(f"DrafterTraining {name}") as status:
        while time.monotonic() - started < timeout:
            item = json.loads(kubectl("-n", namespace, "get", "draftertrainings", name, "-o", "json").stdout)
            state = item.get("status") or {}
            stage, summary = state.get("stage") or "Pending", (state.get("progress") or {}).get("summary") or ""
            if not seen or seen[-1][1:] != (stage, summary):
                seen.append((time.monotonic() - started, stage, summary))
                console.print(f"  {seen[-1][0]:5.0f} s  {stage:<9} {summary}")
            status.update(f"DrafterTraining {name}: {stage} {summary}")
            if stage in ("Succeeded", "Failed"):
                break
            time.sleep(1)
    if stage != "Succeeded":
        ready = next((c for c in state.get("conditions") or [] if c["type"] == "Ready"), {})
        raise local.ClusterError(f"DrafterTraining {name}: {stage}: {ready.get('message')}; "
                                 f"see `kubectl -n {namespace} describe draftertraining {name}`")
    return item


def report(console: Console, item: dict, kubectl, namespace: str) -> None:
    status, name = item["status"], item["metadata"]["name"]
    table = Table(title=f"DrafterTraining {name}: stages (from their conditions)")
    for column in ("stage", "finished at", "what"):
        table.add_column(column)
    order = ("Generated", "Extracted", "Trained", "Exported", "Evaluated", "Promoted")
    for condition in sorted((c for c in status["conditions"] if c["type"] in order), key=lambda c: order.index(c["type"])):
        table.add_row(condition["type"], condition["lastTransitionTime"][11:19], condition.get("message", ""))
    console.print(table)
    for artifact in status.get("artifacts") or []:
        console.print(f"  artifact of {artifact['stage']}: {artifact['path']} ({(artifact.get('sizeBytes') or 0) / 1e6:.2f} MB)")
    evaluation = status.get("evaluation") or {}
    hidden = status.get("hiddenStates") or {}
    console.print(f"  hidden states: claim {hidden.get('claimName')} ({hidden.get('shardsDone')}/{hidden.get('shards')} "
                  f"Extract shares, one pod each), deleted after export: {hidden.get('deleted')}")
    for share in hidden.get("shardSizes") or []:
        console.print(f"    share {share['index']}: {share.get('bytesWritten', 0) / 1e6:.2f} MB written, "
                      f"{share.get('estimatedBytes', 0) / 1e6:.2f} MB estimated")
    train = json.loads(kubectl("-n", namespace, "get", "job", f"{name}-train-g1", "-o", "json").stdout)
    console.print(f"  Train: one torchrun group of {train['spec'].get('completions', 1)} pods (Indexed Job, pods "
                  f"{train['status'].get('completedIndexes', '-')} succeeded), meeting at "
                  f"{name}-train-g1-0.{name}-rendezvous through the cluster DNS")
    estimate = status.get("estimate") or {}
    console.print(f"  estimate before the run: {estimate.get('gpuHours', 0) * 3600:.3g} GPU-seconds "
                  f"({estimate.get('basis')})")
    speedup = evaluation.get("speedup")  # none without a baseline in the gate
    console.print(f"  Evaluate: the current drafter measured {evaluation.get('currentTokensPerSecond', 0):.1f} tok/s; "
                  f"the new one {evaluation.get('tokensPerSecond', 0):.1f} tok/s through the gate"
                  f"{'' if speedup is None else f' (speedup {speedup:.2f}x)'}; promoted as revision "
                  f"{status.get('promotedRevision')}")
    by_category = evaluation.get("byCategory") or []
    if by_category:
        table = Table(title="Both drafters by traffic category, on the same prompts (status.evaluation.byCategory)")
        for column in ("category", "prompts", "current drafter: acceptance length", "new drafter: acceptance length"):
            table.add_column(column)
        for row in by_category:
            table.add_row(row["category"], str(row.get("prompts", "")),
                          *(f"{row[key]:.2f}" if row.get(key) is not None else "-"
                            for key in ("currentAcceptanceLength", "newAcceptanceLength")))
        console.print(table)


if __name__ == "__main__":  # pragma: no cover - run through `drafter-operator demo`
    sys.exit("run `drafter-operator demo`")
