"""The real engines' OpenAI request and response models, on bodies the emulator and the benchmark client exchange.

Runs under the engine environment's python (DRAFTER_ENGINE_PYTHON): imports vLLM 0.33.0's and SGLang 0.5.23's
protocol modules and nothing of drafter_operator. Reads one JSON list on stdin of cases
{"id", "engine": "vllm"|"sglang", "chat": bool, "request": {...}, "response": {...}} and prints one JSON list of
{"id", "request": "ok"|<error>, "response": "ok"|<error>, "dumped": <the response as the engine serializes it>,
"clientIds": {"request_id": ..., "rid": ...}}: what the engine's own request model accepts (and the client request
id it reads from the body, by either engine's field name), and whether the emulator's answer is one its response
model builds and writes back with the same fields.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def models(engine: str, chat: bool):
    if engine == "vllm":
        if chat:
            from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest, ChatCompletionResponse
            return ChatCompletionRequest, ChatCompletionResponse
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest, CompletionResponse
        return CompletionRequest, CompletionResponse
    from sglang.srt.entrypoints.openai import protocol
    if chat:
        return protocol.ChatCompletionRequest, protocol.ChatCompletionResponse
    return protocol.CompletionRequest, protocol.CompletionResponse


def check(case: dict) -> dict:
    request_model, response_model = models(case["engine"], case["chat"])
    out: dict = {"id": case["id"]}
    try:
        parsed = request_model.model_validate(case["request"])
        out["request"] = "ok"
        out["clientIds"] = {field: getattr(parsed, field, None) for field in ("request_id", "rid")}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["request"] = f"{type(exc).__name__}: {exc}"[:600]
    try:
        built = response_model.model_validate(case["response"])
        out["response"] = "ok"
        out["dumped"] = json.loads(built.model_dump_json())
    except Exception as exc:  # noqa: BLE001
        out["response"] = f"{type(exc).__name__}: {exc}"[:600]
    return out


def main() -> None:
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the engines log on import
    cases = json.load(sys.stdin)
    results = [check(case) for case in cases]
    real_stdout.write(json.dumps(results) + "\n")
    real_stdout.flush()


if __name__ == "__main__":
    main()
