"""Teeth: each tests/simulation/mutants/*.patch breaks the operator on purpose; the simulation must
notice (some invariant fails) within its budget. A patch is a unified diff from the repository root
(a/operator/drafter_operator/...), applied with `patch -p1` to a copy of the package; the scenarios
run in a subprocess importing that copy.

    MUTANT_SCENARIOS=150 pytest tests/simulation/test_mutants.py -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.mutants import MUTANTS, REPO, SURVIVORS, package_copy

SCENARIOS = int(os.environ.get("MUTANT_SCENARIOS", "150"))  # the slowest mutant needs 100 (docs/performance.md)
#: Scenarios for a mutant of the training and benchmark controllers (a header line "family: batch").
BATCH_SCENARIOS = int(os.environ.get("MUTANT_BATCH_SCENARIOS", "100"))  # the slowest batch mutant needs 60


@pytest.fixture(scope="module")
def baseline():
    """What the unpatched operator already breaks on one seed of a family (computed when a mutant's run first
    breaks something there, then kept): a mutant is killed only by something new. The unpatched operator
    breaks nothing on the seeds the suite runs, so this is usually one scenario per mutant, not all of them."""
    from drafter_testbed.simulation.runner import run_scenario
    known: dict[tuple[str, int], set[str]] = {}

    def of(family: str, seed: int) -> set[str]:
        if (family, seed) not in known:
            known[family, seed] = run_scenario(seed, 50, family=family).failed
        return known[family, seed]
    return of


#: A patch whose header has this line is not the simulation's to see (kopf's registry, say): the named
#: tests run against the patched copy instead, and must fail.
CAUGHT_BY = "caught by: "


def caught_by(patch: Path) -> list[str]:
    header = patch.read_text().split("\n--- a/", 1)[0]
    return next((line[len(CAUGHT_BY):].split() for line in header.splitlines() if line.startswith(CAUGHT_BY)), [])


def family(patch: Path) -> str:
    """The scenario family a patch header names ("family: batch"), the serving's by default."""
    header = patch.read_text().split("\n--- a/", 1)[0]
    return next((line.split(":", 1)[1].strip() for line in header.splitlines() if line.startswith("family:")), "serving")


def patched_copy(patch: Path, tmp_path: Path) -> dict:
    """The package with ``patch`` applied, and the environment that imports it."""
    package_copy(tmp_path)
    applied = subprocess.run(["patch", "-p1", "--batch", "-i", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert applied.returncode == 0, f"{patch.name} does not apply: {applied.stdout}{applied.stderr}"
    # the simulation harness is drafter-testbed's (testbed/drafter_testbed/simulation), from this checkout
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "operator"), str(REPO / "testbed"), str(REPO)])}


SIMULATED = [p for p in MUTANTS if not caught_by(p)]
TESTED = [p for p in MUTANTS if caught_by(p)]


@pytest.mark.parametrize("patch", TESTED, ids=[p.stem for p in TESTED])
def test_the_named_tests_kill_the_mutant(patch: Path, tmp_path: Path):
    env = patched_copy(patch, tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import drafter_operator; print(drafter_operator.__file__)"],
                           cwd=REPO, env=env, capture_output=True, text=True)
    assert probe.stdout.startswith(str(tmp_path)), f"the mutant would run the real package: {probe.stdout}"
    # -x: the first failing test kills the mutant; the rest of the named files would only say so again.
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *caught_by(patch)],
                         cwd=REPO, env=env, capture_output=True, text=True)
    print(f"{patch.name}: {'killed' if run.returncode else 'survived'} by {' '.join(caught_by(patch))}")
    assert run.returncode == 1, f"{patch.name} survived {caught_by(patch)}:\n{run.stdout[-2000:]}"


#: The header line naming the seed that killed the mutant when its patch was last checked ("killed at seed: 12").
KILLED_AT = "killed at seed: "


def killed_at(patch: Path) -> int | None:
    header = patch.read_text().split("\n--- a/", 1)[0]
    return next((int(line[len(KILLED_AT):]) for line in header.splitlines() if line.startswith(KILLED_AT)), None)


def first_new_violation(env: dict, tmp_path: Path, kind: str, seed: int, scenarios: int, baseline):
    """From ``seed`` on (at most ``scenarios`` seeds): the first seed whose violations include one the unpatched
    operator does not have there, with that violation, else (the next seed to try, None)."""
    end = seed + scenarios
    while seed < end:
        run = subprocess.run([sys.executable, "-m", "tests.simulation.mutant_run", "--seed", str(seed),
                              "--scenarios", str(end - seed), "--family", kind],
                             cwd=REPO, env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
        result = json.loads(run.stdout.strip().splitlines()[-1])
        assert result["package"].startswith(str(tmp_path)), f"the mutant ran the real package: {result['package']}"
        if result["seed"] is None:  # no seed left broke anything
            return end, None
        known = baseline(kind, result["seed"])
        killer = next((v for v in result["violations"] if v["invariant"] not in known), None)
        if killer:
            return result["seed"], killer
        seed = result["seed"] + 1
    return end, None


@pytest.mark.parametrize("patch", SIMULATED, ids=[p.stem for p in SIMULATED])
def test_the_simulation_kills_the_mutant(patch: Path, tmp_path: Path, baseline):
    """Some seed within the budget breaks an invariant the unpatched operator keeps there. The seed its header
    names is tried first (one scenario instead of a scan from 0); where that seed no longer kills it (the
    simulation changed), every seed from 0 is tried, as without a header, and the output says which seed to record."""
    env = patched_copy(patch, tmp_path)
    kind = family(patch)
    end = BATCH_SCENARIOS if kind == "batch" else SCENARIOS
    recorded, killer = killed_at(patch), None
    if recorded is not None and recorded < end:
        seed, killer = first_new_violation(env, tmp_path, kind, recorded, 1, baseline)
    if killer is None:
        seed, killer = first_new_violation(env, tmp_path, kind, 0, end, baseline)
        if killer and recorded is not None:
            print(f"{patch.name}: seed {recorded} no longer kills it; record '{KILLED_AT}{seed}' in its header")
    print(f"{patch.name}: {'killed' if killer else 'survived'}: "
          + (f"{killer['invariant']} (seed {seed}): {killer['message']}" if killer else ""))
    assert killer, f"{patch.name} survived {end} scenarios: the simulation cannot see it"


def test_the_mutation_score_docs_guarantees_states_is_the_catalogues():
    """docs/guarantees.md states the score as the catalogue has it: killed by the simulation, by named tests, and
    the survivors, each of which it names."""
    doc = (REPO / "docs" / "guarantees.md").read_text()
    total = len(SIMULATED) + len(TESTED) + len(SURVIVORS)
    stated = (f"The simulation alone kills {len(SIMULATED)} of the {total} mutants "
              f"({100 * len(SIMULATED) / total:.0f}%)")
    assert stated in doc, f"docs/guarantees.md should say: {stated}"
    missing = [p.stem for p in SURVIVORS + TESTED if f"`{p.stem}`" not in doc]
    assert not missing, f"docs/guarantees.md does not name these mutants: {missing}"
