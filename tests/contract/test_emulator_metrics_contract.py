"""Contract tier: the emulator's metric families against the ones the real engines register.

The real collectors (vLLM 0.33.0's ``PrometheusStatLogger`` with its ``SpecDecodingProm``; SGLang
0.5.23's ``SchedulerMetricsCollector`` and ``TokenizerMetricsCollector``) are instantiated on CPU
by engine_metrics.py, in the engines' environment (vLLM: DRAFTER_ENGINE_PYTHON from
.ci/engine-contract-env; SGLang, which also needs torchvision and dill: DRAFTER_CLIENTS_PYTHON from
.ci/clients-env). Every family the emulator exports must exist in the engine with the same type,
help text, label names and bucket bounds, and the families a speculative-decoding dashboard charts
must be exported by both. Skipped when the environments are absent.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from drafter_testbed.emulator.exporters import SglangExporter, VllmExporter
from tests.contract.engine_metrics import families

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = [pytest.mark.xdist_group("emulator-metrics-contract"), pytest.mark.contract]

HELPER = Path(__file__).resolve().parent / "engine_metrics.py"
MODEL = "/models/kimi-k2.5"

#: What a Grafana dashboard for speculative decoding charts: request success, prompt and generation
#: tokens, running and waiting requests, TTFT / ITL / e2e histograms, KV-cache usage, acceptance.
VLLM_DASHBOARD = (
    "vllm:request_success", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_requests_running",
    "vllm:num_requests_waiting", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:kv_cache_usage_perc", "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)
SGLANG_DASHBOARD = (
    "sglang:num_requests", "sglang:num_aborted_requests", "sglang:prompt_tokens", "sglang:generation_tokens",
    "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds", "sglang:e2e_request_latency_seconds", "sglang:token_usage",
    "sglang:gen_throughput", "sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:spec_verify_calls",
    "sglang:spec_num_steps", "sglang:spec_num_draft_tokens",
)


def real_metrics(python: str, *args: str) -> dict:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([python, str(HELPER), *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"engine_metrics.py {' '.join(args)} failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def vllm_real(engine_python) -> dict:
    return real_metrics(engine_python, "vllm", MODEL, "3")


SGLANG_FLAGS = ("--model-path", MODEL, "--enable-metrics", "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", "/models/drafter", "--speculative-num-steps", "3",
                "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6")


@pytest.fixture(scope="module")
def sglang_real(clients_python) -> dict:
    return real_metrics(clients_python, "sglang", "--", *SGLANG_FLAGS)


def assert_same_families(emulated: dict[str, dict], real: dict[str, dict]) -> None:
    for name, family in sorted(emulated.items()):
        assert name in real, f"{name} is exported by the emulator but not registered by the engine"
        assert family == real[name], f"{name}: emulator {family} != engine {real[name]}"


def test_vllm_families_match_the_engine(vllm_real):
    emulated = families(VllmExporter(MODEL, 3).registry)
    assert_same_families(emulated, vllm_real["families"])
    for name in VLLM_DASHBOARD:
        assert name in emulated and name in vllm_real["families"], name


def test_vllm_precreates_the_same_series(vllm_real):
    """At start-up both expose the same series of every family the emulator has (finish reasons,
    draft positions, histogram buckets), each at zero."""
    emulated_text = VllmExporter(MODEL, 3).render().decode()
    names = set(families(VllmExporter(MODEL, 3).registry))

    def series(text: str) -> set[str]:
        out = set()
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            sample = line.rsplit(" ", 1)[0]
            family = sample.split("{")[0].removesuffix("_total").removesuffix("_bucket").removesuffix("_sum") \
                .removesuffix("_count").removesuffix("_created")
            if family in names and not sample.split("{")[0].endswith("_created"):
                out.add(sample)
        return out

    real = series(vllm_real["exposition"])
    assert series(emulated_text) == real
    reasons = {s.split('finished_reason="')[1].split('"')[0] for s in real if "finished_reason" in s}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}


def test_sglang_families_match_the_engine(sglang_real):
    emulated = families(SglangExporter(MODEL, num_steps=3, num_draft_tokens=6).registry)
    assert_same_families(emulated, sglang_real["families"])
    for name in SGLANG_DASHBOARD:
        assert name in emulated and name in sglang_real["families"], name
