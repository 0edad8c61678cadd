"""The output check: speculation must not change what the target says (benchmark_client/equivalence.py), the
emulator's outputs it is exercised against (emulator/outputs.py), and how a defect fails a gate."""

from __future__ import annotations

import asyncio
import json
import math

import aiohttp
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.api.benchmark import BenchmarkResult, DrafterBenchmarkSpec, Divergence, EquivalenceResult
from drafter_operator.api.benchmark_gate import BenchmarkGate
from drafter_operator.api.serving import DrafterServingSpec
from drafter_operator.benchmark_client import equivalence
from drafter_operator.benchmark_client import prompts as prompt_sets
from drafter_operator.benchmark_client.equivalence import Generation, compare, parse_generation
from drafter_operator.benchmark_client.result import termination_message
from drafter_operator.benchmark_client.stream import BenchError, Endpoint
from drafter_operator.controllers.benchmark.decide import bench_argv
from drafter_operator.controllers.benchmark.outcome import gate_verdict
from drafter_operator.controllers.serving.decide import gate_verdict as serving_gate_verdict
from drafter_operator import engines
from drafter_operator.resources.gate import GatedPod, gate_benchmark
from drafter_testbed.emulator import outputs
from drafter_testbed.emulator.engine import candidates
from tests.support.emulator_server import emulator
from tests.processes import free_port

SM120 = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


def sglang(*extra: str) -> list[str]:
    return ["python3", "-m", "sglang.launch_server", "--model-path", "/models/kimi", "--port", str(free_port()),
            "--enable-metrics", *extra]


DSPARK_5 = ("--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", "/models/dspark",
            "--speculative-dspark-block-size", "5")
EAGLE3 = ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3",
          "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")


# ------------------------------------------------------------------------------------ comparing two sides

def generation(ids, margins=None) -> Generation:
    margins = margins if margins is not None else [3.0] * len(ids)
    return Generation(tuple(ids), tuple((-0.1, -0.1 - m) for m in margins))


@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.data())
def test_the_first_differing_token_is_the_divergence_and_its_baseline_margin_decides_a_defect(ids, data):
    position = data.draw(st.integers(0, len(ids) - 1))
    # Logprobs as engines print them: margins in hundredths, the threshold too (the check judges 4 decimals).
    margins = [m / 100 for m in data.draw(st.lists(st.integers(0, 1000), min_size=len(ids), max_size=len(ids)))]
    min_margin = data.draw(st.integers(0, 500)) / 100
    served = list(ids)
    served[position] = ids[position] + 1
    found = compare(3, generation(ids, margins), generation(served), min_margin)
    assert found is not None and (found.prompt, found.position) == (3, position)
    assert (found.expected, found.got) == (ids[position], ids[position] + 1)
    assert found.defect == (margins[position] >= min_margin)
    assert compare(3, generation(ids, margins), generation(ids), min_margin) is None


def test_a_side_that_stops_early_is_a_defect_at_its_end():
    found = compare(0, generation([1, 2, 3]), generation([1, 2]), 0.5)
    assert (found.position, found.expected, found.got, found.defect) == (2, 3, None, True)


def test_a_single_candidate_means_the_baseline_was_decided():
    baseline = Generation((1, 2), ((-0.1,), (-0.2,)))
    found = compare(0, baseline, generation([1, 5]), 100.0)
    assert found.defect and found.margin is None


def test_the_summary_puts_defects_first_and_counts_each_kind():
    found = [[], [Divergence(prompt=1, position=4, margin=0.01, defect=False)],
             [Divergence(prompt=2, position=3, margin=0.02, defect=False),
              Divergence(prompt=2, position=9, margin=2.5, defect=True, expected=7, got=8)], []]
    result = equivalence.equivalence_result(found, 300, 0.5, False, 2.0)
    assert (result.prompts, result.identical, result.defects, result.near_ties) == (4, 2, 1, 2)
    assert result.identical_fraction == 0.5 and result.seconds_per_prompt == 0.5
    assert [(d.prompt, d.position) for d in result.divergences] == [(2, 9), (1, 4), (2, 3)]
    message = equivalence.defect_message(result)
    assert "prompt 2 at generated token 9" in message and "margin 2.50" in message
    assert equivalence.defect_message(equivalence.equivalence_result([[]], 10, 0.5, False, 1.0)) == ""


def test_vllm_and_sglang_response_shapes_both_parse():
    top = [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -2.1}]
    vllm_chat = {"choices": [{"token_ids": [5, 6], "logprobs": {"content": [
        {"token": "a", "logprob": -0.1, "top_logprobs": top}, {"token": "a", "logprob": -0.1, "top_logprobs": top[::-1]}]}}]}
    sglang_chat = {"choices": [{"response_token_ids": [5, 6], "logprobs": vllm_chat["choices"][0]["logprobs"]}]}
    completions = {"choices": [{"token_ids": [5, 6], "logprobs": {"top_logprobs": [{"a": -0.1, "b": -2.1}] * 2}}]}
    for body in (vllm_chat, sglang_chat, completions):
        parsed = parse_generation(body, "x")
        assert parsed.token_ids == (5, 6)
        assert parsed.margin(0) == pytest.approx(2.0) and parsed.margin(1) == pytest.approx(2.0)


@pytest.mark.parametrize("body, says", [
    ({"choices": [{"logprobs": {"content": []}}]}, "no generated token ids"),
    ({"choices": [{"token_ids": [1], "logprobs": None}]}, "no logprobs"),
    ({"choices": []}, "not a completion response"),
])
def test_a_response_without_what_the_check_needs_is_an_error_naming_it(body, says):
    with pytest.raises(BenchError, match=says):
        parse_generation(body, "target POST x")


# ------------------------------------------------------------------------------------ the emulator's outputs

def continuation(prompt, **kwargs):
    return outputs.Continuation.start("/models/kimi", prompt, candidates(), **kwargs)


def step(generation: outputs.Continuation) -> outputs.Token:
    """Emit one token and return it in full."""
    generation.next()
    return generation.token(len(generation.emitted) - 1)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=30))
def test_the_targets_greedy_continuation_depends_on_the_prompt_only(prompt):
    first, second = continuation(prompt), continuation(prompt)
    assert [step(first).id for _ in range(64)] == [step(second).id for _ in range(64)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=30))
def test_a_clean_speculative_revision_departs_only_at_near_ties_and_never_in_deterministic_mode(prompt):
    baseline, served = continuation(prompt), continuation(prompt, speculative=True)
    strict = continuation(prompt, speculative=True, deterministic=True)
    for _ in range(256):
        expected, got, exact = step(baseline), step(served), step(strict)
        assert exact.id == expected.id
        if got.id != expected.id:
            assert expected.top[0][2] - expected.top[1][2] < outputs.NEAR_TIE_MARGIN
            assert got.id == expected.top[1][0]
            break


def test_the_lossy_fault_applies_to_its_engine_method_k_and_gpu_only():
    fault = outputs.lossy_fault("sglang", "DSPARK", 5, SM120)
    assert fault is not None and fault.issue.endswith("/33800")
    for other in (("vllm", "DSPARK", 5, SM120), ("sglang", "DSPARK", 4, SM120), ("sglang", "DSPARK", 5, "NVIDIA-B200"),
                  ("sglang", "EAGLE3", 5, SM120), ("sglang", "DSPARK", 5, None)):
        assert outputs.lossy_fault(*other) is None


def test_the_lossy_fault_corrupts_clearly_decided_tokens_from_its_position():
    fault = outputs.lossy_fault("sglang", "dspark", 5, SM120)
    clear = 0
    for prompt in range(20):
        baseline, served = continuation([prompt]), continuation([prompt], speculative=True, deterministic=True,
                                                                fault=fault)
        for position in range(200):
            expected, got = step(baseline), step(served)
            if got.id != expected.id:
                assert position >= fault.after
                assert got.id not in (expected.top[0][0], expected.top[1][0])
                clear += expected.top[0][2] - expected.top[1][2] >= 0.5
                break
    assert clear >= 12  # most corruptions land on clearly decided tokens


# ------------------------------------------------------------------------------------ against the emulator

async def _check(target_argv, product, prompts=12):
    async with emulator(sglang()) as (base_url, _, _s1), emulator(target_argv, gpu_product=product) as (url, _, _s2):
        async with aiohttp.ClientSession() as session:
            baseline, target = Endpoint("baseline", base_url, "/models/kimi", 96), Endpoint("target", url, "/models/kimi", 96)
            return await equivalence.check(session, equivalence.Sides(target, baseline),
                                           prompt_sets.select(prompt_sets.builtin(), prompts), 96, 0.5, False)


def test_the_check_finds_the_lossy_revision_and_passes_the_clean_one_on_the_emulator():
    lossy = asyncio.run(asyncio.wait_for(_check(sglang(*DSPARK_5), SM120), 120))
    clean = asyncio.run(asyncio.wait_for(_check(sglang(*EAGLE3), SM120), 120))
    same_on_b200 = asyncio.run(asyncio.wait_for(_check(sglang(*DSPARK_5), "NVIDIA-B200"), 120))
    assert lossy.defects >= 9 and lossy.divergences[0].defect and lossy.divergences[0].position >= 24
    assert clean.defects == 0 and same_on_b200.defects == 0
    assert clean.identical < clean.prompts and all(d.margin < 0.5 for d in clean.divergences)
    # Past each near-tie the check goes on from the baseline's prefix: every token of every prompt is compared
    # unless a prompt passed its resumes.
    resumed_out = sum(1 for p in range(clean.prompts) if sum(d.prompt == p for d in clean.divergences) > equivalence.RESUMES)
    assert clean.tokens_compared == 96 * clean.prompts or resumed_out


def test_the_emulator_refuses_top_logprobs_without_logprobs_as_vllm_does():
    async def ask():
        async with emulator(sglang()) as (url, _, session):
            async with session.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "top_logprobs": 2}) as resp:
                return resp.status, await resp.json()
    status, body = asyncio.run(asyncio.wait_for(ask(), 60))
    assert status == 400 and "logprobs" in body["error"]["message"]


# ------------------------------------------------------------------------------------ API, argv and verdicts

SERVING = {"engine": "vllm", "target": {"model": "/models/kimi"},
           "drafter": {"method": "eagle3", "model": "/models/eagle3", "numSpeculativeTokens": 3}}


def test_equivalence_needs_a_live_baseline_serving():
    with pytest.raises(pydantic.ValidationError, match="spec.baseline.servingRef"):
        DrafterBenchmarkSpec.model_validate({"servingRef": {"name": "s"}, "equivalence": {},
                                             "baseline": {"tokensPerSecond": "80"}})
    with pytest.raises(pydantic.ValidationError, match="gate.baseline.servingRef"):
        BenchmarkGate.model_validate({"equivalence": {}})
    gate = BenchmarkGate.model_validate({"equivalence": {"numPrompts": 4}, "baseline": {"servingRef": {"name": "b"}}})
    assert gate.equivalence.min_margin == "1.0"
    with pytest.raises(pydantic.ValidationError, match="minMargin"):
        BenchmarkGate.model_validate({"equivalence": {"minMargin": "101"}, "baseline": {"servingRef": {"name": "b"}}})


def test_a_gate_of_the_output_check_alone_makes_a_benchmark_without_thresholds():
    spec = DrafterServingSpec.model_validate({**SERVING, "env": [{"name": "VLLM_BATCH_INVARIANT", "value": "1"}],
                                              "swap": {"strategy": "BlueGreen", "gate": {"equivalence": {"numPrompts": 4},
                                                                "baseline": {"servingRef": {"name": "plain"}}}}})
    body = gate_benchmark("ns", "s", spec, GatedPod("abc", "10.0.0.1", 8000))
    assert "gate" not in body["spec"] and body["spec"]["equivalence"]["numPrompts"] == 4
    assert body["metadata"]["annotations"]["drafter.dev/deterministic"] == "true"
    DrafterBenchmarkSpec.model_validate(body["spec"])


def test_the_bench_command_carries_the_check_and_the_deterministic_mode():
    spec = DrafterBenchmarkSpec.model_validate({"servingRef": {"name": "s"}, "baseline": {"servingRef": {"name": "b"}},
                                                "equivalence": {"numPrompts": 6, "maxTokens": 64, "minMargin": "1.5"}})
    argv = bench_argv(spec, "http://t", "vllm", [], None, "http://b", [], None, deterministic=True)
    assert argv[argv.index("--equivalence-prompts") + 1] == "6"
    assert argv[argv.index("--equivalence-tokens") + 1] == "64"
    assert argv[argv.index("--equivalence-margin") + 1] == "1.5" and "--deterministic" in argv
    assert "--equivalence-prompts" not in bench_argv(spec, "http://t", "vllm", [], None, None, [])


@pytest.mark.parametrize("engine, env, args, expected", [
    ("vllm", [{"name": "VLLM_BATCH_INVARIANT", "value": "1"}], None, True),
    ("vllm", [{"name": "VLLM_BATCH_INVARIANT", "value": "0"}], None, False),
    ("vllm", None, None, False),
    ("sglang", None, ["--enable-deterministic-inference"], True),
    ("sglang", None, ["--max-running-requests", "8"], False),
])
def test_deterministic_mode_is_read_where_each_engine_sets_it(engine, env, args, expected):
    drafter = {"method": "none"}
    spec = DrafterServingSpec.model_validate({"engine": engine, "target": {"model": "/m", "extraArgs": args},
                                              "drafter": drafter, "env": env})
    assert engines.deterministic_mode(spec) is expected


def result_with(defects: int) -> BenchmarkResult:
    divergences = [[Divergence(prompt=i, position=30 + i, margin=2.0, defect=True, expected=1, got=2)]
                   for i in range(defects)]
    return BenchmarkResult(tokens_per_second=100.0, speedup=1.5, equivalence=equivalence.equivalence_result(
        [*divergences, [], []], 500, 0.5, False, 1.0))


def test_a_defect_fails_the_gate_naming_the_prompt_and_token_and_the_serving_reads_it():
    spec = DrafterBenchmarkSpec.model_validate({"servingRef": {"name": "s"}, "baseline": {"servingRef": {"name": "b"}},
                                                "equivalence": {}, "gate": {"minSpeedup": "1.2"}})
    failed = gate_verdict(result_with(2), spec.gate, spec.equivalence)
    assert failed.status == "False" and failed.reason == "OutputDiverged"
    assert "prompt 0 at generated token 30" in failed.message
    passed = gate_verdict(result_with(0), spec.gate, spec.equivalence)
    assert passed.status == "True" and "2 of 2 identical" in passed.message
    assert gate_verdict(result_with(0), None, spec.equivalence).status == "True"
    assert gate_verdict(BenchmarkResult(tokens_per_second=1.0), None, spec.equivalence).status == "False"
    benchmark = {"status": {"state": "Succeeded", "result": {**result_with(1).to_json(), "verdict": "Failed",
                                                             "verdictMessage": failed.message}}}
    assert serving_gate_verdict(benchmark).reason == "OutputDiverged"


@given(st.integers(0, 1000))
def test_the_termination_message_keeps_the_counts_of_any_check(defects):
    result = result_with(min(defects, 300))
    message = termination_message(result)
    assert len(message.encode()) <= 4096
    kept = BenchmarkResult.model_validate(json.loads(message)).equivalence
    assert kept.defects == result.equivalence.defects and kept.prompts == result.equivalence.prompts
    assert (kept.divergences or [None])[0] == (result.equivalence.divergences or [None])[0]
