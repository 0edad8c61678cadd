"""The load-aware schedule against static speculation and none, at every load, on the demo's drafter.

What it does, as the operator does it:

1. the demo's sweep (1, 8, 32 streams) of the demo's drafter (the retrained EAGLE-3 for Kimi-K2.5 on
   vLLM, k = 5; a = 0.89 in drafter_testbed/data/emulator-profiles.yaml) against the baseline (the same target without
   speculation), refined the way ``drafter-operator bench`` refines it (``engines/crossover.py``) until the
   break-even is bracketed within 10%;
2. the schedule ``drafter.dynamic: fromBenchmark`` builds from that sweep (``engines/dynamic.py``);
3. at every level (default 1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64 streams) the output throughput of no
   speculation, of static k = 5 and of the schedule, and the schedule's share of the better of the two.

Two ways to measure (``--mode``):

- ``modelled`` (default): the emulator's engine in process (``EmulatedEngine``: the step loop
  ``drafter-operator emulate`` serves with) at time scale 0; throughput is tokens over the step loop's
  modelled seconds (prefill included). One wave of N streams of ``--max-tokens`` tokens each, seeded
  acceptance draws: deterministic, no wall clock. tests/unit/engines/test_crossover_schedule.py asserts its
  0.95x property.
- ``served``: three ``drafter-operator emulate`` servers (subprocesses) measured over HTTP by the
  project's benchmark client (``drafter-operator bench``'s waves of N streams: ``benchmark_client/run.py``), the sweep
  with its own refinement. Wall-clock figures: on a busy machine the emulator's step loop falls behind
  and the figures blur, so raise ``--time-scale`` there. (The engines' own clients, ``vllm bench
  serve`` and the like from ``.ci/clients-env``, take over a minute to start each on a loaded 2-core
  machine, 33 runs here; the project's client drives the same emulator endpoints.)

Usage: python bench/crossover_schedule.py [--mode modelled|served] [--levels 1,2,4,...] [--max-tokens 256]
                                          [--time-scale 1.0] [--json out.json]
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
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drafter_operator.engines import crossover
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_operator.engines import dynamic

TARGET = "/models/kimi-k2.5-int4"
#: The demo's drafter once the DrafterTraining promoted it (drafter_testbed/demo.py RETRAINED_DRAFTER).
DRAFTER = "/models/drafters/kimi-k25-eagle3-regenerated"
K = 5
DEMO_SWEEP = (1, 8, 32)
LEVELS = (1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64)
PROMPT_TOKENS = 64
SEED = 7


def argv(schedule: Sequence[Sequence[int]] | None = None, speculative: bool = True) -> list[str]:
    """``vllm serve`` of the demo's target: without speculation, with static k, or with a schedule."""
    if not speculative:
        return ["vllm", "serve", TARGET]
    config: dict = {"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": K}
    if schedule is not None:
        config[dynamic.SCHEDULE_KEY] = [list(entry) for entry in schedule]
    return ["vllm", "serve", TARGET, "--speculative-config", json.dumps(config)]


def modelled_tokens_per_second(command: list[str], streams: int, max_tokens: int, seed: int = SEED,
                               environment: dict[str, str] | None = None) -> float:
    """Output tokens per modelled second of one wave of ``streams`` requests sent at once to the emulator's
    engine (time scale 0: the step loop runs as fast as it can and counts the seconds it models);
    ``environment``: the engine's own environment variables (e.g. SGLANG_RAGGED_VERIFY_MODE)."""
    engine = EmulatedEngine(parse_command_line(command), Settings(time_scale=0.0, seed=seed), load_profile(),
                            environment=environment)

    async def one() -> None:
        async for _ in engine.generate(PROMPT_TOKENS, max_tokens, streaming=True):
            pass

    async def wave() -> None:
        await asyncio.gather(*(one() for _ in range(streams)))

    asyncio.run(wave())
    return engine.totals.generated_tokens / engine.scheduler.model_seconds


Measure = Callable[[list[str], int], float]


def refined_sweep(measure: Measure, sweep: Sequence[int] = DEMO_SWEEP) -> list[tuple[int, float]]:
    """(streams, speedup) of the sweep and of the levels the refinement adds, in the order measured."""
    static, none = argv(), argv(speculative=False)
    levels = [(c, measure(static, c) / measure(none, c)) for c in sweep]
    while (level := crossover.next_level(levels)) is not None:
        levels.append((level, measure(static, level) / measure(none, level)))
    return levels


@dataclass(frozen=True)
class Row:
    streams: int
    none: float
    static: float
    scheduled: float

    @property
    def share(self) -> float:
        """The schedule's throughput over the better of static speculation and none."""
        return self.scheduled / max(self.static, self.none)


def compare(measure: Measure, schedule: Sequence[Sequence[int]], levels: Sequence[int] = LEVELS) -> list[Row]:
    return [Row(n, measure(argv(speculative=False), n), measure(argv(), n), measure(argv(schedule), n))
            for n in levels]


# --------------------------------------------------------------------------------------------------
# served: emulator servers and the project's bench client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    """One ``drafter-operator emulate`` per command line, started on first use, stopped at exit."""

    def __init__(self, time_scale: float) -> None:
        self.time_scale = time_scale
        self.urls: dict[str, str] = {}
        self.processes: list[subprocess.Popen] = []

    def url(self, command: list[str]) -> str:
        key = json.dumps(command)
        if key not in self.urls:
            port = free_port()
            env = {**os.environ, "DRAFTER_EMULATOR_TIME_SCALE": str(self.time_scale),
                   "DRAFTER_EMULATOR_SEED": str(SEED), "DRAFTER_EMULATOR_HOST": "127.0.0.1"}
            env.pop("DRAFTER_EMULATOR_ACCEPTANCE", None)
            process = subprocess.Popen([sys.executable, "-m", "drafter_operator.cli", "emulate", *command,
                                        "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            self.processes.append(process)
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2):
                        break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the emulator {' '.join(command[:3])} did not start") from None
                    time.sleep(0.2)
            self.urls[key] = url
        return self.urls[key]

    def close(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(timeout=10)


def served_measure(servers: Servers, max_tokens: int, repetitions: int) -> Measure:
    from drafter_operator.benchmark_client.run import Options, run

    def measure(command: list[str], streams: int) -> float:
        # One level of `drafter-operator bench`: waves of `streams` requests at once, tokens / wave time.
        options = Options(url=servers.url(command), concurrency=(streams,), num_prompts=streams,
                          repetitions=repetitions, max_tokens=max_tokens, completions=True, refine=0)
        result = asyncio.run(run(options))
        return result.tokens_per_second / servers.time_scale  # per modelled second

    return measure


# --------------------------------------------------------------------------------------------------


def report(sweep: list[tuple[int, float]], schedule: Sequence[Sequence[int]], rows: list[Row]) -> dict:
    found = crossover.bracket(sweep)
    print("sweep (streams: speedup), in the order measured: "
          + ", ".join(f"{c}: {s:.3f}x" for c, s in sweep))
    if found is not None:
        print(f"break-even bracket: {found.above} .. {found.below} streams, interpolated {found.estimate:.2f}")
    print("schedule: " + ", ".join(f"batch {a}-{b}: k={n}" for a, b, n in schedule))
    print(f"\n{'streams':>7} {'none tok/s':>11} {'static k=5':>11} {'scheduled':>10} {'static/none':>12} "
          f"{'scheduled/best':>15}")
    for row in rows:
        print(f"{row.streams:>7} {row.none:>11.0f} {row.static:>11.0f} {row.scheduled:>10.0f} "
              f"{row.static / row.none:>11.3f}x {row.share:>14.3f}x")
    worst = min(rows, key=lambda r: r.share)
    print(f"\nlowest share of the better of static and none: {worst.share:.3f}x at {worst.streams} streams")
    return {"sweep": sweep, "bracket": None if found is None else
            {"above": found.above, "below": found.below, "estimate": found.estimate},
            "schedule": [list(entry) for entry in schedule],
            "rows": [{"streams": r.streams, "none": r.none, "static": r.static, "scheduled": r.scheduled,
                      "share": r.share} for r in rows]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("modelled", "served"), default="modelled")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="streams to compare at")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per request")
    parser.add_argument("--repetitions", type=int, default=2, help="served: waves per level")
    parser.add_argument("--time-scale", type=float, default=1.0, help="served: DRAFTER_EMULATOR_TIME_SCALE")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    levels = tuple(int(x) for x in args.levels.split(","))
    started = time.monotonic()
    servers = Servers(args.time_scale) if args.mode == "served" else None
    try:
        measure = (served_measure(servers, args.max_tokens, args.repetitions) if servers is not None
                   else lambda command, streams: modelled_tokens_per_second(command, streams, args.max_tokens))
        sweep = refined_sweep(measure)
        schedule = dynamic.schedule_from_levels([{"concurrency": c, "speedup": s} for c, s in sweep], K)
        results = report(sweep, schedule, compare(measure, schedule, levels))
    finally:
        if servers is not None:
            servers.close()
    print(f"({args.mode}, {args.max_tokens} tokens per request, {time.monotonic() - started:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
