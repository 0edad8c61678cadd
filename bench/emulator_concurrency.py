"""Speculative speedup against concurrency on the engine emulator, next to the published crossovers.

For the three seed profiles (vLLM without speculation, the baseline; vLLM with the seed's EAGLE-3
drafter, k = 5, a = 0.432; SGLang with the public drafter AQ-MedAI/Kimi-K2-Instruct-eagle3, 3 steps,
a = 0.89) and 1, 2, 4, 8, 16, 32 and 64 concurrent streams, it prints:

- the aggregate decode throughput and the speedup over the baseline that the batching model
  (``drafter_testbed/emulator/batching.py``) predicts;
- the same, measured on a running emulator (``drafter-operator emulate`` as a subprocess, one per
  profile, run one after the other): ``N`` streams each send one streamed completion at the same
  time, of ``max(--tokens, --budget / N)`` tokens (few streams get longer completions, so that the
  luck of the acceptance draws averages out as well as it does with many streams); the aggregate rate counts the tokens that arrive while all ``N`` streams are decoding (from
  the last stream's first token to the first stream's last token), in modelled seconds
  (wall seconds / time scale), so ramp-up and the tail of early finishers do not blur it;
- the published points the calibration aims at.

Usage: python bench/emulator_concurrency.py [--tokens 128] [--budget 2048] [--time-scale 0.25] [--seed 0]
                                            [--model-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import aiohttp

from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator import batching
from drafter_testbed.emulator.batching import NO_SPECULATION, Speculation

TARGET = "/models/kimi-k2.5-int4"
SEED_DRAFTER = "/models/kimi-k2.5-eagle3"
PUBLIC_DRAFTER = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
PROMPT = "Explain speculative decoding to an operator who runs a one-trillion-parameter model."
STREAMS = (1, 2, 4, 8, 16, 32, 64)

#: Published load crossovers (speedup = 1 + change in throughput, or 1 / (1 + change in TPOT)).
PUBLISHED = (
    ("DeepSeek-V4, MTP", "concurrency 1: +75 % (1.75x); concurrency 32: -37 % (0.63x)"),
    ("Kimi-K2.6, EAGLE-3", "slower than no speculation above about 20 concurrent requests"),
    ("Qwen3-32B, EAGLE-3, 2xH200 (llm-d guide)",
     "1 QPS: -27 % TPOT (1.37x); 2-4 QPS: +3 % throughput; 8 QPS: -13 % throughput"),
    ("70B target, 1B drafter", "the speedup reverses at batch 32"),
)


@dataclass
class Profile:
    name: str
    engine: str
    argv: list[str]
    a: float
    spec: Speculation
    measured: dict[int, float] = field(default_factory=dict)


def profiles() -> list[Profile]:
    seed = json.dumps({"method": "eagle3", "model": SEED_DRAFTER, "num_speculative_tokens": 5})
    entries = load_profile(None)
    return [
        Profile("baseline (vLLM, no speculation)", "vllm", ["vllm", "serve", TARGET], 0.0, NO_SPECULATION),
        Profile("vLLM seed drafter (eagle3, k=5)", "vllm", ["vllm", "serve", TARGET, "--speculative-config", seed],
                entries.lookup("vllm", SEED_DRAFTER).acceptance, Speculation(5)),
        Profile("SGLang public drafter (EAGLE3, 3 steps)", "sglang",
                ["python3", "-m", "sglang.launch_server", "--model-path", TARGET, "--enable-metrics",
                 "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", PUBLIC_DRAFTER,
                 "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", "4"],
                entries.lookup("sglang", PUBLIC_DRAFTER).acceptance, Speculation(3, verify_tokens=4)),
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(profile: Profile, port: int, time_scale: float, seed: int) -> subprocess.Popen:
    env = {**os.environ, "DRAFTER_EMULATOR_TIME_SCALE": str(time_scale), "DRAFTER_EMULATOR_SEED": str(seed)}
    for name in ("DRAFTER_EMULATOR_HOST", "DRAFTER_EMULATOR_PROFILE", "DRAFTER_EMULATOR_ACCEPTANCE"):
        env.pop(name, None)
    argv = [*profile.argv, "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen([sys.executable, "-m", "drafter_operator.cli", "emulate", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


async def wait_ready(session: aiohttp.ClientSession, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the emulator exited: {process.stderr.read()}")
        try:
            async with session.get("/health") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the emulator was not ready after {timeout}s")


async def stream(session: aiohttp.ClientSession, max_tokens: int) -> list[tuple[float, int]]:
    """(arrival time, tokens) of every chunk of one streamed completion."""
    body = {"model": TARGET, "prompt": PROMPT, "max_tokens": max_tokens, "stream": True}
    chunks = []
    async with session.post("/v1/completions", json=body) as r:
        r.raise_for_status()
        async for raw in r.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                text = json.loads(line[len("data: "):])["choices"][0]["text"]
                chunks.append((time.monotonic(), len(text.split())))
    return chunks


def all_decoding_rate(runs: list[list[tuple[float, int]]], time_scale: float) -> float:
    """Tokens per modelled second while every stream decodes (after the last first token, up to the
    first last token)."""
    start = max(run[0][0] for run in runs)
    end = min(run[-1][0] for run in runs)
    if end <= start:
        raise RuntimeError("no window where all streams decode: raise --tokens")
    tokens = sum(n for run in runs for t, n in run if start < t <= end)
    return tokens / ((end - start) / time_scale)


async def measure(profile: Profile, tokens: int, budget: int, time_scale: float, seed: int) -> None:
    port = free_port()
    process = start(profile, port, time_scale, seed)
    try:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", connector=connector, timeout=timeout) as session:
            await wait_ready(session, process)
            for n in STREAMS:
                runs = await asyncio.gather(*(stream(session, max(tokens, budget // n)) for _ in range(n)))
                profile.measured[n] = all_decoding_rate(runs, time_scale)
    finally:
        process.terminate()
        process.wait(timeout=10)


def report(all_profiles: list[Profile]) -> dict[str, object]:
    costs = load_profile(None).costs
    base = all_profiles[0]
    rows = []
    header = (f"{'streams':>7} | {'baseline tok/s':>20} | "
              + " | ".join(f"{p.name[:32]:>32}" for p in all_profiles[1:]))
    print(header)
    print(f"{'':>7} | {'model':>9} {'measured':>10} | "
          + " | ".join(f"{'model':>15} {'measured':>16}" for _ in all_profiles[1:]))
    for n in STREAMS:
        base_model = batching.tokens_per_second(n, 0.0, NO_SPECULATION, costs)
        row = {"streams": n, "baselineModel": base_model, "baselineMeasured": base.measured.get(n)}
        cells = []
        for p in all_profiles[1:]:
            model = batching.speedup_at(n, p.a, p.spec, costs)
            measured = p.measured[n] / base.measured[n] if n in p.measured and n in base.measured else None
            row[p.name] = {"speedupModel": model, "speedupMeasured": measured,
                           "tokensPerSecondModel": batching.tokens_per_second(n, p.a, p.spec, costs),
                           "tokensPerSecondMeasured": p.measured.get(n)}
            cells.append(f"{model:>14.2f}x {'-' if measured is None else f'{measured:.2f}x':>16}")
        measured_base = base.measured.get(n)
        print(f"{n:>7} | {base_model:>9.0f} {'-' if measured_base is None else f'{measured_base:.0f}':>10} | "
              + " | ".join(cells))
        rows.append(row)
    crossovers = {p.name: batching.crossover_streams(p.a, p.spec, costs) for p in all_profiles[1:]}
    print("\nbreak-even (model): " + "; ".join(
        f"{name}: {'never pays' if x == 0.0 else 'never' if x is None else f'{x:.1f} streams'}"
        for name, x in crossovers.items()))
    print("\npublished points:")
    for who, what in PUBLISHED:
        print(f"  {who}: {what}")
    return {"rows": rows, "crossovers": crossovers,
            "costs": {"targetStepMs": costs.target_step_ms, "draftCost": costs.draft_cost,
                      "computeKneeTokens": costs.compute_knee_tokens, "draftKneeTokens": costs.draft_knee_tokens,
                      "prefillTokensPerSecond": costs.prefill_tokens_per_second}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128, help="max_tokens of each stream's completion")
    parser.add_argument("--budget", type=int, default=2048, help="tokens per concurrency level, at least")
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="DRAFTER_EMULATOR_TIME_SCALE (0.25: four times real time; raise it on a busy machine)")
    parser.add_argument("--seed", type=int, default=0, help="DRAFTER_EMULATOR_SEED of the first emulator")
    parser.add_argument("--model-only", action="store_true", help="print the model's table without measuring")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    started = time.monotonic()
    all_profiles = profiles()
    if not args.model_only:
        try:
            for index, profile in enumerate(all_profiles):
                asyncio.run(measure(profile, args.tokens, args.budget, args.time_scale, args.seed + index))
        except RuntimeError as exc:
            print(f"emulator_concurrency: {exc}", file=sys.stderr)
            return 1
    results = report(all_profiles)
    print(f"\nbench wall time {time.monotonic() - started:.1f}s (time scale {args.time_scale}, "
          f"max({args.tokens}, {args.budget} / streams) tokens per stream)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
