"""k per load band from one sweep (engines/k_bands.py): the schedule it renders serves at least 0.97x of the best
static k (0 included) at every load from 1 to 64 streams, and beats the on/off schedule around the break-even.

Two worlds: the emulator's engine in process (bench/crossover_schedule.py, modelled seconds, deterministic), and
the emulator's batching model evaluated directly for drafters, step costs and sweeps hypothesis draws."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import crossover_schedule as bench
from drafter_operator.engines import crossover, dynamic, k_bands
from drafter_testbed.emulator import batching

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = pytest.mark.xdist_group("k-bands-demo")

MAX_TOKENS = 256
LEVELS = tuple(range(1, 65))


def measure(command, streams):
    return bench.modelled_tokens_per_second(command, streams, MAX_TOKENS)


@pytest.fixture(scope="module")
def demo():
    sweep = bench.refined_sweep(measure)
    levels = bench.sweep_levels(sweep, measure)
    acceptance = bench.modelled_acceptance(bench.argv())
    bands, model = bench.k_band_schedule(levels, acceptance, measure)
    on_off = dynamic.schedule_from_levels([{"concurrency": c, "speedup": s} for c, s in sweep], bench.K)
    rows = bench.compare_bands(measure, on_off, k_bands.schedule(bands), (1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64))
    return sweep, acceptance, bands, rows


def test_the_counters_give_a_falling_per_position_acceptance(demo):
    _, acceptance, _, _ = demo
    assert len(acceptance) == bench.K
    assert all(0.0 < a <= 1.0 for a in acceptance)
    assert acceptance[0] > acceptance[-1]


def test_the_k_band_schedule_reaches_97_percent_of_the_best_static_k_at_every_load(demo):
    _, _, bands, rows = demo
    shares = {row.streams: round(row.share, 3) for row in rows}
    assert min(shares.values()) >= 0.97, (shares, bands)
    # It drafts fewer tokens as the load grows and nothing well above the break-even.
    ks = [band.k for band in bands]
    assert ks == sorted(ks, reverse=True) and ks[-1] == 0 and len(set(ks)) >= 3, bands


def test_around_the_break_even_it_serves_at_least_15_percent_more_than_on_off(demo):
    sweep, _, _, rows = demo
    low, high = bench.around_break_even(sweep)
    near = [row for row in rows if low <= row.streams <= high]
    assert len(near) >= 3
    assert sum(row.gain for row in near) / len(near) >= 1.15, [(r.streams, round(r.gain, 3)) for r in near]
    # the gap it closes is real: at some load there the best static k is neither K nor none
    assert any(max(range(len(r.static)), key=r.static.__getitem__) not in (0, bench.K) for r in near)


def test_the_rendered_schedule_is_one_vllm_accepts(demo):
    _, _, bands, _ = demo
    schedule = k_bands.schedule(bands)
    assert dynamic.validate_schedule([list(entry) for entry in schedule]) == schedule
    assert schedule[0][0] == 1 and schedule[-1][1] == dynamic.MAX_BATCH_SIZE
    assert all(a[1] + 1 == b[0] for a, b in zip(schedule, schedule[1:]))


# --------------------------------------------------------------------------------------------------
# the batching model as the world


def world_levels(costs, acceptance, spec_k, sweep):
    spec = batching.Speculation(spec_k)
    return [k_bands.Level(c, spec_k, batching.tokens_per_second(c, acceptance, spec, costs),
                          batching.tokens_per_second(c, 0.0, batching.NO_SPECULATION, costs)) for c in sweep]


def refined(costs, acceptance, spec_k, first=(1, 8, 32)):
    sweep = list(first)

    def speedups():
        return [(c, batching.speedup_at(c, acceptance, batching.Speculation(spec_k), costs)) for c in sweep]

    while (level := crossover.next_level(speedups())) is not None:
        sweep.append(level)
    return world_levels(costs, acceptance, spec_k, sweep)


def unconditional(curve):
    """Per-position acceptance as the counters count it (position i only when every earlier one was accepted)."""
    out, reach = [], 1.0
    for a in curve:
        reach *= a
        out.append(reach)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.floats(0.5, 0.95), decay=st.floats(0.85, 1.0), spec_k=st.integers(2, 6),
       draft_cost=st.floats(0.05, 0.4), knee=st.sampled_from([16.0, 32.0, 64.0]),
       draft_knee_over_knee=st.sampled_from([1.0, 2.0, 4.0]))
def test_any_drafter_the_chosen_k_is_within_3_percent_of_the_best_at_every_load(a, decay, spec_k, draft_cost,
                                                                                knee, draft_knee_over_knee):
    # The drafter turns compute-bound at no fewer streams than the target at tokens (k_bands' one assumption).
    costs = batching.StepCosts(draft_cost=draft_cost, compute_knee_tokens=knee,
                               draft_knee_tokens=knee * draft_knee_over_knee)
    curve = [a * decay ** i for i in range(spec_k)]
    acceptance = unconditional(curve)
    # The sweep reaches the top load the property is held at: above it the last band's k carries on, a guess.
    model = k_bands.step_model(refined(costs, curve, spec_k, (1, 8, 32, 64)), acceptance, k_bands.CHAIN)
    bands = k_bands.choose_bands(model, dynamic.MAX_BATCH_SIZE)
    schedule = k_bands.schedule(bands)
    for streams in LEVELS:
        rates = [batching.tokens_per_second(streams, curve, batching.Speculation(k), costs) if k else
                 batching.tokens_per_second(streams, 0.0, batching.NO_SPECULATION, costs) for k in range(spec_k + 1)]
        chosen = dynamic.k_for_batch(schedule, streams, spec_k)
        assert rates[chosen] >= 0.97 * max(rates), (streams, chosen, [round(r) for r in rates], bands)


def test_a_sweep_at_k_predicts_every_smaller_k_within_5_percent_in_the_batching_model():
    costs = batching.StepCosts()
    curve = [0.9, 0.86, 0.88, 0.97, 0.89]
    model = k_bands.step_model(refined(costs, curve, 5), unconditional(curve), k_bands.CHAIN)
    for streams in (1, 4, 8, 12, 16, 24, 32):  # within the sweep (1 to 32 streams)
        for k in range(6):
            spec = batching.Speculation(k) if k else batching.NO_SPECULATION
            truth = batching.tokens_per_second(streams, curve if k else 0.0, spec, costs)
            assert model.tokens_per_second(k, streams) == pytest.approx(truth, rel=0.05), (streams, k)


def test_measuring_the_schedule_corrects_a_draft_cost_the_sweep_got_wrong():
    # The sweep ran at a load where the drafter's cost was inflated (say, a neighbour's prefill): its draft cost
    # is overstated there, and the prediction drops k too early. The schedule's own measurement fixes it.
    costs = batching.StepCosts()
    curve = [0.85] * 4
    acceptance = unconditional(curve)
    honest = refined(costs, curve, 4)
    inflated = [k_bands.Level(l.concurrency, l.k, l.tokens_per_second * (0.8 if l.concurrency >= 8 else 1.0),
                              l.baseline_tokens_per_second) for l in honest]
    wrong = k_bands.step_model(inflated, acceptance, k_bands.CHAIN)
    truth = k_bands.step_model(honest, acceptance, k_bands.CHAIN)
    bands = k_bands.choose_bands(wrong, dynamic.MAX_BATCH_SIZE)
    schedule = k_bands.schedule(bands)
    measured = [k_bands.Level(l.concurrency, dynamic.k_for_batch(schedule, l.concurrency, 4),
                              batching.tokens_per_second(l.concurrency, curve,
                                                         batching.Speculation(dynamic.k_for_batch(schedule, l.concurrency, 4)),
                                                         costs), l.baseline_tokens_per_second)
                for l in honest if dynamic.k_for_batch(schedule, l.concurrency, 4) > 0]
    better = k_bands.refine(inflated, measured, acceptance, k_bands.CHAIN)

    def error(model):
        return sum(abs(model.tokens_per_second(k, b) / truth.tokens_per_second(k, b) - 1)
                   for b in (8, 12, 16) for k in range(1, 5))

    assert measured and error(better) < error(wrong)


@pytest.mark.parametrize(("mode", "k", "forwards"), [(k_bands.CHAIN, 4, 4), (k_bands.BLOCK, 4, 1),
                                                     (k_bands.LOOKUP, 4, 0), (k_bands.CHAIN, 0, 0)])
def test_draft_forwards_by_family_mode(mode, k, forwards):
    assert k_bands.draft_forwards(mode, k) == forwards


def test_bad_inputs_name_what_is_wrong():
    with pytest.raises(ValueError, match="draft mode"):
        k_bands.draft_forwards("tree", 3)
    with pytest.raises(ValueError, match="no measured levels"):
        k_bands.step_model([], [0.5], k_bands.CHAIN)
    with pytest.raises(ValueError, match="per-position acceptance must lie in"):
        k_bands.step_model([k_bands.Level(1, 2, 100.0, 80.0)], [1.5], k_bands.CHAIN)
    with pytest.raises(ValueError, match="tokens_per_second"):
        k_bands.Level(1, 2, 0.0, 80.0)
    with pytest.raises(ValueError, match="per-position acceptance is empty"):
        k_bands.mean_length((), 2)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.3, 0.95), st.floats(0.3, 0.95))
def test_another_traffics_acceptance_predicts_with_the_step_costs_the_sweep_measured(ran_at, mix_at):
    """A sweep's throughputs were measured at its own prompts' acceptance: the step costs are fitted with that, and a
    traffic mix's acceptance only changes what each k yields. Fitting with the mix's would read a sweep of easy prompts
    as cheap steps for hard traffic."""
    costs, k = batching.StepCosts(), 4
    levels = world_levels(costs, [ran_at] * k, k, (1, 8, 32))
    result = {"levels": [{"concurrency": l.concurrency, "tokensPerSecond": l.tokens_per_second,
                          "baselineTokensPerSecond": l.baseline_tokens_per_second} for l in levels],
              "perPositionAcceptance": list(unconditional([ran_at] * k))}
    mix = unconditional([mix_at] * k)
    fitted = k_bands.step_model(levels, unconditional([ran_at] * k), k_bands.CHAIN)
    expected = k_bands.choose_bands(k_bands.predicting(fitted, mix), dynamic.MAX_BATCH_SIZE)
    assert k_bands.bands_from_result(result, k, k_bands.CHAIN, dynamic.MAX_BATCH_SIZE, mix) == expected
    # The mix's prediction is the batching model's truth for the mix, within 5%, at a k the sweep did not run.
    for streams in (1, 8, 16):
        truth = batching.tokens_per_second(streams, [mix_at] * 2, batching.Speculation(2), costs)
        assert k_bands.predicting(fitted, mix).tokens_per_second(2, streams) == pytest.approx(truth, rel=0.05)
