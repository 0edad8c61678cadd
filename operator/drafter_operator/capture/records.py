"""What a capture keeps of each engine's request-log line: the request id, whether it is a prompt or a response,
and the content of that kind, as one record for the claim.

The line formats are those the engines' own request logging writes with the flags engines/*.py capture_flags
render (the contract tier feeds the real engines' RequestLogger classes and parses their lines here):

- SGLang 0.5.23, ``--log-requests-format json``: ``[2026-12-06 18:00:00] {"timestamp": ..., "event": ..., "rid":
  ..., "obj": {...}, "out": {...}}`` (sglang/srt/utils/log_utils.py). ``request.received`` carries the input as
  the server received it (``text`` or ``input_ids``, ``sampling_params``); ``request.finished`` adds ``out``
  (``text``, ``meta_info``). ``request.received.openai`` has no request id, so it cannot be sampled with the
  rest of its request and is not kept.
- vLLM 0.33.0, the request logger routed to a file with a bare ``%(message)s`` format
  (vllm/entrypoints/serve/utils/request_logger.py): ``Request <id> JSON body: {...}`` (the OpenAI request body,
  at INFO when VLLM_REQUEST_BODY_LOG_LEVEL is INFO) and ``Generated response <id>[ (streaming complete)]:
  output: '<repr>', finish_reason: <reason>``. The body names the request's ``request_id``; the response names
  the serving's id, the same with a ``chatcmpl-`` or ``cmpl-`` prefix (unless the client sent an X-Request-Id
  header, whose value then names the response only: such a request's response cannot be joined to its prompt
  and is sampled by its own id).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

PROMPT, RESPONSE = "prompt", "response"
Kind = Literal["prompt", "response"]


@dataclass(frozen=True)
class RequestLine:
    """One engine log line that matters to a capture."""

    request_id: str
    kind: Kind
    content: dict[str, Any]


def _present(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


# ---------------------------------------------------------------------------------------------------
# SGLang

SGLANG_RECEIVED = "request.received"
SGLANG_FINISHED = "request.finished"


def sglang_line(line: str) -> RequestLine | None:
    """The request line in one line of SGLang's JSON request log, or None for anything else (a line of another
    event, a torn or foreign line)."""
    start = line.find("{")
    if start < 0:
        return None
    try:
        entry = json.loads(line[start:])
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("obj"), dict):
        return None
    rid, event, obj = entry.get("rid"), entry.get("event"), entry["obj"]
    # A batch request carries a list of ids: it is sampled as one, by its ids together.
    request_id = rid if isinstance(rid, str) else json.dumps(rid) if rid is not None else None
    if request_id is None:
        return None
    if event == SGLANG_RECEIVED:
        return RequestLine(request_id, PROMPT, _present(text=obj.get("text"), input_ids=obj.get("input_ids"),
                                                        sampling_params=obj.get("sampling_params")))
    if event == SGLANG_FINISHED and isinstance(entry.get("out"), dict):
        out = entry["out"]
        meta = out.get("meta_info") if isinstance(out.get("meta_info"), dict) else {}
        return RequestLine(request_id, RESPONSE, _present(text=out.get("text"), output_ids=out.get("output_ids"),
                                                          finish_reason=meta.get("finish_reason"),
                                                          completion_tokens=meta.get("completion_tokens")))
    return None


# ---------------------------------------------------------------------------------------------------
# vLLM

_VLLM_BODY_RE = re.compile(r"^Request (?P<id>\S+) JSON body: (?P<body>\{.*\})\s*$")
_VLLM_OUTPUT_RE = re.compile(r"^Generated response (?P<id>\S+?)(?P<stream> \(streaming (?:delta|complete)\))?: "
                             r"output: (?P<output>.*), finish_reason: (?P<reason>\S*)\s*$")
#: The prefixes vLLM's OpenAI servers put before a request's own id in the id they log its response under.
VLLM_RESPONSE_ID_PREFIXES = ("chatcmpl-", "cmpl-")


def vllm_request_id(logged_id: str) -> str:
    """The request id a vLLM response line names, without its endpoint's prefix."""
    for prefix in VLLM_RESPONSE_ID_PREFIXES:
        if logged_id.startswith(prefix):
            return logged_id[len(prefix):]
    return logged_id


def vllm_line(line: str) -> RequestLine | None:
    """The request line in one line of vLLM's request log, or None for anything else (the params line, a
    streaming delta, a body cut by --max-log-len, a foreign line)."""
    if (match := _VLLM_BODY_RE.match(line)) is not None:
        try:
            body = json.loads(match["body"])
        except ValueError:
            return None
        return RequestLine(match["id"], PROMPT, body) if isinstance(body, dict) else None
    if (match := _VLLM_OUTPUT_RE.match(line)) is not None:
        if match["stream"] == " (streaming delta)":
            return None  # a fragment: the complete response comes in its own line
        try:
            text = ast.literal_eval(match["output"])
        except (ValueError, SyntaxError):
            return None
        if not isinstance(text, str):
            return None
        return RequestLine(vllm_request_id(match["id"]), RESPONSE, _present(text=text, finish_reason=match["reason"]))
    return None


# ---------------------------------------------------------------------------------------------------


def capture_record(engine: str, line: RequestLine, *, responses: bool, time: str) -> dict[str, Any] | None:
    """The record a capture writes for a kept request line, or None for a response when only prompts are kept."""
    if line.kind == RESPONSE and not responses:
        return None
    return {"engine": engine, "requestId": line.request_id, "kind": line.kind, "time": time, "content": line.content}
