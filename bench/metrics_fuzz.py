"""Fuzz the acceptance monitor with mangled engine /metrics bodies: no exception, no false Degraded.

Runs --bodies scrapes (default 10,000) in sequences of --length (default 20) scrapes of one engine,
alternating vLLM 0.33.0 and SGLang 0.5.23. Each engine is the emulator's exporter driven by a healthy
drafter (acceptance about 71% at k = 5, or 80% at k = 3; the monitor's threshold is 40%, window 60 s,
`for` 30 s, one scrape every 15 s), so every Degraded=True is a false one. Before each scrape the true
body is mutated with probability --mutation-rate (default 0.5) by one to three of the mutations in
drafter_testbed/metrics_mutations.py: truncated, duplicated series, NaN/Inf/negative/huge/fractional/scaled values,
text values, a counter going backwards, an older body replayed (all counters backwards), a missing
family, a wrong TYPE, label garbage, binary junk, junk inserted, a body over the 4 MiB cap, thousands of
extra series, CRLF line ends, an HTML or JSON error page, families reordered. Each body goes through
the operator's own path: the engine's parser, EngineSource.sample_from (scrape history, window,
replicas combined) and the Degraded verdict (acceptance/verdict.evaluate).

Prints the bodies per mutation, the parser's answers, the Degraded condition after each scrape, the
exceptions that escaped (must be 0), the false Degraded (must be 0) and the CPU time per body (parse +
window + verdict, the thread's CPU time: on a shared machine wall time measures the neighbours). Exit
status 1 when either count is not 0.

Usage: python bench/metrics_fuzz.py [--bodies 10000] [--length 20] [--mutation-rate 0.5] [--seed 13]
                                    [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import sys
import time
from pathlib import Path

from drafter_testbed.metrics_mutations import MUTATIONS, false_degraded, percentile, random_plan, run_sequence


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=10_000)
    parser.add_argument("--length", type=int, default=20, help="scrapes per sequence (one engine)")
    parser.add_argument("--mutation-rate", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    per_mutation: collections.Counter[str] = collections.Counter()
    parsed: collections.Counter[str] = collections.Counter()
    conditions: collections.Counter[str] = collections.Counter()
    seconds: list[float] = []
    slowest: dict[str, float] = {}
    errors: list[str] = []
    false: list[tuple[str, int, int]] = []
    bodies = mutated = sequences = 0
    started = time.perf_counter()
    while bodies < args.bodies:
        engine = ("vllm", "sglang")[sequences % 2]
        length = min(args.length, args.bodies - bodies)
        seed = rng.randrange(2**32)
        run = run_sequence(engine, seed, random_plan(rng, length, args.mutation_rate))
        for step in run.steps:
            kind = " + ".join(step.mutations) or "none"
            per_mutation.update(step.mutations or ("none",))
            mutated += bool(step.mutations)
            parsed[step.parsed] += 1
            conditions[f"{step.condition[0]}/{step.condition[1]}"] += 1
            seconds.append(step.seconds)
            slowest[kind] = max(slowest.get(kind, 0.0), step.seconds)
            if step.error:
                errors.append(f"{engine} seed {seed} ({kind}):\n{step.error}")
        false += [(engine, seed, i) for i in false_degraded(run)]
        bodies += len(run.steps)
        sequences += 1
    wall = time.perf_counter() - started

    print(f"{bodies} bodies in {sequences} sequences ({mutated} mutated, {bodies - mutated} true), "
          f"{wall:.1f} s, seed {args.seed}")
    print("\nbodies per mutation (a body may get several):")
    for name in ["none", *MUTATIONS]:
        print(f"  {name:24} {per_mutation[name]:6}")
    print("\nthe parser's answer:")
    for answer, count in parsed.most_common():
        print(f"  {answer:24} {count:6}")
    print("\nDegraded after the scrape:")
    for condition, count in conditions.most_common():
        print(f"  {condition:40} {count:6}")
    print(f"\nexceptions: {len(errors)}")
    for error in errors[:3]:
        print(error)
    print(f"false Degraded: {len(false)}" + (f" (first: {false[:5]})" if false else ""))
    print(f"CPU time per body: median {statistics.median(seconds) * 1e3:.2f} ms, p99 {percentile(seconds, 0.99) * 1e3:.1f} ms, "
          f"max {max(seconds) * 1e3:.0f} ms")
    for kind, value in sorted(slowest.items(), key=lambda item: -item[1])[:3]:
        print(f"  slowest: {kind}: {value * 1e3:.0f} ms")
    if args.json:
        args.json.write_text(json.dumps({
            "bodies": bodies, "sequences": sequences, "mutated": mutated, "seed": args.seed, "wallSeconds": wall,
            "perMutation": dict(per_mutation), "parsed": dict(parsed), "conditions": dict(conditions),
            "exceptions": len(errors), "falseDegraded": len(false),
            "secondsPerBody": {"median": statistics.median(seconds), "p99": percentile(seconds, 0.99),
                               "max": max(seconds)}}, indent=2))
    return 1 if errors or false else 0


if __name__ == "__main__":
    sys.exit(main())
