"""The engines' capture settings as each engine module renders them (the contract tier parses them for real)."""

from __future__ import annotations

import logging.config

from drafter_operator.api.serving.capture import CaptureSpec
from drafter_operator.capture.spool import SPOOL_DIRECTORY
from drafter_operator.engines import sglang, vllm


def capture(responses: bool = False) -> CaptureSpec:
    return CaptureSpec(sample_rate="0.05", claim_name="captured", responses=responses)


def test_no_capture_renders_nothing() -> None:
    assert sglang.capture_flags(None) == [] and vllm.capture_flags(None) == [] and vllm.capture_environment(None) == {}


def test_sglang_logs_whole_requests_as_json_into_the_spool() -> None:
    assert sglang.capture_flags(capture()) == ["--log-requests", "--log-requests-level", "3", "--log-requests-format",
                                               "json", "--log-requests-target", SPOOL_DIRECTORY]


def test_vllm_logs_outputs_only_when_responses_are_kept() -> None:
    assert vllm.capture_flags(capture()) == ["--enable-log-requests"]
    assert vllm.capture_flags(capture(responses=True)) == ["--enable-log-requests", "--enable-log-outputs",
                                                           "--no-enable-log-deltas"]
    assert vllm.capture_environment(capture()) == {"VLLM_LOGGING_CONFIG_PATH": vllm.CAPTURE_LOGGING_CONFIG_PATH,
                                                   "VLLM_REQUEST_BODY_LOG_LEVEL": "INFO"}


def test_vllm_logging_config_sends_request_lines_to_the_spool_only(tmp_path) -> None:
    config = vllm.capture_logging_config()
    request_logger = config["loggers"][vllm.REQUEST_LOGGER]
    assert request_logger == {"handlers": ["capture"], "level": "INFO", "propagate": False}
    assert config["handlers"]["capture"]["filename"].startswith(SPOOL_DIRECTORY + "/")
    assert config["loggers"]["vllm"]["handlers"] == ["vllm"]  # the engine's console stays
    # the standard library accepts it (the vLLM formatter class aside, which the contract tier loads for real)
    config["formatters"]["vllm"] = {"format": "%(message)s"}
    config["handlers"]["capture"]["filename"] = str(tmp_path / "requests.log")
    logging.config.dictConfig(config)
    logging.getLogger(vllm.REQUEST_LOGGER).info("Request u1 JSON body: {}")
    logging.getLogger(vllm.REQUEST_LOGGER).handlers[0].flush()
    assert (tmp_path / "requests.log").read_text() == "Request u1 JSON body: {}\n"
    logging.getLogger(vllm.REQUEST_LOGGER).handlers.clear()
