"""Contract tier: request capture against the real engines.

- The capture flags each engine module renders, appended to a plain command line, parse in the engine's own parser
  to request logging as the sidecar expects it (SGLang: every request, whole, as JSON lines in the spool; vLLM:
  request logging, and outputs without deltas when responses are kept).
- The real request loggers (SGLang's RequestLogger with those settings; vLLM's RequestLogger with the logging
  configuration we render, applied as `vllm serve` applies it) write lines that drafter_operator.capture.records
  reads back to the request id, the prompt and the response they were given.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture import records
from drafter_operator.capture.spool import SPOOL_DIRECTORY
from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import vllm as vllm_engine
from tests.support.contract_parsers import parse

# The modules using the session-scoped `parsers` (a vLLM and an SGLang parser process, about 100 s to start under
# CI load) share one worker, so one worker starts them rather than both (tests/contract/conftest.py).
pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("engine-parsers")]

HARNESS = Path(__file__).resolve().parent / "capture_logger_harness.py"
PLAIN = {"vllm": ["vllm", "serve", "/models/m", "--host", "0.0.0.0", "--port", "8000"],
         "sglang": ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--host", "0.0.0.0",
                    "--port", "30000"]}
PROMPT = "Summarise: 'quoted', \"double\", a newline\nand unicode é"
RESPONSE = "It says: 'hi'\nthen stops."


def capture(responses: bool) -> CaptureSpec:
    return CaptureSpec(sample_rate="0.05", claim_name="captured", responses=responses)


@pytest.mark.parametrize("responses", [False, True])
def test_sglang_parses_the_capture_flags(parsers, responses: bool) -> None:
    result = parse(parsers, "sglang", PLAIN["sglang"] + sglang_engine.capture_flags(capture(responses)))
    assert result["status"] == "ok", result
    args = result["args"]
    assert args["log_requests"] is True
    assert args["log_requests_level"] == 3  # whole inputs and outputs (_compute_metadata)
    assert args["log_requests_format"] == "json"
    assert args["log_requests_target"] == [SPOOL_DIRECTORY]


@pytest.mark.parametrize("responses", [False, True])
def test_vllm_parses_the_capture_flags(parsers, responses: bool) -> None:
    result = parse(parsers, "vllm", PLAIN["vllm"] + vllm_engine.capture_flags(capture(responses)))
    assert result["status"] == "ok", result
    args = result["args"]
    assert args["enable_log_requests"] is True
    assert args["enable_log_outputs"] is responses
    assert args["enable_log_deltas"] is (not responses)  # off only where outputs are logged at all
    assert args.get("max_log_len") is None  # nothing cut: a cut body is no longer JSON


def run_harness(python: str, *argv: str) -> list[str]:
    proc = subprocess.run([python, str(HARNESS), *argv], capture_output=True, text=True, timeout=600,
                          env={"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_vllm_request_logger_lines_read_back(engine_python: str, tmp_path: Path) -> None:
    config = vllm_engine.capture_logging_config()
    assert config["handlers"]["capture"]["filename"] == vllm_engine.CAPTURE_LOG_FILE
    config["handlers"]["capture"]["filename"] = str(tmp_path / "vllm-requests.log")
    lines = run_harness(engine_python, "vllm", str(tmp_path), "req-1", PROMPT, RESPONSE, json.dumps(config))
    parsed = [line for line in map(records.vllm_line, lines) if line is not None]
    kinds = [(line.request_id, line.kind) for line in parsed]
    # the body, the non-streamed response and the streamed one's complete line; the params line is not kept
    assert kinds == [("req-1", "prompt"), ("req-1", "response"), ("req-1", "response")]
    assert parsed[0].content["messages"] == [{"role": "user", "content": PROMPT}]
    assert parsed[1].content == {"text": RESPONSE, "finish_reason": "stop"}
    assert parsed[2].content == {"text": RESPONSE, "finish_reason": "streaming_complete"}


def test_sglang_request_logger_lines_read_back(clients_python: str, tmp_path: Path) -> None:
    lines = run_harness(clients_python, "sglang", str(tmp_path), "req-1", PROMPT, RESPONSE)
    parsed = [line for line in map(records.sglang_line, lines) if line is not None]
    assert [(line.request_id, line.kind) for line in parsed] == [("req-1", "prompt"), ("req-1", "response")]
    assert parsed[0].content == {"text": PROMPT, "sampling_params": {"max_new_tokens": 8}}
    assert parsed[1].content == {"text": RESPONSE, "output_ids": [4, 5], "finish_reason": {"type": "stop"},
                                 "completion_tokens": 2}
