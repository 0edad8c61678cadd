"""k per load band against static speculation at every k, none, and the on/off schedule, on the demo's drafter.

What it does, as the operator does it:

1. the demo's sweep (1, 8, 32 streams) of the demo's drafter (the retrained EAGLE-3 for Kimi-K2.5 on
   vLLM, k = 5; a = 0.89 in drafter_testbed/data/emulator-profiles.yaml) against the baseline (the same target without
   speculation), refined the way ``drafter-operator bench`` refines it (``engines/crossover.py``) until the
   break-even is bracketed within 10%, with the per-position acceptance the engine's counters export;
2. two schedules from that one sweep: on/off (k = 5 below the break-even, none from it:
   ``engines/dynamic.py``) and k per load band (every k from 0 to 5 predicted at each load from the
   sweep's step costs and acceptance: ``engines/k_bands.py``);
3. the k-band schedule measured at the sweep's levels and, where a level is more than 5% off its prediction, the
   bands fitted again with those levels (``k_bands.refine_bands``, what the operator does with the scheduled
   revision's own sweep); that schedule is the one compared;
4. at every level (default 1, 2, 4, 8, 12, 16, 20, 24, 32, 48, 64 streams) the output throughput of no
   speculation, of static k = 1 to 5, of both schedules, and the k-band schedule's share of the best
   static k (0 included) and its gain over on/off.

Two ways to measure (``--mode``):

- ``modelled`` (default): the emulator's engine in process (``EmulatedEngine``: the step loop
  ``drafter-operator emulate`` serves with) at time scale 0; throughput is tokens over the step loop's
  modelled seconds (prefill included). One wave of N streams of ``--max-tokens`` tokens each, seeded
  acceptance draws: deterministic, no wall clock. tests/unit/engines/test_crossover_schedule.py and
  test_k_bands.py assert its properties.
- ``served``: ``drafter-operator emulate`` servers (subprocesses) measured over HTTP by the
  project's benchmark client (``drafter-operator bench``'s waves of N streams: ``benchmark_client/run.py``), the sweep
  with its own refinement. Wall-clock figures: on a busy machine the emulator's step loop falls behind
  and the figures blur, so raise ``--time-scale`` there.

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

from drafter_operator.engines import crossover, k_bands
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


def argv(schedule: Sequence[Sequence[int]] | None = None, speculative: bool = True, k: int = K) -> list[str]:
    """``vllm serve`` of the demo's target: without speculation, with static k, or with a schedule."""
    if not speculative or k == 0:
        return ["vllm", "serve", TARGET]
    config: dict = {"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": k}
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
    _ACCEPTANCE[json.dumps(command)] = per_position(engine.exporter.registry)
    return engine.totals.generated_tokens / engine.scheduler.model_seconds


#: The per-position acceptance of the last modelled run of each command line (json of the argv).
_ACCEPTANCE: dict[str, tuple[float, ...]] = {}


def per_position(registry) -> tuple[float, ...]:
    """vLLM's per-position acceptance from an emulated engine's metrics: accepted at position i / drafts."""
    samples = [sample for metric in registry.collect() for sample in metric.samples]
    drafts = sum(s.value for s in samples if s.name == "vllm:spec_decode_num_drafts_total")
    accepted = {int(s.labels["position"]): s.value for s in samples
                if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total"}
    return tuple(accepted[i] / drafts for i in sorted(accepted)) if drafts else ()


def modelled_acceptance(command: list[str]) -> tuple[float, ...]:
    """The per-position acceptance the last modelled run of ``command`` counted."""
    return _ACCEPTANCE.get(json.dumps(command), ())


Measure = Callable[[list[str], int], float]


def refined_sweep(measure: Measure, sweep: Sequence[int] = DEMO_SWEEP) -> list[tuple[int, float]]:
    """(streams, speedup) of the sweep and of the levels the refinement adds, in the order measured."""
    static, none = argv(), argv(speculative=False)
    levels = [(c, measure(static, c) / measure(none, c)) for c in sweep]
    while (level := crossover.next_level(levels)) is not None:
        levels.append((level, measure(static, level) / measure(none, level)))
    return levels


def sweep_levels(sweep: Sequence[tuple[int, float]], measure: Measure) -> list[k_bands.Level]:
    """The sweep's levels as k-band inputs: each level's throughput at k = K and the baseline's."""
    static, none = argv(), argv(speculative=False)
    return [k_bands.Level(c, K, measure(static, c), measure(none, c)) for c, _ in sweep]


def k_band_schedule(levels: Sequence[k_bands.Level], acceptance: Sequence[float], measure: Measure,
                    refine: bool = True) -> tuple[list[k_bands.Band], k_bands.StepModel]:
    """The k-band schedule of one sweep; with ``refine``, measured at the sweep's levels and chosen again from
    the sweep and those measurements."""
    model = k_bands.step_model(levels, acceptance, k_bands.CHAIN)
    bands = k_bands.choose_bands(model, dynamic.MAX_BATCH_SIZE)
    if refine:  # as the operator refines a schedule from its own sweep (controllers/serving/schedule.py)
        scheduled = argv(k_bands.schedule(bands))
        measured = [k_bands.Level(level.concurrency, dynamic.k_for_batch(k_bands.schedule(bands), level.concurrency, K),
                                  measure(scheduled, level.concurrency), level.baseline_tokens_per_second)
                    for level in levels]
        found = k_bands.refine_bands(levels, acceptance, k_bands.CHAIN, dynamic.MAX_BATCH_SIZE, measured)
        if found is not None and found.bands is not None:
            bands = list(found.bands)
            model = k_bands.refine(levels, [m for m in measured if m.k > 0], acceptance, k_bands.CHAIN)
    return bands, model


@dataclass(frozen=True)
class BandRow:
    """One load: throughput of none and of every static k (index = k), of on/off and of the k-band schedule."""

    streams: int
    static: tuple[float, ...]
    on_off: float
    banded: float

    @property
    def share(self) -> float:
        """The k-band schedule's throughput over the best static k (0 included)."""
        return self.banded / max(self.static)

    @property
    def gain(self) -> float:
        """The k-band schedule's throughput over the on/off schedule's."""
        return self.banded / self.on_off


def compare_bands(measure: Measure, on_off: Sequence[Sequence[int]], banded: Sequence[Sequence[int]],
                  levels: Sequence[int] = LEVELS, max_k: int = K) -> list[BandRow]:
    return [BandRow(n, tuple(measure(argv(k=k), n) for k in range(max_k + 1)), measure(argv(on_off), n),
                    measure(argv(banded), n)) for n in levels]


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
        if result.per_position_acceptance:
            _ACCEPTANCE[json.dumps(command)] = tuple(result.per_position_acceptance)
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


def report_bands(bands: Sequence[k_bands.Band], rows: list[BandRow], around: tuple[float, float]) -> dict:
    print("\nk per load band: " + ", ".join(f"batch {b.start}-{b.end}: k={b.k} (predicted {b.predicted_speedup:.2f}x)"
                                          for b in bands))
    ks = len(rows[0].static)
    print(f"\n{'streams':>7} " + " ".join(f"{'k=' + str(k):>7}" for k in range(ks))
          + f" {'on/off':>7} {'banded':>7} {'banded/best':>12} {'banded/onoff':>13}")
    for row in rows:
        print(f"{row.streams:>7} " + " ".join(f"{x:>7.0f}" for x in row.static)
              + f" {row.on_off:>7.0f} {row.banded:>7.0f} {row.share:>11.3f}x {row.gain:>12.3f}x")
    worst = min(rows, key=lambda r: r.share)
    near = [r for r in rows if around[0] <= r.streams <= around[1]]
    mean_gain = sum(r.gain for r in near) / len(near) if near else float("nan")
    print(f"\nlowest share of the best static k: {worst.share:.3f}x at {worst.streams} streams; "
          f"mean gain over on/off at {around[0]:.0f}-{around[1]:.0f} streams: {mean_gain:.3f}x")
    return {"bands": [{"start": b.start, "end": b.end, "k": b.k, "predicted": b.predicted_speedup} for b in bands],
            "rows": [{"streams": r.streams, "static": list(r.static), "onOff": r.on_off, "banded": r.banded,
                      "share": r.share, "gain": r.gain} for r in rows],
            "meanGainAroundBreakEven": mean_gain}


def around_break_even(sweep: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """The band around the break-even: half to one and a half times its streams."""
    found = crossover.bracket(sweep)
    estimate = found.estimate if found is not None and found.estimate is not None else float(LEVELS[-1])
    return estimate / 2, estimate * 1.5


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
        levels_k = sweep_levels(sweep, measure)
        acceptance = modelled_acceptance(argv())
        bands, _ = k_band_schedule(levels_k, acceptance, measure)
        results["kBands"] = report_bands(bands, compare_bands(measure, schedule, k_bands.schedule(bands), levels),
                                         around_break_even(sweep))
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
