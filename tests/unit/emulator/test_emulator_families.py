"""Drafter families in the emulator and the batching model: command lines, draft cost modes, draws, metrics."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.engines import speedup
from drafter_testbed.emulator import batching
from drafter_testbed.emulator.batching import Speculation, StepCosts, speculation_for
from drafter_testbed.emulator import server
from drafter_testbed.emulator.cmdline import parse_engine_command_line
from drafter_testbed.emulator.families import startup_problems
from drafter_testbed.emulator.model import Decoder, Family

COSTS = StepCosts()
VLLM = ["vllm", "serve", "/models/Kimi-K2.5"]
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Kimi-K2.5"]

acceptance = st.floats(0.0, 1.0)
ks = st.integers(1, 16)
batches = st.integers(1, 256)


# ------------------------------------------------------------------------------------ batching model

@settings(max_examples=200, deadline=None)
@given(a=acceptance, k=ks, batch=batches, cost=st.floats(0.01, 2.0))
def test_zero_draft_cost_never_loses_to_a_costly_drafter_at_equal_acceptance(a, k, batch, cost):
    costs = StepCosts(draft_cost=cost)
    lookup, chain, block = (speculation_for(m, k) for m in ("suffix", "eagle3", "dspark"))
    assert batching.speedup_at(batch, a, lookup, costs) >= batching.speedup_at(batch, a, chain, costs) - 1e-12
    assert batching.speedup_at(batch, a, lookup, costs) >= batching.speedup_at(batch, a, block, costs) - 1e-12


@settings(max_examples=200, deadline=None)
@given(k1=ks, k2=ks, method=st.sampled_from(["dflash", "dspark", "DFLASH", "DSPARK"]))
def test_a_block_drafters_cost_does_not_grow_with_k(k1, k2, method):
    # One forward per step whatever k; at a batch whose block stays under the draft knee it costs the same.
    one, other = speculation_for(method, k1), speculation_for(method, k2)
    assert one.forwards == other.forwards == 1
    assert batching.draft_ms(1, one, COSTS) == batching.draft_ms(1, other, COSTS) == COSTS.draft_cost * COSTS.target_step_ms


@settings(max_examples=200, deadline=None)
@given(k=ks, batch=batches)
def test_a_block_forward_never_costs_more_than_k_sequential_ones(k, batch):
    # Compute-bound, the block's k + 1 queries cost what k + 1 one-token forwards do: never more.
    assert batching.draft_ms(batch, speculation_for("dflash", k), COSTS) <= \
        batching.draft_ms(batch, speculation_for("eagle3", k), COSTS) * (k + 1) / k * (1 + 1e-12)
    assert batching.draft_ms(1, speculation_for("dflash", k), COSTS) <= batching.draft_ms(1, Speculation(k), COSTS)


def test_each_family_gets_its_draft_cost_mode():
    assert speculation_for("ngram", 4).forwards == speculation_for("ngramGpu", 4).forwards == 0
    assert speculation_for("NGRAM", 4).forwards == speculation_for("suffix", 24).forwards == 0
    assert speculation_for("dflash", 15).draft_width == 16 and speculation_for("dspark", 7).draft_width == 7
    for method in ("eagle3", "EAGLE", "mtp", "draft_model", "STANDALONE", "NEXTN"):
        assert speculation_for(method, 3).forwards == 3
    assert speculation_for("eagle3", 0) == batching.NO_SPECULATION


@given(a=acceptance, k=ks)
def test_a_constant_curve_is_the_iid_model(a, k):
    assert speedup.curve_acceptance_length(speedup.position_curve(a, k), k) == pytest.approx(
        speedup.mean_acceptance_length(a, k))
    assert batching.mean_length(speedup.position_curve(a, k, 0.9), k) <= speedup.mean_acceptance_length(a, k) + 1e-12


def test_a_cheaper_drafter_breaks_even_later():
    # Same acceptance, k = 7: prompt lookup > a block drafter > seven sequential forwards.
    a = 0.8
    by = {m: batching.crossover_streams(a, speculation_for(m, 7), COSTS) for m in ("suffix", "dspark", "eagle3")}
    assert by["eagle3"] < by["dspark"] < by["suffix"]


# ------------------------------------------------------------------------------------ command lines

def vllm(config: dict) -> list[str]:
    return [*VLLM, "--speculative-config", json.dumps(config)]


@pytest.mark.parametrize(("config", "method", "k"), [
    ({"method": "suffix"}, "suffix", 24),  # SP:1732-1739: the tree depth (default 24, SP:538)
    ({"method": "suffix", "suffix_decoding_max_tree_depth": 8}, "suffix", 8),
    ({"method": "suffix", "num_speculative_tokens": 5}, "suffix", 5),
    ({"method": "dspark"}, "dspark", 7),
    ({"method": "dspark", "num_speculative_tokens": 5, "enable_adaptive_verification": True}, "dspark", 5),
    ({"method": "dflash", "model": "z-lab/Kimi-DFlash-b16", "num_speculative_tokens": 15}, "dflash", 15),
    ({"model": "z-lab/Kimi-DFlash-b16", "num_speculative_tokens": 15}, "dflash", 15),
    ({"model": "deepseek-ai/dspark_qwen3_8b_block7", "num_speculative_tokens": 7}, "dspark", 7),
    ({"method": "ngram_gpu", "num_speculative_tokens": 4}, "ngram_gpu", 4),
    ({"method": "kimi_k3_mtp", "num_speculative_tokens": 1}, "mtp", 1),
    ({"method": "draft_model", "model": "/models/small-draft", "num_speculative_tokens": 3}, "draft_model", 3),
])
def test_vllm_families_resolve_like_the_engine(config, method, k):
    spec = parse_engine_command_line(vllm(config)).speculation
    assert (spec.method, spec.num_speculative_tokens) == (method, k)


@pytest.mark.parametrize(("config", "problem"), [
    ({"method": "dflash", "num_speculative_tokens": 15}, "needs a 'model'"),
    ({"method": "suffix", "suffix_decoding_min_token_prob": 1.5}, "must be in [0, 1]"),
    ({"method": "suffix", "suffix_decoding_max_spec_factor": -1}, "must be >= 0"),
    ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2}, "<="),
])
def test_vllm_post_parse_checks_refuse_at_load(config, problem):
    problems = startup_problems(parse_engine_command_line(vllm(config)))
    assert problems and problem in problems[0]


@pytest.mark.parametrize(("flags", "k", "steps", "draft_tokens"), [
    (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d"], 15, 1, 16),
    (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d", "--speculative-dflash-block-size", "8",
      "--speculative-num-steps", "4", "--speculative-eagle-topk", "2"], 7, 1, 8),
    (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d", "--speculative-num-draft-tokens", "10"],
     9, 1, 10),
    (["--speculative-algorithm", "DSPARK"], 7, 1, 8),
    (["--speculative-algorithm", "dspark", "--speculative-dspark-block-size", "5"], 5, 1, 6),
    (["--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", "4"], 3, 1, 4),
    (["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "d"], 3, 3, 4),
    (["--speculative-algorithm", "FROZEN_KV_MTP", "--speculative-num-steps", "2"], 2, 2, 3),
])
def test_sglang_families_resolve_like_the_engine(flags, k, steps, draft_tokens):
    config = parse_engine_command_line([*SGLANG, *flags])
    spec = config.speculation
    assert (spec.num_speculative_tokens, spec.num_steps, spec.num_draft_tokens, spec.eagle_topk) == (k, steps, draft_tokens, 1)
    assert startup_problems(config) == []


@pytest.mark.parametrize(("flags", "problem"), [
    (["--speculative-algorithm", "DFLASH"], "needs --speculative-draft-model-path"),
    (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d", "--speculative-dflash-block-size", "8",
      "--speculative-num-draft-tokens", "6"], "they differ"),
    (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d", "--speculative-dflash-block-size", "0"],
     "to be positive"),
    (["--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5", "--speculative-num-draft-tokens", "5"],
     "must equal gamma + 1"),
    (["--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", "1"], "must be >= 2"),
    (["--speculative-algorithm", "FROZEN_KV_MTP"], "needs --speculative-num-steps"),
])
def test_sglang_accepts_at_parse_and_refuses_at_load(flags, problem):
    problems = startup_problems(parse_engine_command_line([*SGLANG, *flags]))  # the parse itself accepts
    assert problems and problem in problems[0]


# ------------------------------------------------------------------------------------ draws

def decoder(k: int, a: float, family: Family, method: str, seed: int = 7) -> Decoder:
    return Decoder(k, a, target_step_ms=10.0, draft_cost=0.3, rng=random.Random(seed), method=method, family=family)


@pytest.mark.parametrize(("k", "a", "family", "method"), [
    (7, 0.75, Family(confidence_recall=0.6), "dspark"),
    (24, 0.85, Family(decay=0.97, match_rate=0.6, confidence_recall=0.6), "suffix"),
    (15, 0.85, Family(decay=0.97), "dflash"),
    (4, 0.3, Family(match_rate=0.7), "ngram"),
])
def test_draws_average_to_the_model(k, a, family, method):
    d = decoder(k, a, family, method)
    draws = [d.draw() for _ in range(40_000)]
    tokens = sum(1 + accepted for _, accepted in draws) / len(draws)
    drafted = sum(n for n, _ in draws) / len(draws)
    assert tokens == pytest.approx(batching.mean_length(d.curve, k), rel=0.02)
    assert drafted == pytest.approx(family.mean_drafted(d._curve, k), rel=0.02)
    assert d.speculation.verified_per_request == pytest.approx(1 + drafted, rel=0.02)
    assert all(accepted <= n <= k for n, accepted in draws)
    if family.varies:
        assert any(n < k for n, _ in draws)  # a variable drafted length, none at all sometimes
    if family.confidence_recall:
        assert any(0 < n == accepted < k for n, accepted in draws)  # capped right after the accepted ones


def test_a_plain_drafter_draws_as_before():
    # No match draw, no cap draw: a seeded stream of an EAGLE drafter is unchanged.
    d, rng = decoder(5, 0.6, Family(), "eagle3", seed=3), random.Random(3)
    for _ in range(200):
        expected = 0
        while expected < 5 and rng.random() < 0.6:
            expected += 1
        assert d.draw() == (5, expected)


# ------------------------------------------------------------------------------------ metrics

def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def run_steps(engine, steps: int) -> str:
    exporter, decoder_ = engine.exporter, engine.decoder
    for _ in range(steps):
        drafted, accepted = decoder_.draw()
        exporter.step(1 + accepted, drafted, accepted, 0.01)
    return exporter.render().decode()


def test_vllm_counts_only_the_steps_that_drafted():
    engine = server.build_engine(vllm({"method": "suffix"}), {"DRAFTER_EMULATOR_SEED": "1"})
    text = run_steps(engine, 2000)
    drafts = metric(text, "vllm:spec_decode_num_drafts_total")
    assert 0 < drafts < 2000  # steps without a suffix match draft nothing and count no draft
    assert metric(text, "vllm:spec_decode_num_draft_tokens_total") < 24 * drafts  # a variable length


def test_sglang_dspark_exports_its_cap_gauge_and_a_nominal_rate():
    flags = ["--speculative-algorithm", "DSPARK", "--enable-metrics"]
    capped = server.build_engine([*SGLANG, *flags], {"DRAFTER_EMULATOR_SEED": "1", "SGLANG_RAGGED_VERIFY_MODE": "compact"})
    static = server.build_engine([*SGLANG, *flags], {"DRAFTER_EMULATOR_SEED": "1"})
    text, plain = run_steps(capped, 40), run_steps(static, 40)
    assert 1.0 < metric(text, "sglang:spec_cap_length") < 8.0  # the window incl. the bonus, capped below gamma + 1
    assert metric(plain, "sglang:spec_cap_length") == 0.0  # static mode: no cap scheduled
    assert metric(text, "sglang:spec_block_accept_length") == 0.0
    assert metric(text, "sglang:spec_num_steps") == 1 and metric(text, "sglang:spec_num_draft_tokens") == 8
    length, rate = metric(text, "sglang:spec_accept_length"), metric(text, "sglang:spec_accept_rate")
    assert rate == pytest.approx((length - 1) / 7)  # accepted / (steps x (draft tokens - 1)), however capped


# ------------------------------------------------------------------------------------ profile

def test_profile_entries_carry_the_family_shape():
    from drafter_testbed.emulator.profiles import ProfileError, load_profile, parse_profile

    profile = load_profile()
    dspark, suffix = profile.lookup("sglang", "DSPARK"), profile.lookup("vllm", "suffix")
    assert dspark.source == "profile:dspark" and dspark.shape.confidence_recall > 0 and dspark.shape.draft_cost
    assert suffix.shape.match_rate < 1 and suffix.shape.decay < 1
    assert profile.lookup("sglang", "z-lab/Kimi-K2.5-DFlash-b16").source == "profile:dflash"
    base = {"default": {"vllm": 0.5, "sglang": 0.5}}
    for key, bad in (("decay", 1.5), ("matchRate", -0.1), ("confidenceRecall", "high"), ("draftCost", -1)):
        with pytest.raises(ProfileError, match=key):
            parse_profile({**base, "drafters": [{"name": "x", "acceptance": {"vllm": 0.5}, key: bad}]}, "test")


def test_a_block_drafter_on_the_engine_costs_one_forward_per_step():
    dflash = server.build_engine([*SGLANG, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                  "/models/Kimi-K2.5-DFlash-b16"], {})
    eagle = server.build_engine([*SGLANG, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                 "AQ-MedAI/Kimi-K2-Instruct-eagle3"], {})
    assert dflash.decoder.speculation.forwards == 1 and dflash.decoder.k == 15
    assert eagle.decoder.speculation.forwards == 3
    # One stream: a 15-token block costs one draft forward of the entry's draftCost, three EAGLE steps three.
    costs = dflash.decoder.costs
    assert dflash.decoder.step_seconds(1) * 1000 == pytest.approx(costs.target_step_ms * (1 + costs.draft_cost))
    assert dflash.state()["speculation"]["numSteps"] == 1 and len(dflash.state()["acceptanceByPosition"]) == 15


@pytest.mark.parametrize(("config", "flags", "env", "dropped"), [
    ({"method": "eagle3", "model": "/models/d-eagle3", "num_speculative_tokens": 4}, [], {}, None),
    ({"method": "suffix", "num_speculative_tokens": 4}, [], {}, "Model Runner V1 with method 'suffix'"),
    ({"method": "ngram_gpu", "num_speculative_tokens": 4}, [], {}, None),
    ({"method": "ngram_gpu", "num_speculative_tokens": 4}, [], {"VLLM_USE_V2_MODEL_RUNNER": "0"},
     "Model Runner V1 with method 'ngram_gpu'"),
    ({"method": "dflash", "model": "/models/d-dflash", "num_speculative_tokens": 4}, [],
     {"VLLM_USE_V2_MODEL_RUNNER": "0"}, None),
    ({"method": "eagle3", "model": "/models/d-eagle3", "num_speculative_tokens": 4}, ["--data-parallel-size", "2"], {},
     "data parallelism"),
])
def test_vllm_drops_the_per_batch_size_schedule_where_its_runner_cannot_follow_it(config, flags, env, dropped):
    from drafter_operator.engines import dynamic

    argv = [*vllm({**config, dynamic.SCHEDULE_KEY: [[1, 8, 4], [9, 64, 0]]}), *flags]
    engine = server.build_engine(argv, env)
    assert engine.schedule_dropped == dropped
    assert (engine.decoder.k_at(32) == 4) is bool(dropped)  # dropped: the static k at every batch size
    assert engine.state()["speculation"]["scheduleDroppedBy"] == dropped
