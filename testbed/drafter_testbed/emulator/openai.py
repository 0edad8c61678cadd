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
from dataclasses import dataclass

from drafter_testbed.emulator import tokenizer as tok
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
                             bounded=bounded, stream=stream, include_usage=include_usage)


class ResponseBuilder:
    """Builds the chunks and the final body of one response, in vLLM's OpenAI format."""

    def __init__(self, request: GenerationRequest, model: str) -> None:
        self.request = request
        self.model = model
        self.id = ("chatcmpl-" if request.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.completion_tokens = 0

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

    def text_chunk(self, tokens: list[str], last: bool) -> dict[str, object]:
        self.completion_tokens += len(tokens)
        text = "".join(tokens)
        finish = self.request.finish_reason if last else None
        if self.request.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        body = self._envelope([choice], chunk=True)
        if self.request.include_usage:
            body["usage"] = None
        return body

    def usage_chunk(self) -> dict[str, object]:
        body = self._envelope([], chunk=True)
        body["usage"] = self.usage()
        return body

    def full_response(self, tokens: list[str]) -> dict[str, object]:
        self.completion_tokens = len(tokens)
        text = "".join(tokens)
        finish = self.request.finish_reason
        if self.request.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": [],
                                              "reasoning_content": None},
                      "logprobs": None, "finish_reason": finish, "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        body = self._envelope([choice], chunk=False)
        body["usage"] = self.usage()
        return body


def sse(data: dict[str, object] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


SSE_DONE = sse("[DONE]")
