"""Contract tier: the real benchmark clients, with their default backends, against the emulator.

vLLM 0.33.0's ``vllm bench serve`` (backend openai: streamed /v1/completions, /tokenize and
/detokenize to align prompts, /metrics for the acceptance counters), SGLang 0.5.23's
``python -m sglang.bench_serving`` (backend sglang: the native /generate, /model_info for the
tokenizer path, /server_info for the acceptance length) and GuideLLM 0.8.1 (backend openai_http:
streamed /v1/chat/completions) each run against an emulator started as a subprocess on a loopback
port. Every run must finish without a failed request, and the token counts the client reports
must be the ones the emulator served (its ``/emulator/state`` totals, before and after).

The clients load the emulator's tokenizer by path (``drafter_operator/data/tokenizer``), as users
point ``--tokenizer`` at it. The clients live in the environment `.ci/clients-env` builds:

    export DRAFTER_CLIENTS_PYTHON="$(.ci/clients-env)"

Without it every test here is skipped. Offline: the datasets are the clients' synthetic ones
(vLLM ``random``, SGLang ``random-ids``, GuideLLM ``synthetic_text``); SGLang's default ``sharegpt``
and its ``random`` both download ShareGPT from the Hugging Face hub. vLLM 0.33.0's default backend
is named ``openai`` (streamed /v1/completions).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR, shipped
from tests.processes import free_port, listening_process

pytestmark = pytest.mark.contract

PROMPTS = 12
INPUT_LEN = 64
OUTPUT_LEN = 24
CLIENT_TIMEOUT = 300


class Emulator:
    def __init__(self, port: int, proc: subprocess.Popen) -> None:
        self.port = port
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}"

    def totals(self) -> dict:
        with urllib.request.urlopen(self.url + "/emulator/state", timeout=10) as r:
            return json.load(r)["totals"]


@contextlib.contextmanager
def emulator(*argv: str) -> Iterator[Emulator]:
    port = free_port()
    env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.05",
           "DRAFTER_EMULATOR_SEED": "7"}
    with listening_process([sys.executable, "-m", "drafter_operator.cli", "emulate", *argv, "--port", str(port)],
                           env, port) as proc:
        yield Emulator(port, proc)


def run_client(argv: list[str], cwd: Path) -> str:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(argv[:4])} failed ({proc.returncode}):\n{output[-6000:]}"
    return output


def served(before: dict, after: dict) -> dict:
    return {key: after[key] - before[key] for key in ("requests", "abortedRequests", "promptTokens", "generatedTokens")}


VLLM_SPEC = '{"method":"eagle3","model":"/models/drafter","num_speculative_tokens":3}'


def test_vllm_bench_serve_default_backend(clients_python, tmp_path):
    with emulator("vllm", "serve", "/models/kimi", "--served-model-name", "kimi",
                  "--speculative-config", VLLM_SPEC) as emu:
        before = emu.totals()
        output = run_client([
            clients_python, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--base-url", emu.url, "--model", "kimi",
            "--tokenizer", str(TOKENIZER_DIR), "--num-prompts", str(PROMPTS), "--random-input-len", str(INPUT_LEN),
            "--random-output-len", str(OUTPUT_LEN), "--save-result", "--result-dir", str(tmp_path),
            "--result-filename", "result.json"], tmp_path)
        delta = served(before, emu.totals())
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["backend"] == "openai"  # vLLM 0.33.0's default: streamed /v1/completions
    assert (result["completed"], result["failed"]) == (PROMPTS, 0), output[-3000:]
    assert delta == {"requests": PROMPTS, "abortedRequests": 0, "promptTokens": result["total_input_tokens"],
                     "generatedTokens": result["total_output_tokens"]}
    assert result["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    assert "tokenizer mismatch" not in output  # /tokenize agreed with the client's own tokenizer
    assert 0 < result["spec_decode_acceptance_rate"] <= 100  # read from the emulator's /metrics


def test_sglang_bench_serving_default_backend(clients_python, tmp_path):
    with emulator("python3", "-m", "sglang.launch_server", "--model-path", "/models/kimi", "--enable-metrics",
                  "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/drafter",
                  "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", "4") as emu:
        before = emu.totals()
        # no --tokenizer: the client reads tokenizer_path from /model_info, as against a real server
        output = run_client([
            clients_python, "-m", "sglang.bench_serving", "--base-url", emu.url, "--dataset-name", "random-ids",
            "--num-prompts", str(PROMPTS), "--random-input-len", str(INPUT_LEN), "--random-output-len",
            str(OUTPUT_LEN), "--random-range-ratio", "1.0", "--warmup-requests", "0",
            "--output-details", "--output-file", str(tmp_path / "result.jsonl")], tmp_path)
        delta = served(before, emu.totals())
    result = json.loads((tmp_path / "result.jsonl").read_text().strip().splitlines()[-1])
    assert result["backend"] == "sglang"
    assert result["completed"] == PROMPTS and not any(result["errors"]), output[-3000:]
    # input_lens are the server's meta_info.prompt_tokens: the random ids travel as decoded text, which
    # the server re-tokenizes (a real SGLang too), so they differ from the dataset's lengths
    assert delta == {"requests": PROMPTS, "abortedRequests": 0, "promptTokens": sum(result["input_lens"]),
                     "generatedTokens": result["total_output_tokens"]}
    assert result["total_input_tokens"] == PROMPTS * INPUT_LEN  # the dataset's own count
    # the client re-tokenizes the generated text with the emulator's tokenizer and gets the same count
    assert result["total_output_tokens_retokenized"] == result["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    assert 1.0 <= result["accept_length"] <= 4.0  # /server_info's avg_spec_accept_length


def test_guidellm_default_backend(clients_python, tmp_path):
    guidellm = str(Path(clients_python).parent / "guidellm")
    with emulator("vllm", "serve", "/models/kimi", "--served-model-name", "kimi") as emu:
        before = emu.totals()
        run_client([guidellm, "run", "--backend", f"kind=openai_http,target={emu.url}", "--profile", "kind=synchronous",
                    "--data", f"kind=synthetic_text,prompt_tokens={INPUT_LEN},output_tokens={OUTPUT_LEN}",
                    "--constraint", f"kind=max_requests,count={PROMPTS}",
                    "--tokenizer", f"kind=huggingface_auto,model={TOKENIZER_DIR}",
                    "--output", f"kind=json,path={tmp_path / 'result.json'}", "--disable-progress"], tmp_path)
        delta = served(before, emu.totals())
    benchmark = json.loads((tmp_path / "result.json").read_text())["benchmarks"][0]
    metrics = benchmark["metrics"]
    assert metrics["request_totals"] == {"successful": PROMPTS, "errored": 0, "incomplete": 0, "total": PROMPTS}
    prompt = metrics["prompt_token_count"]["successful"]["total_sum"]
    generated = metrics["output_token_count"]["successful"]["total_sum"]
    assert delta == {"requests": PROMPTS, "abortedRequests": 0, "promptTokens": prompt, "generatedTokens": generated}
    assert generated == PROMPTS * OUTPUT_LEN
    # GuideLLM built prompts of INPUT_LEN tokens with the same tokenizer; the server adds the chat template
    template = shipped().count_chat([{"role": "user", "content": ""}])
    assert prompt == PROMPTS * (INPUT_LEN + template)
