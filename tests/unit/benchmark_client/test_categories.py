"""Acceptance by traffic category: the API, the prompt sets, the measurement against the emulator."""

from __future__ import annotations

import asyncio
import json

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.benchmark import BenchmarkResult, CategoryResult, DrafterBenchmarkSpec
from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES
from drafter_operator.benchmark_client import prompts as prompt_sets
from drafter_operator.benchmark_client.result import termination_message
from drafter_operator.benchmark_client.run import Options, run
from drafter_operator.benchmark_client.stream import BenchError
from drafter_operator.controllers.benchmark.decide import bench_argv
from tests.support.emulator_server import emulator, vllm_argv

SERVING = {"servingRef": {"name": "s"}}


# ------------------------------------------------------------------------------------------------------ the API

def test_prompts_may_carry_a_category_and_plain_strings_stay_valid():
    spec = DrafterBenchmarkSpec.model_validate({**SERVING, "numPrompts": 2, "acceptanceByCategory": True, "prompts": {
        "categorized": [{"text": "def f(): pass", "category": "code"}, {"text": "Hallo"}]}})
    assert [p.category for p in spec.prompts.categorized] == ["code", None]
    assert spec.to_json()["prompts"]["categorized"][0] == {"text": "def f(): pass", "category": "code"}
    plain = DrafterBenchmarkSpec.model_validate({**SERVING, "numPrompts": 1, "prompts": {"inline": ["hi"]}})
    assert plain.prompts.inline == ["hi"] and plain.acceptance_by_category is None
    assert "acceptanceByCategory" not in plain.to_json()  # unset stays unset: old objects read as they did


def test_an_unknown_category_names_the_field_and_the_vocabulary():
    with pytest.raises(pydantic.ValidationError) as caught:
        DrafterBenchmarkSpec.model_validate({**SERVING, "prompts": {"categorized": [{"text": "x", "category": "poetry"}]}})
    assert "categorized" in str(caught.value) and "category" in str(caught.value) and "'code'" in str(caught.value)


def test_the_prompt_sources_are_alternatives_and_num_prompts_counts_categorized_ones():
    with pytest.raises(pydantic.ValidationError, match="exactly one of prompts.inline .*prompts.categorized"):
        DrafterBenchmarkSpec.model_validate({**SERVING, "prompts": {"inline": ["a"], "categorized": [{"text": "b"}]}})
    with pytest.raises(pydantic.ValidationError, match="numPrompts exceeds the number of spec.prompts.categorized"):
        DrafterBenchmarkSpec.model_validate({**SERVING, "numPrompts": 3, "prompts": {"categorized": [{"text": "b"}]}})


def test_the_job_is_asked_for_categories_only_when_the_spec_says_so():
    spec = DrafterBenchmarkSpec.model_validate({**SERVING, "acceptanceByCategory": True})
    assert "--acceptance-by-category" in bench_argv(spec, "http://t", "vllm", [], None, None, [])
    assert "--acceptance-by-category" not in bench_argv(DrafterBenchmarkSpec.model_validate(SERVING),
                                                         "http://t", "vllm", [], None, None, [])


# -------------------------------------------------------------------------------------------------- prompt sets

prompt_entries = st.lists(st.one_of(
    st.text(min_size=1, max_size=30).filter(str.strip),
    st.builds(lambda text, category: {"text": text, "category": category} if category else {"text": text},
              st.text(min_size=1, max_size=30).filter(str.strip), st.sampled_from((None, *TRAFFIC_CATEGORIES)))),
    min_size=1, max_size=12)


@given(prompt_entries)
def test_a_json_list_of_strings_and_objects_keeps_each_prompt_and_its_category(entries):
    parsed = prompt_sets.parse_set(json.dumps(entries))
    assert [p.text for p in parsed] == [e if isinstance(e, str) else e["text"] for e in entries]
    assert [p.category for p in parsed] == [None if isinstance(e, str) else e.get("category") for e in entries]
    members = prompt_sets.by_category(parsed)
    assert sorted(i for m in members.values() for i in m) == [i for i, p in enumerate(parsed) if p.category]
    assert list(members) == [c for c in TRAFFIC_CATEGORIES if c in members]


@pytest.mark.parametrize("entry, message", [
    ({"text": "x", "category": "poetry"}, r"\[1\]\.category: unknown category 'poetry': use one of code, math"),
    ({"text": "x", "kind": "code"}, r"\[1\]: unknown key\(s\) \['kind'\]"),
    (3, r"\[1\]: a prompt is a string or an object with a \"text\" string"),
])
def test_a_bad_prompt_entry_is_named_with_its_position_and_the_fix(entry, message):
    with pytest.raises(prompt_sets.PromptsError, match=message):
        prompt_sets.parse_set(json.dumps(["fine", entry]), "--prompts-file p.json")


def test_the_built_in_set_has_several_prompts_of_every_category_and_keeps_its_measured_six():
    measured = prompt_sets.builtin_set()
    assert len(measured) == 6 and prompt_sets.builtin() == prompt_sets.texts(measured)
    every = prompt_sets.category_set(list(measured), None)
    members = prompt_sets.by_category(every)
    assert list(members) == list(TRAFFIC_CATEGORIES)
    assert all(len(m) >= 3 for m in members.values()), {c: len(m) for c, m in members.items()}
    assert all(len(every[i].text) >= 10000 for i in members["longContext"])  # genuinely long: > 2,000 tokens
    assert prompt_sets.category_set(list(measured), "file.txt") == list(measured)


# ------------------------------------------------------------------------------------- against the emulator

@pytest.mark.timing  # orders two categories' speedups measured on the wall clock
def test_a_run_reports_acceptance_throughput_and_speedup_for_every_category():
    """The emulator with DRAFTER_EMULATOR_CATEGORIES on: each category's acceptance is measured apart, in the
    order the published drafter shows (code and math above tool calls, above chat and writing, other languages
    last), and the baseline's throughput on the same prompts gives each category its speedup."""
    async def measure():
        async with emulator(vllm_argv(), category_acceptance=True) as (url, engine, _s), \
                emulator(vllm_argv(spec=False)) as (base_url, baseline, _b):
            options = Options(url=url, metrics_urls=(url,), baseline_url=base_url, num_prompts=2, max_tokens=96,
                              num_speculative_tokens=5, acceptance_by_category=True)
            return await run(options), engine.state()["totals"], baseline.state()["totals"]
    result, totals, base_totals = asyncio.run(asyncio.wait_for(measure(), 180))
    rows = {row.category: row for row in result.acceptance_by_category}
    assert list(rows) == list(TRAFFIC_CATEGORIES)
    members = prompt_sets.by_category(prompt_sets.category_set(list(prompt_sets.builtin_set()), None))
    assert {c: r.prompts for c, r in rows.items()} == {c: len(m) for c, m in members.items()}
    for row in rows.values():
        assert row.acceptance_unavailable is None and 1 < row.acceptance_length <= 6 and len(row.per_position_acceptance) == 5
        assert row.tokens_per_second > 0 and row.baseline_tokens_per_second > 0
        assert row.speedup == pytest.approx(row.tokens_per_second / row.baseline_tokens_per_second, rel=1e-3)
    length = {c: r.acceptance_length for c, r in rows.items()}
    assert min(length["code"], length["math"]) > length["toolCalls"] > max(length["chat"], length["writing"])
    assert max(length["chat"], length["writing"]) > length["nonEnglish"]
    assert rows["code"].speedup > rows["nonEnglish"].speedup
    every = sum(r.prompts for r in rows.values())
    assert totals["requests"] == 1 + 2 + every and base_totals["requests"] == 1 + 2 + every
    assert result.total_tokens == 2 * 96  # the run's own figures cover the measured prompts only


def test_without_tagged_prompts_the_run_refuses_before_sending_anything():
    with pytest.raises(BenchError, match="--acceptance-by-category needs prompts tagged with a traffic category"):
        asyncio.run(run(Options(url="http://127.0.0.1:9", prompts=("a", "b"), num_prompts=1,
                                acceptance_by_category=True)))


def test_the_termination_message_keeps_every_categorys_figures():
    rows = [CategoryResult(category=c, prompts=3, acceptance_length=3.1234, acceptance_rate=0.4321,
                           per_position_acceptance=[0.8] * 8, tokens_per_second=123.456,
                           baseline_tokens_per_second=80.123, speedup=1.5409, acceptance_unavailable="x" * 300)
            for c in TRAFFIC_CATEGORIES]
    result = BenchmarkResult(tokens_per_second=1.0, acceptance_by_category=rows, per_position_acceptance=[0.5] * 16)
    kept = BenchmarkResult.model_validate_json(termination_message(result, limit=2000))
    assert [(r.category, r.acceptance_length, r.speedup) for r in kept.acceptance_by_category] == \
        [(c, 3.1234, 1.5409) for c in TRAFFIC_CATEGORIES]
    assert kept.truncated


def test_categories_over_plain_inline_strings_are_refused_with_the_fix():
    with pytest.raises(pydantic.ValidationError, match="give them as spec.prompts.categorized"):
        DrafterBenchmarkSpec.model_validate({**SERVING, "numPrompts": 1, "acceptanceByCategory": True,
                                             "prompts": {"inline": ["hi"]}})
    assert DrafterBenchmarkSpec.model_validate({**SERVING, "numPrompts": 1, "acceptanceByCategory": False,
                                                "prompts": {"inline": ["hi"]}}).acceptance_by_category is False
