"""spec.drafter.dynamic fromBenchmark: the schedule from a load sweep, its rendering, the API rules, the wiring."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drafter_operator.api import DrafterServingSpec
from drafter_operator.api.serving.status import SpeculationScheduleStatus
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.controllers.serving.schedule import speculation_schedule
from drafter_operator.engines import dynamic, vllm

IMAGE = "vllm/vllm-openai:v0.33.0"

levels_strategy = st.lists(
    st.fixed_dictionaries({"concurrency": st.integers(1, 256),
                           "speedup": st.one_of(st.none(), st.floats(0.05, 4.0))}), max_size=16)


@settings(max_examples=300, deadline=None)
@given(levels=levels_strategy, k=st.integers(1, 16))
def test_schedule_is_contiguous_from_one_and_k_or_zero(levels, k):
    schedule = dynamic.schedule_from_levels(levels, k)
    assert schedule[0][0] == 1
    assert schedule[-1][1] == dynamic.MAX_BATCH_SIZE
    for (_, end, _), (start, _, _) in zip(schedule, schedule[1:]):
        assert start == end + 1  # contiguous, non-overlapping
    assert all(start <= end for start, end, _ in schedule)
    assert {n for _, _, n in schedule} <= {0, k}
    # k exactly below the break-even, 0 from it; the break-even lies after the last level that paid
    # and no later than the first that did not
    at, off = dynamic.crossover(levels), dynamic.off_from(levels)
    assert (at is None) == (off is None)
    if off is not None:
        paid = [lv["concurrency"] for lv in levels if lv["speedup"] is not None and lv["concurrency"] < at]
        assert max(paid, default=0) < off <= at
    for batch in {1, 2, 7, 64, 255, 256, off or 1, max((off or 1) - 1, 1), dynamic.MAX_BATCH_SIZE}:
        expected = k if off is None or batch < off else 0
        assert dynamic.k_for_batch(schedule, batch, k) == expected


def test_schedule_examples():
    sweep = [{"concurrency": 1, "speedup": 1.67}, {"concurrency": 4, "speedup": 1.53},
             {"concurrency": 8, "speedup": 1.27}, {"concurrency": 32, "speedup": 0.69}]
    # off from the break-even interpolated between 8 (1.27x) and 32 (0.69x): 8 + 24 x 0.27 / 0.58 = 19.2
    assert dynamic.schedule_from_levels(sweep, 5) == [(1, 19, 5), (20, 65536, 0)]
    assert dynamic.schedule_from_levels(list(reversed(sweep)), 5) == [(1, 19, 5), (20, 65536, 0)]
    # a refined sweep: the break-even between 16 (1.01x) and 17 (0.97x) streams
    refined = [*sweep, {"concurrency": 20, "speedup": 0.86}, {"concurrency": 16, "speedup": 1.01},
               {"concurrency": 17, "speedup": 0.97}]
    assert dynamic.schedule_from_levels(refined, 5) == [(1, 16, 5), (17, 65536, 0)]
    # slower already at the lowest level measured: off from there
    assert dynamic.schedule_from_levels([{"concurrency": 8, "speedup": 0.9}, {"concurrency": 32, "speedup": 0.6}],
                                        5) == [(1, 7, 5), (8, 65536, 0)]
    assert dynamic.schedule_from_levels([{"concurrency": 1, "speedup": 0.9}], 3) == [(1, 65536, 0)]
    assert dynamic.schedule_from_levels([{"concurrency": 1, "speedup": 1.2}], 3) == [(1, 65536, 3)]
    assert dynamic.schedule_from_levels([], 3) == [(1, 65536, 3)]
    # a level without a speedup (no baseline) says nothing
    assert dynamic.schedule_from_levels([{"concurrency": 2, "speedup": None}, {"concurrency": 4, "speedup": 0.5}],
                                        4) == [(1, 3, 4), (4, 65536, 0)]
    with pytest.raises(ValueError):
        dynamic.schedule_from_levels(sweep, 0)


def spec(engine="vllm", **drafter) -> DrafterServingSpec:
    drafter = {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 5, **drafter}
    if engine == "sglang":
        drafter.pop("numSpeculativeTokens")
    return DrafterServingSpec.model_validate({"engine": engine, "target": {"model": "/models/t"}, "drafter": drafter})


def test_vllm_renders_the_schedule_in_speculative_config():
    s = spec(dynamic="fromBenchmark")
    argv = vllm.render_command(s, schedule=[(1, 31, 5), (32, 65536, 0)])
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "eagle3", "model": "/models/d", "num_speculative_tokens": 5,
                      "num_speculative_tokens_per_batch_size": [[1, 31, 5], [32, 65536, 0]]}
    # no schedule: the static k, as before
    assert "num_speculative_tokens_per_batch_size" not in " ".join(vllm.render_command(s))


def test_api_refuses_dynamic_on_sglang_without_adaptive_speculation_and_without_speculation():
    with pytest.raises(ValidationError, match="dynamic on sglang needs spec.drafter.numSteps"):
        spec("sglang", dynamic="fromBenchmark")
    with pytest.raises(ValidationError, match="eagleTopk unset or 1"):
        spec("sglang", dynamic="fromBenchmark", numSteps=3, eagleTopk=4, numDraftTokens=8)
    with pytest.raises(ValidationError, match="dynamic on sglang needs method eagle3, eagle or mtp"):
        DrafterServingSpec.model_validate({"engine": "sglang", "target": {"model": "/models/t"},
                                           "drafter": {"method": "ngram", "dynamic": "fromBenchmark"}})
    assert spec("sglang", dynamic="fromBenchmark", numSteps=3).drafter.dynamic == "fromBenchmark"
    assert spec("sglang", dynamic="fromBenchmark", numSteps=3, eagleTopk=1).drafter.eagle_topk == 1
    with pytest.raises(ValidationError, match="dynamic needs speculation"):
        DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/models/t"},
                                           "drafter": {"method": "none", "dynamic": "fromBenchmark"}})
    with pytest.raises(ValidationError):
        spec(dynamic="always")
    assert spec(dynamic="fromBenchmark").drafter.dynamic == "fromBenchmark"


def run(name: str, levels=None, completed="2026-12-01T00:00:00Z") -> dict:
    """A finished DrafterBenchmark as Observed.measured holds it."""
    result = {"speedup": 1.5, **({"levels": levels} if levels is not None else {})}
    return {"metadata": {"name": name}, "status": {"state": "Succeeded", "result": result, "completionTime": completed}}


SWEEP = [{"concurrency": 1, "speedup": 1.6, "tokensPerSecond": 90.0},
         {"concurrency": 16, "speedup": 1.1, "tokensPerSecond": 500.0},
         {"concurrency": 32, "speedup": 0.7, "tokensPerSecond": 700.0}]


def test_wiring_static_until_the_static_revision_has_a_sweep():
    s = spec(dynamic="fromBenchmark")
    base = revision_hash(s, IMAGE)
    schedule, status = speculation_schedule(s, IMAGE, {}, None)
    assert schedule is None and status["source"] == "static" and status["revision"] == base
    assert "no finished benchmark of it: run a DrafterBenchmark with concurrencyLevels" in status["message"]
    schedule, status = speculation_schedule(s, IMAGE, {base: [run("g0")]}, None)
    assert schedule is None and "1 finished benchmark(s) of it, none with concurrencyLevels" in status["message"]
    # another revision's sweep (an older drafter) is not this one's
    schedule, status = speculation_schedule(s, IMAGE, {"other": [run("g1", SWEEP)]}, None)
    assert schedule is None


def test_wiring_reads_the_static_revisions_gate_sweep():
    s = spec(dynamic="fromBenchmark")
    base = revision_hash(s, IMAGE)
    # the newest run with a sweep counts, whichever made it (a gate or a run by hand)
    runs = [run("single-level"), run("by-hand", SWEEP), run("g0", SWEEP[:2])]
    schedule, status = speculation_schedule(s, IMAGE, {base: runs, "other": [run("g1", [])]}, None)
    # off from the break-even between 16 (1.1x) and 32 (0.7x): 16 + 16 x 0.1 / 0.4 = 20 streams
    assert schedule == [(1, 19, 5), (20, 65536, 0)]
    assert status["source"] == "benchmark by-hand" and status["crossoverConcurrency"] == 32
    assert (status["aboveConcurrency"], status["breakEvenConcurrency"]) == (16, 20.0)
    assert status["ranges"][1] == {"start": 20, "end": 65536, "numSpeculativeTokens": 0}
    assert "break-even of by-hand: 20.0 streams, between 16 and 32" in status["message"]
    # a new schedule is a new engine process: a new revision name, stable for the same schedule
    scheduled = revision_hash(s, IMAGE, schedule)
    assert scheduled != base and status["scheduledRevision"] == scheduled
    assert scheduled == revision_hash(s, IMAGE, [list(entry) for entry in schedule])
    assert revision_hash(s, IMAGE, None) == revision_hash(s, IMAGE, []) == base
    assert revision_hash(s, IMAGE, [(1, 15, 5), (16, 65536, 0)]) not in (base, scheduled)
    # the gate left the index: the recorded schedule of the same revision is kept
    again, kept = speculation_schedule(s, IMAGE, {}, status)
    assert again == schedule and kept == status
    # the status of another revision is not reused
    assert speculation_schedule(s, IMAGE, {}, {**status, "revision": "elsewhere"})[0] is None


def test_wiring_off_without_dynamic():
    assert speculation_schedule(spec(), IMAGE, {}, None) == (None, None)
    base = revision_hash(spec(), IMAGE)
    assert speculation_schedule(spec(), IMAGE, {base: [run("g0", SWEEP)]}, None) == (None, None)


def banded_sweep(**acceptance) -> dict:
    """A finished sweep at k = 5 of the batching model's demo drafter, with the acceptance the engine exported."""
    from drafter_testbed.emulator import batching

    costs, curve = batching.StepCosts(), [0.9, 0.86, 0.88, 0.97, 0.89]
    levels = []
    for c in (1, 8, 14, 15, 32):
        spec_tps = batching.tokens_per_second(c, curve, batching.Speculation(5), costs)
        base_tps = batching.tokens_per_second(c, 0.0, batching.NO_SPECULATION, costs)
        levels.append({"concurrency": c, "tokensPerSecond": spec_tps, "baselineTokensPerSecond": base_tps,
                       "speedup": spec_tps / base_tps})
    finished = run("swept", levels)
    finished["status"]["result"].update(acceptance)
    return finished


@pytest.mark.parametrize("acceptance", [
    {"perPositionAcceptance": [0.9, 0.774, 0.681, 0.661, 0.588]},  # vLLM's per-position counters
    {"acceptanceLength": 4.6},  # SGLang exports only the mean: a constant per-token acceptance solved from it
])
def test_wiring_k_per_band_where_the_sweep_has_acceptance(acceptance):
    s = spec(dynamic="fromBenchmark")
    base = revision_hash(s, IMAGE)
    schedule, status = speculation_schedule(s, IMAGE, {base: [banded_sweep(**acceptance)]}, None)
    ks = [k for _, _, k in schedule]
    assert status["basis"] == "kPerBand" and ks == sorted(ks, reverse=True), schedule
    assert ks[0] >= 3 and ks[-1] == 0 and any(0 < k < ks[0] for k in ks), schedule  # more than on and off
    assert dynamic.validate_schedule([list(e) for e in schedule]) == schedule
    assert [(r["start"], r["end"], r["numSpeculativeTokens"]) for r in status["ranges"]] == schedule
    assert all(r["predictedSpeedup"] >= 1.0 for r in status["ranges"])
    assert status["scheduledRevision"] == revision_hash(s, IMAGE, schedule)
    assert "k per load band, predicted from the sweep of swept" in status["message"]
    SpeculationScheduleStatus.model_validate(status)  # the CRD's schema takes it


def test_wiring_on_off_where_the_sweep_has_no_acceptance():
    s = spec(dynamic="fromBenchmark")
    schedule, status = speculation_schedule(s, IMAGE, {revision_hash(s, IMAGE): [banded_sweep()]}, None)
    assert status["basis"] == "onOff" and [k for _, _, k in schedule] == [5, 0]


def test_a_traffic_mix_chooses_the_bands_from_its_categories_acceptance():
    swept = banded_sweep(perPositionAcceptance=[0.9, 0.774, 0.681, 0.661, 0.588])
    swept["status"]["result"]["acceptanceByCategory"] = [
        {"category": "code", "perPositionAcceptance": [0.95, 0.9, 0.86, 0.82, 0.78]},
        {"category": "chat", "perPositionAcceptance": [0.6, 0.35, 0.2, 0.12, 0.07]}]

    def bands(mix):
        s = DrafterServingSpec.model_validate({**spec(dynamic="fromBenchmark").model_dump(by_alias=True,
                                                                                          exclude_none=True),
                                               **({"traffic": {"mix": mix}} if mix else {})})
        return speculation_schedule(s, IMAGE, {revision_hash(s, IMAGE): [swept]}, None)

    code, code_status = bands({"code": 100})
    chat, chat_status = bands({"chat": 100})
    overall, _ = bands(None)
    assert "for the traffic mix code 100" in code_status["message"]
    # code accepts more: it drafts more, further into the load; chat drafts less
    assert code[0][2] >= overall[0][2] >= chat[0][2] and code != chat
    assert sum(e - s + 1 for s, e, k in code if k > 0 and e < 65536) > sum(e - s + 1 for s, e, k in chat
                                                                          if k > 0 and e < 65536)
    # a mix with a category the sweep did not measure falls back to the sweep's overall acceptance, and says so
    unmeasured, status = bands({"toolCalls": 100})
    assert unmeasured == overall and "no acceptance by category in it" in status["message"]


def test_a_traffic_mix_is_not_part_of_a_revision_and_needs_a_weight():
    s = spec(dynamic="fromBenchmark")
    mixed = DrafterServingSpec.model_validate({**s.model_dump(by_alias=True, exclude_none=True),
                                               "traffic": {"mix": {"code": 60, "chat": 40}}})
    assert revision_hash(mixed, IMAGE) == revision_hash(s, IMAGE)
    with pytest.raises(ValidationError, match="spec.traffic.mix needs a weight above 0"):
        DrafterServingSpec.model_validate({**s.model_dump(by_alias=True, exclude_none=True),
                                           "traffic": {"mix": {"code": 0}}})
    with pytest.raises(ValidationError, match="spec.traffic.mix takes the categories code, math"):
        DrafterServingSpec.model_validate({**s.model_dump(by_alias=True, exclude_none=True),
                                           "traffic": {"mix": {"poetry": 10}}})


def own_sweep(schedule, slower: float = 1.0, name: str = "scheduled-gate") -> dict:
    """A finished sweep of the revision that runs ``schedule``: each level at the schedule's k there, in the same
    batching model as banded_sweep; ``slower`` divides the speculative throughput where k > 0 (a prediction that
    was too kind)."""
    from drafter_testbed.emulator import batching

    costs, curve = batching.StepCosts(), [0.9, 0.86, 0.88, 0.97, 0.89]
    levels = []
    for c in (1, 8, 14, 15, 32):
        k = dynamic.k_for_batch(schedule, c, 5)
        base_tps = batching.tokens_per_second(c, 0.0, batching.NO_SPECULATION, costs)
        spec_tps = batching.tokens_per_second(c, curve[:k], batching.Speculation(k), costs) / (slower if k else 1.0) \
            if k else base_tps
        levels.append({"concurrency": c, "tokensPerSecond": spec_tps, "baselineTokensPerSecond": base_tps,
                       "speedup": spec_tps / base_tps})
    return run(name, levels, completed="2026-12-02T00:00:00Z")


PER_POSITION = {"perPositionAcceptance": [0.9, 0.774, 0.681, 0.661, 0.588]}


def test_a_schedule_whose_own_sweep_agrees_with_the_prediction_is_kept():
    s = spec(dynamic="fromBenchmark")
    base = revision_hash(s, IMAGE)
    predicted, status = speculation_schedule(s, IMAGE, {base: [banded_sweep(**PER_POSITION)]}, None)
    again, checked = speculation_schedule(s, IMAGE, {base: [banded_sweep(**PER_POSITION)],
                                                     status["scheduledRevision"]: [own_sweep(predicted)]}, None)
    assert again == predicted and checked["scheduledRevision"] == status["scheduledRevision"]
    assert "refinedWith" not in checked and "the sweep of scheduled-gate of this schedule agrees" in checked["message"]


def inflated_sweep() -> dict:
    """banded_sweep with its speculative throughput 20% low from 8 streams on (a neighbour's prefill shared the GPUs
    while it ran): its prediction drafts too little there."""
    swept = banded_sweep(**PER_POSITION)
    for level in swept["status"]["result"]["levels"]:
        if level["concurrency"] >= 8:
            level["tokensPerSecond"] *= 0.8
            level["speedup"] = level["tokensPerSecond"] / level["baselineTokensPerSecond"]
    return swept


def test_a_schedule_its_own_sweep_finds_faster_than_predicted_is_refined_once_and_kept():
    s = spec(dynamic="fromBenchmark")
    base = revision_hash(s, IMAGE)
    honest, _ = speculation_schedule(s, IMAGE, {base: [banded_sweep(**PER_POSITION)]}, None)
    predicted, status = speculation_schedule(s, IMAGE, {base: [inflated_sweep()]}, None)
    first = status["scheduledRevision"]
    assert predicted != honest
    measured = {base: [inflated_sweep()], first: [own_sweep(predicted)]}  # the schedule measured without the noise
    refined, block = speculation_schedule(s, IMAGE, measured, status)
    assert block["refinedWith"] == "scheduled-gate" and block["predictedRevision"] == first
    assert block["scheduledRevision"] == revision_hash(s, IMAGE, refined) != first
    assert "refined with the sweep of scheduled-gate of the predicted schedule (off by up to" in block["message"]
    SpeculationScheduleStatus.model_validate(block)

    def drafted(schedule):
        return [dynamic.k_for_batch(schedule, c, 5) for c in range(1, 65)]

    # Closer to what the honest sweep predicts at every load than the noisy prediction was.
    gap = sum(abs(a - b) for a, b in zip(drafted(predicted), drafted(honest)))
    assert sum(abs(a - b) for a, b in zip(drafted(refined), drafted(honest))) < gap
    # The refined revision's own sweep is never used: the schedule settles.
    measured[block["scheduledRevision"]] = [own_sweep(refined, slower=2.0, name="refined-gate")]
    assert speculation_schedule(s, IMAGE, measured, block) == (refined, block)
    # The predicted revision's sweep gone (its gate collected): the refined schedule recorded is kept.
    del measured[first]
    assert speculation_schedule(s, IMAGE, measured, block)[0] == refined


def test_a_load_where_the_schedules_k_measured_slower_than_none_drafts_less_after_refinement():
    s = spec(dynamic="fromBenchmark")
    base = revision_hash(s, IMAGE)
    predicted, status = speculation_schedule(s, IMAGE, {base: [banded_sweep(**PER_POSITION)]}, None)
    lost = own_sweep(predicted, slower=2.0)  # every drafting level below 1.0x
    refined, block = speculation_schedule(s, IMAGE, {base: [banded_sweep(**PER_POSITION)],
                                                     status["scheduledRevision"]: [lost]}, status)
    for level in lost["status"]["result"]["levels"]:
        k = dynamic.k_for_batch(predicted, level["concurrency"], 5)
        if k and level["speedup"] < 1.0:
            assert all(dynamic.k_for_batch(refined, c, 5) < k for c in range(level["concurrency"], 129)), (level, refined)
