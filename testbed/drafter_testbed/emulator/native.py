"""SGLang's native ``POST /generate``: request parsing and response bodies (SGLang 0.5.23).

Request (``sglang/srt/managers/io_struct.py`` ``GenerateReqInput``): exactly one of ``text`` (a string)
or ``input_ids`` (token ids); ``sampling_params.max_new_tokens`` (default 128, as
``sampling/sampling_params.py``); ``stream``; ``rid``. Other fields (``return_logprob``,
``lora_path``, ``ignore_eos``, temperatures...) are accepted and have no effect here. A batch (a list
of texts or of id lists) is refused: the emulator serves one prompt per request.

Response (``managers/tokenizer_manager.py``): ``{"text", "output_ids", "meta_info"}`` where
``meta_info`` has ``id``, ``finish_reason`` (``{"type": "length", "length": N}`` once finished, else
null), ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``e2e_latency`` when finished
and, for a speculative server, SGLang's per-request ``spec_verify_ct``, ``spec_accept_length``
(completion tokens / verify calls), ``spec_accept_rate`` and the draft counts. Streaming sends SSE
``data: {...}`` events whose ``text`` and ``output_ids`` are cumulative (SGLang's default, without
``--incremental-streaming-output``), then ``data: [DONE]``; ``sglang.bench_serving`` reads
``meta_info.completion_tokens`` from each event.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from drafter_testbed.emulator import tokenizer as tok
from drafter_testbed.emulator.openai import RequestError, _is_token_ids, check_token_ids
from drafter_testbed.emulator.tokenizer import EmulatorTokenizer

#: SamplingParams.max_new_tokens default in SGLang 0.5.23.
DEFAULT_MAX_NEW_TOKENS = 128


@dataclass(frozen=True)
class NativeRequest:
    rid: str
    prompt_tokens: int
    max_new_tokens: int
    stream: bool


def parse_generate(body: object, *, context_length: int, tokenizer: EmulatorTokenizer | None = None) -> NativeRequest:
    tokenizer = tokenizer or tok.shipped()
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise RequestError("Either text, input_ids or input_embeds should be provided.")
    if text is not None:
        if not isinstance(text, str):
            raise RequestError("the emulator serves one prompt per request: 'text' must be a string")
        prompt_tokens = len(tokenizer.encode(text))
    else:
        if not _is_token_ids(input_ids):
            raise RequestError("the emulator serves one prompt per request: 'input_ids' must be a list of ids")
        prompt_tokens = len(check_token_ids(input_ids, tokenizer))
    params = body.get("sampling_params")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise RequestError("'sampling_params' must be an object")
    max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if max_new is None:
        max_new = context_length - prompt_tokens  # SGLang: None means up to the context length
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise RequestError(f"max_new_tokens must be an integer >= 1 here, got {max_new!r}")
    if prompt_tokens + max_new > context_length:
        raise RequestError(f"Requested token count exceeds the model's maximum context length of {context_length} "
                           f"tokens. You requested a total of {prompt_tokens + max_new} tokens: {prompt_tokens} "
                           f"tokens from the input messages and {max_new} tokens for the completion.")
    rid = body.get("rid") if isinstance(body.get("rid"), str) else uuid.uuid4().hex
    return NativeRequest(rid=rid, prompt_tokens=prompt_tokens, max_new_tokens=max_new,
                         stream=bool(body.get("stream", False)))


class NativeResponseBuilder:
    """Accumulates one request's tokens and renders SGLang's cumulative bodies."""

    def __init__(self, request: NativeRequest, *, draft_per_round: int,
                 tokenizer: EmulatorTokenizer | None = None) -> None:
        """``draft_per_round``: tokens SGLang counts as proposed per verification (0: no speculation)."""
        self.request = request
        self.draft_per_round = draft_per_round
        self.tokenizer = tokenizer or tok.shipped()
        self.text_parts: list[str] = []
        self.output_ids: list[int] = []
        self.verify_ct = 0
        self.correct_drafts = 0

    def add_step(self, tokens: list[str]) -> None:
        """One engine step: the prefill's token first, then one verification step per call."""
        if self.output_ids:  # every step after the prefill is a verification call
            self.verify_ct += 1
            self.correct_drafts += len(tokens) - 1
        self.text_parts.extend(tokens)
        for token in tokens:
            self.output_ids.extend(self.tokenizer.encode(token, add_special_tokens=False))

    def body(self, *, finished: bool, e2e_latency: float | None = None) -> dict[str, object]:
        completion = len(self.output_ids)
        meta: dict[str, object] = {
            "id": self.request.rid,
            "finish_reason": {"type": "length", "length": completion} if finished else None,
            "prompt_tokens": self.request.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": completion,
            "cached_tokens": 0,
        }
        if finished:
            meta["e2e_latency"] = e2e_latency
            if self.verify_ct > 0 and self.draft_per_round > 0:
                proposed = self.verify_ct * self.draft_per_round
                meta.update({
                    "spec_accept_rate": self.correct_drafts / proposed,
                    "spec_accept_length": completion / self.verify_ct,
                    "spec_num_correct_drafts": self.correct_drafts,
                    "spec_num_proposed_drafts": proposed,
                    "spec_verify_ct": self.verify_ct,
                    # older names SGLang keeps as aliases
                    "spec_accept_token_num": self.correct_drafts,
                    "spec_draft_token_num": proposed,
                })
        return {"text": "".join(self.text_parts), "output_ids": list(self.output_ids), "meta_info": meta}
