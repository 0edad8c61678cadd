"""Contract tier: the engine emulator's request logs against the real engines' request loggers.

One request through the emulator (started with the capture flags and environment the operator renders) and the
same request through the real loggers (capture_logger_harness.py, in the engines' environments): the lines have
the same form (file names, line prefixes, JSON keys, text up to what the real harness cannot know), and
drafter_operator.capture.records reads both to the same request ids, kinds, prompts and responses.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture import records
from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import vllm as vllm_engine
from tests.contract.test_capture_contract import PROMPT, run_harness
from tests.support.emulator_server import emulator, run, sglang_argv, vllm_argv

pytestmark = pytest.mark.contract

REQUEST_ID = "req-1"
CAPTURE = CaptureSpec(sample_rate="0.05", claim_name="captured", responses=True)


def emulated_vllm_lines(directory: Path) -> tuple[list[str], str, str]:
    """The emulator's log lines for one chat request and one streamed one, the first's answer, the second's."""
    config = vllm_engine.capture_logging_config()
    config["handlers"]["capture"]["filename"] = str(directory / "vllm-requests.log")
    (directory / "vllm-logging.json").write_text(json.dumps(config))
    env = {**vllm_engine.capture_environment(CAPTURE), vllm_engine.LOGGING_CONFIG_ENV: str(directory / "vllm-logging.json")}
    # the harness's request: model "m", one user message, the request id in the body
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "request_id": REQUEST_ID}

    async def scenario():
        argv = vllm_argv("--served-model-name", "m", *vllm_engine.capture_flags(CAPTURE))
        async with emulator(argv, environment=env) as (_, _, s):
            async with s.post("/v1/chat/completions", json=body) as r:
                answer = await r.json()
            async with s.post("/v1/chat/completions", json={**body, "stream": True}) as r:
                await r.read()
        return answer

    answer = run(scenario())
    assert answer["id"] == f"chatcmpl-{REQUEST_ID}"
    lines = (directory / "vllm-requests.log").read_text(encoding="utf-8").splitlines()
    return lines, answer["choices"][0]["message"]["content"], answer["usage"]["completion_tokens"]


def real_sampling_params(engine_python: str, max_tokens: int) -> str:
    proc = subprocess.run([engine_python, "-c", "from vllm.sampling_params import SamplingParams; "
                           f"print(repr(SamplingParams(max_tokens={max_tokens})))"], capture_output=True, text=True,
                          timeout=600, env={"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def test_emulated_vllm_request_log_matches_the_real_logger(engine_python: str, tmp_path: Path) -> None:
    emulated_dir, real_dir = tmp_path / "emulated", tmp_path / "real"
    emulated_dir.mkdir()
    real_dir.mkdir()
    emulated, response, _ = emulated_vllm_lines(emulated_dir)
    config = vllm_engine.capture_logging_config()
    config["handlers"]["capture"]["filename"] = str(real_dir / "vllm-requests.log")
    real = run_harness(engine_python, "vllm", str(real_dir), REQUEST_ID, PROMPT, response, json.dumps(config))
    # real: the start-up notice, the body, the params line (the harness passes no params), the response, the
    # streamed response's complete line; emulated: the notice, then body, params and response per request
    notice, body, params, output, complete = real
    assert emulated[:4] == [notice, body, emulated[2], output]
    prefix, suffix = f"Received request chatcmpl-{REQUEST_ID}: params: ", ", lora_request: None."
    assert params == f"{prefix}None{suffix}"
    assert emulated[2].startswith(prefix) and emulated[2].endswith(suffix)
    sampling = emulated[2][len(prefix):-len(suffix)]
    max_tokens = int(re.search(r"max_tokens=(\d+)", sampling)[1])
    assert sampling == real_sampling_params(engine_python, max_tokens)
    # the streamed request: its body (with "stream"), its params line, its complete line; no deltas
    assert len(emulated) == 7
    assert emulated[4] == body.replace(f'"request_id":"{REQUEST_ID}"', f'"stream":true,"request_id":"{REQUEST_ID}"')
    form = re.compile(rf"^Generated response chatcmpl-{REQUEST_ID} \(streaming complete\): output: .*, "
                      r"finish_reason: streaming_complete$")
    assert form.match(complete) and form.match(emulated[6])

    def read(lines):
        return [(line.request_id, line.kind, line.content) for line in map(records.vllm_line, lines) if line]

    assert read(emulated[:4]) == read(real[:4])
    assert [(i, k) for i, k, _ in read(emulated[4:])] == [(i, k) for i, k, _ in read([body, complete])]


def sglang_entries(lines: list[str]) -> list[dict]:
    prefix = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \{")
    assert all(prefix.match(line) for line in lines), lines
    return [json.loads(line[line.index("{"):]) for line in lines]


def test_emulated_sglang_request_log_matches_the_real_logger(clients_python: str, tmp_path: Path) -> None:
    target = tmp_path / "emulated"
    flags = sglang_engine.capture_flags(CAPTURE)
    flags[flags.index(sglang_engine.SPOOL_DIRECTORY)] = str(target)
    # the harness's request: SGLang's GenerateReqInput itself, as the native /generate takes it
    body = {"text": PROMPT, "rid": REQUEST_ID, "sampling_params": {"max_new_tokens": 8}}

    async def scenario():
        async with emulator(sglang_argv(*flags)) as (_, _, s):
            async with s.post("/generate", json=body) as r:
                return await r.json()

    answer = run(scenario())
    real_dir = tmp_path / "real"
    real_lines = run_harness(clients_python, "sglang", str(real_dir), REQUEST_ID, PROMPT, answer["text"])
    assert [p.name for p in target.iterdir()] == [p.name for p in (real_dir / "sglang").iterdir()]
    emulated_lines = next(target.iterdir()).read_text(encoding="utf-8").splitlines()
    emulated, real = sglang_entries(emulated_lines), sglang_entries(real_lines)
    assert [list(entry) for entry in emulated] == [list(entry) for entry in real]
    assert [entry["event"] for entry in emulated] == ["request.received", "request.finished"]
    for mine, theirs in zip(emulated, real):
        assert mine["rid"] == theirs["rid"] == REQUEST_ID
        assert mine["obj"] == theirs["obj"]  # every GenerateReqInput field, the same values
    assert list(emulated[1]["out"]) == list(real[1]["out"])

    def read(lines):
        return [(line.request_id, line.kind) for line in map(records.sglang_line, lines) if line]

    assert read(emulated_lines) == read(real_lines) == [(REQUEST_ID, "prompt"), (REQUEST_ID, "response")]
    prompt, response = (records.sglang_line(line) for line in emulated_lines)
    real_prompt, real_response = (records.sglang_line(line) for line in real_lines)
    assert prompt.content == real_prompt.content
    assert response.content["text"] == real_response.content["text"] == answer["text"]
