"""Deterministic simulation soak of the DrafterServing controller (drafter_testbed.simulation, whose tests are
tests/simulation).

Runs many seeded scenarios (the real reconcile in a simulated cluster: random spec edits, deletes
and re-creates, operator crashes at any request, node loss, acceptance drops, metric faults,
admission refusals, foreign objects, API faults, watch lag, a simulated day or more each) and checks
every invariant after every event. Prints scenarios/second, ops/second and violations per invariant,
with the first seeds of each.

    python bench/simulate.py --scenarios 200 --operations 50 --seed 0 --workers 2
    python bench/simulate.py --seed 17 --replay             # the op list and the violations of seed 17
    python bench/simulate.py --seed 17 --replay --shrink    # and the shortest op list per violation
    python bench/simulate.py --scenarios 20 --profile       # cProfile of one worker's scenarios
    python bench/simulate.py --family batch --scenarios 200  # DrafterTraining and DrafterBenchmark (batch.py)
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter, defaultdict

from drafter_testbed.simulation.operations import describe
from drafter_testbed.simulation.runner import reproduction, run_scenario, shrink


def one(args: tuple[int, int, float, str]) -> tuple[int, list[tuple[str, str]], int, int, float]:
    seed, operations, days, family = args
    outcome = run_scenario(seed, operations, days=days, family=family)
    return seed, [(v.invariant, v.message) for v in outcome.violations], outcome.events, outcome.reconciles, \
        outcome.simulated


def soak(scenarios: int, operations: int, seed: int, workers: int, days: float, family: str = "serving") -> int:
    jobs = [(s, operations, days, family) for s in range(seed, seed + scenarios)]
    start = time.perf_counter()
    counts: Counter[str] = Counter()
    seeds: dict[str, list[int]] = defaultdict(list)
    examples: dict[str, str] = {}
    events = reconciles = 0
    simulated = 0.0
    if workers > 1:
        with multiprocessing.Pool(workers) as pool:
            results = list(pool.imap_unordered(one, jobs, chunksize=max(1, scenarios // (workers * 8))))
    else:
        results = list(map(one, jobs))
    for s, violations, ev, rec, sim in sorted(results):
        events += ev
        reconciles += rec
        simulated += sim
        for invariant, message in violations:
            counts[invariant] += 1
            seeds[invariant].append(s)
            examples.setdefault(invariant, message)
    elapsed = time.perf_counter() - start
    print(f"{scenarios} scenarios x {operations} ops in {elapsed:.1f}s with {workers} worker(s): "
          f"{scenarios / elapsed:.1f} scenarios/s, {scenarios * operations / elapsed:.0f} ops/s, "
          f"{reconciles / elapsed:.0f} reconciles/s, {events / elapsed:.0f} events/s; "
          f"{simulated / 86400:.0f} simulated days")
    if not counts:
        print("no invariant broken")
        return 0
    print("violations (scenarios breaking each invariant):")
    for invariant, n in counts.most_common():
        print(f"  {invariant:28s} {n:6d}  seeds {seeds[invariant][:8]}  e.g. {examples[invariant][:200]}")
    return 1


def replay(seed: int, operations: int, days: float, do_shrink: bool, budget: float, family: str = "serving") -> int:
    outcome = run_scenario(seed, operations, days=days, family=family)
    print(f"seed {seed}: {outcome.setup}")
    for op in outcome.ops:
        print(f"  {describe(op)}")
    if not outcome.violations:
        print("no invariant broken")
        return 0
    for v in outcome.violations:
        print(f"{v.invariant} (during op #{outcome.ops[v.step]['salt']}, t={v.t:.0f}s): {v.message}")
        if do_shrink:
            ops = shrink(seed, v.invariant, operations, budget_seconds=budget, days=days, family=family)
            again = run_scenario(seed, operations, ops=ops, stop_on=v.invariant, days=days,
                                 family=family).first(v.invariant)
            print(reproduction(seed, v.invariant, ops, again.message if again else v.message, operations, family))
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", type=int, default=100)
    parser.add_argument("--operations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--days", type=float, default=1.0, help="simulated days per scenario, at least (batch: x 6 hours)")
    parser.add_argument("--family", default="serving", choices=["serving", "batch"],
                        help="serving: DrafterServing; batch: DrafterTraining and DrafterBenchmark")
    parser.add_argument("--replay", action="store_true", help="run --seed only: print its ops and violations")
    parser.add_argument("--shrink", action="store_true", help="with --replay: shrink each violation's op list")
    parser.add_argument("--shrink-seconds", type=float, default=120.0)
    parser.add_argument("--profile", action="store_true", help="cProfile the scenarios (one process)")
    args = parser.parse_args()
    if args.replay:
        return replay(args.seed, args.operations, args.days, args.shrink, args.shrink_seconds, args.family)
    if args.profile:
        import cProfile
        import pstats
        profiler = cProfile.Profile()
        profiler.enable()
        code = soak(args.scenarios, args.operations, args.seed, 1, args.days, args.family)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
        return code
    return soak(args.scenarios, args.operations, args.seed, args.workers, args.days, args.family)


if __name__ == "__main__":
    sys.exit(main())
