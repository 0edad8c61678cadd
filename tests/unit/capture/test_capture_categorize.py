"""A request's traffic category, read from the request alone (capture/categorize.py): what the operator tags captured
prompts with, and what the emulator's acceptance by category follows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.benchmark_client import prompts as prompt_sets
from drafter_operator.capture import categorize
from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES


def test_the_classifier_agrees_with_every_tag_of_the_built_in_set():
    every = prompt_sets.category_set(list(prompt_sets.builtin_set()), None)
    assert {p.text[:40]: categorize.classify_text(p.text) for p in every} == {p.text[:40]: p.category for p in every}


@pytest.mark.parametrize("text, category", [
    ("Here:\n```python\nprint(1)\n```\nwhy does it print 1?", "code"),
    ("def f(x):\n    return x\nclass A:\n    pass\nimport os\n", "code"),
    ("Prove that the sum of the first n odd integers is n^2, by induction.", "math"),
    ("Write a short story about a lighthouse keeper, in a quiet voice.", "writing"),
    ("What's a good name for a grey cat?", "chat"),
    ("Wie spät ist es in Tokio, und ist das nicht sehr früh für einen Anruf bei der Familie?", "nonEnglish"),
    ("Pourquoi le ciel est-il bleu et la mer aussi ? Je ne comprends pas la différence.", "nonEnglish"),
    ("Объясни, пожалуйста, как работает двигатель внутреннего сгорания.", "nonEnglish"),
    ("请用简单的语言解释一下光合作用。", "nonEnglish"),
    ('{"name": "lookup", "parameters": {"type": "object"}} Call it: {"tool": "lookup", "arguments": {}}', "toolCalls"),
    ("word " * 2000, "longContext"),
])
def test_the_classifier_reads_the_kind_of_traffic_from_the_text(text, category):
    assert categorize.classify_text(text) == category


@given(st.text(max_size=400), st.booleans())
def test_every_text_gets_one_category_of_the_vocabulary_the_same_each_time(text, tools):
    category = categorize.classify_text(text, tools=tools)
    assert category in TRAFFIC_CATEGORIES and category == categorize.classify_text(text, tools=tools)
    assert not tools or category == "toolCalls"


def test_a_request_body_is_read_as_the_engine_sees_it_and_offering_tools_makes_it_a_tool_call():
    body = {"model": "m", "messages": [{"role": "user", "content": "What's the weather in Oslo?"}], "max_tokens": 8}
    tools = {**body, "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]}
    assert (categorize.classify(body), categorize.classify(tools)) == ("chat", "toolCalls")
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "```\nx = 1\n```"}]}]}
    assert categorize.classify(parts) == "code" and categorize.classify({"prompt": [1, 2, 3]}) == "chat"
    assert categorize.classify({"text": "请用简单的语言解释一下光合作用。"}) == "nonEnglish"  # SGLang's native /generate
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
    assert categorize.request_text(chat) == "Be brief.\nHi"
