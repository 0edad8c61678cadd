"""The emulator's SGLang adaptive speculation (emulator/sglang_adaptive.py): the controller's rules one by one, the
command line SGLang accepts, refuses or silently downgrades, and the step loop drafting the active steps.
tests/contract/test_sglang_adaptive_contract.py holds the same controller to SGLang's own code."""

from __future__ import annotations

import asyncio
import json

import pytest

from drafter_testbed.emulator import sglang_adaptive as sa
from drafter_testbed.emulator.cmdline import EngineRefused, parse_engine_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator.server import build_engine

SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/target",
          "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/draft"]
ADAPTIVE = [*SGLANG, "--speculative-adaptive"]


def rule(*candidates: int, **knobs) -> sa.TierRule:
    """A rule whose every verify is an update (no warm-up, interval 1) and no hysteresis; ``ema_alpha`` 0 freezes
    the average."""
    return sa.TierRule(tuple(candidates), **{"warmup_batches": 0, "update_interval": 1, "ema_alpha": 0.0,
                                             "down_hysteresis": 0.0, **knobs})


def settle(r: sa.TierRule, steps: int, average: float, accepted=(1,)) -> sa.SlotState:
    return sa.after_verify(r, sa.SlotState(steps, average), list(accepted))


# ------------------------------------------------------------------------------------------------ config

def test_the_default_config_is_sglangs_four_tiers():
    config = sa.read_config(None)
    assert [bs for bs, _ in config.tiers] == [1, 8, 32, 64]
    assert config.candidate_steps == (0, 1, 3, 5, 7) and config.default_steps == 3
    assert dict(config.tiers)[1] == sa.TierRule((1, 3, 5, 7), down_hysteresis=-0.25, up_hysteresis=0.0)
    assert dict(config.tiers)[8].down_hysteresis == 0.0


def test_top_level_keys_are_every_tiers_defaults_and_a_tier_overrides_them():
    config = sa.parse_config({"ema_alpha": 0.5, "note": "ignored", "4": {"candidate_steps": [3, 1, 1]},
                              "16": {"candidate_steps": [0], "ema_alpha": 0.1}})
    assert config.tiers == ((4, sa.TierRule((1, 3), ema_alpha=0.5)), (16, sa.TierRule((0,), ema_alpha=0.1)))


@pytest.mark.parametrize("raw,kind,message", [
    ({}, "ValueError", "at least one integer-string BS key"),
    ({"1": {"candidate_steps": []}}, "ValueError", "BS 1: candidate_steps must be a list of non-negative ints, got []"),
    ({"1": {"candidate_steps": [2, -1]}}, "ValueError", "got [2, -1]"),
    ({"1": {"candidate_steps": [1.0]}}, "ValueError", "got [1.0]"),
    ({"1": [1]}, "AttributeError", "'list' object has no attribute 'get'"),
    ([1], "AttributeError", "'list' object has no attribute 'items'"),
])
def test_configs_sglang_refuses(raw, kind, message):
    with pytest.raises(sa.AdaptiveConfigRefused) as refused:
        sa.parse_config(raw)
    assert refused.value.kind == kind and message in str(refused.value)


def test_a_config_file_that_cannot_be_read_is_refused(tmp_path):
    with pytest.raises(sa.AdaptiveConfigRefused) as refused:
        sa.read_config(str(tmp_path / "missing.json"))
    assert refused.value.kind == "FileNotFoundError"
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(sa.AdaptiveConfigRefused) as refused:
        sa.read_config(str(tmp_path / "bad.json"))
    assert refused.value.kind == "JSONDecodeError"


# ------------------------------------------------------------------------------------------------- slot

def test_a_slot_starts_at_the_engines_steps_if_its_tier_offers_them_else_its_middle_candidate():
    assert sa.SlotState.start(rule(1, 3, 5, 7), 3) == sa.SlotState(3, 2.0)
    assert sa.SlotState.start(rule(0, 1), 3) == sa.SlotState(1, 0.0)
    assert sa.SlotState.start(rule(0), 3) == sa.SlotState(0, -1.0)


def test_the_average_moves_by_alpha_toward_the_mean_accepted_drafts_per_request():
    r = sa.TierRule((1, 3), ema_alpha=0.25, warmup_batches=100)
    state = sa.after_verify(r, sa.SlotState(3, 2.0), [0, 4, 2])
    assert state == sa.SlotState(3, 0.75 * 2.0 + 0.25 * 2.0, 1)
    assert sa.after_verify(r, state, [4]).average == pytest.approx(0.75 * 2.0 + 0.25 * 4)
    assert sa.after_verify(r, state, []) == state  # nothing verified: nothing counted


def test_updates_wait_for_the_warm_up_then_come_every_interval():
    r = sa.TierRule((1, 3, 5), ema_alpha=0.0, warmup_batches=3, update_interval=2)
    state, moved_at = sa.SlotState(1, 4.0), []
    for batch in range(1, 12):
        before = state.steps
        state = sa.after_verify(r, state, [4])
        if state.steps != before:
            moved_at.append(batch)
    assert moved_at == [5]  # the first update (batch 5) jumps 1 -> 5 at once; nothing moves it after
    assert state.steps == 5


def test_rising_takes_an_average_above_the_current_step_less_a_half_plus_the_up_hysteresis():
    assert settle(rule(1, 3, 5), 3, 2.6).steps == 5
    assert settle(rule(1, 3, 5), 3, 2.5).steps == 3
    assert settle(rule(1, 3, 5, up_hysteresis=0.2), 3, 2.6).steps == 3
    assert settle(rule(1, 3, 5, 7), 1, 6.0).steps == 7  # as far as the average reaches, in one update


def test_falling_takes_an_average_at_or_below_the_lower_step_less_a_half_plus_the_down_hysteresis():
    assert settle(rule(1, 3, 5), 5, 2.5).steps == 3
    assert settle(rule(1, 3, 5), 5, 2.6).steps == 5
    assert settle(rule(1, 3, 5, down_hysteresis=-0.25), 5, 2.5).steps == 5
    assert settle(rule(1, 3, 5), 5, 0.5).steps == 1
    # 0 drafts nothing: it is reached at half a draft or less
    assert settle(rule(0, 1), 1, 0.5).steps == 0 and settle(rule(0, 1), 1, 0.51).steps == 1


def test_a_slot_at_zero_learns_nothing_and_probes_the_next_candidate_at_its_update():
    r = rule(0, 2, 4, ema_alpha=1.0)
    probed = sa.after_verify(r, sa.SlotState(0, -1.0), [0])
    assert probed == sa.SlotState(2, 1.0, 1)  # the average was untouched, then set neutral for the probe
    kept = sa.after_verify(r, sa.SlotState(0, 3.0), [0])
    assert kept == sa.SlotState(2, 3.0, 1)  # an average from before is kept
    assert settle(rule(0), 0, -1.0).steps == 0  # nothing above 0 to probe


def test_the_ceiling_holds_a_slot_down_but_never_blocks_a_rise():
    ceiling = {"ceiling_coeff": 0.5}
    assert settle(rule(1, 3, 5, 7, **ceiling), 5, 4.6).steps == 7  # a rise: ceil(2.3) = 3 does not stop it
    assert settle(rule(1, 3, 5, 7, **ceiling), 7, 6.6).steps == 3  # no rise: capped to the largest <= ceil(3.3)
    assert settle(rule(1, 3, 5, 7, **ceiling), 7, 0.1).steps == 1  # the ceiling is at least 1


# ----------------------------------------------------------------------------------------------- router

def test_batches_route_to_the_largest_tier_at_or_below_them_and_below_all_to_the_smallest():
    steps = sa.AdaptiveSteps(sa.parse_config({"4": {"candidate_steps": [3]}, "16": {"candidate_steps": [0]}}), 3)
    assert [steps.tier(bs) for bs in (1, 4, 15, 16, 500)] == [4, 4, 4, 16, 16]
    assert steps.steps_for_batch(20) == 0 and steps.active == 0
    assert steps.steps_for_batch(2) == 3 and steps.active == 3


def test_a_verify_feeds_only_its_tier_and_a_switch_becomes_active():
    config = sa.parse_config({"1": {"candidate_steps": [1, 3], "warmup_batches": 0, "update_interval": 1,
                                    "ema_alpha": 1.0}, "8": {"candidate_steps": [0, 1]}})
    steps = sa.AdaptiveSteps(config, 1)
    assert steps.on_verify([3], 1) == 3 and steps.active == 3
    assert steps.slots[8] == sa.SlotState(1, 0.0)
    assert steps.on_verify([3], 1) is None


# ---------------------------------------------------------------------------------------- command line

def test_adaptive_resolves_topk_one_the_middle_candidate_and_one_more_draft_token():
    spec = parse_engine_command_line([*ADAPTIVE, "--speculative-num-draft-tokens", "9"]).speculation
    assert spec.adaptive == sa.read_config(None) and spec.adaptive_dropped is None
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens, spec.num_speculative_tokens) == (3, 1, 4, 3)
    spec = parse_engine_command_line([*ADAPTIVE, "--speculative-num-steps", "7"]).speculation
    assert (spec.num_steps, spec.num_draft_tokens) == (7, 8)


def test_steps_no_tier_offers_and_bad_configs_are_refused_as_sglang_refuses_them(tmp_path):
    with pytest.raises(EngineRefused) as refused:
        parse_engine_command_line([*ADAPTIVE, "--speculative-num-steps", "2"])
    assert refused.value.status == 1
    assert str(refused.value) == ("ValueError: --speculative-num-steps=2 is not in the adaptive config candidate_steps "
                                  "[0, 1, 3, 5, 7]. Pass one of those values.")
    bad = tmp_path / "tiers.json"
    bad.write_text(json.dumps({"1": {"candidate_steps": []}}))
    with pytest.raises(EngineRefused, match=r"^ValueError: BS 1: candidate_steps must be"):
        parse_engine_command_line([*ADAPTIVE, "--speculative-adaptive-config", str(bad)])


def test_a_config_file_sets_the_tiers_and_the_starting_steps(tmp_path):
    path = tmp_path / "tiers.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [2, 4, 6]}, "16": {"candidate_steps": [0, 2]}}))
    spec = parse_engine_command_line([*ADAPTIVE, "--speculative-adaptive-config", str(path)]).speculation
    assert spec.adaptive.candidate_steps == (0, 2, 4, 6) and spec.num_steps == 4


@pytest.mark.parametrize("flags,reason", [
    (["--speculative-eagle-topk", "2"], "speculative_eagle_topk=2 (only topk=1 is supported)"),
    (["--dp-size", "2", "--enable-dp-attention"], "attention DP is not supported"),
    (["--attn-dp-size", "2"], "attention DP is not supported"),
    (["--enable-multi-layer-eagle"], "enable_multi_layer_eagle=True is not supported"),
    (["--enable-two-batch-overlap"], "enable_two_batch_overlap=True is not supported"),
    (["--enable-pdmux"], "enable_pdmux=True is not supported"),
])
def test_where_sglang_drops_adaptive_the_emulator_serves_static_steps(flags, reason):
    spec = parse_engine_command_line([*ADAPTIVE, *flags]).speculation
    assert spec.adaptive is None and spec.adaptive_dropped.startswith(reason)
    static = parse_engine_command_line([*SGLANG, *flags]).speculation
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == \
        (static.num_steps, static.eagle_topk, static.num_draft_tokens)


def test_other_algorithms_drop_it_and_nothing_changes_without_the_flag():
    ngram = parse_engine_command_line([*SGLANG[:5], "--speculative-algorithm", "NGRAM", "--speculative-adaptive"])
    assert ngram.speculation.adaptive_dropped == "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)"
    nextn = parse_engine_command_line([*SGLANG[:5], "--speculative-algorithm", "nextn", "--speculative-adaptive"])
    assert nextn.speculation.adaptive is not None  # NEXTN is EAGLE
    plain = parse_engine_command_line(SGLANG).speculation
    assert plain.adaptive is None and plain.adaptive_dropped is None


def test_the_emulator_logs_sglangs_warning_when_it_drops_adaptive():
    lines: list[str] = []
    build_engine([*ADAPTIVE, "--enable-pdmux"], {}, log=lines.append)
    assert ("speculative_adaptive disabled: enable_pdmux=True is not supported (adaptive state swap does not "
            "update decode_attn_backend_group). Falling back to static speculative params.") in lines
    lines.clear()
    build_engine(ADAPTIVE, {}, log=lines.append)
    assert not any("speculative_adaptive" in line for line in lines)


# -------------------------------------------------------------------------------------------- step loop

def serve(engine: EmulatedEngine, streams: int, max_tokens: int) -> None:
    async def one() -> None:
        async for _ in engine.generate(16, max_tokens, streaming=False):
            pass

    async def scenario() -> None:
        await asyncio.gather(*(one() for _ in range(streams)))

    asyncio.run(scenario())


def adaptive_engine(tmp_path, tiers: dict, acceptance: float) -> EmulatedEngine:
    path = tmp_path / "tiers.json"
    path.write_text(json.dumps(tiers))
    config = parse_engine_command_line([*ADAPTIVE, "--speculative-adaptive-config", str(path)])
    return EmulatedEngine(config, Settings(time_scale=0.0, seed=5, acceptance=acceptance), load_profile())


def gauge(engine: EmulatedEngine, name: str) -> float:
    return engine.exporter.registry.get_sample_value(
        name, {"engine_type": "unified", "model_name": "/models/target", "moe_ep_rank": "0", "pp_rank": "0",
               "tp_rank": "0"})


def test_steps_rise_past_the_start_when_drafts_are_accepted_and_the_steps_drafted_follow(tmp_path):
    engine = adaptive_engine(tmp_path, {"1": {"candidate_steps": [1, 2, 6], "warmup_batches": 2,
                                              "update_interval": 1}}, acceptance=1.0)
    assert engine.config.k == 2 and engine.decoder.step_choices == (1, 2, 6)
    serve(engine, 1, 400)
    assert engine.adaptive.active == 6
    totals = engine.totals
    # every draft accepted: 2 drafts a step until the EMA passes 2 - 0.5 + 0 (after warm-up), then 6
    assert totals.accepted_tokens == totals.draft_tokens > 6 * (totals.verification_steps - 10)
    assert engine.state()["speculation"]["adaptive"]["tiers"][0]["steps"] == 6
    # SGLang's gauges show the active steps at the next decode log; the accept rate keeps the start-up width
    assert gauge(engine, "sglang:spec_num_steps") == 6 and gauge(engine, "sglang:spec_num_draft_tokens") == 7


def test_a_tier_that_learns_nothing_pays_falls_to_zero_and_its_steps_draft_nothing(tmp_path):
    engine = adaptive_engine(tmp_path, {"1": {"candidate_steps": [3]},
                                        "4": {"candidate_steps": [0, 3], "warmup_batches": 0,
                                              "update_interval": 1000}}, acceptance=0.0)
    serve(engine, 6, 40)
    slot = engine.adaptive.slots[4]
    assert slot.steps == 3 and slot.average < 0.5  # still before its first update: every step drafted 3
    assert engine.totals.draft_tokens > 0 and engine.totals.accepted_tokens == 0
    engine = adaptive_engine(tmp_path, {"1": {"candidate_steps": [3]},
                                        "4": {"candidate_steps": [0, 3], "warmup_batches": 0,
                                              "update_interval": 1}}, acceptance=0.0)
    serve(engine, 6, 40)
    # at 0 a step verifies without drafting; every other update probes 3 again, so about half the steps draft
    assert engine.totals.verify_forwards > engine.totals.verification_steps
    assert engine.totals.draft_tokens < 3 * engine.totals.verify_forwards
