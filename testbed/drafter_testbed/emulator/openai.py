"""The OpenAI-compatible request and response shapes the engines serve (completions, chat, tokenize).

Token counts come from the shipped tokenizer (``emulator/tokenizer.py``), as vLLM 0.33.0 counts them:
a completion prompt is encoded as given (``prompt`` may also be token ids, checked against the
vocabulary like vLLM does), a chat request is rendered through the chat template with the assistant
header and encoded without special tokens. ``n`` must be 1 and a batch of prompts is refused.

``/tokenize`` and ``/detokenize`` follow ``vllm/entrypoints/serve/tokenize/protocol.py``: a body with
``messages`` is a chat request (``add_generation_prompt`` default true), otherwise ``prompt`` (a
string; ``add_special_tokens`` default true); the answer is ``{count, max_model_len, tokens,
token_strs}``; ``/detokenize`` takes ``{tokens}`` and answers ``{prompt}``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from drafter_testbed.emulator import tokenizer as tok
from drafter_testbed.emulator.outputs import Token
from drafter_testbed.emulator.tokenizer import EmulatorTokenizer, TemplateError

#: vLLM's default ``max_tokens`` for /v1/completions.
DEFAULT_COMPLETION_TOKENS = 16
#: Length at which a chat completion without ``max_tokens`` "naturally" stops (finish_reason stop).
DEFAULT_CHAT_TOKENS = 256


class RequestError(Exception):
    """A request the engine would refuse, with the HTTP status it would use."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.status}}


def check_token_ids(ids: list[object], tokenizer: EmulatorTokenizer) -> list[int]:
    """``ids`` if every one is a token of the vocabulary (vLLM refuses the request otherwise)."""
    for token_id in ids:
        if not tokenizer.is_valid_id(token_id):
            raise RequestError(f"Token id {token_id!r} is out of vocabulary (size {tokenizer.vocab_size})")
    return ids  # type: ignore[return-value]


def _is_token_ids(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def completion_prompt_ids(prompt: object, tokenizer: EmulatorTokenizer) -> list[int]:
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    if _is_token_ids(prompt):
        return check_token_ids(prompt, tokenizer)
    if isinstance(prompt, list) and len(prompt) == 1:
        return completion_prompt_ids(prompt[0], tokenizer)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise RequestError("the emulator serves one prompt per request (got a batch)")
    raise RequestError("'prompt' must be a string, a list of token ids, or a one-element list of either")


def chat_prompt_ids(messages: object, tokenizer: EmulatorTokenizer, add_generation_prompt: bool = True) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError("each message needs a 'role'")
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    except TemplateError as exc:
        raise RequestError(str(exc)) from None
    return tokenizer.encode(text, add_special_tokens=False)


def _check_model(body: dict, served_names: tuple[str, ...], strict_model: bool) -> str:
    model = body.get("model") or served_names[0]
    if strict_model and model not in served_names:
        raise RequestError(f"The model `{model}` does not exist.", status=404, kind="NotFoundError")
    return model


def _flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"'{name}' must be a boolean")
    return value


def tokenize(body: object, *, served_names: tuple[str, ...], context_length: int,
             tokenizer: EmulatorTokenizer | None = None) -> dict[str, object]:
    """vLLM's ``POST /tokenize``: a completion prompt or chat messages -> token ids."""
    tokenizer = tokenizer or tok.shipped()
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    _check_model(body, served_names, strict_model=True)
    if "messages" in body:
        ids = chat_prompt_ids(body["messages"], tokenizer, _flag(body, "add_generation_prompt", True))
    elif isinstance(body.get("prompt"), str):
        ids = tokenizer.encode(body["prompt"], add_special_tokens=_flag(body, "add_special_tokens", True))
    else:
        raise RequestError("'prompt' must be a string (or send 'messages')")
    return {"count": len(ids), "max_model_len": context_length, "tokens": ids,
            "token_strs": tokenizer.tokens(ids) if _flag(body, "return_token_strs", False) else None}


def detokenize(body: object, *, served_names: tuple[str, ...],
               tokenizer: EmulatorTokenizer | None = None) -> dict[str, object]:
    """vLLM's ``POST /detokenize``: token ids -> text."""
    tokenizer = tokenizer or tok.shipped()
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    _check_model(body, served_names, strict_model=True)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise RequestError("'tokens' must be a list of token ids")
    return {"prompt": tokenizer.decode(check_token_ids(tokens, tokenizer))}


@dataclass(frozen=True)
class GenerationRequest:
    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int
    #: True when the client set max_tokens: the request ends with finish_reason "length".
    bounded: bool
    stream: bool
    include_usage: bool
    #: The prompt's token ids (what the target's continuation depends on, emulator/outputs.py).
    prompt_ids: tuple[int, ...] = ()
    #: Top logprobs per generated token: chat ``logprobs: true`` with ``top_logprobs``, completions ``logprobs: N``;
    #: None: no logprobs asked for.
    top_logprobs: int | None = None
    #: ``return_token_ids``: the generated (and prompt) token ids beside the text.
    return_token_ids: bool = False

    @property
    def finish_reason(self) -> str:
        return "length" if self.bounded else "stop"


def parse_request(body: object, *, chat: bool, served_names: tuple[str, ...], context_length: int,
                  strict_model: bool, tokenizer: EmulatorTokenizer | None = None) -> GenerationRequest:
    tokenizer = tokenizer or tok.shipped()
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = _check_model(body, served_names, strict_model)
    if body.get("n", 1) != 1:
        raise RequestError("the emulator supports n = 1 only")
    ids = chat_prompt_ids(body.get("messages"), tokenizer) if chat else completion_prompt_ids(body.get("prompt"), tokenizer)
    prompt_tokens = len(ids)
    raw_max = body.get("max_completion_tokens") if chat and body.get("max_completion_tokens") is not None \
        else body.get("max_tokens")
    bounded = raw_max is not None
    if bounded:
        if isinstance(raw_max, bool) or not isinstance(raw_max, int) or raw_max < 1:
            raise RequestError("'max_tokens' must be an integer >= 1")
        max_tokens = raw_max
    else:
        max_tokens = DEFAULT_CHAT_TOKENS if chat else DEFAULT_COMPLETION_TOKENS
        bounded = not chat  # a completion without max_tokens ends at vLLM's default length limit
    if prompt_tokens + max_tokens > context_length:
        raise RequestError(
            f"This model's maximum context length is {context_length} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
            f"completion). Please reduce the length of the messages or completion.")
    stream = bool(body.get("stream", False))
    options = body.get("stream_options") or {}
    include_usage = stream and isinstance(options, dict) and bool(options.get("include_usage", False))
    return GenerationRequest(chat=chat, model=model, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
                             bounded=bounded, stream=stream, include_usage=include_usage, prompt_ids=tuple(ids),
                             top_logprobs=_top_logprobs(body, chat),
                             return_token_ids=_flag(body, "return_token_ids", False))


#: vLLM's default --max-logprobs: the most top logprobs a request may ask for.
MAX_LOGPROBS = 20


def _top_logprobs(body: dict, chat: bool) -> int | None:
    """How many top logprobs per token the request asks for, refused as vLLM 0.33.0's protocol refuses it."""
    if chat:
        top = body.get("top_logprobs")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
            raise RequestError("`top_logprobs` must be a positive value.")
        if top and not _flag(body, "logprobs", False):
            raise RequestError("when using `top_logprobs`, `logprobs` must be set to true.")
        if top is not None and top > MAX_LOGPROBS:
            raise RequestError(f"Requested top logprobs of {top}, which is greater than max allowed: {MAX_LOGPROBS}")
        return (top or 0) if _flag(body, "logprobs", False) else None
    count = body.get("logprobs")
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise RequestError("`logprobs` must be a positive value.")
    if count > MAX_LOGPROBS:
        raise RequestError(f"Requested sample logprobs of {count}, which is greater than max allowed: {MAX_LOGPROBS}")
    return count


class ResponseBuilder:
    """Builds the chunks and the final body of one response, in vLLM's OpenAI format."""

    def __init__(self, request: GenerationRequest, model: str, engine: str = "vllm", response_id: str | None = None) -> None:
        """``response_id``: the id the engine answers under (the one its request log names); default a random one
        with vLLM's endpoint prefix."""
        self.request = request
        self.model = model
        self.engine = engine
        self.id = response_id or ("chatcmpl-" if request.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.completion_tokens = 0
        self.text_length = 0

    def usage(self) -> dict[str, int]:
        prompt = self.request.prompt_tokens
        return {"prompt_tokens": prompt, "total_tokens": prompt + self.completion_tokens,
                "completion_tokens": self.completion_tokens}

    def _envelope(self, choices: list[dict[str, object]], chunk: bool) -> dict[str, object]:
        if self.request.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def role_chunk(self) -> dict[str, object]:
        """The first chunk of a chat stream: the assistant role, empty content."""
        return self._envelope([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "logprobs": None, "finish_reason": None}], chunk=True)

    def _logprobs(self, generated: Sequence[Token], offset: int) -> dict[str, object] | None:
        """The choice's logprobs in the engine's format for these tokens (None when none were asked for)."""
        top = self.request.top_logprobs
        if top is None:
            return None
        def ranked(token: Token) -> list[tuple[str, float]]:
            return [(text, logprob) for _id, text, logprob in token.top][:top]
        if self.request.chat:
            return {"content": [{"token": t.text, "logprob": t.logprob, "bytes": list(t.text.encode()),
                                 "top_logprobs": [{"token": text, "logprob": lp, "bytes": list(text.encode())}
                                                  for text, lp in ranked(t)]} for t in generated]}
        offsets, at = [], offset
        for t in generated:
            offsets.append(at)
            at += len(t.text)
        # vLLM's completions list the sampled token among the top ones too (it may be an extra entry).
        return {"text_offset": offsets, "token_logprobs": [t.logprob for t in generated],
                "tokens": [t.text for t in generated],
                "top_logprobs": [dict([*ranked(t), (t.text, t.logprob)]) for t in generated]}

    def _token_ids(self, choice: dict[str, object], generated: Sequence[Token] | None) -> None:
        """``return_token_ids`` as each engine answers it: the generated ids in the choice (vLLM's and SGLang's
        completions ``token_ids``, SGLang's chat ``response_token_ids``) and the prompt's (in the choice, except
        vLLM's chat, which puts them at the top level: ``full_response``)."""
        if not self.request.return_token_ids or generated is None:
            return
        ids = [t.id for t in generated]
        choice["response_token_ids" if self.engine == "sglang" and self.request.chat else "token_ids"] = ids
        if self.engine == "sglang" or not self.request.chat:
            choice["prompt_token_ids"] = list(self.request.prompt_ids)

    def text_chunk(self, tokens: list[str], last: bool, generated: Sequence[Token] | None = None) -> dict[str, object]:
        offset = self.text_length
        self.completion_tokens += len(tokens)
        text = "".join(tokens)
        self.text_length += len(text)
        finish = self.request.finish_reason if last else None
        logprobs = self._logprobs(generated or (), offset) if generated is not None else None
        if self.request.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish, "stop_reason": None}
        if self.engine == "vllm":
            self._token_ids(choice, generated)
        body = self._envelope([choice], chunk=True)
        if self.request.include_usage:
            body["usage"] = None
        return body

    def usage_chunk(self) -> dict[str, object]:
        body = self._envelope([], chunk=True)
        body["usage"] = self.usage()
        return body

    def full_response(self, tokens: list[str], generated: Sequence[Token] | None = None) -> dict[str, object]:
        """The whole answer; ``generated``: the tokens behind ``tokens`` (for logprobs and token ids)."""
        self.completion_tokens = len(tokens)
        text = "".join(tokens)
        finish = self.request.finish_reason
        logprobs = self._logprobs(generated, 0) if generated is not None else None
        if self.request.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": [],
                                              "reasoning_content": None},
                      "logprobs": logprobs, "finish_reason": finish, "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish, "stop_reason": None}
        self._token_ids(choice, generated)
        body = self._envelope([choice], chunk=False)
        if self.request.return_token_ids and self.engine == "vllm" and self.request.chat:
            body["prompt_token_ids"] = list(self.request.prompt_ids)
        body["usage"] = self.usage()
        return body


def sse(data: dict[str, object] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


SSE_DONE = sse("[DONE]")
