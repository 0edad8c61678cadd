"""What counting real tokens costs the emulator: the shipped tokenizer and the endpoints that use it.

Prints, on this machine:
- the tokenizer's load time (first request only; ``tokenizer.shipped()`` caches it) and size;
- encode time and tokens per word for English-like prompts of 100 to 100,000 words (the words come
  from a fixed list, some outside the tokenizer's training lists, so the count is not one per word);
- chat-template rendering + encoding time for a 2-message and a 50-message conversation;
- round-trip latency of ``POST /tokenize`` (vLLM) and of a 1-token ``POST /generate`` (SGLang) on an
  in-process emulator at time scale 0 (no modelled sleeping): the request overhead the tokenizer adds
  to every request, measured over ``--requests`` sequential calls.

Usage: python bench/emulator_tokenizer.py [--requests 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time

import aiohttp

from drafter_testbed.emulator import tokenizer as tok
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator.server import EmulatorServer

WORDS = ("the model drafts tokens and the target verifies them while operators watch acceptance rates "
         "across Kubernetes clusters, GPUs, schedulers; throughput, latency (p99) and 42 other numbers").split()


def timed(fn, repeat: int) -> float:
    """Best-of-3 mean seconds per call over ``repeat`` calls."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


def prompt(words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def endpoint_latency(engine: str, requests: int) -> dict[str, float]:
    argv = (["vllm", "serve", "m", "--port", "0"] if engine == "vllm" else
            ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "0"])
    emu = EmulatedEngine(parse_command_line(argv), Settings(host="127.0.0.1", time_scale=0.0, seed=0), load_profile())
    server = EmulatorServer(emu, "127.0.0.1", 0)
    await server.start()
    text = prompt(1000, random.Random(1))
    path, body = (("/tokenize", {"prompt": text}) if engine == "vllm" else
                  ("/generate", {"text": text, "sampling_params": {"max_new_tokens": 1}}))
    try:
        async with aiohttp.ClientSession(base_url=server.url) as session:
            samples = []
            for i in range(requests + 20):
                start = time.perf_counter()
                async with session.post(path, json=body) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                if i >= 20:  # warm-up
                    samples.append(time.perf_counter() - start)
    finally:
        await server.stop()
    samples.sort()
    return {"path": path, "median_ms": statistics.median(samples) * 1000,
            "p99_ms": samples[int(0.99 * (len(samples) - 1))] * 1000}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    t = tok.load()
    load_ms = (time.perf_counter() - start) * 1000
    size_kb = sum(p.stat().st_size for p in tok.TOKENIZER_DIR.glob("*.json")) / 1024
    print(f"tokenizer: vocabulary {t.vocab_size}, {size_kb:.0f} KB on disk, load {load_ms:.1f} ms")

    rng = random.Random(0)
    encode = []
    print(f"{'words':>8} {'tokens':>8} {'tok/word':>9} {'encode ms':>10} {'Mtok/s':>8}")
    for words in (100, 1_000, 10_000, 100_000):
        text = prompt(words, rng)
        n = len(t.encode(text))
        seconds = timed(lambda: t.encode(text), max(1, 2000 // words))
        encode.append({"words": words, "tokens": n, "encode_ms": seconds * 1000})
        print(f"{words:>8} {n:>8} {n / words:>9.2f} {seconds * 1000:>10.3f} {n / seconds / 1e6:>8.2f}")

    chat = []
    for turns in (2, 50):
        messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": prompt(50, rng)} for i in range(turns)]
        seconds = timed(lambda: t.count_chat(messages), 200)
        chat.append({"messages": turns, "tokens": t.count_chat(messages), "ms": seconds * 1000})
        print(f"chat template + encode, {turns} messages ({chat[-1]['tokens']} tokens): {seconds * 1000:.3f} ms")

    endpoints = {}
    for engine in ("vllm", "sglang"):
        result = asyncio.run(endpoint_latency(engine, args.requests))
        endpoints[engine] = result
        print(f"{engine} POST {result['path']} (1,000-word prompt, time scale 0): "
              f"median {result['median_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms over {args.requests} requests")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_ms": load_ms, "size_kb": size_kb, "encode": encode, "chat": chat,
                       "endpoints": endpoints}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
