"""Does the engine emulator run at the speed its model says?

Starts three emulators as real `drafter-operator emulate` processes at time scale 1.0 (wall-clock
speed), each fed single-stream requests by its own client (the three run side by side to keep the
bench under a minute; each emulator still sees one request at a time):

1. vLLM without speculation (the baseline, 82.5 tok/s by calibration);
2. vLLM with the seed's EAGLE-3 drafter (k = 5, a = 0.432: 15 % acceptance, 0.66x);
3. SGLang with the public drafter (EAGLE3, 3 steps, topk 1, 4 draft tokens, a = 0.89: 1.70x).

For each it prints, measured next to the model:
- tok/s (completion tokens / request wall time, time to first token included);
- acceptance rate and mean acceptance length from `/metrics` deltas (the operator's own parsers),
  with the sampling standard error of the rate: acceptance is drawn at random, so a run of a few
  thousand tokens is expected to differ from the model by about that much;
- speedup against the measured baseline;
- a clock check: the run's wall time against the modelled time *for the steps it actually drew*
  (prefill + verification steps x step cost); this isolates the emulator's timing from the luck of
  the draws and should agree within a fraction of a percent.

Usage: python bench/emulator_throughput.py [--tokens 512] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

from drafter_operator.engines import metrics as spec_metrics
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import speedup
from drafter_operator.engines import vllm as vllm_engine
from drafter_testbed.emulator.profiles import load_profile

TARGET = "/models/kimi-k2.5-int4"
SEED_DRAFTER = "/models/kimi-k2.5-eagle3"
PUBLIC_DRAFTER = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
PROMPT = "Explain speculative decoding to an operator who runs a one-trillion-parameter model."


@dataclass
class Case:
    name: str
    engine: str
    argv: list[str]
    requests: int
    k: int
    drafter: str | None
    port: int = 0
    process: subprocess.Popen | None = None
    results: dict[str, object] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases(requests: int) -> list[Case]:
    """The three cases; request counts are chosen so that each takes about as long as the seed case."""
    spec = json.dumps({"method": "eagle3", "model": SEED_DRAFTER, "num_speculative_tokens": 5})
    out = [
        Case("vLLM, no speculation", "vllm", ["vllm", "serve", TARGET], max(requests - 1, 2), 0, None),
        Case("vLLM, seed drafter (eagle3, k=5)", "vllm",
             ["vllm", "serve", TARGET, "--speculative-config", spec], requests, 5, SEED_DRAFTER),
        Case("SGLang, public drafter (EAGLE3, 3 steps)", "sglang",
             ["python3", "-m", "sglang.launch_server", "--model-path", TARGET, "--enable-metrics",
              "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", PUBLIC_DRAFTER,
              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
             requests * 5 // 2, 3, PUBLIC_DRAFTER),
    ]
    for case in out:
        case.port = free_port()
        case.argv = [*case.argv, "--host", "127.0.0.1", "--port", str(case.port)]
    return out


def start(case: Case, seed: int) -> None:
    env = {**os.environ, "DRAFTER_EMULATOR_TIME_SCALE": "1.0", "DRAFTER_EMULATOR_SEED": str(seed)}
    env.pop("DRAFTER_EMULATOR_HOST", None)
    env.pop("DRAFTER_EMULATOR_PROFILE", None)
    env.pop("DRAFTER_EMULATOR_ACCEPTANCE", None)
    case.process = subprocess.Popen([sys.executable, "-m", "drafter_operator.cli", "emulate", *case.argv],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


async def wait_ready(client: httpx.AsyncClient, case: Case, timeout: float = 30.0) -> None:
    path = sglang_engine.READINESS_PATH if case.engine == "sglang" else vllm_engine.READINESS_PATH
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if case.process and case.process.poll() is not None:
            raise RuntimeError(f"{case.name}: the emulator exited: {case.process.stderr.read()}")
        try:
            if (await client.get(f"http://127.0.0.1:{case.port}{path}")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{case.name}: not ready after {timeout}s")


async def scrape(client: httpx.AsyncClient, case: Case) -> spec_metrics.SpecDecodeCounters:
    text = (await client.get(f"http://127.0.0.1:{case.port}/metrics")).text
    parser = vllm_engine if case.engine == "vllm" else sglang_engine
    try:
        return parser.parse_spec_decode_metrics(text)
    except mv.MetricsUnusable as exc:
        # The emulator's own exposition must always be usable: a verdict is a bug this bench reports.
        raise RuntimeError(f"{case.name}: the emulator's /metrics are unusable: {exc.verdict}") from None


async def stream_one(client: httpx.AsyncClient, case: Case, max_tokens: int) -> tuple[int, float, float]:
    """(completion tokens, seconds, time to first token) of one streamed completion."""
    body = {"model": TARGET, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start_t = time.perf_counter()
    first = None
    tokens = None
    async with client.stream("POST", f"http://127.0.0.1:{case.port}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line[len("data: "):]
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            if chunk["choices"] and first is None:
                first = time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk["choices"]:
                last = time.perf_counter()
    assert tokens == max_tokens, (tokens, max_tokens)
    return tokens, last - start_t, first - start_t


async def run_case(client: httpx.AsyncClient, case: Case, max_tokens: int, profile) -> None:
    await wait_ready(client, case)
    before = await scrape(client, case)
    tokens = seconds = 0.0
    for _ in range(case.requests):
        n, s, _ttft = await stream_one(client, case, max_tokens)
        tokens += n
        seconds += s
    after = await scrape(client, case)
    try:
        w = spec_metrics.window(before, after, num_speculative_tokens=case.k or None)
    except mv.MetricsUnusable as exc:
        raise RuntimeError(f"{case.name}: no acceptance window between the two scrapes: {exc.verdict}") from None

    a = profile.lookup(case.engine, case.drafter).acceptance if case.drafter else 0.0
    model = speedup.predict(a, case.k, profile.draft_cost, profile.target_step_ms)
    step_s = speedup.step_seconds(case.k, profile.draft_cost, profile.target_step_ms)
    steps = w.drafts if case.k else tokens - case.requests
    modelled_seconds = case.requests * profile.target_step_ms / 1000.0 + steps * step_s
    se = None
    if case.k and w.drafts:
        # Standard error of accepted/drafted over this many verification steps (i.i.d. steps).
        acc = [a**i for i in range(1, case.k + 1)]
        mean = sum(acc)
        var = sum((2 * i - 1) * a**i for i in range(1, case.k + 1)) - mean * mean
        se = math.sqrt(var / w.drafts) / case.k
    case.results = {
        "requests": case.requests, "tokens": int(tokens), "seconds": seconds,
        "tokensPerSecond": tokens / seconds, "modelTokensPerSecond": model.tokens_per_second,
        "acceptanceRate": w.acceptance_rate, "modelAcceptanceRate": model.acceptance_rate,
        "acceptanceRateStdErr": se,
        "meanAcceptanceLength": w.mean_acceptance_length, "modelMeanAcceptanceLength": model.mean_acceptance_length,
        "verificationSteps": w.drafts, "modelSpeedup": model.speedup,
        "modelledSecondsForDrawnSteps": modelled_seconds,
        "clockDeviation": seconds / modelled_seconds - 1.0,
    }


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2%}"


def report(all_cases: list[Case]) -> None:
    baseline = all_cases[0].results["tokensPerSecond"]
    print(f"{'case':42} {'tokens':>6} {'tok/s':>7} {'model':>7} {'dev':>7} | {'accept':>7} {'model':>7} {'±se':>6}"
          f" | {'length':>6} {'model':>6} | {'speedup':>7} {'model':>6} | {'clock':>7}")
    for case in all_cases:
        r = case.results
        r["speedup"] = r["tokensPerSecond"] / baseline
        rate, mrate, se = r["acceptanceRate"], r["modelAcceptanceRate"], r["acceptanceRateStdErr"]
        length, mlength = r["meanAcceptanceLength"], r["modelMeanAcceptanceLength"]
        print(f"{case.name:42} {r['tokens']:>6} {r['tokensPerSecond']:>7.2f} {r['modelTokensPerSecond']:>7.2f} "
              f"{pct(r['tokensPerSecond'] / r['modelTokensPerSecond'] - 1):>7} | "
              f"{'-' if rate is None else f'{rate:.2%}':>7} {'-' if mrate is None else f'{mrate:.2%}':>7} "
              f"{'-' if se is None else f'{se:.2%}':>6} | "
              f"{'-' if length is None else f'{length:.3f}':>6} {mlength:>6.3f} | "
              f"{r['speedup']:>6.3f}x {r['modelSpeedup']:>5.3f}x | {pct(r['clockDeviation']):>7}")
    print("dev: measured tok/s vs the model; clock: wall time vs the modelled time of the steps actually drawn;\n"
          "±se: expected sampling spread of the acceptance rate for this many verification steps.")


async def main_async(args: argparse.Namespace) -> list[Case]:
    profile = load_profile(None)
    all_cases = cases(args.requests)
    for index, case in enumerate(all_cases):
        start(case, args.seed + index)  # independent draws per emulator
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            await asyncio.gather(*(run_case(client, case, args.tokens, profile) for case in all_cases))
    finally:
        for case in all_cases:
            if case.process and case.process.poll() is None:
                case.process.terminate()
                case.process.wait(timeout=10)
    return all_cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512, help="max_tokens per request")
    parser.add_argument("--requests", type=int, default=4,
                        help="requests of the vLLM seed-drafter case (baseline: one fewer, SGLang: 2.5x as many)")
    parser.add_argument("--seed", type=int, default=0,
                        help="DRAFTER_EMULATOR_SEED of the first emulator (the others get seed+1, seed+2)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        all_cases = asyncio.run(main_async(args))
    except RuntimeError as exc:  # an emulator that exited, never got ready, or exported unusable metrics
        print(f"emulator_throughput: {exc}", file=sys.stderr)
        return 1
    report(all_cases)
    print(f"bench wall time {time.monotonic() - started:.1f}s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({c.name: c.results for c in all_cases}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
