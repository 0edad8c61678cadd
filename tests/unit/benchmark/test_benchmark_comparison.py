"""DrafterBenchmark spec.candidates (pure): one candidate's run at a time, failures with the candidate's reason,
and the comparison with the pick at each load."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import load_picks
from drafter_operator.api import DrafterBenchmark
from drafter_operator.controllers.benchmark.comparison import candidate_run_name
from drafter_operator.controllers.benchmark.decide import decide
from drafter_operator.controllers.benchmark.state import BenchmarkState, ObservedServing
from tests.support.benchmarks import FAST, IMAGE, SERVING, T0, condition, created_job, created_runs

CANDIDATES = ("kimi-eagle3", "kimi-suffix", "kimi-dspark")


def comparison(generation: int = 1, **spec) -> dict:
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
            "metadata": {"name": "families", "namespace": "team", "uid": "cmp-1", "generation": generation,
                         "creationTimestamp": "2026-11-30T12:00:00Z"},
            "spec": {"candidates": [{"name": name} for name in CANDIDATES], "numPrompts": 32, "maxTokens": 256,
                     "concurrencyLevels": [1, 8, 32], "baseline": {"servingRef": {"name": "kimi-baseline"}},
                     "timeout": "10m", **spec}}


def serving_body(name: str, method: str = "eagle3") -> dict:
    body = copy.deepcopy(SERVING)
    body["metadata"] = {"name": name, "namespace": "team"}
    if method == "none":
        body["spec"]["drafter"] = {"method": "none"}
        body["spec"].pop("acceptance", None)
    return body


def run(body: dict, index: int, state: str | None = None, levels: list[tuple[int, float]] = (), owner: str = "cmp-1",
        generation: int = 1, break_even: float | None = None) -> dict:
    result = {"levels": [{"concurrency": c, "speedup": s, "tokensPerSecond": 80.0 * s} for c, s in levels]}
    if break_even is not None:
        result["crossover"] = {"belowConcurrency": 16, "estimate": break_even}
    status = {"state": state, "drafter": f"method-{index}", "result": result} if state else {}
    if state == "Failed":
        status["conditions"] = [{"type": "Failed", "status": "True", "message": "serving kimi-dspark is not Ready"}]
    return {"metadata": {"name": candidate_run_name(body["metadata"]["name"], generation, index),
                         "labels": {"drafter.dev/comparison": body["metadata"]["name"]},
                         "ownerReferences": [{"uid": owner, "controller": True}]},
            "spec": {}, "status": status}


def state(body: dict, runs=(), servings=None) -> BenchmarkState:
    servings = tuple(serving_body(n) for n in CANDIDATES) if servings is None else servings
    return BenchmarkState(benchmark=body, target=None, baseline=ObservedServing(serving=serving_body("kimi-baseline", "none")),
                          jobs=(), job_pods=(), now=T0, image=IMAGE, candidate_servings=servings,
                          candidate_runs=tuple(runs))


def test_the_first_candidate_is_measured_by_a_run_of_its_own_with_the_comparisons_settings():
    body = comparison()
    plan = decide(state(body))
    (child,) = created_runs(plan)
    assert created_job(plan) is None  # no Job of its own: each candidate's run has one
    assert child["metadata"]["name"] == "families-c1-g1"
    assert child["metadata"]["labels"]["drafter.dev/comparison"] == "families"
    expected = {k: v for k, v in body["spec"].items() if k != "candidates"}
    assert child["spec"] == {**expected, "servingRef": {"name": "kimi-eagle3"}}
    DrafterBenchmark.model_validate(child)  # a valid single run, as the apiserver will check it
    assert plan.status["state"] == "Running" and "candidate 1 of 3" in condition(plan, "Complete")["message"]
    assert [c["serving"] for c in plan.status["comparison"]["candidates"]] == list(CANDIDATES)


def test_candidates_run_one_after_another_never_together():
    body = comparison()
    running = decide(state(body, [run(body, 0, "Running")]))
    assert created_runs(running) == [] and running.status["state"] == "Running"
    assert "DrafterBenchmark families-c1-g1 is Running" in condition(running, "Complete")["message"]
    second = decide(state(body, [run(body, 0, "Succeeded", [(1, 1.7)])]))
    assert [b["metadata"]["name"] for b in created_runs(second)] == ["families-c2-g1"]
    assert created_runs(second)[0]["spec"]["servingRef"] == {"name": "kimi-suffix"}


def test_a_failed_candidate_fails_the_comparison_with_its_reason_and_starts_no_other():
    body = comparison()
    plan = decide(state(body, [run(body, 0, "Succeeded", [(1, 1.7)]), run(body, 1, "Failed")]))
    assert created_runs(plan) == [] and plan.status["state"] == "Failed"
    failed = condition(plan, "Failed")
    assert failed["reason"] == "CandidateFailed"
    assert failed["message"].startswith("candidate kimi-suffix: DrafterBenchmark families-c2-g1 failed: serving")


def test_a_missing_candidate_fails_before_any_sweep_is_spent():
    body = comparison()
    servings = (serving_body("kimi-eagle3"), serving_body("kimi-suffix"), None)
    plan = decide(state(body, servings=servings))
    assert created_runs(plan) == [] and plan.status["state"] == "Failed"
    failed = condition(plan, "Failed")
    assert failed["reason"] == "ServingNotFound" and "spec.candidates: DrafterServing 'kimi-dspark' not found" in failed["message"]


def test_all_succeeded_the_comparison_picks_per_load_only_where_every_candidate_measured():
    body = comparison()
    runs = [run(body, 0, "Succeeded", [(1, 1.71), (8, 1.29), (32, 0.64), (14, 1.01)], break_even=14.3),
            run(body, 1, "Succeeded", [(1, 3.28), (8, 1.40), (32, 0.45)], break_even=12.2),
            run(body, 2, "Succeeded", [(1, 2.42), (8, 1.30), (32, 0.37)])]
    plan = decide(state(body, runs))
    assert plan.status["state"] == "Succeeded" and created_runs(plan) == []
    result = plan.status["comparison"]
    assert [(c["serving"], c.get("breakEven")) for c in result["candidates"]] == [
        ("kimi-eagle3", 14.3), ("kimi-suffix", 12.2), ("kimi-dspark", None)]
    assert [(lv["concurrency"], lv.get("pick")) for lv in result["levels"]] == [
        (1, "kimi-suffix"), (8, "kimi-suffix"), (14, None), (32, load_picks.NO_SPECULATION)]
    level14 = next(lv for lv in result["levels"] if lv["concurrency"] == 14)
    assert [s.get("speedup") for s in level14["speedups"]] == [1.01, None, None]
    assert "1: kimi-suffix, 8: kimi-suffix, 32: no speculation" in condition(plan, "Complete")["message"]
    DrafterBenchmark.model_validate({**body, "status": plan.status})  # the status schema takes it


def test_only_runs_this_comparison_controls_count_and_an_older_generations_are_deleted():
    body = comparison(generation=2)
    copied = run(body, 0, "Succeeded", [(1, 9.9)], owner="someone-else", generation=2)
    old = run(body, 0, "Succeeded", [(1, 1.5)], generation=1)
    plan = decide(state(body, [copied, old]))
    assert [b["metadata"]["name"] for b in created_runs(plan)] == ["families-c1-g2"]  # the copy is not its run
    assert plan.deletes == ["/apis/drafter.dev/v1alpha1/namespaces/team/drafterbenchmarks/families-c1-g1"]


def test_a_finished_comparison_is_final():
    body = comparison()
    runs = [run(body, i, "Succeeded", [(1, 1.5)]) for i in range(3)]
    first = decide(state(body, runs))
    body["status"] = first.status
    again = decide(state(body, runs))
    assert not again.writes_anything()


@pytest.mark.parametrize("change, message", [
    ({"concurrencyLevels": None}, "spec.candidates are compared by their speedup at each load"),
    ({"gate": {"minSpeedup": "1.2"}}, "spec.gate judges one serving"),
    ({"candidates": [{"name": "a"}, {"name": "a"}]}, "must name each DrafterServing once"),
    ({"candidates": [{"name": "a"}, {"name": "kimi-baseline"}]}, "must not be one of spec.candidates"),
    ({"servingRef": {"name": "a"}}, "exactly one of spec.servingRef"),
])
def test_a_comparison_is_refused_with_the_field_and_the_fix(change: dict, message: str):
    body = comparison()
    body["spec"].update(change)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    with pytest.raises(ValueError, match=message):
        DrafterBenchmark.model_validate(body)


@FAST
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]),
                       st.dictionaries(st.sampled_from([1, 2, 4, 8, 16, 32]), st.floats(0.1, 4.0), min_size=1),
                       min_size=1))
def test_the_pick_is_the_fastest_of_all_where_all_measured_and_none_where_none_beats_the_baseline(speedups):
    picks = load_picks.picks_per_level(speedups)
    assert list(picks) == sorted({c for measured in speedups.values() for c in measured})
    for level, pick in picks.items():
        measured = [m[level] for m in speedups.values() if level in m]
        if len(measured) < len(speedups):
            assert pick is None
        elif max(measured) <= 1.0:
            assert pick == load_picks.NO_SPECULATION
        else:
            assert speedups[pick][level] == max(measured)


class CountingKube:
    """The reads a reconcile makes: the comparison, its baseline's serving and Service, and the runs it lists."""

    def __init__(self, body: dict, runs: list[dict]):
        self.body, self.runs, self.gets = body, runs, []

    def get(self, path: str):
        self.gets.append(path)
        if path.endswith("/drafterbenchmarks/families"):
            return copy.deepcopy(self.body)
        return serving_body(path.rsplit("/", 1)[1], "none") if "/drafterservings/" in path else None

    def list(self, path: str, label_selector: str | None = None):
        return copy.deepcopy(self.runs) if path.endswith("/drafterbenchmarks") else []


def test_the_candidates_servings_are_read_until_the_first_run_exists_not_on_every_tick():
    from drafter_operator.controllers.benchmark.apply import BenchmarkReconciler

    body = comparison()
    before = CountingKube(body, [])
    state = BenchmarkReconciler(before, image=IMAGE).observe("team", "families")
    assert [p.rsplit("/", 1)[1] for p in before.gets if "/drafterservings/" in p] == ["kimi-baseline", *CANDIDATES]
    assert len(state.candidate_servings) == 3
    during = CountingKube(body, [run(body, 0, "Running")])
    state = BenchmarkReconciler(during, image=IMAGE).observe("team", "families")
    assert [p.rsplit("/", 1)[1] for p in during.gets if "/drafterservings/" in p] == ["kimi-baseline"]
    assert state.candidate_servings == () and len(state.candidate_runs) == 1
    # An older generation's run is no reason to skip the check of the new spec's candidates.
    stale = CountingKube(comparison(generation=2), [run(body, 0, "Succeeded", [(1, 1.5)], generation=1)])
    assert len(BenchmarkReconciler(stale, image=IMAGE).observe("team", "families").candidate_servings) == 3


def swept(index: int, by_category: dict[str, float], body: dict) -> dict:
    """Candidate ``index``'s finished sweep at k = 4 in the batching model (overall per-token acceptance 0.75), with
    a per-token acceptance per category as its counters measured it."""
    from drafter_testbed.emulator import batching

    def unconditional(a: float) -> list[float]:
        return [a ** (i + 1) for i in range(4)]

    costs = batching.StepCosts()
    levels = []
    for c in (1, 8, 32):
        spec_tps = batching.tokens_per_second(c, [0.75] * 4, batching.Speculation(4), costs)
        base_tps = batching.tokens_per_second(c, 0.0, batching.NO_SPECULATION, costs)
        levels.append({"concurrency": c, "speedup": spec_tps / base_tps, "tokensPerSecond": spec_tps,
                       "baselineTokensPerSecond": base_tps})
    finished = run(body, index, "Succeeded")
    finished["status"].update(drafter="eagle3:/models/drafters/d%d" % index, numSpeculativeTokens=4)
    finished["status"]["result"] = {"levels": levels, "perPositionAcceptance": unconditional(0.75),
                                    "acceptanceByCategory": [{"category": category,
                                                              "perPositionAcceptance": unconditional(a)}
                                                             for category, a in by_category.items()]}
    return finished


@pytest.mark.parametrize(("mix", "pick"), [({"code": 100}, "kimi-eagle3"), ({"chat": 100}, "kimi-suffix"),
                                           ({"code": 10, "chat": 90}, "kimi-suffix")])
def test_a_traffic_mix_picks_the_candidate_its_categories_favour_where_the_prompts_measured_a_tie(mix, pick):
    body = comparison(traffic={"mix": mix}, acceptanceByCategory=True,
                      candidates=[{"name": "kimi-eagle3"}, {"name": "kimi-suffix"}])
    runs = [swept(0, {"code": 0.9, "chat": 0.55}, body), swept(1, {"code": 0.55, "chat": 0.9}, body)]
    plan = decide(state(body, runs, servings=tuple(serving_body(n) for n in ("kimi-eagle3", "kimi-suffix"))))
    compared = plan.status["comparison"]
    assert compared["basis"] == "trafficMix"
    assert all(level["pick"] == pick for level in compared["levels"] if level["concurrency"] == 1)
    one = next(level for level in compared["levels"] if level["concurrency"] == 1)
    by_name = {s["serving"]: s for s in one["speedups"]}
    assert by_name["kimi-eagle3"]["speedup"] == by_name["kimi-suffix"]["speedup"]  # the prompts measured a tie
    assert by_name[pick]["mixSpeedup"] > max(s["mixSpeedup"] for n, s in by_name.items() if n != pick)
    assert "for the traffic mix" in condition(plan, "Complete")["message"]
    # Without the mix, the tie goes to the candidate named first.
    plain = comparison(acceptanceByCategory=True, candidates=[{"name": "kimi-eagle3"}, {"name": "kimi-suffix"}])
    measured = decide(state(plain, [swept(0, {"code": 0.9, "chat": 0.55}, plain),
                                    swept(1, {"code": 0.55, "chat": 0.9}, plain)],
                            servings=tuple(serving_body(n) for n in ("kimi-eagle3", "kimi-suffix"))))
    assert measured.status["comparison"]["basis"] == "measured"
    assert next(level for level in measured.status["comparison"]["levels"] if level["concurrency"] == 1)["pick"] \
        == "kimi-eagle3"


def test_a_mix_a_candidate_has_no_acceptance_for_falls_back_to_the_measured_speedups_and_says_why():
    body = comparison(traffic={"mix": {"math": 100}}, acceptanceByCategory=True,
                      candidates=[{"name": "kimi-eagle3"}, {"name": "kimi-suffix"}])
    runs = [swept(0, {"code": 0.9, "math": 0.5}, body), swept(1, {"code": 0.55, "chat": 0.9}, body)]
    plan = decide(state(body, runs, servings=tuple(serving_body(n) for n in ("kimi-eagle3", "kimi-suffix"))))
    assert plan.status["comparison"]["basis"] == "measured"
    assert "cannot predict the traffic mix math 100" in condition(plan, "Complete")["message"]


def test_traffic_needs_candidates_and_acceptance_by_category():
    with pytest.raises(Exception, match="spec.traffic picks among spec.candidates"):
        DrafterBenchmark.model_validate(comparison(traffic={"mix": {"code": 1}}))
    # A candidate's own run measures its serving: the mix stays with the comparison.
    from drafter_operator.controllers.benchmark.comparison import candidate_run
    body = comparison(traffic={"mix": {"code": 1}}, acceptanceByCategory=True)
    assert "traffic" not in candidate_run(body, 0)["spec"]
    DrafterBenchmark.model_validate(candidate_run(body, 0))
