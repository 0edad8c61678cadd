"""Runs the real engines' request loggers with the capture settings the operator renders, in the engines'
environment, and prints the lines they wrote as a JSON list.

    $DRAFTER_ENGINE_PYTHON capture_logger_harness.py vllm <directory> <request id> <prompt> <response> <config JSON>
    $DRAFTER_CLIENTS_PYTHON capture_logger_harness.py sglang <directory> <request id> <prompt> <response>

The vLLM logging configuration's capture file already points into the directory. SGLang's request types import
its multimodal helpers, which need torchvision: the clients' environment has it on top of the engines'.
vLLM applies the file VLLM_LOGGING_CONFIG_PATH names through LoggingConfig's default when `vllm serve` configures
logging from its arguments (vllm/logger.py configure_logging_from_args); this does the same with no arguments.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def vllm_lines(directory: Path, config: str, request_id: str, prompt: str, response: str) -> list[str]:
    config_path = directory / "vllm-logging.json"
    config_path.write_text(config)
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config_path)
    os.environ["VLLM_REQUEST_BODY_LOG_LEVEL"] = "INFO"
    from vllm.config.logging import LoggingConfig
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.logger import configure_logging
    from vllm.entrypoints.serve.utils.request_logger import RequestLogger

    configure_logging(LoggingConfig())
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": prompt}], request_id=request_id)
    logger = RequestLogger(max_log_len=None)
    logger.log_request_body(request)
    logger.log_inputs(f"chatcmpl-{request_id}", prompt, [1, 2, 3], None, None, None)
    logger.log_outputs(f"chatcmpl-{request_id}", response, [4, 5], finish_reason="stop", is_streaming=False)
    logger.log_outputs(f"chatcmpl-{request_id}", response, None, finish_reason="streaming_complete",
                       is_streaming=True, delta=False)
    log_file = json.loads(config)["handlers"]["capture"]["filename"]
    return Path(log_file).read_text(encoding="utf-8").splitlines()


def sglang_lines(directory: Path, request_id: str, prompt: str, response: str) -> list[str]:
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.utils.request_logger import RequestLogger

    target = directory / "sglang"
    logger = RequestLogger(log_requests=True, log_requests_level=3, log_requests_format="json",
                           log_requests_target=[str(target)])
    obj = GenerateReqInput(text=prompt, rid=request_id, sampling_params={"max_new_tokens": 8})
    logger.log_received_request(obj)
    out = {"text": response, "output_ids": [4, 5],
           "meta_info": {"id": request_id, "finish_reason": {"type": "stop"}, "completion_tokens": 2,
                         "e2e_latency": 0.1}}
    logger.log_finished_request(obj, out)
    return [line for path in sorted(target.iterdir()) for line in path.read_text(encoding="utf-8").splitlines()]


def main() -> None:
    engine, directory, request_id, prompt, response, *config = sys.argv[1:]
    if engine == "vllm":
        lines = vllm_lines(Path(directory), config[0], request_id, prompt, response)
    else:
        lines = sglang_lines(Path(directory), request_id, prompt, response)
    print(json.dumps(lines))


if __name__ == "__main__":
    main()
