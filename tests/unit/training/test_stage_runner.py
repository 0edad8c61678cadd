"""The stage runner: files written, servers started and stopped, commands in order, the outcome in the
termination message (real subprocesses, loopback only)."""

from __future__ import annotations

import json
import socket
import sys

from drafter_operator.training import Command, ConfigFile, Stage
from drafter_operator.training.stage_progress import PROGRESS_INTERVAL, ProgressReporter
from drafter_operator.training.stage_runner import (
    TERMINATION_MESSAGE_BYTES,
    run_stage,
    stage_plan,
    termination_message,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_stage_writes_its_files_runs_its_commands_in_order_and_reports_its_outputs(tmp_path):
    out = tmp_path / "out"
    port = free_port()
    server = Command((sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"), server=True,
                     ready_url=f"http://127.0.0.1:{port}/")
    write = Command((sys.executable, "-c",
                     "import json,os,pathlib,urllib.request; cfg=json.load(open(os.environ['CFG']));"
                     "urllib.request.urlopen('http://127.0.0.1:%d/').read();" % port +
                     "p=pathlib.Path(cfg['out']); p.mkdir(); (p/'w.bin').write_bytes(b'x'*1234)"),
                    env={"CFG": str(tmp_path / "files" / "c.json")})
    stage = Stage("Train", (server, write), (ConfigFile("c.json", {"out": str(out)}, "json"),), {"drafter": str(out)})
    log = tmp_path / "termination-log"
    plan = json.loads(json.dumps(stage_plan(stage)))  # it travels as JSON in a ConfigMap
    assert run_stage(plan, str(tmp_path / "files"), str(log)) == 0
    outcome = json.loads(log.read_text())
    assert outcome["outcome"] == "Succeeded" and outcome["stage"] == "Train"
    assert outcome["outputs"] == {"drafter": {"path": str(out), "sizeBytes": 1234}}
    # the server was stopped with the stage
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_failing_command_stops_the_stage_with_its_exit_code_and_output(tmp_path):
    fail = Command((sys.executable, "-c", "import sys; print('loading'); print('RuntimeError: CUDA missing'); sys.exit(3)"))
    never = Command((sys.executable, "-c", f"open({str(tmp_path / 'ran')!r}, 'w')"))
    log = tmp_path / "log"
    assert run_stage(stage_plan(Stage("Extract", (fail, never))), str(tmp_path / "f"), str(log)) == 3
    outcome = json.loads(log.read_text())
    assert (outcome["outcome"], outcome["reason"], outcome["exitCode"]) == ("Failed", "CommandFailed", 3)
    assert outcome["tail"].endswith("RuntimeError: CUDA missing") and not (tmp_path / "ran").exists()


def test_a_server_that_exits_before_it_answers_fails_the_stage(tmp_path):
    port = free_port()
    dead = Command((sys.executable, "-c", "raise SystemExit(7)"), server=True, ready_url=f"http://127.0.0.1:{port}/")
    log = tmp_path / "log"
    assert run_stage(stage_plan(Stage("Generate", (dead,))), str(tmp_path / "f"), str(log), ready_timeout=30) == 1
    outcome = json.loads(log.read_text())
    assert outcome["reason"] == "ServerNotReady" and "exited with code 7" in outcome["tail"]


def test_the_termination_message_fits_4_kib_and_keeps_the_end_of_the_output():
    message = termination_message({"stage": "Train", "outcome": "Failed", "tail": "x" * 10000 + "THE ERROR"})
    assert len(message.encode()) <= TERMINATION_MESSAGE_BYTES
    parsed = json.loads(message)
    assert parsed["tail"].startswith("...") and parsed["tail"].endswith("THE ERROR")


def test_options_come_from_the_configs_on_the_volume_and_the_stage_is_rendered_where_they_are(tmp_path):
    from pathlib import Path

    import yaml

    from drafter_operator.api import DrafterTraining
    from drafter_operator.training.stage_runner import resolve_options, stage_of

    body = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3.yaml").read_text())
    body["spec"].pop("baseDrafter")
    spec = DrafterTraining.model_validate(body).spec
    config = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
              "vocab_size": 163840, "num_attention_heads": 64, "intermediate_size": 18432,
              "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "rope_theta": 50000.0}
    read = {"/models/Kimi-K2.5/config.json": json.dumps(config)}
    options = resolve_options(spec, cpu=False, generation_endpoint="http://10.0.0.7:30000/v1", read_text=read.__getitem__)
    assert options.target_config["hidden_size"] == 7168 and options.base_drafter_config is None
    assert (options.chat_template, options.draft_vocab_size, options.export_to) == ("kimi-k2-instruct", 32000, "sglang")
    assert options.generation_endpoint == "http://10.0.0.7:30000/v1"
    train = stage_of(spec, "Train", options)
    assert train.name == "Train" and train.commands
    try:
        stage_of(spec, "Evaluate", options)
    except ValueError as exc:
        assert "not part of this training" in str(exc)
    else:
        raise AssertionError("an unknown stage must be refused")


def test_run_stage_refuses_a_stage_it_cannot_render_with_the_reason_in_the_termination_message(tmp_path):
    from pathlib import Path

    import yaml

    from drafter_operator.cli import main

    body = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3.yaml").read_text())
    body["spec"].pop("baseDrafter")  # a hub id: never looked up from a unit test
    spec_file = tmp_path / "training.json"
    spec_file.write_text(json.dumps(body["spec"]))
    log = tmp_path / "termination-log"
    # the target's config.json is not on this machine's /models: the stage cannot be rendered here
    code = main(["run-stage", "--training", str(spec_file), "--stage", "Train", "--termination-log", str(log),
                 "--files", str(tmp_path / "files")])
    outcome = json.loads(log.read_text())
    assert code == 2 and outcome["reason"] == "RenderFailed" and "config.json" in outcome["tail"]


TQDM_LIKE = r'''
import pathlib, sys, time
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
print("Loading weights: 100%|##########| 39/39 [00:00<00:00, 100.00it/s]", flush=True)
for i in range(1, 7):
    time.sleep(0.05)
    (out / f"hs_{i}.bin").write_bytes(b"x" * 1000)
    # tqdm off a terminal: carriage-return updates, no newline until it closes
    sys.stderr.write(f"\r{100 * i // 6:3d}%|##        | {i}/6 [00:00<00:00, 20.00it/s]"); sys.stderr.flush()
sys.stderr.write("\n")
'''


def progress_lines(text: str) -> list[dict]:
    return [json.loads(line[len("drafter-progress "):]) for line in text.splitlines()
            if line.startswith("drafter-progress ")]


def test_the_runner_prints_progress_lines_from_its_commands_output(tmp_path, capsys):
    out = tmp_path / "hidden_states"
    stage = Stage("Extract", (Command((sys.executable, "-c", TQDM_LIKE, str(out))),), outputs={"hiddenStates": str(out)})
    plan = stage_plan(stage)
    lines: list[str] = []
    # every change reported (interval 0): what the throttle lets through is tested below
    reporter = ProgressReporter(plan, write=lines.append, interval=0.0)
    log = tmp_path / "termination-log"
    assert run_stage(plan, str(tmp_path / "files"), str(log), reporter=reporter) == 0
    records = progress_lines("\n".join(lines))
    assert records[0]["stage"] == "Extract" and records[0]["summary"] == "Extract running"
    done = [r["samplesDone"] for r in records if "samplesDone" in r]
    assert done == sorted(done) and set(done) >= {1, 6} and len(set(done)) >= 3  # the \r updates, one by one
    assert all(r.get("samplesTotal") == 6 for r in records if "samplesDone" in r)  # not the 39/39 loading bar
    assert max(r.get("bytesWritten", 0) for r in records) == 6000
    last = records[-1]
    assert (last["outcome"], last["percent"], last["etaSeconds"], last["summary"]) == ("Succeeded", 100.0, 0, "6/6 samples")
    # the termination message carries the last progress, and the command's output still went to ours
    assert json.loads(log.read_text())["progress"] == last
    assert "6/6 [00:00" in capsys.readouterr().out


def test_progress_lines_go_to_stdout_at_the_start_and_the_end_and_no_more_often_than_the_interval(tmp_path, capsys):
    out = tmp_path / "hidden_states"
    stage = Stage("Extract", (Command((sys.executable, "-c", TQDM_LIKE, str(out))),), outputs={"hiddenStates": str(out)})
    assert run_stage(stage_plan(stage), str(tmp_path / "files"), str(tmp_path / "log")) == 0
    records = progress_lines(capsys.readouterr().out)
    # the command takes well under PROGRESS_INTERVAL: its start and its end only
    assert PROGRESS_INTERVAL >= 5 and len(records) == 2
    assert "samplesDone" not in records[0] and records[1]["samplesDone"] == 6 and records[1]["bytesWritten"] == 6000


def test_a_failing_stage_ends_with_its_progress_so_far(tmp_path):
    script = "import sys; print('hf_hidden_states: extracted 3/10 samples', flush=True); sys.exit(4)"
    plan = stage_plan(Stage("Extract", (Command((sys.executable, "-c", script)),)))
    lines: list[str] = []
    log = tmp_path / "log"
    assert run_stage(plan, str(tmp_path / "f"), str(log), reporter=ProgressReporter(plan, write=lines.append)) == 4
    progress = json.loads(log.read_text())["progress"]
    assert (progress["outcome"], progress["samplesDone"], progress["samplesTotal"]) == ("Failed", 3, 10)
    assert progress["percent"] == 30.0 and progress_lines("\n".join(lines))[-1] == progress


def test_a_silent_command_still_reports_its_outputs_growing(tmp_path):
    out = tmp_path / "out"
    script = ("import pathlib, sys, time; p = pathlib.Path(sys.argv[1]); p.mkdir();"
              "(p / 'a').write_bytes(b'x' * 500); time.sleep(2.5)")
    plan = stage_plan(Stage("Extract", (Command((sys.executable, "-c", script, str(out))),), outputs={"h": str(out)}))
    lines: list[str] = []
    assert run_stage(plan, str(tmp_path / "f"), str(tmp_path / "log"),
                     reporter=ProgressReporter(plan, write=lines.append, interval=0.5)) == 0
    records = progress_lines("\n".join(lines))
    # no output at all, yet a line before the end shows the bytes written (the runner ticks while it waits)
    assert any(r.get("bytesWritten") == 500 and "outcome" not in r for r in records)
