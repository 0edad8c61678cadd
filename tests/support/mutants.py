"""The mutant catalogue of tests/simulation/mutants (and its survivors) and the package copy a patch applies to."""
from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MUTANTS = sorted((REPO / "tests" / "simulation" / "mutants").glob("*.patch"))
#: Mutants the simulation does not kill yet, each with the world event or invariant it lacks in its header: the holes
#: docs/guarantees.md reports. Kept (and checked to apply) so that closing a hole is moving a patch back up.
SURVIVORS = sorted((REPO / "tests" / "simulation" / "mutants" / "survivors").glob("*.patch"))


def package_copy(tmp_path: Path) -> None:
    """The operator package under ``tmp_path``, where a patch's a/operator/... paths find it."""
    shutil.copytree(REPO / "operator" / "drafter_operator", tmp_path / "operator" / "drafter_operator",
                    ignore=shutil.ignore_patterns("__pycache__"))
