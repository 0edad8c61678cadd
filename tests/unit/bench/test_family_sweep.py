"""The drafter families on Kimi-K2.5 through the emulator's step loop (bench/family_sweep.py --mode modelled):
the measured sweep follows the batching model per family, and the families order as their cost modes say."""

from __future__ import annotations

import pytest

from bench import family_sweep as bench

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = pytest.mark.xdist_group("family-sweep")

LEVELS = (1, 8, 32, 64)


@pytest.fixture(scope="module")
def rows():
    out = {}
    for family in bench.FAMILIES:
        model, break_even, _ = bench.predicted(family, LEVELS)
        out[family.name] = {"model": model, "crossover": break_even, **bench.modelled(family, LEVELS, 128)}
    return out


def test_a_full_batch_measures_the_models_steady_state(rows):
    for name, row in rows.items():
        for streams in (32, 64):
            assert row["speedups"][streams] == pytest.approx(row["model"][streams], rel=0.1), (name, streams)


def test_each_bracket_holds_or_sits_just_below_the_models_break_even(rows):
    for name, row in rows.items():
        if row["crossover"] == 0.0:  # never pays: below 1.0x at one stream, measured too
            assert row["bracket"][0] is None and row["speedups"][1] < 1.0, name
            continue
        above, below = row["bracket"]
        assert above <= row["crossover"] and below >= 0.6 * row["crossover"], (name, row["bracket"], row["crossover"])


def test_the_cost_mode_and_the_verify_window_order_the_families(rows):
    def be(name):
        return rows[name]["crossover"]
    # One forward for a whole block, or none: ahead of three sequential forwards at one stream.
    for name in ("SGLang DSPARK", "SGLang DFLASH", "vLLM suffix"):
        assert rows[name]["model"][1] > rows["SGLang EAGLE3"]["model"][1] > rows["SGLang STANDALONE"]["model"][1]
    # The wider the verify window, the sooner speculation stops paying; the confidence cap narrows it.
    assert be("SGLang NGRAM") < be("SGLang DFLASH") < be("SGLang DSPARK") < be("SGLang DSPARK capped") < be("SGLang EAGLE3")
