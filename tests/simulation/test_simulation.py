"""Deterministic simulation of the DrafterServing controller: SIM_SCENARIOS seeded scenarios (each at
least 50 operations and a simulated day), every invariant checked after every event; and of the
DrafterTraining and DrafterBenchmark controllers (batch.py): SIM_BATCH_SCENARIOS scenarios of 50
operations and at least 6 simulated hours. A failure prints the seed, the invariant, the shortest op
list found, and how to replay it.

    SIM_SCENARIOS=200 SIM_BATCH_SCENARIOS=50 SIM_SEED=0 pytest tests/simulation/test_simulation.py
"""

from __future__ import annotations

import os

import pytest

from drafter_testbed.simulation.runner import reproduction, run_scenario, shrink

# About 0.8 s of one core each, in SERVING_SHARES tests; bench/simulate.py runs thousands (docs/performance.md).
SCENARIOS = int(os.environ.get("SIM_SCENARIOS", "200"))
# About 1.1 s of one core each: 50 add about 55 s to the default run.
BATCH_SCENARIOS = int(os.environ.get("SIM_BATCH_SCENARIOS", "50"))
OPERATIONS = int(os.environ.get("SIM_OPERATIONS", "50"))
FIRST_SEED = int(os.environ.get("SIM_SEED", "0"))
SHRINK_SECONDS = float(os.environ.get("SIM_SHRINK_SECONDS", "60"))


#: The serving scenarios run in this many tests, so that the suite's workers share them.
SERVING_SHARES = 4


def check_scenarios(family: str, scenarios: int, share: int = 0, shares: int = 1) -> None:
    for seed in range(FIRST_SEED + share, FIRST_SEED + scenarios, shares):
        outcome = run_scenario(seed, OPERATIONS, stop_on="*", family=family)
        if outcome.violations:
            v = outcome.violations[0]
            ops = shrink(seed, v.invariant, OPERATIONS, budget_seconds=SHRINK_SECONDS, family=family)
            again = run_scenario(seed, OPERATIONS, ops=ops, stop_on=v.invariant, family=family).first(v.invariant)
            raise AssertionError(reproduction(seed, v.invariant, ops, (again or v).message, OPERATIONS, family))


@pytest.mark.parametrize("share", range(SERVING_SHARES))
def test_invariants_hold_in_random_scenarios(share: int):
    check_scenarios("serving", SCENARIOS, share, SERVING_SHARES)


def test_training_and_benchmark_invariants_hold_in_random_scenarios():
    check_scenarios("batch", BATCH_SCENARIOS)
