"""Contract tier: the output check's requests and the emulator's answers against the engines' own OpenAI models.

The benchmark client's output check (benchmark_client/equivalence.py) asks for temperature 0, top-2 logprobs and
the generated token ids. vLLM 0.33.0's and SGLang 0.5.23's request models must accept exactly that body; the
emulator's answer (emulator/openai.py) must be a response their models build and serialize with the fields the
client reads (vLLM ``choices[0].token_ids``; SGLang's chat ``response_token_ids``; the logprobs of each token with
its top two, the prompt's token ids), and to the completions request with a token-id prompt that resumes the
comparison past a near-tie. tests/contract/engine_protocols.py runs the models in the engines' environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from drafter_operator.benchmark_client.equivalence import parse_generation, request, resumed_request
from drafter_operator import engines
from drafter_operator.benchmark_client.stream import Endpoint
from drafter_operator.constants import BENCHMARK_REQUEST_ID_PREFIX
from tests.support.emulator_server import emulator
from tests.processes import free_port

pytestmark = pytest.mark.contract

HELPER = Path(__file__).resolve().parent / "engine_protocols.py"
MODEL = "/models/kimi"


def argv(engine: str) -> list[str]:
    if engine == "vllm":
        return ["vllm", "serve", MODEL, "--port", str(free_port())]
    return ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--port", str(free_port())]


async def exchange(engine: str, chat: bool, resumed: bool = False) -> tuple[dict, dict]:
    async with emulator(argv(engine)) as (url, _engine, session):
        endpoint = Endpoint("target", url, MODEL, 8, chat=chat,
                            request_id_field=engines.engine(engine).CLIENT_REQUEST_ID_FIELD)
        path, body = resumed_request(endpoint, [11, 12, 13, 14], 8) if resumed else \
            request(endpoint, "Explain speculative decoding.", 8)
        async with session.post(path, json=body) as resp:
            assert resp.status == 200, await resp.text()
            return body, await resp.json()


def real_models(python: str, cases: list[dict]) -> list[dict]:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([python, str(HELPER)], input=json.dumps(cases), capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_output_checks_requests_and_the_emulators_answers_are_what_each_engine_speaks(engine_python):
    cases, answers = [], {}
    for engine in ("vllm", "sglang"):
        for chat, resumed in ((True, False), (False, False), (False, True)):
            body, answer = asyncio.run(asyncio.wait_for(exchange(engine, chat, resumed), 60))
            case_id = f"{engine}-{'chat' if chat else 'completions'}{'-resumed' if resumed else ''}"
            answers[case_id] = answer
            cases.append({"id": case_id, "engine": engine, "chat": chat, "request": body, "response": answer})
    results = real_models(engine_python, cases)
    assert [r["id"] for r in results] == [c["id"] for c in cases]
    for result in results:
        assert result["request"] == "ok", result
        assert result["response"] == "ok", result
        # The benchmark's name for the request is the one the engine takes (so its request log carries it, and a
        # serving's capture can leave the request out).
        case = next(c for c in cases if c["id"] == result["id"])
        field = engines.engine(case["engine"]).CLIENT_REQUEST_ID_FIELD
        assert result["clientIds"][field] == case["request"][field], result
        assert case["request"][field].startswith(BENCHMARK_REQUEST_ID_PREFIX)
        dumped = result["dumped"]
        # What the engine's own model writes back still parses to the same generation the emulator served.
        served = parse_generation(answers[result["id"]], result["id"])
        assert parse_generation(dumped, result["id"] + " as the engine serializes it") == served
        assert len(served.token_ids) == 8 and all(len(top) == 2 for top in served.top_logprobs)
        assert served.prompt_ids is not None  # what a resumed comparison builds its prefix from
        if result["id"].endswith("-resumed"):
            assert served.prompt_ids == (11, 12, 13, 14)
