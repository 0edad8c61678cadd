"""The OpenAI-compatible request and response shapes the engines serve (completions, chat).

Token counts are what matters here: a prompt's tokens are counted as words and punctuation marks
(``\\w+|[^\\w\\s]``), a chat prompt adds 4 template tokens per message and 3 for the reply header,
a token-id prompt counts its ids. ``n`` must be 1 and a batch of prompts is refused.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass

#: vLLM's default ``max_tokens`` for /v1/completions.
DEFAULT_COMPLETION_TOKENS = 16
#: Length at which a chat completion without ``max_tokens`` "naturally" stops (finish_reason stop).
DEFAULT_CHAT_TOKENS = 256

_TOKEN = re.compile(r"\w+|[^\w\s]")


class RequestError(Exception):
    """A request the engine would refuse, with the HTTP status it would use."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.status}}


def count_text_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def _completion_prompt_tokens(prompt: object) -> int:
    if isinstance(prompt, str):
        return max(count_text_tokens(prompt), 1)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return _completion_prompt_tokens(prompt[0])
        raise RequestError("the emulator serves one prompt per request (got a batch)")
    raise RequestError("'prompt' must be a string, a list of token ids, or a one-element list of either")


def _chat_prompt_tokens(messages: object) -> int:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    total = 3
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError("each message needs a 'role'")
        content = message.get("content") or ""
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        total += 4 + count_text_tokens(str(content))
    return total


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
                  strict_model: bool) -> GenerationRequest:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model") or served_names[0]
    if strict_model and model not in served_names:
        raise RequestError(f"The model `{model}` does not exist.", status=404, kind="NotFoundError")
    if body.get("n", 1) != 1:
        raise RequestError("the emulator supports n = 1 only")
    prompt_tokens = _chat_prompt_tokens(body.get("messages")) if chat else _completion_prompt_tokens(body.get("prompt"))
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
