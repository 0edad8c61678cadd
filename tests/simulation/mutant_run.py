"""Run scenarios with a patched operator until one breaks an invariant (the mutant test's subprocess):
prints one JSON line, the first seed that broke something and what it broke, or that none did.

    PYTHONPATH=<patched copy>/operator:<repo>/testbed:<repo> python -m tests.simulation.mutant_run --scenarios 20

Whether a violation is the mutant's doing (the unpatched operator keeps that invariant on that seed) is the
caller's to judge: it runs the unpatched operator on that one seed only, and asks again from the next seed
when the violation was not new. The budget is a number of seeds, never seconds: a mutant is killed or not
whatever the machine's load.
"""

from __future__ import annotations

import argparse
import json

import drafter_operator

from drafter_testbed.simulation.runner import run_scenario


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", type=int, default=20, help="seeds to try, from --seed on")
    parser.add_argument("--operations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", default="serving", help="serving, or batch (DrafterTraining and DrafterBenchmark)")
    args = parser.parse_args()
    result: dict = {"package": drafter_operator.__file__, "seed": None, "violations": []}
    for seed in range(args.seed, args.seed + args.scenarios):
        outcome = run_scenario(seed, args.operations, family=args.family)
        if outcome.violations:
            result.update(seed=seed, violations=[{"invariant": v.invariant, "message": v.message}
                                                 for v in outcome.violations])
            break
    print(json.dumps(result))


if __name__ == "__main__":
    main()
