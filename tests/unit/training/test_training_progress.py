"""training/progress.py: the frameworks' real output (tests/unit/data/training_logs/) parsed into
progress, the drafter-progress line, and what the operator reads back from a log tail."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.training import TrainingProgress
from drafter_operator.training import progress as p

LOGS = Path(__file__).parents[1] / "data" / "training_logs"
AT = datetime(2026, 12, 1, 3, 24, 0, tzinfo=timezone.utc)


def raw(name: str) -> str:
    """The file as written, carriage returns kept (read_text would turn them into newlines)."""
    return LOGS.joinpath(name).read_bytes().decode()


def replay(name: str, stage: str, state: p.Progress | None = None) -> tuple[p.Progress, list[p.Progress]]:
    """Feed a captured log one read at a time (as the runner does), one second apart; every state seen."""
    state = state or p.Progress()
    seen = []
    for i, line in enumerate(raw(name).split("\n")):
        state = p.advance(state, line, stage, float(i))
        seen.append(state)
    return state, seen


@pytest.mark.parametrize("name,stage", [
    ("specforge-extract-cpu.log", "Extract"),
    ("speculators-extract-cpu.log", "Extract"),
    ("tqdm-generate-offline-data.log", "Extract"),
    ("speculators-prepare-data.log", "Generate"),
    ("tqdm-regenerate-responses.log", "Generate"),
])
def test_sample_stages_count_samples_from_real_output(name, stage):
    final, seen = replay(name, stage)
    assert (final.samples_done, final.samples_total) == (24, 24)
    assert final.summary() == "24/24 samples" and final.percent() == 100.0
    done = [s.samples_done for s in seen if s.samples_done is not None]
    assert done == sorted(done)  # never backwards
    # the model-loading, dataset-building and vocabulary bars of the same logs are not samples
    assert all(s.samples_total in (None, 24) for s in seen)


def test_the_extract_adapter_counts_while_the_model_loading_bar_does_not():
    _final, seen = replay("specforge-extract-cpu.log", "Extract")
    assert seen[0].samples_done is None  # "Loading weights ... 39/39" and "Map ... 24/24" come first
    assert [s.samples_done for s in seen if s.samples_done is not None][:3] == [1, 2, 3]


def test_tqdm_carriage_return_updates_are_each_an_update():
    text = raw("tqdm-generate-offline-data.log")
    assert "\r" in text and text.count("\n") <= 1  # one "line" holding every update
    states = []
    state = p.Progress()
    for i, update in enumerate(text.split("\r")):
        state = p.advance(state, update, "Extract", float(i))
        states.append(state.samples_done)
    assert [n for n in states if n is not None] == [0, 5, 10, 15, 20, 24]
    # the same text in one piece ends in the same place
    assert p.advance(p.Progress(), text, "Extract", 0.0).samples_done == 24


def test_specforge_train_gives_step_and_loss_and_the_epochs_come_from_its_config():
    plan = {"stage": "Train", "commands": [{"argv": ["python", "eager_loss.py", "train", "--config", "run.yaml"]}],
            "files": [{"name": "specforge-train.yaml", "text": "training:\n  num_epochs: 2\n  batch_size: 1\n"}]}
    start = p.start(plan)
    assert start.epochs == 2
    final, seen = replay("specforge-train.log", "Train", start)
    assert [s.step for s in seen if s.step is not None][-1] == 40
    assert final.loss == pytest.approx(0.2830731272697449)
    assert final.steps is None and final.percent() is None  # SpecForge prints no total off a terminal
    assert final.summary() == "step 40 loss 0.283"
    assert final.rate() and final.rate() > 0  # steps per second of the replay clock


def test_speculators_train_gives_epoch_step_steps_and_loss():
    final, seen = replay("speculators-train.log", "Train")
    assert (final.epoch, final.epochs, final.step, final.loss) == (2, 2, 9, 1.188)
    assert final.steps == 9 and final.percent() == 100.0
    assert final.summary() == "epoch 2/2 step 9/9 loss 1.19"
    first_epoch = [s for s in seen if s.epoch == 1]
    assert first_epoch[0].percent() == 0.0 and first_epoch[0].steps is None
    # after the first epoch's bar (4 steps), 4 + 4 per epoch left; the validation bar (1/1) is no step count
    after_bar = next(s for s in seen if s.steps is not None)
    assert (after_bar.step, after_bar.steps) == (4, 8)
    assert all(s.steps in (None, 8, 9) for s in seen)
    assert all(s.steps is None or s.step <= s.steps for s in seen if s.step is not None)


def test_specforge_export_reports_its_shards():
    final, _ = replay("specforge-export.log", "Export")
    assert (final.shards_done, final.shards_total, final.percent()) == (1, 1, 100.0)
    assert final.summary() == "shards 1/1"


def test_bars_of_other_stages_are_not_taken_for_progress():
    bar = "Map (num_proc=1): 50%|#####     | 12/24 [00:00<00:00, 100 examples/s]"
    assert p.advance(p.Progress(), bar, "Generate", 0.0).samples_done == 12
    for stage in ("Extract", "Train", "Export"):
        assert p.advance(p.Progress(), bar, stage, 0.0) == p.Progress()


def test_our_regenerate_client_counts_samples_during_generate():
    # What `drafter-operator regenerate` prints (spec.data.generation) is read back as Generate's samples;
    # without it a Generate through the target's engine pod showed "Generate running" until it ended.
    import io

    from drafter_operator.training.regenerate import Progress as RegenerateProgress

    out = io.StringIO()
    printer = RegenerateProgress(0, 5, out)
    printer.report()
    for _ in range(3):
        printer.advance()
    seen = [p.advance(p.Progress(), line, "Generate", 0.0) for line in out.getvalue().splitlines()]
    assert [(s.samples_done, s.samples_total) for s in seen] == [(0, 5), (1, 5), (2, 5), (3, 5)]
    assert seen[-1].summary() == "3/5 samples"
    # the same words in another stage, or inside another line, are not Generate's samples
    assert p.advance(p.Progress(), "regenerated 3/5 samples", "Train", 0.0) == p.Progress()
    assert p.advance(p.Progress(), "WARNING regenerated 3/5 samples twice", "Generate", 0.0) == p.Progress()


def test_the_plan_gives_what_is_asked_for_before_any_output():
    generate = {"stage": "Generate", "commands": [
        {"argv": ["vllm", "launch", "render", "--max-samples", "7"], "server": True},
        {"argv": ["speculators", "prepare-data", "--max-samples", "24", "--seed", "0"]}]}
    assert p.start(generate) == p.Progress(samples_total=24)
    extract = {"stage": "Extract", "commands": [{"argv": ["python", "hf_hidden_states.py", "--num-samples", "10000"]}]}
    assert p.start(extract).samples_total == 10000
    train = {"stage": "Train", "commands": [{"argv": ["speculators", "convert", "B"]},
                                            {"argv": ["python", "-m", "speculators.train", "--epochs", "5"]}]}
    assert p.start(train) == p.Progress(epochs=5)
    assert p.start({"stage": "Train", "files": [{"name": "x.yaml", "text": ": not yaml: ["}]}) == p.Progress()
    assert p.start({"stage": "Export", "commands": [{"argv": ["cp", "-rL", "a", "b"]}]}) == p.Progress()


def test_rate_and_eta_from_the_progress_so_far():
    state = p.Progress(samples_total=100)
    for now, done in ((10.0, 0), (20.0, 10), (30.0, 20)):
        state = p.advance(state, f"hf_hidden_states: extracted {done}/100 samples", "Extract", now)
    assert state.rate() == pytest.approx(1.0)  # 20 samples in 20 s
    assert state.eta_seconds() == 80 and state.percent() == 20.0
    # a restart from fewer (a retried pod) measures afresh
    state = p.advance(state, "hf_hidden_states: extracted 5/100 samples", "Extract", 40.0)
    assert state.rate() is None and state.eta_seconds() is None


def test_the_line_round_trips_into_status_progress():
    state = p.Progress(epoch=1, epochs=5, step=40, steps=200, loss=2.3125, first=(0.0, 0), last=(20.0, 40))
    line = p.format_line(p.record(state, "Train", AT))
    assert line.startswith("drafter-progress {") and "\n" not in line
    latest = p.latest_status(f"step 39\n{line}\nsome later output\n", AT)
    assert latest.stage == "Train" and latest.bytes_written is None
    assert latest.progress == {"epoch": 1, "epochs": 5, "step": 40, "steps": 200, "loss": 2.3125, "etaSeconds": 80,
                               "percent": 20.0, "summary": "epoch 1/5 step 40/200 loss 2.31",
                               "updated": "2026-12-01T03:24:00Z"}
    TrainingProgress.model_validate(latest.progress)  # status.progress accepts it as it is
    # read 30 s later: the estimate counts from then
    assert p.latest_status(line, AT + timedelta(seconds=30)).progress["etaSeconds"] == 50


def test_the_last_good_line_wins_and_bad_fields_are_dropped():
    first = p.format_line(p.record(p.Progress(samples_done=1, samples_total=4), "Extract", AT, p.OutputBytes(written=10)))
    second = p.format_line({"stage": "Extract", "samplesDone": "three", "samplesTotal": 4, "percent": 250,
                            "bytesWritten": -1, "loss": float("nan"), "updated": "yesterday"})
    tail = "\n".join([first, second, "drafter-progress {not json", "drafter-progress [1, 2]"])
    latest = p.latest_status(tail, AT)
    assert latest.progress == {"samplesTotal": 4, "percent": 100.0, "updated": "2026-12-01T03:24:00Z"}
    assert latest.bytes_written is None
    assert p.latest_status(first, AT).bytes_written == 10
    # kubectl logs --timestamps puts the time first
    assert p.latest_status(f"2026-12-01T03:24:00.1Z {first}", AT).progress["samplesDone"] == 1
    assert p.latest_status("no progress here\r\n", AT) is None


def test_the_end_of_a_successful_stage_is_100_percent():
    record = p.record(p.Progress(), "Export", AT, outcome="Succeeded")
    assert (record["percent"], record["etaSeconds"], record["summary"]) == (100.0, 0, "Export succeeded")
    assert p.record(p.Progress(), "Export", AT, outcome="Failed")["summary"] == "Export failed"
    assert "percent" not in p.record(p.Progress(), "Export", AT, outcome="Failed")


@given(st.lists(st.text(), max_size=30), st.sampled_from(["Generate", "Extract", "Train", "Export"]))
def test_arbitrary_output_never_breaks_the_parser(lines, stage):
    state = p.Progress()
    for i, line in enumerate(lines):
        state = p.advance(state, line, stage, float(i))
    record = p.record(state, stage, AT)
    assert json.loads(p.format_line(record)[len(p.PREFIX):]) == record
    percent = state.percent()
    assert percent is None or 0.0 <= percent <= 100.0


junk_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=3), max_leaves=8)


@given(st.lists(st.text() | st.dictionaries(st.sampled_from([*p.PROGRESS_FIELDS, "bytesWritten", "stage", "x"]),
                                            junk_values, max_size=8)
                .map(lambda d: p.PREFIX + json.dumps(d)), max_size=10))
def test_arbitrary_log_tails_never_break_the_reader(lines):
    latest = p.latest_status("\n".join(lines), AT)
    if latest is not None:
        TrainingProgress.model_validate(latest.progress)
        assert latest.bytes_written is None or latest.bytes_written >= 0


@given(st.builds(p.Progress,
                 samples_done=st.none() | st.integers(0, 10**6), samples_total=st.none() | st.integers(1, 10**6),
                 epoch=st.none() | st.integers(1, 100), epochs=st.none() | st.integers(1, 100),
                 step=st.none() | st.integers(0, 10**7), steps=st.none() | st.integers(1, 10**7),
                 loss=st.none() | st.floats(-1e6, 1e6, allow_nan=False)),
       st.none() | st.integers(0, 2**50))
def test_every_record_round_trips(state, written):
    record = p.record(state, "Train", AT, p.OutputBytes(written=written))
    latest = p.latest_status("junk\n" + p.format_line(record) + "\n", AT)
    assert latest.bytes_written == written and latest.stage == "Train"
    assert latest.progress == {k: v for k, v in record.items() if k in p.PROGRESS_FIELDS}
    TrainingProgress.model_validate(latest.progress)
