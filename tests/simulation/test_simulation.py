"""Deterministic simulation of the DrafterServing controller: SIM_SCENARIOS seeded scenarios (each at
least 50 operations and a simulated day), every invariant checked after every event. A failure
prints the seed, the invariant, the shortest op list found, and how to replay it.

    SIM_SCENARIOS=200 SIM_SEED=0 pytest tests/simulation/test_simulation.py
"""

from __future__ import annotations

import os

from tests.simulation.runner import reproduction, run_scenario, shrink

# About 90 s of one core; bench/simulate.py runs thousands (docs/performance.md).
SCENARIOS = int(os.environ.get("SIM_SCENARIOS", "200"))
OPERATIONS = int(os.environ.get("SIM_OPERATIONS", "50"))
FIRST_SEED = int(os.environ.get("SIM_SEED", "0"))
SHRINK_SECONDS = float(os.environ.get("SIM_SHRINK_SECONDS", "60"))


def test_invariants_hold_in_random_scenarios():
    for seed in range(FIRST_SEED, FIRST_SEED + SCENARIOS):
        outcome = run_scenario(seed, OPERATIONS, stop_on="*")
        if outcome.violations:
            v = outcome.violations[0]
            ops = shrink(seed, v.invariant, OPERATIONS, budget_seconds=SHRINK_SECONDS)
            again = run_scenario(seed, OPERATIONS, ops=ops, stop_on=v.invariant).first(v.invariant)
            raise AssertionError(reproduction(seed, v.invariant, ops, (again or v).message, OPERATIONS))
