"""The docs say what is true now; history lives in git log.

No page (docs/**/*.md, README.md, the chart's README template) holds:

- a commit of this repository: a hex word of 7 to 40 characters that ``git rev-list --all`` knows as a
  commit, or any 7-character one with letters and digits (git's short form, caught even where the clone
  lacks that commit: a shallow checkout, a rewritten history). Other hex words are facts and stay: a
  revision hash or image digest in an example, an upstream project's commit;
- an issue or pull request of this project told as a story: "issue 28", "(issue 13)", "issue #12",
  "PR 7". Another project's tracker (``vllm#52479``, ``sglang#33800``, a github.com/... link) is a fact about
  the engines and stays;
- a CI-run story: "stop 35", "stop's CI";
- a phrase that tells what changed rather than what is: "before the fix", "after the fix", "used to", "was
  fixed", "were fixed", "we found", "first pass", "rerun at", "how the numbers moved", "problems found by".

The fix is to say what holds now (with the command that shows it) and leave the story to the commit message.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

#: A hex word: not part of a longer word, a path segment of letters, or a longer hex run (a digest).
HEX = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
HISTORY = re.compile(
    r"\b(?:issues?|PR|pull requests?) #?\d+\b"
    r"|\bstop \d+\b|\bstop's CI\b"
    r"|\b(?:before|after) the fix\b"
    r"|(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )\bused to\b"
    r"|\b(?:was|were) fixed\b|\bwe found\b|\bfirst pass\b|\brerun at\b|\bhow the numbers moved\b"
    r"|\bproblems found by\b",
    re.IGNORECASE)


def pages() -> list[Path]:
    return sorted([*(REPO / "docs").rglob("*.md"), REPO / "README.md",
                   REPO / "charts" / "drafter-operator" / "README.md.gotmpl"])


@cache
def commits() -> tuple[str, ...]:
    """Every commit this clone knows (empty where there is no git or no repository)."""
    try:
        run = subprocess.run(["git", "-C", str(REPO), "rev-list", "--all"], capture_output=True, text=True,
                             timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(sorted(run.stdout.split())) if run.returncode == 0 else ()


def is_commit(word: str) -> bool:
    if not re.search(r"[a-f]", word):
        return False  # a number, not a hash
    if len(word) == 7 and re.search(r"\d", word):
        return True
    return any(commit.startswith(word) for commit in commits())


def history(text: str) -> list[tuple[int, str]]:
    """The (line, phrase) of each piece of history in a page's text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [(number, f"commit {m[0]}") for m in HEX.finditer(line) if is_commit(m[0])]
        found += [(number, m[0]) for m in HISTORY.finditer(line)]
    return found


def test_there_are_pages_to_read_and_commits_to_match():
    assert len(pages()) >= 30
    assert commits(), "git rev-list --all found no commits: the hash check would only see 7-character ones"


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.relative_to(REPO).as_posix())
def test_the_page_describes_the_product_as_it_is(page: Path):
    found = [f"{page.relative_to(REPO)}:{line}: {phrase!r}" for line, phrase in history(page.read_text())]
    assert found == [], (f"history in the docs: {found}. Say what is true now, with the command that shows it; "
                         f"the story belongs in git log.")


def test_the_check_tells_history_from_facts():
    head = commits()[0] if commits() else "0123abc"
    text = (f"Rerun at {head[:9]} the sweep ran 2x faster (issue 28); stop 35's CI went red.\n"
            "Before the fix the loop used to spin; it was fixed and we found why.\n"
            "Revision 8d1f0c2a9e, digest sha256:" + "ab12" * 16 + ", upstream vllm#52479 and sglang#33800.\n"
            "The label is used to select pods; SpecForge at commit a6b6b0230009d15ec2a97a57384e6f53f0f96946.\n")
    found = history(text)
    assert [line for line, _ in found] == [1, 1, 1, 1, 2, 2, 2, 2], found
    assert {phrase.lower() for _, phrase in found} >= {"rerun at", "issue 28", "stop 35", "before the fix",
                                                      "used to", "was fixed", "we found"}
