"""Run scenarios until an invariant breaks that the unpatched operator does not break on the same seed
(the mutant test's subprocess): prints one JSON line.

    PYTHONPATH=<patched copy>/operator:<repo> python -m tests.simulation.mutant_run --scenarios 20
"""

from __future__ import annotations

import argparse
import json
import time

import drafter_operator

from tests.simulation.runner import run_scenario


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", type=int, default=20)
    parser.add_argument("--operations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--family", default="serving", help="serving, or batch (DrafterTraining and DrafterBenchmark)")
    parser.add_argument("--baseline", help="JSON file: seed -> invariants the unpatched operator breaks")
    args = parser.parse_args()
    baseline = json.loads(open(args.baseline).read()) if args.baseline else {}
    start = time.monotonic()
    tried = 0
    result = {"package": drafter_operator.__file__, "killed": False}
    for seed in range(args.seed, args.seed + args.scenarios):
        if time.monotonic() - start > args.seconds:
            break
        tried += 1
        outcome = run_scenario(seed, args.operations, family=args.family)
        new = [v for v in outcome.violations if v.invariant not in baseline.get(str(seed), [])]
        if new:
            v = new[0]
            result.update(killed=True, seed=seed, invariant=v.invariant, message=v.message)
            break
    result.update(seeds=tried, seconds=round(time.monotonic() - start, 1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
