"""`kubectl drafter compare`: families side by side, and the pick at each load (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.kubectl_plugin import compare
from drafter_operator.kubectl_plugin.actions import PluginError


def sweep(name: str, serving: str, speedups: dict[int, float], state: str = "Succeeded", revision: str = "r1",
          break_even: float | None = None) -> dict:
    levels = [{"concurrency": c, "tokensPerSecond": 100.0 * s, "speedup": s} for c, s in speedups.items()]
    result: dict = {"levels": levels}
    if break_even is not None:
        result["crossover"] = {"aboveConcurrency": 14, "belowConcurrency": 15, "estimate": break_even}
    return {"metadata": {"name": name}, "spec": {"servingRef": {"name": serving}},
            "status": {"state": state, "revision": revision, "result": result}}


def serving(method: str, revision: str = "r1") -> dict:
    return {"spec": {"drafter": {"method": "eagle3"}},
            "status": {"revisions": [{"name": "r0", "drafter": "none"},
                                     {"name": revision, "drafterSpec": {"method": method}}]}}


def test_the_pick_follows_the_load():
    eagle = compare.candidate(sweep("eagle", "kimi-eagle3", {1: 1.57, 8: 1.31, 32: 0.71}, break_even=14.27),
                              serving("eagle3"))
    suffix = compare.candidate(sweep("suffix", "kimi-suffix", {1: 2.4, 8: 1.1, 32: 0.93}), serving("suffix"))
    ngram = compare.candidate(sweep("ngram", "kimi-ngram", {1: 1.2, 8: 1.35, 32: 0.98}), serving("ngram"))
    result = compare.compare([eagle, suffix, ngram])
    assert result.levels == [1, 8, 32]
    # Named by their servings (what one would serve), each once.
    assert result.picks == {1: "kimi-suffix", 8: "kimi-ngram", 32: compare.NO_SPECULATION}
    table = compare.render(result).splitlines()
    assert table[0].split() == ["STREAMS", "kimi-eagle3", "(eagle3)", "kimi-suffix", "(suffix)", "kimi-ngram", "(ngram)",
                                "PICK"]
    assert table[3].split() == ["32", "0.71x", "0.93x", "0.98x", "no", "speculation"]
    assert table[4].split() == ["break-even", "14.27", "-", "-"]
    assert table[5].split() == ["revision", "r1", "(static)", "r1", "(static)", "r1", "(static)"]


def test_the_table_says_which_revision_and_schedule_each_column_measured():
    # a scheduled revision (spec.drafter.dynamic) beside a static family compares a schedule with a family
    scheduled = serving("eagle3", revision="r2")
    scheduled["status"]["speculationSchedule"] = {"scheduledRevision": "r2", "ranges": [
        {"start": 1, "end": 6, "numSpeculativeTokens": 4}, {"start": 7, "end": 65536, "numSpeculativeTokens": 0}]}
    eagle = compare.candidate(sweep("eagle", "kimi", {1: 1.6}, revision="r2"), scheduled)
    static = compare.candidate(sweep("eagle-static", "kimi", {1: 1.6}, revision="r1"), scheduled)
    assert (eagle.revision, eagle.schedule) == ("r2", "k 4/0 by load") and static.schedule == "static"
    assert compare.rows(compare.compare([eagle, static]))[-1] == ["revision", "r2 (k 4/0 by load)", "r1 (static)", ""]
    assert compare.candidate(sweep("b", "s", {1: 1.1}), None).schedule == "?"


def test_two_runs_of_one_serving_keep_their_benchmark_names():
    before = compare.candidate(sweep("before", "kimi", {1: 1.2}), None)
    after = compare.candidate(sweep("after", "kimi", {1: 1.5}), None)
    other = compare.candidate(sweep("s", "kimi-suffix", {1: 1.4}), None)
    result = compare.compare([before, after, other])
    assert result.picks == {1: "after"} and compare.rows(result)[0][1:4] == ["before (?)", "after (?)", "kimi-suffix (?)"]


def test_the_family_is_the_measured_revisions():
    # the serving's spec says eagle3; the benchmark measured revision r1, which ran dspark
    assert compare.candidate(sweep("b", "s", {1: 1.1}), serving("dspark")).method == "dspark"
    record = {"status": {"revisions": [{"name": "r1", "drafter": "suffix"}]}}
    assert compare.candidate(sweep("b", "s", {1: 1.1}), record).method == "suffix"
    assert compare.candidate(sweep("b", "s", {1: 1.1}, revision="gone"), serving("dspark")).method == "eagle3"
    assert compare.candidate(sweep("b", "s", {1: 1.1}), None).method == "?"


def test_a_level_not_every_candidate_measured_has_no_pick():
    # a sweep's refinements lie around its own break-even: a pick there would favour whoever measured it
    one = compare.candidate(sweep("one", "a", {1: 1.5, 12: 1.02}), None)
    two = compare.candidate(sweep("two", "b", {1: 1.4, 8: 1.2}), None)
    result = compare.compare([one, two])
    assert result.levels == [1, 8, 12]
    assert result.picks == {1: "a", 8: compare.NOT_ALL_MEASURED, 12: compare.NOT_ALL_MEASURED}
    assert compare.rows(result)[2] == ["8", "-", "1.20x", "-"]


@pytest.mark.parametrize("state", [None, "Running", "Failed"])
def test_an_unfinished_run_is_refused_with_what_to_do(state):
    body = sweep("b", "s", {1: 1.1}, state=state)
    with pytest.raises(PluginError, match=r"drafterbenchmark/b is .*compare Succeeded runs"):
        compare.candidate(body, None)


def test_a_run_without_speedups_names_the_fields_to_set():
    body = sweep("b", "s", {})
    with pytest.raises(PluginError, match="spec.concurrencyLevels and a spec.baseline"):
        compare.candidate(body, None)
    with pytest.raises(PluginError, match="named twice"):
        one = compare.candidate(sweep("b", "s", {1: 1.1}), None)
        compare.compare([one, one])


speedup_maps = st.dictionaries(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), st.floats(0.2, 5.0), min_size=1)


@given(st.lists(speedup_maps, min_size=1, max_size=5))
def test_the_pick_is_the_fastest_measured_candidate_and_only_above_one(maps):
    candidates = [compare.Candidate(f"b{i}", "s", "eagle3", m) for i, m in enumerate(maps)]
    result = compare.compare(candidates)
    for level in result.levels:
        measured = {result.labels[c.benchmark]: c.speedups[level] for c in candidates if level in c.speedups}
        pick = result.picks[level]
        if len(measured) < len(candidates):
            assert pick == compare.NOT_ALL_MEASURED
        elif pick == compare.NO_SPECULATION:
            assert max(measured.values()) <= 1.0
        else:
            assert measured[pick] == max(measured.values()) > 1.0
    assert len(compare.rows(result)) == 3 + len(result.levels)
