"""The emulator writes the engines' own request logs (emulator/request_log.py) where their capture flags and
environment send them, and a capture's parser (drafter_operator/capture/records.py) reads them back."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture import records
from drafter_operator.engines import vllm as vllm_engine
from drafter_testbed.emulator import request_log
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from tests.support.emulator_server import emulator, run, sglang_argv, vllm_argv

MODEL = "/models/kimi-k2.5-int4"
PROMPT = "Summarise: 'quoted', a newline\nand unicode é"


def capture(responses: bool) -> CaptureSpec:
    return CaptureSpec(sample_rate="0.05", claim_name="captured", responses=responses)


def vllm_environment(tmp_path: Path, body_level: str | None = "INFO") -> tuple[dict[str, str], Path]:
    """The capture's logging configuration with its file in tmp_path, as the pod carries it."""
    config = vllm_engine.capture_logging_config()
    log_file = tmp_path / "vllm-requests.log"
    config["handlers"]["capture"]["filename"] = str(log_file)
    (tmp_path / "vllm-logging.json").write_text(json.dumps(config))
    env = {vllm_engine.LOGGING_CONFIG_ENV: str(tmp_path / "vllm-logging.json")}
    if body_level is not None:
        env[vllm_engine.REQUEST_BODY_LEVEL_ENV] = body_level
    return env, log_file


async def chat(session, body: dict, headers: dict | None = None) -> tuple[str, str]:
    """(the answer's id, its text) of one chat request, streamed or not."""
    async with session.post("/v1/chat/completions", json=body, headers=headers or {}) as response:
        assert response.status == 200, await response.text()
        if not body.get("stream"):
            answer = await response.json()
            return answer["id"], answer["choices"][0]["message"]["content"]
        chunks = [json.loads(line[len("data: "):]) for line in (await response.text()).split("\n\n")
                  if line.startswith("data: {")]
        return chunks[0]["id"], "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def parsed(lines: list[str], engine: str) -> list[records.RequestLine]:
    parse = records.vllm_line if engine == "vllm" else records.sglang_line
    return [line for line in map(parse, lines) if line is not None]


def test_vllm_writes_the_body_and_the_responses_under_the_answers_ids(tmp_path):
    env, log_file = vllm_environment(tmp_path)
    messages = [{"role": "user", "content": PROMPT}]

    async def scenario():
        async with emulator(vllm_argv(*vllm_engine.capture_flags(capture(True))), environment=env) as (_, _, s):
            plain = await chat(s, {"model": MODEL, "messages": messages, "max_tokens": 6, "request_id": "r-1"})
            streamed = await chat(s, {"model": MODEL, "messages": messages, "max_tokens": 6, "stream": True})
            return plain, streamed

    (plain_id, plain_text), (streamed_id, streamed_text) = run(scenario())
    assert plain_id == "chatcmpl-r-1"
    lines = log_file.read_text(encoding="utf-8").splitlines()
    got = [(line.request_id, line.kind) for line in parsed(lines, "vllm")]
    streamed_base = records.vllm_request_id(streamed_id)
    assert got == [("r-1", "prompt"), ("r-1", "response"), (streamed_base, "prompt"), (streamed_base, "response")]
    prompt, answer, _, streamed_answer = parsed(lines, "vllm")
    assert prompt.content == {"messages": [{"content": PROMPT, "role": "user"}], "model": MODEL, "max_tokens": 6,
                              "request_id": "r-1"}
    assert answer.content == {"text": plain_text, "finish_reason": "length"}
    assert streamed_answer.content == {"text": streamed_text, "finish_reason": "streaming_complete"}
    # the params line at INFO, never a streamed delta (--no-enable-log-deltas)
    assert sum(line.startswith("Received request chatcmpl-r-1: params: SamplingParams(n=1,") for line in lines) == 1
    assert not any("(streaming delta)" in line for line in lines)


def test_vllm_logs_no_response_without_enable_log_outputs_and_deltas_when_asked(tmp_path):
    env, log_file = vllm_environment(tmp_path)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}

    async def scenario(*flags):
        async with emulator(vllm_argv(*flags), environment=env) as (_, _, s):
            return await chat(s, body)

    run(scenario(*vllm_engine.capture_flags(capture(False))))
    assert [line.kind for line in parsed(log_file.read_text().splitlines(), "vllm")] == ["prompt"]
    log_file.unlink()
    answer_id, text = run(scenario("--enable-log-requests", "--enable-log-outputs"))
    deltas = [line for line in log_file.read_text().splitlines() if "(streaming delta)" in line]
    assert deltas and all(line.startswith(f"Generated response {answer_id} (streaming delta)") for line in deltas)


def test_vllm_answers_under_the_request_id_header_and_logs_the_body_under_its_own(tmp_path):
    env, log_file = vllm_environment(tmp_path)

    async def scenario():
        async with emulator(vllm_argv(*vllm_engine.capture_flags(capture(True))), environment=env) as (_, _, s):
            return await chat(s, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                  "request_id": "body-id"}, headers={"X-Request-Id": "header-id"})

    answer_id, _ = run(scenario())
    assert answer_id == "chatcmpl-header-id"
    assert [(line.request_id, line.kind) for line in parsed(log_file.read_text().splitlines(), "vllm")] == \
        [("body-id", "prompt"), ("header-id", "response")]


def test_vllm_reopens_its_log_once_the_sidecar_renamed_it_away(tmp_path):
    env, log_file = vllm_environment(tmp_path)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}

    async def scenario():
        async with emulator(vllm_argv(*vllm_engine.capture_flags(capture(False))), environment=env) as (_, _, s):
            await chat(s, {**body, "request_id": "first"})
            log_file.rename(tmp_path / "taken.log")
            await chat(s, {**body, "request_id": "second"})

    run(scenario())
    assert [line.request_id for line in parsed((tmp_path / "taken.log").read_text().splitlines(), "vllm")] == ["first"]
    assert [line.request_id for line in parsed(log_file.read_text().splitlines(), "vllm")] == ["second"]


def test_vllm_writes_no_body_at_the_default_debug_level_that_the_capture_config_filters(tmp_path):
    env, log_file = vllm_environment(tmp_path, body_level=None)

    async def scenario():
        async with emulator(vllm_argv(*vllm_engine.capture_flags(capture(True))), environment=env) as (_, _, s):
            return await chat(s, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})

    run(scenario())
    lines = log_file.read_text().splitlines()
    assert not any(" JSON body: " in line for line in lines)
    assert [line.kind for line in parsed(lines, "vllm")] == ["response"]


def test_vllm_without_request_logging_writes_nothing(tmp_path):
    env, log_file = vllm_environment(tmp_path)

    async def scenario():
        async with emulator(vllm_argv(), environment=env) as (_, engine, s):
            await chat(s, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
            return engine.request_log

    assert run(scenario()) is None
    assert not log_file.exists()


def test_vllm_refuses_a_logging_file_with_logging_configuration_off(tmp_path):
    env, _ = vllm_environment(tmp_path)
    config = parse_command_line(vllm_argv("--enable-log-requests"))
    with pytest.raises(request_log.RequestLogRefused, match="configure_logging to be enabled"):
        EmulatedEngine(config, Settings(host="127.0.0.1"), load_profile(),
                       environment={**env, "VLLM_CONFIGURE_LOGGING": "0"})


def test_vllm_default_configuration_sends_request_lines_to_the_console_format(tmp_path, capsys):
    async def scenario():
        async with emulator(vllm_argv("--enable-log-requests"), environment={}) as (_, _, s):
            return await chat(s, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                  "request_id": "c-1"})

    run(scenario())
    out = capsys.readouterr().out.splitlines()
    params = [line for line in out if "Received request chatcmpl-c-1: params:" in line]
    assert len(params) == 1 and params[0].startswith("(APIServer pid=")
    assert " INFO " in params[0] and "[request_logger.py:66] " in params[0]
    assert not any("JSON body" in line for line in out)  # DEBUG under vLLM's default INFO


def sglang_capture_argv(target: Path, level: int = 3) -> list[str]:
    return sglang_argv("--log-requests", "--log-requests-level", str(level), "--log-requests-format", "json",
                       "--log-requests-target", str(target))


def test_sglang_writes_json_lines_into_its_hourly_file_under_the_answers_rid(tmp_path):
    async def scenario():
        async with emulator(sglang_capture_argv(tmp_path / "spool")) as (_, _, s):
            answer = await chat(s, {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
                                    "max_tokens": 5})
            async with s.post("/generate", json={"text": PROMPT, "rid": "native-1",
                                                 "sampling_params": {"max_new_tokens": 4}}) as r:
                native = await r.json()
            return answer, native

    (answer_id, text), native = run(scenario())
    files = sorted((tmp_path / "spool").iterdir())
    assert [f.name for f in files] == [f"{socket.gethostname()}_0.log"]
    lines = files[0].read_text(encoding="utf-8").splitlines()
    assert all(line.startswith("[") and "] {" in line for line in lines)
    events = [json.loads(line[line.index("{"):])["event"] for line in lines]
    assert events == ["request.received.openai", "request.received", "request.finished",
                      "request.received", "request.finished"]
    got = parsed(lines, "sglang")
    assert [(line.request_id, line.kind) for line in got] == \
        [(answer_id, "prompt"), (answer_id, "response"), ("native-1", "prompt"), ("native-1", "response")]
    assert got[1].content["text"] == text and got[1].content["completion_tokens"] == 5
    assert got[2].content == {"text": PROMPT, "sampling_params": {"max_new_tokens": 4}}
    assert got[3].content["text"] == native["text"] and got[3].content["output_ids"] == native["output_ids"]
    received = json.loads(lines[1][lines[1].index("{"):])
    assert list(received["obj"]) == [name for name, _ in request_log.GENERATE_REQ_INPUT_FIELDS]


def test_sglang_level_1_leaves_the_text_out_and_without_log_requests_writes_nothing(tmp_path):
    async def scenario(argv):
        async with emulator(argv) as (_, _, s):
            async with s.post("/generate", json={"text": "hi", "rid": "n", "sampling_params": {"max_new_tokens": 2}}):
                pass

    run(scenario(sglang_capture_argv(tmp_path / "one", level=1)))
    lines = next((tmp_path / "one").iterdir()).read_text().splitlines()
    entries = [json.loads(line[line.index("{"):]) for line in lines]
    assert [e["event"] for e in entries] == ["request.received", "request.finished"]
    assert "text" not in entries[0]["obj"] and "text" not in entries[1]["out"]
    run(scenario(sglang_argv("--log-requests-target", str(tmp_path / "off"))))
    assert next((tmp_path / "off").iterdir()).read_text() == ""  # the target opens at start; nothing is logged


def test_a_worker_of_a_group_opens_no_request_log(tmp_path):
    config = parse_command_line(sglang_capture_argv(tmp_path / "spool") + [
        "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:5000", "--tp-size", "2"])
    engine = EmulatedEngine(config, Settings(host="127.0.0.1"), load_profile(), environment={})
    assert engine.request_log is None and not (tmp_path / "spool").exists()


def test_vllm_opens_the_file_its_config_names_where_the_process_runner_put_that_volume(tmp_path):
    """The pod's logging file names the spool's container path; on the local process runner (no mount namespace for
    volumes) the emulator opens it where DRAFTER_CONTAINER_PATHS maps it, as the runner remaps argv and env."""
    from drafter_operator.container_paths import PATH_MAP_ENV

    config = vllm_engine.capture_logging_config()
    container_file = config["handlers"]["capture"]["filename"]
    spool_on_host = tmp_path / "pod" / "volumes" / "spool"
    spool_on_host.mkdir(parents=True)
    (tmp_path / "vllm-logging.json").write_text(json.dumps(config))
    env = {vllm_engine.LOGGING_CONFIG_ENV: str(tmp_path / "vllm-logging.json"),
           vllm_engine.REQUEST_BODY_LEVEL_ENV: "INFO",
           PATH_MAP_ENV: json.dumps({str(Path(container_file).parent): str(spool_on_host)})}

    async def scenario():
        async with emulator(vllm_argv(*vllm_engine.capture_flags(capture(False))), environment=env) as (_, _, s):
            return await chat(s, {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4,
                                  "request_id": "r-9"})

    run(scenario())
    written = spool_on_host / Path(container_file).name
    assert [(line.request_id, line.kind) for line in parsed(written.read_text().splitlines(), "vllm")] == [("r-9", "prompt")]
