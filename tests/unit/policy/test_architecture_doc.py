"""docs/architecture.md names the modules that exist, and every module that exists.

Every backticked path on the page (``controllers/serving/decide.py``, ``preflight/rules/``, ``spec.py``) must
exist, and every runtime module (each .py under operator/drafter_operator/ but ``__init__.py``) must be named
on the page at least once. The tier diagram must place every room of ``TIERS`` (tests/support/rooms.py) on its tier.

How the page's paths are read, as a person reads them:

- a path is relative to drafter_operator/ (testbed/drafter_testbed/ in the testbed's section); a path that
  starts ``operator/drafter_operator/`` or ``testbed/drafter_testbed/``, or is not in the package but is in
  the repository (``tests/unit/policy/test_layering.py``, ``crds/``), is read from the repository's root;
- in the rooms table, a name in a row is read inside that row's room (``vllm.py`` in the ``engines/`` row
  is engines/vllm.py);
- a list in brackets after a package is read inside it (``serving/`` (``spec.py``, ...) in the ``api/`` row
  is api/serving/spec.py);
- elsewhere a bare name is read in the folder of the path before it in the same paragraph or bullet
  (``acceptance.py`` after ``controllers/serving/decide.py``), else at the package's root.

Naming a package (``adapters/``) does not name its modules: each module has its own name on the page.
Dotted names (``controllers.handlers``) and commands are not read as paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.rooms import ENTRY_MODULES, TIERS

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "architecture.md"
RUNTIME = REPO / "operator" / "drafter_operator"
TESTBED = REPO / "testbed" / "drafter_testbed"

#: A backticked span that is a path: a file ending .py or a folder, with no spaces.
PATH = re.compile(r"^(?:\./)?[\w.-]+(?:/[\w.-]*)*$")
SPAN = re.compile(r"`([^`]+)`")
FIX = ("Fix docs/architecture.md: give each module its room's row in 'The rooms' (one line from its docstring, "
       "or its name in the row's module list), correct or drop a path that moved or went away.")


@dataclass(frozen=True)
class Named:
    """One path the page names, and where it resolved (None: it names nothing)."""
    line: int
    text: str
    resolved: Path | None


def is_path(span: str) -> bool:
    return bool(PATH.match(span)) and ("/" in span or span.endswith(".py"))


def blocks(text: str) -> list[tuple[Path, list[tuple[int, str]]]]:
    """The page cut into the units a path is read in: each table row, each bullet, each paragraph, with the
    package its section is about (the testbed's section: the testbed). Fenced code is left out."""
    found: list[tuple[Path, list[tuple[int, str]]]] = []
    root, current, fenced = RUNTIME, None, False

    def close():
        nonlocal current
        if current:
            found.append((root, current))
        current = None

    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            close()
            continue
        if fenced:
            continue
        if line.startswith("#"):
            close()
            root = TESTBED if "testbed" in line.lower() else RUNTIME
        elif not line.strip():
            close()
        elif line.startswith("|") or line.lstrip().startswith("- "):
            close()
            current = [(number, line)]
            if line.startswith("|"):
                close()  # a table row is a unit of its own
        elif current is None:
            current = [(number, line)]
        else:
            current.append((number, line))
    close()
    return found


def _exists(path: Path) -> bool:
    return path.is_file() or path.is_dir()


def resolve(span: str, base: Path, root: Path) -> Path | None:
    """Where a path span points: in ``base`` first, then at the package's root, then the repository's."""
    span = span.removeprefix("./")
    for prefix, package in (("operator/drafter_operator", RUNTIME), ("testbed/drafter_testbed", TESTBED),
                            ("drafter_operator", RUNTIME)):
        if span.rstrip("/") == prefix or span.startswith(prefix + "/"):
            target = package / span[len(prefix):].lstrip("/")
            return target if _exists(target) else None
    candidates = dict.fromkeys([base / span, root / span, REPO / span])
    return next((c for c in candidates if _exists(c)), None)


def named_paths(text: str) -> list[Named]:
    named: list[Named] = []
    for root, lines in blocks(text):
        base = root
        row = lines[0][1].startswith("|")
        if row:
            cells = [cell.strip() for cell in lines[0][1].strip().strip("|").split("|")]
            room = SPAN.findall(cells[1]) if len(cells) > 1 else []
            if len(room) == 1 and room[0].endswith("/"):
                base = resolve(room[0], root, root) or root
        for number, line in lines:
            nested: Path | None = None  # the package a bracketed list after it is read in
            depth = 0
            for match in re.finditer(r"`([^`]+)`|\(|\)", line):
                if match[0] == "(":
                    depth += 1
                    continue
                if match[0] == ")":
                    depth = max(depth - 1, 0)
                    if depth == 0:
                        nested = None
                    continue
                span = match[1]
                if not is_path(span):
                    continue
                where = nested if nested is not None and depth > 0 else base
                target = resolve(span, where, root)
                named.append(Named(number, span, target))
                if target is not None and target.is_dir() and line[match.end():].startswith(" ("):
                    nested = target
                elif (not row and target is not None and target.is_relative_to(root) and "/" in span
                      and depth == 0):
                    base = target if target.is_dir() else target.parent
    return named


def runtime_modules() -> set[Path]:
    return {path for path in RUNTIME.rglob("*.py") if path.name != "__init__.py"
            and "__pycache__" not in path.parts}


def relative(path: Path) -> str:
    for package, label in ((RUNTIME, ""), (TESTBED, "testbed: ")):
        if path.is_relative_to(package):
            return label + path.relative_to(package).as_posix()
    return path.relative_to(REPO).as_posix()


def tier_lines(text: str) -> dict[int, str]:
    """The tier diagram's text per tier: ``tier N  room room`` and the lines that carry it on."""
    tiers: dict[int, str] = {}
    last = None
    for line in text.split("```")[1].splitlines():
        match = re.match(r"\s*tier (\d+)\s+(.*)", line)
        if match:
            last = int(match[1])
            tiers[last] = match[2]
        elif last is not None and re.search(r"[a-z_]{3,}", line) and "|" not in line:
            tiers[last] += " " + line.strip()
    return tiers


def test_every_path_the_page_names_exists():
    missing = [f"docs/architecture.md:{n.line}: `{n.text}`" for n in named_paths(PAGE.read_text())
               if n.resolved is None]
    assert missing == [], f"the page names paths that do not exist: {missing}. {FIX}"


def test_every_runtime_module_is_named_on_the_page():
    named = {n.resolved for n in named_paths(PAGE.read_text()) if n.resolved is not None}
    unnamed = sorted(relative(path) for path in runtime_modules() - named)
    assert unnamed == [], f"modules of operator/drafter_operator not named on the page: {unnamed}. {FIX}"


def test_the_tier_diagram_places_every_room_on_its_tier():
    tiers = tier_lines(PAGE.read_text())
    wrong = []
    for level, rooms in enumerate(TIERS):
        words = set(re.findall(r"[\w.]+", tiers.get(level, "")))
        wrong += [f"{room} (tier {level})" for room in rooms if room != "__init__" and room not in words]
    assert wrong == [], (f"rooms of tests/support/rooms.py TIERS missing from their tier in the page's "
                         f"diagram: {wrong}. Add each to its tier's line.")
    assert set(ENTRY_MODULES) <= set(re.findall(r"[\w.]+", tiers[len(TIERS) - 1]))


def test_the_reading_catches_a_moved_module_and_follows_rows_brackets_and_paragraphs():
    page = ("# Rooms\n\n| Tier | Room | Job | Main modules |\n|---|---|---|---|\n"
            "| 2 | `api/` | models | `serving/` (`spec.py`), `kind.py` |\n"
            "| 4 | `preflight/` | checks | `rules/`, `tiny.py` |\n\n"
            "- **Serving.** `controllers/serving/decide.py` `decide`, with `acceptance.py` and `cli.py`.\n"
            "  `crds/` and `tests/unit/policy/test_layering.py` are the repository's.\n\n"
            "## The testbed\n\n`emulator/batching.py` and `harness.py`.\n")
    found = {n.text: n.resolved for n in named_paths(page)}
    assert found["spec.py"] == RUNTIME / "api" / "serving" / "spec.py"
    assert found["kind.py"] == RUNTIME / "api" / "kind.py"
    assert found["rules/"] == RUNTIME / "preflight" / "rules"
    assert found["tiny.py"] is None  # moved to the testbed: the page would be wrong
    assert found["acceptance.py"] == RUNTIME / "controllers" / "serving" / "acceptance.py"
    assert found["cli.py"] == RUNTIME / "cli.py"  # not in controllers/: the root's
    assert found["crds/"] == REPO / "crds"
    assert found["tests/unit/policy/test_layering.py"] == REPO / "tests" / "unit" / "policy" / "test_layering.py"
    assert found["emulator/batching.py"] == TESTBED / "emulator" / "batching.py"
    assert found["harness.py"] == TESTBED / "harness.py"
