"""The training's cost estimate (training/cost.py) and how it reaches status.estimate (pure)."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.controllers.training.observe import run_estimate
from drafter_operator.training import cost, progress
from drafter_testbed import tiny_target
from tests.support.target_configs import KIMI

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3.yaml"
MEASURED = json.loads((Path(__file__).resolve().parents[3] / "bench" / "gpu_training_h200.json").read_text())
T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
DEEPSEEK_V3 = {**KIMI["text_config"], "num_attention_heads": 128, "n_routed_experts": 256,
               "first_k_dense_replace": 3, "vocab_size": 129280}


def seed_spec(**changes) -> DrafterTrainingSpec:
    raw = yaml.safe_load(EXAMPLE.read_text())["spec"]
    for section, values in changes.items():
        raw[section] = {**raw.get(section, {}), **values}
    return DrafterTrainingSpec.model_validate(raw)


def test_active_parameters_match_the_published_activated_counts():
    # Kimi-K2: "32B activated"; DeepSeek-V3: "37B activated", which counts the 0.93B embedding a forward only looks up.
    assert cost.active_parameters(KIMI) / 1e9 == pytest.approx(32, rel=0.03)
    assert (cost.active_parameters(DEEPSEEK_V3) + 7168 * 129280) / 1e9 == pytest.approx(37, rel=0.03)


def test_a_dense_target_counts_every_layer_and_the_head():
    c = tiny_target.target_config("standin")
    per_layer = 4 * 1024 * 16 * 64 + 3 * 1024 * 2816
    assert cost.active_parameters(c) == 24 * per_layer + 1024 * 4096


def test_the_extract_calibration_is_the_measured_capture_on_the_kimi_width_stand_in():
    wide = tiny_target.target_config("wide")
    measured = MEASURED["wide_2_4B_kimi_width"]["specforge-eagle3"]["extract"]["steady_tokens_per_second"]
    assert cost.extract_rate(wide) == pytest.approx(measured, rel=1e-3)
    # Kimi-K2.5 at ~13x the active parameters: the same FLOP rate, ~13x fewer tokens; the seed's SGLang extraction
    # measured 396 tok/s per GPU (3,165 on 8), within a factor of 1.5 of the estimate.
    assert 396 / 1.5 < cost.extract_rate(KIMI) < 396 * 1.5


@pytest.mark.parametrize("framework", ["specforge", "speculators"])
def test_train_rates_go_through_both_measurements(framework):
    for width, key in ((1024, "standin_315M"), (7168, "wide_2_4B_kimi_width")):
        measured = MEASURED[key][f"{framework}-eagle3"]["train"]["steady_tokens_per_second"]
        assert cost.train_rate(framework, width) == pytest.approx(measured, rel=1e-3)


@given(st.sampled_from(["specforge", "speculators"]), st.integers(64, 32768), st.integers(1, 4096))
def test_a_wider_drafter_never_trains_faster(framework, width, more):
    assert cost.train_rate(framework, width + more) < cost.train_rate(framework, width)


def test_the_seeds_run_costs_what_the_rates_say():
    spec = seed_spec()
    estimate = cost.run_cost(spec, KIMI)
    tokens = 10000 * 4096
    assert estimate.tokens == tokens
    assert estimate.gpu_seconds["Extract"] == pytest.approx(tokens / cost.extract_rate(KIMI))
    assert estimate.gpu_seconds["Train"] == pytest.approx(tokens * 5 / 3479.0)
    assert estimate.gpu_hours == pytest.approx(sum(estimate.gpu_seconds.values()) / 3600)
    assert "10,000 samples" in estimate.basis and "5 epochs" in estimate.basis and "31.5B" in estimate.basis


def test_no_estimate_without_the_targets_shape():
    assert cost.run_cost(seed_spec(), {"architectures": ["X"]}) is None


@settings(max_examples=60)
@given(st.integers(1, 10**6), st.integers(1, 20), st.sampled_from(range(8, 65, 8)), st.integers(1, 10**6),
       st.integers(0, 19))
def test_more_samples_or_epochs_never_cost_less_and_gpus_do_not_change_the_gpu_hours(samples, epochs, gpus, extra,
                                                                                       more_epochs):
    base = cost.run_cost(seed_spec(data={"numSamples": samples}, train={"epochs": epochs},
                                   resources={"gpus": gpus}), KIMI)
    bigger = cost.run_cost(seed_spec(data={"numSamples": samples + extra}, train={"epochs": min(20, epochs + more_epochs)},
                                     resources={"gpus": gpus}), KIMI)
    other_gpus = cost.run_cost(seed_spec(data={"numSamples": samples}, train={"epochs": epochs},
                                         resources={"gpus": 8 + gpus % 64}), KIMI)  # TP 8 divides both
    assert bigger.gpu_hours > base.gpu_hours
    assert other_gpus.gpu_hours == pytest.approx(base.gpu_hours)


def _estimate(stage: str, log: str | None, status: dict, gpus: int) -> dict | None:
    latest = progress.latest_status(log, T0) if log else None
    return run_estimate(stage, latest, T0, status, gpus)


def _line(stage: str, **fields) -> str:
    return progress.format_line({"stage": stage, "updated": "2026-12-01T12:00:00Z", **fields}) + "\n"


COST = {"gpuSeconds": {"Extract": 7200.0, "Train": 14400.0}, "tokens": 1000, "basis": "b"}


def _finish(seconds: int) -> str:
    return progress.rfc3339(T0 + dt.timedelta(seconds=seconds))


def test_the_finish_time_is_the_running_stages_eta_plus_the_later_stages_at_the_runs_gpus():
    # Before Extract: both stages ahead, 8 GPUs.
    estimate = _estimate("Generate", _line("Generate", cost=COST), {}, 8)
    assert estimate == {"gpuHours": 6.0, "basis": "b", "finishTime": _finish(900 + 1800)}
    # Extract without a rate yet: its own estimate; with one: its ETA.
    assert _estimate("Extract", _line("Extract", cost=COST), {}, 8)["finishTime"] == _finish(2700)
    assert _estimate("Extract", _line("Extract", cost=COST, etaSeconds=100), {}, 8)["finishTime"] == \
        _finish(100 + 1800)
    assert _estimate("Train", _line("Train", cost=COST, etaSeconds=60), {}, 8)["finishTime"] == _finish(60)
    assert _estimate("Export", _line("Export", cost=COST), {}, 8)["finishTime"] == _finish(0)


def test_without_a_line_of_this_stage_the_recorded_estimate_stays():
    recorded = {"estimate": {"gpuHours": 1.0, "finishTime": "2026-12-01T13:00:00Z", "basis": "b"}}
    assert _estimate("Train", None, recorded, 8) == recorded["estimate"]
    assert _estimate("Train", _line("Extract", cost=COST), recorded, 8) == recorded["estimate"]
    assert _estimate("Train", _line("Train"), {}, 8) is None


@pytest.mark.parametrize("bad", [{"gpuSeconds": {"Train": -1}, "tokens": 1, "basis": "b"},
                                 {"gpuSeconds": {"Train": "NaN"}, "tokens": 1, "basis": "b"},
                                 {"gpuSeconds": {"Train": 1}, "tokens": -5, "basis": "b"},
                                 {"gpuSeconds": [], "tokens": 1, "basis": "b"}, "text"])
def test_a_malformed_cost_is_dropped_never_guessed(bad):
    assert progress.latest_status(_line("Train", cost=bad), T0).cost is None


def test_the_cost_survives_the_progress_line():
    state = progress.start({"stage": "Train"})
    line = progress.format_line(progress.record(state, "Train", T0, cost=COST))
    assert progress.latest_status(line, T0).cost == COST
    assert math.isfinite(COST["gpuSeconds"]["Train"])
