"""Teeth: each tests/simulation/mutants/*.patch breaks the operator on purpose; the simulation must
notice (some invariant fails) within its budget. A patch is a unified diff from the repository root
(a/operator/drafter_operator/...), applied with `patch -p1` to a copy of the package; the scenarios
run in a subprocess importing that copy.

    MUTANT_SCENARIOS=100 pytest tests/simulation/test_mutants.py -s
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MUTANTS = sorted((Path(__file__).parent / "mutants").glob("*.patch"))
SCENARIOS = int(os.environ.get("MUTANT_SCENARIOS", "100"))  # the slowest mutant needs 51 (docs/guarantees.md)
#: Scenarios for a mutant of the training and benchmark controllers (a header line "family: batch").
BATCH_SCENARIOS = int(os.environ.get("MUTANT_BATCH_SCENARIOS", "40"))
SECONDS = float(os.environ.get("MUTANT_SECONDS", "300"))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """What the unpatched operator already breaks, per family and seed (computed when a mutant of the family
    first asks): a mutant is killed only by something new."""
    from tests.simulation.runner import run_scenario
    made: dict[str, Path] = {}

    def of(family: str) -> Path:
        if family not in made:
            count = BATCH_SCENARIOS if family == "batch" else SCENARIOS
            known = {str(seed): sorted(run_scenario(seed, 50, family=family).failed) for seed in range(count)}
            made[family] = tmp_path_factory.mktemp("baseline") / f"{family}.json"
            made[family].write_text(json.dumps(known))
        return made[family]
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
    shutil.copytree(REPO / "operator" / "drafter_operator", tmp_path / "operator" / "drafter_operator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    applied = subprocess.run(["patch", "-p1", "--batch", "-i", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert applied.returncode == 0, f"{patch.name} does not apply: {applied.stdout}{applied.stderr}"
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "operator"), str(REPO)])}


SIMULATED = [p for p in MUTANTS if not caught_by(p)]
TESTED = [p for p in MUTANTS if caught_by(p)]


@pytest.mark.parametrize("patch", TESTED, ids=[p.stem for p in TESTED])
def test_the_named_tests_kill_the_mutant(patch: Path, tmp_path: Path):
    env = patched_copy(patch, tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import drafter_operator; print(drafter_operator.__file__)"],
                           cwd=REPO, env=env, capture_output=True, text=True)
    assert probe.stdout.startswith(str(tmp_path)), f"the mutant would run the real package: {probe.stdout}"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *caught_by(patch)],
                         cwd=REPO, env=env, capture_output=True, text=True)
    print(f"{patch.name}: {'killed' if run.returncode else 'survived'} by {' '.join(caught_by(patch))}")
    assert run.returncode == 1, f"{patch.name} survived {caught_by(patch)}:\n{run.stdout[-2000:]}"


@pytest.mark.parametrize("patch", SIMULATED, ids=[p.stem for p in SIMULATED])
def test_the_simulation_kills_the_mutant(patch: Path, tmp_path: Path, baseline):
    env = patched_copy(patch, tmp_path)
    kind = family(patch)
    scenarios = BATCH_SCENARIOS if kind == "batch" else SCENARIOS
    run = subprocess.run([sys.executable, "-m", "tests.simulation.mutant_run", "--scenarios", str(scenarios),
                          "--seconds", str(SECONDS), "--baseline", str(baseline(kind)), "--family", kind],
                         cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["package"].startswith(str(tmp_path)), f"the mutant ran the real package: {result['package']}"
    print(f"{patch.name}: {'killed' if result['killed'] else 'survived'} after {result['seeds']} seed(s) "
          f"in {result['seconds']}s: {result.get('invariant')} (seed {result.get('seed')}): {result.get('message')}")
    assert result["killed"], f"{patch.name} survived {result['seeds']} scenarios: the simulation cannot see it"
