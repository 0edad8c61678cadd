"""The dataset a retraining reads from a serving's capture: prompts as conversations, de-duplicated, split by hash;
the held-out ones also as a benchmark's prompts, each with its traffic category."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.benchmark_client.prompts import parse_set
from drafter_operator.capture.categorize import classify_text
from drafter_operator.capture.dataset import captured_dataset, is_held_out, prompt_conversations, prompt_key, \
    prompt_text, read_records, Skipped
from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES


def vllm_chat(*messages: tuple[str, object], request_id: str = "r") -> dict:
    return {"engine": "vllm", "requestId": request_id, "kind": "prompt", "time": "2026-12-06T18:00:00Z",
            "content": {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages]}}


def prompt_record(content: dict, engine: str = "vllm") -> dict:
    return {"engine": engine, "requestId": "r", "kind": "prompt", "time": "2026-12-06T18:00:00Z", "content": content}


def test_a_chat_keeps_its_system_and_user_turns_and_drops_the_answers_the_target_regenerates():
    record = vllm_chat(("system", "Be brief."), ("user", "What is 2+2?"), ("assistant", "4"),
                       ("user", [{"type": "text", "text": "And 3+3"}, {"type": "text", "text": "?"}]))
    assert prompt_conversations(record) == [[{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "What is 2+2?"},
                                             {"role": "user", "content": "And 3+3?"}]]


def test_completions_and_sglang_prompts_are_one_user_turn_each():
    assert prompt_conversations(prompt_record({"prompt": ["a", "b"]})) == [
        [{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    assert prompt_conversations(prompt_record({"text": "Hola", "sampling_params": {}}, "sglang")) == [
        [{"role": "user", "content": "Hola"}]]


@pytest.mark.parametrize("content, reason", [
    ({"prompt": [1, 2, 3]}, "a prompt given as token ids"),
    ({"input_ids": [1, 2, 3]}, "a prompt given as token ids"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "content with parts that are not text"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]}, "a message of role 'tool'"),
    ({"messages": [{"role": "system", "content": "only a system turn"}]}, "no user turn with text"),
    ({"max_tokens": 4}, "no prompt text"),
])
def test_a_prompt_regeneration_could_not_use_is_skipped_with_its_reason(content, reason):
    with pytest.raises(Skipped, match=reason):
        prompt_conversations(prompt_record(content))


def test_duplicates_collapse_whitespace_and_the_first_capture_is_kept():
    records = [vllm_chat(("user", "What  is\nKubernetes?"), request_id="1"),
               vllm_chat(("user", " What is Kubernetes? "), request_id="2"),
               vllm_chat(("user", "Something else"), request_id="3"),
               {"kind": "response", "content": {"text": "ignored"}}]
    dataset = captured_dataset(records, held_out_fraction=0.0)
    assert [row["conversations"][0]["content"] for row in dataset.train] == ["What  is\nKubernetes?", "Something else"]
    assert dataset.summary() == {"prompts": 3, "duplicates": 1, "train": 2, "heldOut": 0, "heldOutByCategory": {},
                                 "skipped": {}}
    assert dataset.held_out_prompts() == []


def test_the_split_holds_out_about_its_share_and_a_prompt_keeps_its_side_whatever_else_was_captured():
    records = [vllm_chat(("user", f"question {i}")) for i in range(4000)]
    dataset = captured_dataset(records, held_out_fraction=0.1)
    assert 0.08 < len(dataset.held_out) / 4000 < 0.12  # a hash, so this count is fixed for these prompts
    held = {row["id"] for row in dataset.held_out}
    # A later capture: some prompts gone, the rest in another order, new ones beside them.
    again = captured_dataset(list(reversed(records[1000:])) + [vllm_chat(("user", "new"))], held_out_fraction=0.1)
    gone = {prompt_key([{"role": "user", "content": f"question {i}"}])[:32] for i in range(1000)}
    new = prompt_key([{"role": "user", "content": "new"}])[:32]
    assert {row["id"] for row in again.held_out} - {new} == held - gone
    assert not held & {row["id"] for row in again.train}


@given(st.lists(st.text(alphabet="ab \n", min_size=1, max_size=6), max_size=40),
       st.sampled_from([0.0, 0.25, 0.5, 0.9]))
def test_every_distinct_prompt_lands_once_on_exactly_one_side(prompts, fraction):
    records = [vllm_chat(("user", p)) for p in prompts]
    dataset = captured_dataset(records, held_out_fraction=fraction)
    rows = dataset.train + dataset.held_out
    keys = {prompt_key([{"role": "user", "content": p}]) for p in prompts if p.strip()}
    assert sorted(row["id"] for row in rows) == sorted(k[:32] for k in keys)
    assert all(is_held_out(prompt_key(row["conversations"]), fraction) for row in dataset.held_out)
    assert not any(is_held_out(prompt_key(row["conversations"]), fraction) for row in dataset.train)
    assert dataset.prompts == len(prompts)
    assert dataset.duplicates + len(rows) + sum(dataset.skipped.values()) == len(prompts)


def test_a_fraction_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="held-out fraction"):
        captured_dataset([], held_out_fraction=1.0)


def test_the_claim_is_read_oldest_hour_first_across_writers_and_a_torn_last_line_is_passed_over(tmp_path):
    for writer, hour, text in [("pod-b", "2026-12-06T19", "late"), ("pod-a", "2026-12-06T18", "early"),
                               ("pod-b", "2026-12-06T18", "early too")]:
        (tmp_path / writer).mkdir(exist_ok=True)
        (tmp_path / writer / f"capture-{hour}.jsonl").write_text(json.dumps(vllm_chat(("user", text))) + "\n")
    with (tmp_path / "pod-b" / "capture-2026-12-06T19.jsonl").open("a") as f:
        f.write('{"kind": "prompt", "cont')  # a sidecar appending as it is read
    (tmp_path / "pod-a" / "notes.txt").write_text("not a capture file\n")
    counts = Counter()
    texts = [r["content"]["messages"][0]["content"] for r in read_records(tmp_path, counts)]
    assert texts == ["early", "early too", "late"]
    assert counts == {"a line that is not a record": 1}


# --------------------------------------------------------------------------------- held-out prompts by category


def test_a_held_out_prompt_is_its_turns_as_the_engine_reads_them_with_the_category_the_classifier_gives():
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    offered = vllm_chat(("user", "What's the weather in Oslo?"))
    offered["content"]["tools"] = tools
    records = [vllm_chat(("system", "You answer in German."), ("user", "Wie spät ist es in Tokio, und ist das nicht "
                                                                        "sehr früh für einen Anruf bei der Familie?"),
                         ("assistant", "Früh."), ("user", "Und in Berlin?")),
               offered,
               prompt_record({"prompt": ["def f(x):\n    return x\nclass A:\n    pass\nimport os\n",
                                         "Write a short story about a lighthouse keeper, in a quiet voice."]}),
               prompt_record({"text": "请用简单的语言解释一下光合作用。"}, "sglang")]
    dataset = captured_dataset(records, held_out_fraction=0.999999)
    conversations = [c for r in records for c in prompt_conversations(r)]
    assert all(is_held_out(prompt_key(c), 0.999999) for c in conversations)  # these five hash to the held-out side
    assert dataset.held_out_prompts() == [
        {"text": "You answer in German.\nWie spät ist es in Tokio, und ist das nicht sehr früh für einen Anruf bei der "
                 "Familie?\nUnd in Berlin?", "category": "nonEnglish"},
        {"text": "What's the weather in Oslo?", "category": "toolCalls"},  # the request offered tools
        {"text": "def f(x):\n    return x\nclass A:\n    pass\nimport os\n", "category": "code"},
        {"text": "Write a short story about a lighthouse keeper, in a quiet voice.", "category": "writing"},
        {"text": "请用简单的语言解释一下光合作用。", "category": "nonEnglish"}]
    assert classify_text("What's the weather in Oslo?") == "chat"  # the text alone: it is the tools that decide
    for entry in dataset.held_out_prompts():
        assert entry["category"] in {classify_text(entry["text"]), "toolCalls"}
    assert dataset.summary()["heldOutByCategory"] == {"code": 1, "writing": 1, "toolCalls": 1, "nonEnglish": 2}
    parsed = parse_set(json.dumps(dataset.held_out_prompts()))
    assert [(p.text, p.category) for p in parsed] == [(e["text"], e["category"]) for e in dataset.held_out_prompts()]


_TEXT = st.text(alphabet="ab 中()=:", min_size=1, max_size=12)


@st.composite
def captured_records(draw) -> dict:
    """A record of the claim: a vLLM chat (system, user and assistant turns; tools offered or not), a completion
    (a string or a batch), SGLang's text, a prompt as token ids, a response."""
    shape = draw(st.sampled_from(["chat", "completion", "sglang", "token ids", "response"]))
    if shape == "chat":
        turns = draw(st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), _TEXT), min_size=1,
                              max_size=4))
        record = vllm_chat(*turns, request_id=draw(st.text(alphabet="0123456789", min_size=1, max_size=3)))
        if draw(st.booleans()):
            record["content"]["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        return record
    if shape == "completion":
        return prompt_record({"prompt": draw(st.one_of(_TEXT, st.lists(_TEXT, min_size=1, max_size=3)))})
    if shape == "sglang":
        return prompt_record({"text": draw(_TEXT), "sampling_params": {}}, "sglang")
    if shape == "token ids":
        return prompt_record({"input_ids": [1, 2, 3]})
    return {"engine": "vllm", "requestId": "r", "kind": "response", "content": {"text": draw(_TEXT)}}


def _usable(record: dict) -> list[list[dict[str, str]]]:
    try:
        return prompt_conversations(record)
    except Skipped:
        return []


@given(st.lists(captured_records(), max_size=30), st.sampled_from([0.0, 0.25, 0.5, 0.9]))
def test_the_held_out_prompts_are_the_held_out_rows_one_each_in_order_and_none_is_a_train_prompt(records, fraction):
    dataset = captured_dataset(records, held_out_fraction=fraction)
    prompts = dataset.held_out_prompts()
    assert len(prompts) == len(dataset.held_out) == sum(dataset.summary()["heldOutByCategory"].values())
    tools: dict[str, bool] = {}  # whether the first capture of each conversation (the one kept) offered tools
    for record in records:
        for turns in _usable(record) if record["kind"] == "prompt" else ():
            tools.setdefault(prompt_key(turns), bool(record["content"].get("tools")))
    for entry, row in zip(prompts, dataset.held_out):
        assert set(entry) == {"text", "category"} and entry["category"] in TRAFFIC_CATEGORIES
        assert entry["text"] == "\n".join(t["content"] for t in row["conversations"])
        key = prompt_key(row["conversations"])
        assert entry["category"] == classify_text(entry["text"], tools=tools[key])
    # The contents carry no newline, so a train conversation with a held-out prompt's text is one whose turns
    # split that text between other roles (hashed apart): never the same conversation.
    train = {prompt_text(row["conversations"]): row for row in dataset.train}
    for entry, row in zip(prompts, dataset.held_out):
        twin = train.get(entry["text"])
        assert twin is None or [t["role"] for t in twin["conversations"]] != [t["role"] for t in row["conversations"]]
    if prompts:
        assert [(p.text, p.category) for p in parse_set(json.dumps(prompts))] == \
            [(e["text"], e["category"]) for e in prompts if e["text"].strip()]
