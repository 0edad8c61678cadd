"""Run one rendered DrafterTraining stage inside its Job container: `drafter-operator run-stage PLAN`.

The stage's plan (``stage_plan``: its commands and config files, rendered by ``training.render``) is
mounted from a ConfigMap. The runner writes the files, starts the stage's server commands in the
background and waits until each answers, runs the other commands in order with their output on its
own, and stops the servers at the end. What the controller reads back is the container's
termination message (at most 4 KiB): a JSON line with the stage, its outcome, the sizes of its
outputs, or the failing command with the end of its output, and the stage's last progress.

Train first makes its checkpoint directory this run's and finds the checkpoint to resume from
(``train_resume``, training/checkpoints.py): a Train started again after a disruption or Kueue's
preemption goes on from there, and its progress lines say from which step.

While the stage runs, its commands' output goes through training/progress.py and the runner prints
``drafter-progress {json}`` lines (stage_progress.py; docs/training.md, "Progress") that the operator reads from the
pod's log tail: at the start, when the progress changes (at most every PROGRESS_INTERVAL seconds),
and at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

from drafter_operator.container_paths import from_environment, remap
from drafter_operator.training import (RenderOptions, Stage, TrainingPaths, checkpoints, export, render, shards,
                                      train_directory)
from drafter_operator.training.inputs import stage_inputs
from drafter_operator.training.torchrun import Rendezvous
from drafter_operator.training.hidden_state_size import hidden_states_estimate
from drafter_operator.training.cost import run_cost
from drafter_operator.training.stage_progress import ProgressReporter, tree_bytes, where_outputs_are

ADAPTERS_DIR = Path(__file__).resolve().parent / "adapters"

#: The termination message of a container holds at most 4096 bytes.
TERMINATION_MESSAGE_BYTES = 4096
#: Output lines of a failing command quoted in its termination message.
TAIL_LINES = 30


def stage_plan(stage: Stage) -> dict:
    """The JSON a stage's Job runs (pure): its commands and files, as ``run_stage`` reads them."""
    plan = {
        "stage": stage.name,
        "files": [{"name": f.name, "text": f.text()} for f in stage.files],
        "commands": [{"argv": list(c.argv), "env": dict(c.env), "server": c.server, "readyUrl": c.ready_url}
                     for c in stage.commands],
        "outputs": dict(stage.outputs),
    }
    if stage.publish is not None:
        publish = stage.publish
        plan["publish"] = {"path": publish.path, "staging": publish.staging, "overwrite": publish.overwrite,
                           "tag": publish.tag}
    return plan


def termination_message(payload: Mapping) -> str:
    """One JSON object within the 4 KiB limit: a long ``tail`` is cut from its start."""
    text = json.dumps(payload, separators=(",", ":"))
    if len(text.encode()) <= TERMINATION_MESSAGE_BYTES or "tail" not in payload:
        return text[:TERMINATION_MESSAGE_BYTES]
    tail = payload["tail"]
    excess = len(text.encode()) - TERMINATION_MESSAGE_BYTES + 3
    return json.dumps({**payload, "tail": "..." + tail[excess:]}, separators=(",", ":"))[:TERMINATION_MESSAGE_BYTES]


def free_loopback_port() -> int:
    """A port nothing listens on at 127.0.0.1 now, for the stage's own server (render, hidden states).

    Not a fixed port: in a pod of its own, 127.0.0.1 is private and any port would do, but pods that share a
    network namespace (``hostNetwork``, common for RDMA training nodes; every pod of the local cluster) would
    otherwise meet another stage's server on it and talk to that one.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url: str) -> bool:
    """Whether something already answers ``url`` (with any HTTP status)."""
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def wait_until_ready(url: str, server: subprocess.Popen, timeout: float, sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> str | None:
    """None once ``url`` answers 200; else why not (the server exited, or the timeout passed)."""
    deadline = clock() + timeout
    while clock() < deadline:
        if server.poll() is not None:
            return f"the server exited with code {server.returncode} before {url} answered"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return None
        except (urllib.error.URLError, OSError):
            pass
        sleep(1.0)
    return f"{url} did not answer within {timeout:.0f} s"


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _run(argv: list[str], env: Mapping[str, str], reporter: ProgressReporter | None = None) -> tuple[int, str]:
    """Run one command with its output streamed to ours; its exit code and the end of its output.

    The output is read as text with universal newlines, so each tqdm carriage-return update arrives
    as a line of its own. A reader thread lets the reporter also tick while the command is silent
    (its outputs may still be growing).
    """
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as process:
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                if reporter is not None:
                    reporter.tick()
                continue
            if line is None:
                break
            sys.stdout.write(line)
            sys.stdout.flush()  # the operator reads the pod log while the stage runs
            tail.append(line.rstrip("\n"))
            if reporter is not None:
                reporter.line(line)
        code = process.wait()
    return code, "\n".join(tail)


class StageFailed(Exception):
    """A step of the stage failed: the exit code to return and the fields of the termination message."""

    def __init__(self, code: int, **fields) -> None:
        super().__init__(fields.get("reason"))
        self.code, self.fields = code, fields


def write_files(plan: Mapping, files_dir: str) -> None:
    """The stage's config files (the plan's ``files``) into ``files_dir``, where its commands read them."""
    Path(files_dir).mkdir(parents=True, exist_ok=True)
    for file in plan.get("files") or []:
        (Path(files_dir) / file["name"]).write_text(file["text"])


def prepare_export(publish: Mapping) -> None:
    """Before any work: the output may be replaced and its staging directory is fresh (export.prepare)."""
    try:
        export.prepare(publish["path"], publish["staging"], publish["overwrite"])
    except export.ExportRefused as exc:
        raise StageFailed(1, reason=exc.reason, tail=str(exc)) from None


def run_commands(commands: list[Mapping], servers: list[subprocess.Popen], reporter: ProgressReporter | None,
                 ready_timeout: float) -> None:
    """Each command in order: a server is started (and waited for) and left running in ``servers`` for the
    commands after it; any other command must exit 0."""
    for command in commands:
        argv, env = list(command["argv"]), dict(command.get("env") or {})
        if command.get("server"):
            ready_url = command.get("readyUrl")
            if ready_url and answers(ready_url):
                # Another process holds the port: its answers would be taken for this server's.
                raise StageFailed(1, command=argv[:8], reason="ServerNotReady",
                                  tail=f"{ready_url} answers before the stage's server started: another process "
                                       "listens on its port")
            server = subprocess.Popen(argv, env={**os.environ, **env})
            servers.append(server)
            problem = wait_until_ready(ready_url, server, ready_timeout) if ready_url else None
            if problem:
                raise StageFailed(1, command=argv[:8], reason="ServerNotReady", tail=problem)
            continue
        code, tail = _run(argv, env, reporter)
        if code != 0:
            # A client fails in its own words when its server died under it; say that too (last: a long tail
            # is cut from its start), it is the cause.
            gone = [f"the stage's server ({' '.join(map(str, server.args[:4]))} ...) exited with code "
                    f"{server.returncode}" for server in servers if server.poll() is not None]
            raise StageFailed(code, command=argv[:8], exitCode=code, reason="CommandFailed",
                              tail="\n".join([tail, *gone]))


def publish_output(publish: Mapping) -> str:
    """Rename the staging directory into place (export.publish); the published directory's digest."""
    try:
        return export.publish(publish["path"], publish["staging"], publish["overwrite"], publish["tag"])
    except (export.ExportRefused, OSError) as exc:
        raise StageFailed(1, reason="PublishFailed", tail=str(exc)) from None


def output_report(plan: Mapping, publish: Mapping | None, digest: str | None) -> dict:
    """Each output's path and size; the published one carries the digest too (the operator copies it into
    status.artifacts, Export's entry, contentDigest, where Promote reads it)."""
    where = where_outputs_are(plan)
    outputs = {name: {"path": path, "sizeBytes": tree_bytes(where[name])} for name, path in (plan.get("outputs") or {}).items()}
    if digest is not None:
        for output in outputs.values():
            if output["path"] == publish.get("reportedPath", publish["path"]):
                output["contentDigest"] = digest
    return outputs


def stop_servers(servers: list[subprocess.Popen], grace: float = 30) -> None:
    """Terminate every server, then kill any still running after ``grace`` seconds."""
    for server in servers:
        server.terminate()
    for server in servers:
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            server.kill()


def run_stage(plan: Mapping, files_dir: str, termination_log: str, ready_timeout: float = 900.0,
              reporter: ProgressReporter | None = None) -> int:
    """Run ``plan`` (``stage_plan``'s JSON); write the outcome to ``termination_log``; return the exit code."""
    write_files(plan, files_dir)
    reporter = reporter or ProgressReporter(plan, write=lambda text: print(text, flush=True))
    reporter.begin()
    servers: list[subprocess.Popen] = []
    started = time.monotonic()
    outcome: dict = {"stage": plan["stage"]}
    publish = plan.get("publishOnHost") or plan.get("publish")
    try:
        if publish:
            prepare_export(publish)
        run_commands(plan.get("commands") or [], servers, reporter, ready_timeout)
        digest = publish_output(publish) if publish else None
        outputs = output_report(plan, publish, digest)
        if digest is not None:
            # The published directory's digest (export.DIGEST_FILE holds it too).
            outcome["contentDigest"] = digest
        outcome.update(outcome="Succeeded", outputs=outputs)
        return 0
    except StageFailed as failed:
        outcome.update(outcome="Failed", **failed.fields)
        return failed.code
    finally:
        stop_servers(servers)
        outcome["seconds"] = round(time.monotonic() - started, 1)
        outcome["progress"] = reporter.end(outcome.get("outcome", "Failed"))
        Path(termination_log).parent.mkdir(parents=True, exist_ok=True)
        Path(termination_log).write_text(termination_message(outcome))


def model_config(ref: str, read_text: Callable[[str], str]) -> dict | None:
    """A model's config.json as the stage container sees it: a path on the model volume, or a hub id
    read through the hub cache (HF_HOME) by huggingface_hub, which the trainer image carries."""
    if ref.startswith("/"):
        return json.loads(read_text(f"{ref.rstrip('/')}/config.json"))
    from huggingface_hub import hf_hub_download  # only in the trainer image

    return json.loads(Path(hf_hub_download(ref, "config.json")).read_text())


def resolve_options(spec, *, cpu: bool, generation_endpoint: str | None = None, generation: int = 1,
                    read_text: Callable[[str], str] = lambda path: Path(path).read_text()) -> RenderOptions:
    """The render options: the spec's choices, and what only the stage container can know, the target's
    (and base drafter's) config.json from the volumes. The operator cannot read them; rendering happens
    where they are."""
    target = model_config(spec.target.model, read_text)  # first: a missing target fails before any hub request
    base = model_config(spec.base_drafter, read_text) if spec.base_drafter else None
    return RenderOptions(cpu=cpu, chat_template=spec.data.chat_template, draft_vocab_size=spec.train.draft_vocab_size,
                         export_to=spec.output.format, target_config=target, base_drafter_config=base,
                         generation_endpoint=generation_endpoint, generation=generation)


def stage_of(spec, name: str, options: RenderOptions, paths: TrainingPaths = TrainingPaths()) -> Stage:
    """The stage ``name`` of the spec's rendered pipeline; ValueError when the spec has no such stage."""
    stages = {stage.name: stage for stage in render(spec, paths, options)}
    if name not in stages:
        raise ValueError(f"stage {name!r} is not part of this training: it has {', '.join(stages)}")
    return stages[name]


def train_resume(spec, training_uid: str | None, path_map: Mapping[str, str],
                 paths: TrainingPaths = TrainingPaths()) -> checkpoints.Checkpoint | None:
    """Train's checkpoint directory made this run's (the training's uid and what Train reads: another run's
    checkpoints are removed, never resumed), and the checkpoint to resume from in it (None: start afresh)."""
    where = Path(remap(train_directory(spec, paths), path_map))
    run = checkpoints.run_id(training_uid, stage_inputs(spec.to_json(), "Train"))
    return checkpoints.claim_run(spec.framework, where, run)


def resumed_from(resume: checkpoints.Checkpoint | None) -> dict | None:
    """The plan's ``resumedFrom`` (progress.start reads it): the checkpoint's step and epoch, where known."""
    if resume is None:
        return None
    return {k: v for k, v in {"checkpoint": resume.name, "step": resume.step, "epoch": resume.epoch}.items()
            if v is not None}


def register(subparsers) -> None:
    """``drafter-operator run-stage``: what a DrafterTraining stage Job runs."""
    parser = subparsers.add_parser("run-stage", help="run one DrafterTraining stage (inside its Job)")
    parser.add_argument("--training", required=True, help="the DrafterTraining spec as JSON (mounted from a ConfigMap)")
    parser.add_argument("--stage", required=True, help="Generate, Extract, Train or Export")
    parser.add_argument("--cpu", action="store_true", help="the substitutions a machine without a GPU needs")
    parser.add_argument("--generation-endpoint", help="OpenAI base URL of the engine serving the target (spec.data.generation)")
    parser.add_argument("--generation", type=int, default=1,
                        help="the DrafterTraining's spec generation (names Export's staging directory)")
    parser.add_argument("--training-uid", help="the DrafterTraining's uid: what names this run's share manifests")
    parser.add_argument("--rendezvous-endpoint", help="host:port where Train's pods across nodes meet (torchrun c10d)")
    parser.add_argument("--rendezvous-id", default="none", help="the run's id at that rendezvous (torchrun's default)")
    parser.add_argument("--files", default=TrainingPaths().files, help="where the stage's config files are written")
    parser.add_argument("--termination-log", default="/dev/termination-log")
    parser.set_defaults(handler=_main)


def on_host(plan: Mapping, path_map: Mapping[str, str]) -> dict:
    """``plan`` with container paths mapped to where they are (container_paths.py, the adapters)."""
    if not path_map:
        return dict(plan)
    return {
        **plan,
        "files": [{**f, "text": remap(f["text"], path_map)} for f in plan.get("files") or []],
        "commands": [{**c, "argv": [remap(a, path_map) for a in c["argv"]],
                      "env": {k: remap(v, path_map) for k, v in (c.get("env") or {}).items()}}
                     for c in plan.get("commands") or []],
        # Reported as the container sees them; measured where they are.
        "outputsOnHost": {k: remap(v, path_map) for k, v in (plan.get("outputs") or {}).items()},
        **({"publishOnHost": {**plan["publish"], "path": remap(plan["publish"]["path"], path_map),
                              "staging": remap(plan["publish"]["staging"], path_map),
                              "reportedPath": plan["publish"]["path"]}} if plan.get("publish") else {}),
    }


def _main(args, _extra=()) -> int:
    from drafter_operator.api.training import DrafterTrainingSpec

    spec = DrafterTrainingSpec.model_validate(json.loads(Path(args.training).read_text()))
    path_map = from_environment()
    # Defaults are container paths too (the runtime mapped only what the command line spelled out).
    args.termination_log, args.files = remap(args.termination_log, path_map), remap(args.files, path_map)
    try:
        shard = shards.extract_shard(spec, args.stage, os.environ)
        options = resolve_options(spec, cpu=args.cpu, generation_endpoint=args.generation_endpoint,
                                  generation=args.generation,
                                  read_text=lambda path: Path(remap(path, path_map)).read_text())
        meet = Rendezvous(args.rendezvous_endpoint, args.rendezvous_id) if args.rendezvous_endpoint else None
        options = dataclasses.replace(options, shard=shard, rendezvous=meet, port=free_loopback_port())
        if args.stage == "Train":
            options = dataclasses.replace(options, resume=train_resume(spec, args.training_uid, path_map))
        stage = stage_of(spec, args.stage, options)
    except (OSError, ValueError) as exc:  # a missing config.json, an unknown stage, a spec the renderer refuses
        Path(args.termination_log).write_text(termination_message(
            {"stage": args.stage, "outcome": "Failed", "reason": "RenderFailed", "tail": str(exc)}))
        print(f"run-stage: {exc}", file=sys.stderr)
        return 2
    on_volume = remap(spec.output.path, path_map)
    problem = export.parent_problem(on_volume) if stage.publish is None else None
    if problem:  # said as the container sees it
        problem = problem.replace(on_volume.rsplit("/", 1)[0], spec.output.path.rsplit("/", 1)[0])
    refused = output_refusal(spec, stage, os.path.lexists(on_volume), problem)
    if refused:
        reason, refused = refused
        Path(args.termination_log).write_text(termination_message(
            {"stage": args.stage, "outcome": "Failed", "reason": reason, "tail": refused}))
        print(f"run-stage: {refused}", file=sys.stderr)
        return 1
    # The adapters ship inside this package: wherever run-stage is installed, they are beside it.
    installed = {**path_map, TrainingPaths().adapters: str(ADAPTERS_DIR)}
    plan = on_host(stage_plan(stage), installed)
    if options.resume is not None:
        plan["resumedFrom"] = resumed_from(options.resume)
        print(f"run-stage: Train resumes from its checkpoint {options.resume.name}", flush=True)
    if stage.name == "Extract" and options.target_config:
        plan["estimatedBytes"] = hidden_states_estimate(spec, options.target_config)
    cost = run_cost(spec, options.target_config) if options.target_config else None
    if cost is not None:  # every stage says it, so status has it from the first stage on
        # Three significant digits: a tiny run's fraction of a second is not rounded away to nothing.
        plan["cost"] = {"gpuSeconds": {k: float(f"{v:.3g}") for k, v in cost.gpu_seconds.items()},
                        "tokens": cost.tokens, "basis": cost.basis}
    if shard is None and stage.name == "Extract" and spec.framework == "speculators":
        # One pod captures every sample: the whole run is its one share, with the same fresh start.
        shards.start_share(plan["outputsOnHost"]["hiddenStates"], (0, 1), spec.data.num_samples,
                           shards.run_name(args.generation, args.training_uid))
    if shard is None:
        return run_stage(plan, args.files, args.termination_log)
    return run_shard(plan, shard, spec.data.num_samples, plan["outputsOnHost"]["hiddenStates"], args)


def run_shard(plan: Mapping, shard: tuple[int, int], total: int, hidden_states: str, args) -> int:
    """One share of a data-parallel Extract: skipped when its manifest says it finished (a restarted or replaced
    pod), else run and, once it succeeded, recorded in its manifest."""
    run = shards.run_name(args.generation, getattr(args, "training_uid", None))
    done = shards.finished(hidden_states, shard, run)
    if done is not None:
        print(f"run-stage: shard {shard[0]} of {shard[1]} finished before ({done.get('finished')}): not captured again",
              flush=True)
        Path(args.termination_log).write_text(termination_message(
            {"stage": plan["stage"], "outcome": "Succeeded", "shard": done}))
        return 0
    started = time.monotonic()
    stale = shards.start_share(hidden_states, shard, total, run)
    if stale:
        print(f"run-stage: removed {stale} hidden-state files of shard {shard[0]} that an earlier run left", flush=True)
    code = run_stage(plan, args.files, args.termination_log)
    if code == 0:
        record = shards.manifest(shard, total, datetime.now(timezone.utc), time.monotonic() - started,
                                 shards.share_bytes(hidden_states, shard, total), plan.get("estimatedBytes"))
        path = Path(shards.manifest_path(hidden_states, shard, run))
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(record))
        partial.replace(path)  # a share is finished once its whole manifest is there
        # The outcome says it too, for status.hiddenStates.shardSizes.
        outcome = json.loads(Path(args.termination_log).read_text())
        Path(args.termination_log).write_text(termination_message({**outcome, "shard": record}))
    return code


def output_refusal(spec, stage: Stage, output_exists: bool,
                   parent_problem: str | None = None) -> tuple[str, str] | None:
    """Why a stage before Export must not start: the output exists and Export would refuse to replace it, or
    Export could not write beside it, so the run fails at once rather than after hours of work (Export
    itself checks again: export.prepare). (reason, message) or None."""
    if stage.publish is not None:
        return None
    if output_exists and not spec.output.overwrite:
        return "OutputExists", export.refusal(spec.output.path)
    return ("OutputParentNotWritable", parent_problem) if parent_problem else None
