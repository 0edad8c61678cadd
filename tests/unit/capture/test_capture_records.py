"""What a capture keeps of each engine's request-log line (the shapes the contract tier holds to the real
loggers' output)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.capture.records import (
    PROMPT,
    RESPONSE,
    RequestLine,
    capture_record,
    sglang_line,
    vllm_line,
)


def sglang(event: str, **fields) -> str:
    return "[2026-12-06 18:00:00] " + json.dumps({"timestamp": "2026-12-06T18:00:00", "event": event, **fields})


def test_sglang_received_keeps_the_input_and_its_sampling_params() -> None:
    line = sglang("request.received", rid="r1", obj={"rid": "r1", "text": "hi", "input_ids": None,
                                                      "sampling_params": {"temperature": 0}, "stream": False})
    assert sglang_line(line) == RequestLine("r1", PROMPT, {"text": "hi", "sampling_params": {"temperature": 0}})


def test_sglang_finished_keeps_the_output() -> None:
    line = sglang("request.finished", rid="r1", obj={"rid": "r1", "text": "hi"},
                  out={"text": "yo", "meta_info": {"finish_reason": {"type": "length"}, "completion_tokens": 3,
                                                   "e2e_latency": 1.0}})
    assert sglang_line(line) == RequestLine("r1", RESPONSE, {"text": "yo", "finish_reason": {"type": "length"},
                                                             "completion_tokens": 3})


def test_sglang_lines_without_an_id_or_of_other_events_are_not_kept() -> None:
    assert sglang_line(sglang("request.received.openai", obj={"messages": []})) is None
    assert sglang_line(sglang("request.aborted", rid="r1", obj={})) is None
    assert sglang_line("[2026-12-06 18:00:00] {\"event\": \"request.rece") is None  # torn at rotation
    assert sglang_line("plain text") is None


def test_sglang_batch_ids_sample_as_one() -> None:
    line = sglang("request.received", rid=["a", "b"], obj={"text": ["x", "y"]})
    assert sglang_line(line).request_id == '["a", "b"]'


def test_vllm_body_is_the_prompt() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "request_id": "u1"}
    assert vllm_line(f"Request u1 JSON body: {json.dumps(body)}") == RequestLine("u1", PROMPT, body)


@given(st.text())
def test_vllm_response_reads_any_text_back_and_drops_the_endpoint_prefix(text: str) -> None:
    line = f"Generated response chatcmpl-u1: output: {text!r}, finish_reason: stop"
    assert vllm_line(line) == RequestLine("u1", RESPONSE, {"text": text, "finish_reason": "stop"})


def test_vllm_streamed_response_keeps_the_complete_line_only() -> None:
    complete = "Generated response cmpl-u1 (streaming complete): output: 'abc', finish_reason: streaming_complete"
    delta = "Generated response cmpl-u1 (streaming delta): output: 'a', finish_reason: None"
    assert vllm_line(complete) == RequestLine("u1", RESPONSE, {"text": "abc", "finish_reason": "streaming_complete"})
    assert vllm_line(delta) is None


def test_vllm_other_lines_are_not_kept() -> None:
    assert vllm_line("Received request chatcmpl-u1: params: SamplingParams(n=1), lora_request: None.") is None
    assert vllm_line('Request u1 JSON body: {"model": "m", "messa') is None  # cut by --max-log-len


def test_a_response_is_written_only_when_responses_are_kept() -> None:
    response = RequestLine("u1", RESPONSE, {"text": "yo"})
    prompt = RequestLine("u1", PROMPT, {"text": "hi"})
    assert capture_record("vllm", response, responses=False, time="t") is None
    assert capture_record("vllm", response, responses=True, time="t") == {
        "engine": "vllm", "requestId": "u1", "kind": RESPONSE, "time": "t", "content": {"text": "yo"}}
    assert capture_record("sglang", prompt, responses=False, time="t")["content"] == {"text": "hi"}
