"""One served request as the engine's request log sees it: the ids it answers under and the lines its serving code
logs at each point (arrival, acceptance, each streamed step, the end), in the order and with the ids the real
serving code uses (emulator/request_log.py writes them).

- vLLM (``entrypoints/openai/*/serving.py``): the body on arrival under the request's ``request_id`` (the body's,
  else a random one); the answer's id ``chatcmpl-``/``cmpl-`` + the ``X-Request-Id`` header, else that
  ``request_id``; the params line, the deltas and the complete response under the answer's id.
- SGLang (``entrypoints/openai/serving_*.py``, ``managers/tokenizer_manager.py``): the OpenAI body on arrival, the
  ``GenerateReqInput`` once adapted and the finished request with its output; the request's ``rid`` (the body's,
  else a random one) is the answer's id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from drafter_testbed.emulator import request_log as rl
from drafter_testbed.emulator import tokenizer as tok
from drafter_testbed.emulator.native import NativeRequest, NativeResponseBuilder
from drafter_testbed.emulator.openai import GenerationRequest

VLLM_PREFIX = {True: "chatcmpl-", False: "cmpl-"}


class LoggedRequest:
    """The request-log side of one OpenAI or native request (a no-op where the engine logs nothing)."""

    def __init__(self, engine: str, log: rl.VllmRequestLog | rl.SglangRequestLog | None, body: Mapping[str, Any],
                 headers: Mapping[str, str], *, chat: bool, native: bool = False, draft_per_round: int = 0) -> None:
        """``native``: SGLang's /generate, whose body is the GenerateReqInput itself (no OpenAI body to log)."""
        self.engine, self.log, self.body, self.chat = engine, log, body, chat
        self.draft_per_round = draft_per_round
        self.arrival = time.monotonic()
        self.text: list[str] = []
        self.obj: dict[str, Any] | None = None
        self.native: NativeResponseBuilder | None = None
        if engine == "vllm":
            request_id = rl.vllm_request_id(body)
            self.response_id = VLLM_PREFIX[chat] + headers.get("X-Request-Id", request_id)
            if isinstance(log, rl.VllmRequestLog):
                log.request_body(request_id, body, chat)  # before any check of the request, as _check_model logs
        else:
            rid = body.get("rid")
            self.response_id = rid if isinstance(rid, str) else uuid.uuid4().hex
            if isinstance(log, rl.SglangRequestLog) and not native:
                log.openai_received(body)

    def accepted(self, request: GenerationRequest, context_length: int) -> None:
        """An OpenAI request the engine took: vLLM's params line, SGLang's adapted GenerateReqInput."""
        if isinstance(self.log, rl.VllmRequestLog):
            # vLLM bounds a chat without max_tokens by the context left after its prompt
            max_tokens = request.max_tokens if request.bounded or not request.chat \
                else context_length - request.prompt_tokens
            prompt = tok.shipped().decode(list(request.prompt_ids)) if self.log.details else None
            self.log.inputs(self.response_id, prompt, request.prompt_ids,
                            rl.vllm_sampling_params(self.body, max_tokens))
        elif isinstance(self.log, rl.SglangRequestLog) and self.log.enabled:
            prompt = self.body.get("prompt")
            given = {"text": prompt} if not request.chat and isinstance(prompt, str) \
                else {"input_ids": list(request.prompt_ids)}
            self._received(rl.generate_req_input(rid=self.response_id, **given, stream=request.stream,
                                                 sampling_params={"max_new_tokens": request.max_tokens}),
                           NativeRequest(self.response_id, request.prompt_tokens, request.max_tokens, request.stream))

    def accepted_native(self, request: NativeRequest) -> None:
        """SGLang's native /generate: the body is the GenerateReqInput (its known fields), normalised."""
        if isinstance(self.log, rl.SglangRequestLog) and self.log.enabled:
            fields = dict(rl.GENERATE_REQ_INPUT_FIELDS)
            given = {key: value for key, value in self.body.items() if key in fields}
            given.update(rid=request.rid, sampling_params=given.get("sampling_params") or {})
            self._received(rl.generate_req_input(**given), request)

    def _received(self, obj: dict[str, Any], request: NativeRequest) -> None:
        self.obj = obj
        self.native = NativeResponseBuilder(request, draft_per_round=self.draft_per_round)
        self.log.received(obj)

    def step(self, tokens: list[str], last: bool, finish_reason: str | None = None) -> None:
        """One engine step's tokens (a streamed delta for vLLM)."""
        text = "".join(tokens)
        self.text.append(text)
        if self.native is not None:
            self.native.add_step(tokens)
        if isinstance(self.log, rl.VllmRequestLog) and text:
            self.log.outputs(self.response_id, text, self._ids(text), finish_reason if last else None,
                             streaming=True, delta=True)

    def _ids(self, text: str) -> list[int] | None:
        """The output's token ids, computed only where a DEBUG line shows them."""
        return tok.shipped().encode(text, add_special_tokens=False) if self.log.details else None

    def finished(self, *, streamed: bool, finish_reason: str) -> None:
        text = "".join(self.text)
        if isinstance(self.log, rl.VllmRequestLog):
            if streamed:
                self.log.outputs(self.response_id, text, None, "streaming_complete", streaming=True)
            else:
                self.log.outputs(self.response_id, text, self._ids(text), finish_reason, streaming=False)
        elif self.native is not None and self.obj is not None:
            obj = dict(self.obj)
            if self.log.level >= 2 and obj["text"] is None and obj["input_ids"] is not None:
                obj["text"] = tok.shipped().decode(obj["input_ids"])  # SGLang decodes the ids once it logged them
            self.log.finished(obj, self.native.body(finished=True, e2e_latency=time.monotonic() - self.arrival))
