"""The emulator's HTTP API, in process on 127.0.0.1 with a free port and a fast clock."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time

import aiohttp
import pytest

from drafter_operator.engines import metrics as m
from drafter_operator.engines import sglang, vllm
from tests.processes import free_port, wait_until_listening
from tests.support.emulator_server import emulator, run, sglang_argv, vllm_argv


async def read_sse(response: aiohttp.ClientResponse) -> list[dict | str]:
    """The events of an SSE body, checking the framing: `data: ...` lines separated by blank lines."""
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    body = (await response.read()).decode()
    assert body.endswith("\n\n")
    events: list[dict | str] = []
    for block in body[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    return events[:-1]


async def scrape(session: aiohttp.ClientSession, engine: str) -> m.SpecDecodeCounters:
    async with session.get("/metrics") as r:
        assert r.status == 200
        text = await r.text()
    return (vllm if engine == "vllm" else sglang).parse_spec_decode_metrics(text)


# ---------------------------------------------------------------------------------------------- vLLM

def test_vllm_streamed_completion_moves_the_counters_consistently():
    async def scenario():
        async with emulator(vllm_argv()) as (_, engine, s):
            before = await scrape(s, "vllm")
            body = {"model": "/models/kimi-k2.5-int4", "prompt": "Hello there, how are you?", "max_tokens": 200,
                    "stream": True, "stream_options": {"include_usage": True}}
            async with s.post("/v1/completions", json=body) as r:
                events = await read_sse(r)
            after = await scrape(s, "vllm")
            return events, before, after, engine.state()

    from drafter_testbed.emulator.tokenizer import shipped

    events, before, after, state = run(scenario())
    *chunks, usage_chunk = events
    assert all(c["object"] == "text_completion" and c["model"] == "/models/kimi-k2.5-int4" for c in events)
    assert len({c["id"] for c in events}) == 1 and events[0]["id"].startswith("cmpl-")
    prompt_tokens = shipped().count("Hello there, how are you?")
    assert prompt_tokens > len("Hello there, how are you?".split())  # tokens, not words
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {
        "prompt_tokens": prompt_tokens, "completion_tokens": 200, "total_tokens": prompt_tokens + 200}
    texts = [c["choices"][0]["text"] for c in chunks]
    assert sum(len(t.split()) for t in texts) == 200  # one word per token
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    # one chunk per engine step: the prefill's token, then one chunk per verification step
    assert len(texts[0].split()) == 1
    assert all(1 <= len(t.split()) <= 6 for t in texts)

    w = m.window(before, after)
    assert w.drafts == len(chunks) - 1  # drafts == verification steps
    assert w.draft_tokens == 5 * w.drafts
    assert 0 <= w.accepted_tokens <= w.draft_tokens
    assert sum(after.accepted_per_position) == after.accepted_tokens
    assert list(after.accepted_per_position) == sorted(after.accepted_per_position, reverse=True)
    # every step emits 1 + accepted tokens, except that the last step may be cut at max_tokens
    assert 200 <= 1 + w.drafts + w.accepted_tokens <= 200 + 5
    assert after.generation_tokens - (before.generation_tokens or 0) == 200
    assert after.prompt_tokens == prompt_tokens
    assert state["totals"]["verificationSteps"] == w.drafts and state["totals"]["acceptedTokens"] == w.accepted_tokens
    # the spread of a step's length, from vLLM's own per-position counts: a step that accepted A tokens
    # counts once at positions 0..A-1, so the sum of A squared is the sum of (2i + 1) count_i
    squares = sum((2 * i + 1) * count for i, count in enumerate(after.accepted_per_position))
    mean = w.accepted_tokens / w.drafts
    length = state["totals"]["engineAcceptanceLength"]
    assert length["steps"] == w.drafts and length["mean"] == pytest.approx(w.mean_acceptance_length)
    assert length["stdev"] == pytest.approx(math.sqrt(squares / w.drafts - mean * mean))
    assert length["stdev"] > 0  # some steps accepted more than others


def test_vllm_chat_stream_non_streaming_and_models():
    async def scenario():
        async with emulator(vllm_argv("--served-model-name", "kimi-k2.5")) as (_, _engine, s):
            chat = {"model": "kimi-k2.5", "messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 20,
                    "stream": True}
            async with s.post("/v1/chat/completions", json=chat) as r:
                chat_events = await read_sse(r)
            async with s.post("/v1/completions", json={"model": "kimi-k2.5", "prompt": "a b c", "max_tokens": 9}) as r:
                full = await r.json()
            async with s.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}) as r:
                default_chat = await r.json()
            async with s.get("/v1/models") as r:
                models = await r.json()
            async with s.get("/version") as r:
                version = await r.json()
            text = await (await s.get("/metrics")).text()
            return chat_events, full, default_chat, models, version, text

    chat_events, full, default_chat, models, version, text = run(scenario())
    assert chat_events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in chat_events)
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in chat_events)
    assert len(content.split()) == 20 and chat_events[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in e for e in chat_events)  # no include_usage
    assert full["object"] == "text_completion" and full["usage"]["completion_tokens"] == 9
    assert full["usage"]["prompt_tokens"] == 3 and len(full["choices"][0]["text"].split()) == 9
    assert default_chat["choices"][0]["finish_reason"] == "stop"
    assert default_chat["usage"]["completion_tokens"] == len(default_chat["choices"][0]["message"]["content"].split())
    assert [d["id"] for d in models["data"]] == ["kimi-k2.5"] and models["data"][0]["root"] == "/models/kimi-k2.5-int4"
    assert version == {"version": "0.33.0"}
    assert 'model_name="kimi-k2.5"' in text and 'vllm:request_success_total{engine="0",finished_reason="length"' in text


def test_vllm_request_errors():
    async def scenario():
        async with emulator(vllm_argv("--max-model-len", "100")) as (_, _engine, s):
            out = []
            for body in ({"model": "nope", "prompt": "x", "max_tokens": 4},
                         {"prompt": "x", "max_tokens": 4, "n": 2},
                         {"prompt": "x", "max_tokens": 200},
                         {"prompt": ["a", "b"], "max_tokens": 4},
                         {"prompt": "x", "max_tokens": 0}):
                async with s.post("/v1/completions", json=body) as r:
                    out.append((r.status, (await r.json())["error"]["message"]))
            async with s.post("/v1/completions", data=b"{bad") as r:
                out.append((r.status, ""))
            return out

    statuses = [status for status, _ in run(scenario())]
    assert statuses == [404, 400, 400, 400, 400, 400]


def test_no_speculation_has_no_spec_metrics_and_keeps_time():
    async def scenario():
        async with emulator(vllm_argv(spec=False), time_scale=0.2) as (_, engine, s):
            start = time.perf_counter()
            async with s.post("/v1/completions", json={"prompt": "x", "max_tokens": 50}) as r:
                body = await r.json()
            elapsed = time.perf_counter() - start
            text = await (await s.get("/metrics")).text()
            async with s.post("/emulator/acceptance", json={"acceptance": 0.5}) as r:
                status = r.status
            return body, elapsed, text, status

    body, elapsed, text, status = run(scenario())
    assert body["usage"]["completion_tokens"] == 50
    modelled = 50 * 0.01212 * 0.2  # 50 target steps at time scale 0.2
    assert elapsed >= modelled * 0.98  # it kept the modelled time (how close it keeps it: the timing tests)
    assert "spec_decode" not in text and "vllm:generation_tokens_total" in text
    assert status == 409


def test_control_endpoint_changes_acceptance_at_run_time():
    async def scenario():
        async with emulator(vllm_argv()) as (_, _engine, s):
            results = []
            for a in (1.0, 0.0):
                async with s.post("/emulator/acceptance", json={"acceptance": a}) as r:
                    state = await r.json()
                    assert r.status == 200 and state["acceptance"] == a
                before = await scrape(s, "vllm")
                async with s.post("/v1/completions", json={"prompt": "x", "max_tokens": 61}) as r:
                    assert (await r.json())["usage"]["completion_tokens"] == 61
                results.append(m.window(before, await scrape(s, "vllm")))
            async with s.post("/emulator/acceptance", json={"acceptance": 1.5}) as r:
                bad = r.status
            async with s.post("/emulator/acceptance", json={"rate": 0.5}) as r:
                bad2 = r.status
            async with s.get("/emulator/state") as r:
                state = await r.json()
            return results, bad, bad2, state

    (full, none), bad, bad2, state = run(scenario())
    assert full.acceptance_rate == 1.0 and full.mean_acceptance_length == 6.0 and full.drafts == 10
    assert none.acceptance_rate == 0.0 and none.mean_acceptance_length == 1.0 and none.drafts == 60
    assert bad == bad2 == 400
    assert state["acceptanceSource"] == "control endpoint" and state["prediction"]["meanAcceptanceLength"] == 1.0
    assert state["speculation"]["numSpeculativeTokens"] == 5


def test_acceptance_from_the_profile_and_the_environment():
    async def scenario():
        async with emulator(vllm_argv()) as (_, _e, s):
            seed = await (await s.get("/emulator/state")).json()
        async with emulator(vllm_argv(), acceptance=0.25) as (_, _e, s):
            env = await (await s.get("/emulator/state")).json()
        return seed, env

    seed, env = run(scenario())
    assert seed["acceptance"] == 0.432 and seed["acceptanceSource"] == "profile:seed-kimi-k2.5-eagle3"
    assert seed["prediction"]["speedup"] == pytest.approx(0.66, abs=0.002)
    assert env["acceptance"] == 0.25 and env["acceptanceSource"].startswith("env:")


def test_client_disconnect_counts_an_abort():
    async def scenario():
        async with emulator(vllm_argv(), time_scale=1.0) as (_, engine, s):
            async with s.post("/v1/completions", json={"prompt": "x", "max_tokens": 500, "stream": True}) as r:
                await r.content.readline()  # the first chunk, then hang up
            for _ in range(100):
                if engine.totals.aborted:
                    break
                await asyncio.sleep(0.02)
            text = await (await s.get("/metrics")).text()
            return engine.totals.aborted, engine.running, text

    aborted, running, text = run(scenario())
    assert aborted == 1 and running == 0
    assert 'finished_reason="abort",model_name="/models/kimi-k2.5-int4"} 1.0' in text


def test_concurrent_streams_run_independently():
    async def scenario():
        async with emulator(vllm_argv()) as (_, engine, s):
            before = await scrape(s, "vllm")

            async def one(n: int) -> int:
                body = {"prompt": "x", "max_tokens": n, "stream": True, "stream_options": {"include_usage": True}}
                async with s.post("/v1/completions", json=body) as r:
                    return (await read_sse(r))[-1]["usage"]["completion_tokens"]

            done = await asyncio.gather(*(one(n) for n in (30, 60, 90)))
            return done, m.window(before, await scrape(s, "vllm")), engine.running, engine.totals

    done, w, running, totals = run(scenario())
    assert done == [30, 60, 90] and running == 0 and totals.requests == 3
    assert w.generation_tokens == 180 and w.drafts == totals.verification_steps
    assert 180 <= 3 + w.drafts + w.accepted_tokens <= 180 + 3 * 5


def test_step_time_follows_the_batching_model_not_a_fixed_slowdown():
    import random

    from drafter_testbed.emulator.model import Decoder

    # One stream keeps the single-stream step; past the knee (32 tokens) the step grows with the batch.
    spec = Decoder(5, 0.5, target_step_ms=12.12, draft_cost=0.33, rng=random.Random(0))
    assert spec.step_seconds(1) == spec.step_seconds(5) == pytest.approx(0.01212 * 2.65)
    assert spec.step_seconds(16) == pytest.approx(0.01212 * (16 * 6 / 32 + 5 * 0.33))
    plain = Decoder(0, 0.0, target_step_ms=10.0, draft_cost=0.33, rng=random.Random(0))
    assert plain.step_seconds(1) == plain.step_seconds(32) == pytest.approx(0.010)
    assert plain.step_seconds(64) == pytest.approx(0.020)


def test_acceptance_draws_are_unbiased():
    import random

    from drafter_testbed.emulator.model import Decoder
    from drafter_operator.engines import speedup

    d = Decoder(5, 0.432, target_step_ms=12.12, draft_cost=0.33, rng=random.Random(3))
    n = 100_000
    mean = sum(d.draw_accepted() for _ in range(n)) / n
    # E[accepted] = a + ... + a^k; sd of one draw ~1.1, so 5 standard errors is ~0.017
    assert mean == pytest.approx(speedup.mean_acceptance_length(0.432, 5) - 1, abs=0.02)


# ------------------------------------------------------------------------------------------ startup

def test_health_is_503_while_loading_then_200():
    async def scenario():
        async with emulator(vllm_argv(), startup_seconds=0.4) as (_, _e, s):
            first = (await s.get("/health")).status
            completion = (await s.post("/v1/completions", json={"prompt": "x"})).status
            await asyncio.sleep(0.5)
            return first, completion, (await s.get("/health")).status

    assert run(scenario()) == (503, 503, 200)


def test_failed_startup_never_becomes_healthy():
    async def scenario():
        async with emulator(sglang_argv(), fail_startup=True) as (_, _e, s):
            out = [(await s.get(p)).status for p in ("/health", "/health_generate")]
            state = await (await s.get("/emulator/state")).json()
            return out, state["status"]

    assert run(scenario()) == ([503, 503], "failed")


# ------------------------------------------------------------------------------------------- SGLang

def test_sglang_endpoints_and_counters():
    async def scenario():
        async with emulator(sglang_argv()) as (_, engine, s):
            before = await scrape(s, "sglang")
            health = (await s.get("/health_generate")).status
            body = {"prompt": "Hello", "max_tokens": 300, "stream": True, "stream_options": {"include_usage": True}}
            async with s.post("/v1/completions", json=body) as r:
                events = await read_sse(r)
            after = await scrape(s, "sglang")
            info = await (await s.get("/server_info")).json()
            legacy = await (await s.get("/get_server_info")).json()
            model_info = await (await s.get("/model_info")).json()
            text = await (await s.get("/metrics")).text()
            return health, events, before, after, info, legacy, model_info, text, engine.state()

    health, events, before, after, info, legacy, model_info, text, state = run(scenario())
    assert health == 200
    *chunks, usage_chunk = events
    assert usage_chunk["usage"]["completion_tokens"] == 300
    w = m.window(before, after, num_speculative_tokens=3)
    assert w.drafts == len(chunks) - 1 == state["totals"]["verificationSteps"]
    assert w.generation_tokens == 300
    assert w.mean_acceptance_length == pytest.approx(300 / w.drafts)
    assert 1.0 <= w.mean_acceptance_length <= 4.0
    assert after.num_speculative_tokens == 3 and after.num_draft_tokens_gauge == 4
    assert after.accept_length_gauge is not None and 1.0 <= after.accept_length_gauge <= 4.0  # refreshed every 40 steps
    avg = info["internal_states"][0]["avg_spec_accept_length"]
    assert avg == pytest.approx(1 + state["totals"]["acceptedTokens"] / state["totals"]["verificationSteps"])
    assert legacy["internal_states"] == info["internal_states"] and info["speculative_num_steps"] == 3
    assert model_info["model_path"] == "/models/kimi-k2.5-int4"
    labels = 'engine_type="unified",model_name="/models/kimi-k2.5-int4",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    assert f"sglang:spec_num_steps{{{labels}}} 3.0" in text
    assert 'sglang:generation_tokens_total{engine_type="unified",is_streaming="true",' in text
    assert 'sglang:num_requests_total{engine_type="unified",is_streaming="true",' in text


def test_sglang_counts_a_step_that_drafted_nothing_as_a_verification_and_the_state_says_so():
    # NGRAM finds no match in some steps (the profile's matchRate 0.7): vLLM would count no draft for them,
    # SGLang counts a verify forward of one token. The state's engine length must follow SGLang.
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-8B", "--port", str(free_port()),
            "--enable-metrics", "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"]

    async def scenario():
        async with emulator(argv) as (_, engine, s):
            before = await scrape(s, "sglang")
            body = {"prompt": "Hello", "max_tokens": 300, "stream": False}
            assert (await s.post("/v1/completions", json=body)).status == 200
            after = await scrape(s, "sglang")
            return before, after, engine.state()

    before, after, state = run(scenario())
    totals, w = state["totals"], m.window(before, after)
    length = totals["engineAcceptanceLength"]
    assert totals["verificationSteps"] < totals["verifyForwards"] == length["steps"] == w.drafts
    assert length["mean"] < totals["meanAcceptanceLength"]  # the steps without a draft pull SGLang's mean down
    # the window counts the prefill token too, and the last step may be cut at max_tokens (up to 4 tokens)
    assert -4 / w.drafts <= w.mean_acceptance_length - length["mean"] <= 1 / w.drafts + 1e-9


def test_sglang_without_enable_metrics_has_no_metrics_endpoint():
    async def scenario():
        async with emulator(sglang_argv(metrics=False)) as (_, _e, s):
            return (await s.get("/metrics")).status, (await s.get("/health")).status

    assert run(scenario()) == (404, 200)


# ------------------------------------------------------------------------------ the real subprocess

def test_cli_subprocess_binds_the_env_host_and_stops_on_sigterm():
    port = free_port()
    env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.01"}
    proc = subprocess.Popen([sys.executable, "-m", "drafter_operator.cli", "emulate", "vllm", "serve", "m",
                             "--host", "192.0.2.1", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(proc, port)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
        assert proc.returncode == 0, stderr
        assert f"http://127.0.0.1:{port}" in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# ------------------------------------------------------------- endpoints real clients call (issue 7)

def test_vllm_tokenize_detokenize_and_usage_agree():
    from drafter_testbed.emulator.tokenizer import shipped

    async def scenario():
        async with emulator(vllm_argv("--served-model-name", "kimi")) as (_, _e, s):
            prompt = "Kubernetes operators serve speculative decoding"
            async with s.post("/tokenize", json={"model": "kimi", "prompt": prompt, "add_special_tokens": False}) as r:
                tokenized = await r.json()
            async with s.post("/detokenize", json={"model": "kimi", "tokens": tokenized["tokens"]}) as r:
                detokenized = await r.json()
            async with s.post("/tokenize", json={"model": "nope", "prompt": "x"}) as r:
                unknown = r.status
            async with s.post("/tokenize", data=b"{bad") as r:
                not_json = r.status
            async with s.post("/v1/completions", json={"model": "kimi", "prompt": prompt, "max_tokens": 30}) as r:
                completion = await r.json()
            return prompt, tokenized, detokenized, unknown, not_json, completion

    prompt, tokenized, detokenized, unknown, not_json, completion = run(scenario())
    tok = shipped()
    assert tokenized["count"] == len(tokenized["tokens"]) == tok.count(prompt) > len(prompt.split())
    assert tokenized["max_model_len"] == 131072
    assert detokenized == {"prompt": prompt}
    assert (unknown, not_json) == (404, 400)
    assert completion["usage"]["prompt_tokens"] == tokenized["count"]
    # a client re-tokenizing the generated text counts what usage says
    assert len(tok.encode(completion["choices"][0]["text"])) == completion["usage"]["completion_tokens"] == 30


def test_sglang_native_generate_streams_cumulative_bodies():
    from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR, shipped

    async def scenario():
        async with emulator(sglang_argv()) as (_, engine, s):
            body = {"text": "Kubernetes operators", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True},
                    "stream": True, "return_logprob": False}
            async with s.post("/generate", json=body) as r:
                events = await read_sse(r)
            async with s.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}}) as r:
                full = await r.json()
            async with s.post("/generate", json={"text": ["a", "b"]}) as r:
                batch = r.status
            async with s.post("/flush_cache") as r:
                flushed = (r.status, await r.text())
            info = await (await s.get("/model_info")).json()
            return events, full, batch, flushed, info, engine.totals

    events, full, batch, flushed, info, totals = run(scenario())
    tok = shipped()
    metas = [e["meta_info"] for e in events]
    assert [m["completion_tokens"] for m in metas] == sorted(m["completion_tokens"] for m in metas)
    assert metas[-1]["completion_tokens"] == 40 and metas[-1]["finish_reason"] == {"type": "length", "length": 40}
    assert all(m["finish_reason"] is None for m in metas[:-1])
    assert all(m["prompt_tokens"] == tok.count("Kubernetes operators") for m in metas)
    # cumulative: each event's text extends the previous one
    assert all(b["text"].startswith(a["text"]) for a, b in zip(events, events[1:]))
    assert len(tok.encode(events[-1]["text"])) == 40 == len(events[-1]["output_ids"])
    assert metas[-1]["spec_verify_ct"] == len(events) - 1
    assert metas[-1]["spec_accept_length"] == pytest.approx(40 / metas[-1]["spec_verify_ct"])
    assert 0 <= metas[-1]["spec_accept_rate"] <= 1
    assert full["meta_info"]["prompt_tokens"] == 3 and full["meta_info"]["completion_tokens"] == 8
    assert batch == 400 and flushed[0] == 200 and flushed[1].startswith("Cache flushed.")
    assert info["tokenizer_path"] == str(TOKENIZER_DIR)
    assert totals.requests == 2


def test_vllm_request_success_carries_every_finish_reason_vllm_precreates():
    async def scenario():
        async with emulator(vllm_argv()) as (_, _e, s):
            return await (await s.get("/metrics")).text()

    text = run(scenario())
    reasons = [line.split('finished_reason="')[1].split('"')[0] for line in text.splitlines()
               if line.startswith("vllm:request_success_total{")]
    assert reasons == ["stop", "length", "abort", "error", "repetition"]


def test_sglang_accept_rate_uses_sglangs_denominator_for_a_tree():
    """topk 2: 3 steps but 6 draft tokens, so SGLang counts 5 proposed drafts per verification."""
    from drafter_testbed.emulator.exporters import DECODE_LOG_INTERVAL, SglangExporter

    tree = SglangExporter("m", num_steps=3, num_draft_tokens=6)
    chain = SglangExporter("m", num_steps=3, num_draft_tokens=4)
    unset = SglangExporter("m", num_steps=3, num_draft_tokens=0)
    for exporter in (tree, chain, unset):
        for _ in range(DECODE_LOG_INTERVAL):
            exporter.step(3, 3, 2, 0.01)  # 2 accepted per verification
    assert tree.spec_accept_rate._value.get() == pytest.approx(2 / 5)
    assert chain.spec_accept_rate._value.get() == pytest.approx(2 / 3)
    assert unset.spec_accept_rate._value.get() == pytest.approx(2 / 3)
    assert tree.spec_accept_length._value.get() == pytest.approx(3.0)
