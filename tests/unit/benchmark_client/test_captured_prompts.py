"""A benchmark's prompts from a serving's capture: the held-out side of the split a retraining made, each with its
traffic category, pinned by capture time and capped per category."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.benchmark_client.captured import CapturedPrompts, held_out_prompts, load
from drafter_operator.benchmark_client.command import captured_from
from drafter_operator.benchmark_client.prompts import PromptsError
from drafter_operator.benchmark_client.run import BenchError, Options, category_members, prompt_set
from drafter_operator.capture.categorize import classify_text
from drafter_operator.capture.dataset import captured_dataset
from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES

T0 = dt.datetime(2026, 12, 7, 9, tzinfo=dt.timezone.utc)
TEXTS = ["Write a Python function that parses a CSV file.\n```python\ndef parse(path):\n```",
         "Prove that the sum of two even integers is even.",
         "Wie komme ich am besten zum Bahnhof, und ist es weit?",
         "What should I cook tonight?",
         "Write a short story about a lighthouse keeper.",
         "Объясни, как работает трансформатор."]


def record(text: str, minute: int = 0, request_id: str = "r") -> dict:
    return {"engine": "vllm", "requestId": request_id, "kind": "prompt",
            "time": (T0 + dt.timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "content": {"model": "m", "messages": [{"role": "user", "content": text}]}}


def source(**kwargs) -> CapturedPrompts:
    return CapturedPrompts(**{"claim": None, "held_out_fraction": 0.5, **kwargs})


@given(st.lists(st.tuples(st.sampled_from(TEXTS), st.text(min_size=1, max_size=12), st.integers(0, 120)),
                max_size=40),
       st.floats(0.05, 0.95), st.integers(1, 4), st.integers(0, 120))
@settings(max_examples=150, deadline=None)
def test_the_set_is_the_held_out_side_captured_before_the_bound_at_most_n_per_category(
        draws, fraction, per_category, bound_minute):
    records = [record(f"{text} {suffix}", minute) for text, suffix, minute in draws]
    bound = T0 + dt.timedelta(minutes=bound_minute)
    prompts = held_out_prompts(records, source(held_out_fraction=fraction, captured_before=bound,
                                               per_category=per_category))
    before = [r for r in records if dt.datetime.fromisoformat(r["time"].replace("Z", "+00:00")) < bound]
    split = captured_dataset(before, fraction)
    held_out = [(p["text"], p["category"]) for p in split.held_out_prompts()]
    trained = {json.dumps(row["conversations"]) for row in split.train}
    # only held-out prompts of records before the bound, in capture order, never a train one
    assert [(p.text, p.category) for p in prompts] == [
        entry for i, entry in enumerate(held_out)
        if Counter(c for _, c in held_out[:i])[entry[1]] < per_category]
    assert not {json.dumps([{"role": "user", "content": p.text}]) for p in prompts} & trained
    assert all(n <= per_category for n in Counter(p.category for p in prompts).values())
    assert all(p.category == classify_text(p.text) for p in prompts)


def test_a_prompt_captured_after_the_bound_or_without_a_time_is_not_in_the_set():
    records = [record(text, minute=i) for i, text in enumerate(TEXTS)]
    everything = held_out_prompts(records, source(held_out_fraction=0.99))
    assert len(everything) == len(TEXTS)
    pinned = held_out_prompts([*records, {**record("late question?"), "time": None}],
                              source(held_out_fraction=0.99, captured_before=T0 + dt.timedelta(minutes=3)))
    assert [p.text for p in pinned] == TEXTS[:3]


def test_the_categories_are_the_classifiers_and_a_category_measurement_uses_only_the_captured_set(tmp_path):
    hour = tmp_path / "pod-a"
    hour.mkdir()
    (hour / "capture-2026-12-07T09.jsonl").write_text(
        "".join(json.dumps(record(text, i)) + "\n" for i, text in enumerate(TEXTS)) + '{"torn', encoding="utf-8")
    options = Options(url="http://127.0.0.1:1", engine="vllm",
                      captured=CapturedPrompts(tmp_path, 0.99), acceptance_by_category=True)
    prompts = prompt_set(options)
    assert {p.category for p in prompts} == {"code", "math", "nonEnglish", "chat", "writing"}
    texts, members = category_members(options, prompts)
    assert texts == [p.text for p in prompts]  # no built-in prompt is added to a captured set
    assert set(members) <= set(TRAFFIC_CATEGORIES)


def test_an_empty_capture_or_a_missing_mount_fails_with_the_fix(tmp_path):
    with pytest.raises(PromptsError, match="not mounted"):
        load(CapturedPrompts(tmp_path / "absent", 0.1))
    with pytest.raises(PromptsError, match="no held-out prompt captured before 2026-12-07T09:00:00Z.*capture for longer"):
        load(CapturedPrompts(tmp_path, 0.1, captured_before=T0))


@pytest.mark.parametrize("argv, message", [
    (dict(captured_prompts="/c", held_out_fraction=None), "needs --held-out-fraction"),
    (dict(captured_prompts="/c", held_out_fraction=0.1, captured_before="yesterday"), "not an RFC 3339 time"),
    (dict(captured_prompts="/c", held_out_fraction=0.0), "above 0 and below 1"),
    (dict(captured_prompts="/c", held_out_fraction=0.1, captured_per_category=0), "at least 1"),
])
def test_bad_captured_options_are_refused_naming_the_option(argv, message):
    args = argparse.Namespace(**{"captured_before": None, "captured_per_category": 8, **argv})
    with pytest.raises((BenchError, PromptsError), match=message):
        captured_from(args)


def test_a_captured_set_and_a_prompts_file_are_alternatives(tmp_path):
    with pytest.raises(BenchError, match="alternatives"):
        Options(url="u", engine="vllm", prompts_file="p.json", captured=CapturedPrompts(tmp_path, 0.1))
