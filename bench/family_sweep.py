"""Drafter families on one target: speedup per family at 1 to 64 streams, and each family's break-even.

One ``drafter-operator emulate`` server per family on Kimi-K2.5 (issue 27's demo): on SGLang EAGLE3 (the
public AQ-MedAI drafter), DSPARK (the target's bundled weights, gamma 7; once as SGLang runs it by
default, once with ``SGLANG_RAGGED_VERIFY_MODE=compact`` so its confidence head caps the verify
window), DFLASH (a 16-token block), NGRAM and STANDALONE (a small draft model, 3 steps); on vLLM suffix
decoding (k up to 24) and the seed's EAGLE-3. Each is swept by the project's benchmark client
(``drafter-operator bench``: waves of N streams, against a no-speculation server of the same engine
and target, refined until the break-even is bracketed within 10 %, ``engines/crossover.py``). Next to
each measured speedup, the batching model's prediction for that family (``drafter_testbed/emulator/batching.py``:
draft cost per family, per-position acceptance, the drafted length of each step); the profile
figures and their sources are in ``drafter_testbed/data/emulator-profiles.yaml`` and
docs/emulator-model.md.

It prints a speedup table, each family's break-even (measured bracket, the model's value) and the
family with the best measured speedup at each load: what the operator would pick from one sweep.

Two ways to measure (``--mode``), as ``bench/crossover_schedule.py``: ``served`` (default) over HTTP
with the benchmark client, wall-clock figures that blur when the machine is busy (raise
``--time-scale``); ``modelled``, the emulator's engine in process at time scale 0, one wave of N
streams per level with seeded draws, throughput over the step loop's modelled seconds: deterministic,
and refined the same way (``crossover.next_level``).

Usage: python bench/family_sweep.py [--mode served|modelled] [--levels 1,8,32,64] [--max-tokens 128]
                                    [--time-scale 0.2] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crossover_schedule import Servers, modelled_tokens_per_second  # noqa: E402  (bench/ is a folder of scripts)

from drafter_operator.benchmark_client.run import Options, run  # noqa: E402
from drafter_operator.engines import crossover  # noqa: E402
from drafter_testbed.emulator import batching  # noqa: E402
from drafter_testbed.emulator.server import build_engine  # noqa: E402

TARGET = "/models/Kimi-K2.5"
LEVELS = (1, 8, 32, 64)
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", TARGET, "--enable-metrics"]
VLLM = ["vllm", "serve", TARGET]


@dataclass(frozen=True)
class Family:
    name: str
    engine: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


def spec(algorithm: str, *flags: str) -> tuple[str, ...]:
    return (*SGLANG, "--speculative-algorithm", algorithm, *flags)


FAMILIES = (
    Family("SGLang EAGLE3", "sglang", spec("EAGLE3", "--speculative-draft-model-path", "AQ-MedAI/Kimi-K2-Instruct-eagle3")),
    Family("SGLang DSPARK", "sglang", spec("DSPARK")),
    Family("SGLang DSPARK capped", "sglang", spec("DSPARK", "--served-model-name", "kimi-dspark-capped"),
           (("SGLANG_RAGGED_VERIFY_MODE", "compact"),)),
    Family("SGLang DFLASH", "sglang", spec("DFLASH", "--speculative-draft-model-path", "/models/Kimi-K2.5-DFlash-b16")),
    Family("SGLang NGRAM", "sglang", spec("NGRAM")),
    Family("SGLang STANDALONE", "sglang", spec("STANDALONE", "--speculative-draft-model-path",
                                               "/models/Kimi-K2.5-small-draft", "--speculative-num-steps", "3")),
    Family("vLLM suffix", "vllm", (*VLLM, "--speculative-config", '{"method":"suffix"}')),
    Family("vLLM EAGLE-3 (seed)", "vllm", (*VLLM, "--speculative-config",
                                           '{"method":"eagle3","model":"/models/kimi-k2.5-eagle3","num_speculative_tokens":5}')),
)
BASELINES = {"sglang": tuple(SGLANG), "vllm": tuple(VLLM)}


def predicted(family: Family, levels: tuple[int, ...]) -> tuple[dict[int, float], float | None, str]:
    """The batching model's speedup per level and break-even for the family, from the emulator's own decoder."""
    engine = build_engine(list(family.argv), dict(family.env), log=lambda _: None)
    decoder = engine.decoder
    speedups = {n: batching.speedup_at(n, decoder.curve, decoder.speculation, decoder.costs) for n in levels}
    crossover = batching.crossover_streams(decoder.curve, decoder.speculation, decoder.costs)
    spec_ = engine.config.speculation
    shape = f"k={decoder.k} forwards={decoder.speculation.forwards} verify={decoder.speculation.verified_per_request:.1f}"
    return speedups, crossover, f"{spec_.method} {shape} ({engine.acceptance_source})"


def served(servers: Servers, family: Family, levels: tuple[int, ...], max_tokens: int) -> dict:
    """One ``drafter-operator bench`` sweep of the family against its engine's no-speculation server."""
    for key, value in family.env:
        os.environ[key] = value  # Servers copies the environment when it starts a server
    try:
        url = servers.url(list(family.argv))
    finally:
        for key, _ in family.env:
            os.environ.pop(key, None)
    baseline = servers.url(list(BASELINES[family.engine]))
    options = Options(url=url, engine=family.engine, baseline_url=baseline, concurrency=levels, num_prompts=8,
                      repetitions=1, max_tokens=max_tokens, completions=True, refine=4)
    result = asyncio.run(run(options))
    measured = {level.concurrency: level.speedup for level in result.levels or []}
    bracket = result.crossover
    return {"speedups": dict(sorted(measured.items())),
            "bracket": None if bracket is None else [bracket.above_concurrency, bracket.below_concurrency],
            "acceptanceLength": result.acceptance_length}


def modelled(family: Family, levels: tuple[int, ...], max_tokens: int) -> dict:
    """The same sweep on the emulator's engine in process (time scale 0, seeded): no HTTP, no wall clock."""
    def speedup(streams: int) -> float:
        spec = modelled_tokens_per_second(list(family.argv), streams, max_tokens, environment=dict(family.env))
        return spec / modelled_tokens_per_second(list(BASELINES[family.engine]), streams, max_tokens)

    measured = [(n, speedup(n)) for n in levels]
    for _ in range(4):  # as `drafter-operator bench --refine 4`
        if (level := crossover.next_level(measured)) is None:
            break
        measured.append((level, speedup(level)))
    bracket = crossover.bracket(measured)
    return {"speedups": dict(sorted(measured)),
            "bracket": None if bracket is None else [bracket.above, bracket.below], "acceptanceLength": None}


def table(rows: list[dict], levels: tuple[int, ...]) -> None:
    head = " ".join(f"{f'{n} streams':>16}" for n in levels)
    print(f"{'family':<22} {head} {'break-even (measured bracket / model)':>40}")
    for row in rows:
        cells = " ".join(f"{row['speedups'].get(n, float('nan')):>7.2f}x ({row['model'][n]:>4.2f}x)" for n in levels)
        bracket = row["bracket"]
        measured = ("never below 1.0x" if bracket is None else f"below 1.0x at {bracket[1]}" if bracket[0] is None
                    else f"{bracket[0]}..{bracket[1]}")
        model = "none" if row["crossover"] is None else f"{row['crossover']:.1f}"
        print(f"{row['name']:<22} {cells} {measured:>26} / {model:>6}")
    print("\n(measured x (model x)); the operator picks, from this one sweep:")
    for n in levels:
        best = max(rows, key=lambda r: r["speedups"].get(n, 0.0))
        pick = best["name"] if best["speedups"].get(n, 0.0) > 1.0 else "no speculation"
        print(f"  {n:>3} streams: {pick} ({best['speedups'].get(n, 0.0):.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("served", "modelled"), default="served")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--time-scale", type=float, default=0.2, help="DRAFTER_EMULATOR_TIME_SCALE")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    levels = tuple(int(x) for x in args.levels.split(","))
    started, rows = time.monotonic(), []
    servers = Servers(args.time_scale)
    try:
        for family in FAMILIES:
            model, break_even, shape = predicted(family, levels)
            measured = (served(servers, family, levels, args.max_tokens) if args.mode == "served"
                        else modelled(family, levels, args.max_tokens))
            rows.append({"name": family.name, "shape": shape, "model": model, "crossover": break_even, **measured})
            print(f"{family.name}: {shape}; measured {rows[-1]['speedups']}", flush=True)
    finally:
        servers.close()
    print()
    table(rows, levels)
    print(f"\n(Kimi-K2.5 on the emulator, {args.mode}, {args.max_tokens} tokens per request, time scale {args.time_scale}, "
          f"{time.monotonic() - started:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
