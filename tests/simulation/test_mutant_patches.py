"""Every mutant patch still applies to the code it names: a stale patch would fail its (slow) mutant test
late and confusingly. Apart from test_mutants.py so that `./dev check`, which leaves the mutants out, runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.mutants import MUTANTS, SURVIVORS, package_copy


def test_every_mutant_applies_to_the_code_it_names(tmp_path: Path):
    package_copy(tmp_path)
    stale = []
    for patch in MUTANTS + SURVIVORS:
        applied = subprocess.run(["patch", "-p1", "--batch", "--dry-run", "-i", str(patch)], cwd=tmp_path,
                                 capture_output=True, text=True)
        if applied.returncode != 0:
            stale.append(f"{patch.name}: {applied.stdout.strip()}")
    assert not stale, "regenerate these mutant patches against the code:\n" + "\n".join(stale)
