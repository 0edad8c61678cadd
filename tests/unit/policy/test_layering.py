"""The runtime package's rooms and their one-way arrows: a room imports only from rooms below it or beside
it, and rooms beside each other never import each other round in a circle.

Bottom to top:

0. the package root and its fixed facts: constants, settings, timestamps, and the small leaf modules
   (images, container_paths, logs, kube, permissions, memory_release, data);
1. engines (what each engine's command line, flags and metrics are);
2. api (the CRDs' models, which name the engines);
3. benchmark_client (what a DrafterBenchmark Job runs: `drafter-operator bench`);
4. resources, training, monitoring, preflight (builders, the training runtime, measurement, checks);
5. acceptance (the live acceptance: measurement, verdict, actions and the one wording of Degraded);
6. controllers (the pure decides and their thin applies);
7. the entry points: cli, kubectl_plugin, controllers.handlers (kopf's registrations), controllers.runner.

Imports are read from the source (ast), inside functions too: a lazy import is an arrow all the same.
The testbed and the emulator live in their own package (testbed/drafter_testbed), which the runtime never
imports (tests/unit/policy/test_runtime_package.py); nothing of theirs is left here to walk.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import drafter_operator
from tests.support.rooms import ENTRY_MODULES, TIERS

PACKAGE = Path(drafter_operator.__file__).parent

TIER_OF = {room: level for level, rooms in enumerate(TIERS) for room in rooms}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)  # "" for the package root


def room_of(module: str) -> str:
    """"controllers.serving.decide" -> "controllers"; the entry modules are rooms of their own."""
    for entry in ENTRY_MODULES:
        if module == entry or module.startswith(entry + "."):
            return entry
    return module.split(".")[0] or "__init__"


def _is_module(module: str) -> bool:
    base = PACKAGE.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(tree: ast.AST, own: str, is_package: bool) -> Iterable[str]:
    """The package modules a module imports (names relative to the package; "" is the root)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                anchor = own.split(".") if is_package else own.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(["drafter_operator", *[p for p in anchor if p], *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            if name != "drafter_operator" and not name.startswith("drafter_operator."):
                continue
            inner = name.removeprefix("drafter_operator").removeprefix(".")
            while inner and not _is_module(inner):
                inner = inner.rpartition(".")[0]  # `from X import name`: the module is X
            yield inner


def room_arrows() -> dict[str, set[str]]:
    """Room -> the rooms it imports from (itself left out)."""
    arrows: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        own = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        source = room_of(own)
        for target in imported_modules(tree, own, path.name == "__init__.py"):
            if room_of(target) != source:
                arrows.setdefault(source, set()).add(room_of(target))
    return arrows


def arrows_up(arrows: Mapping[str, set[str]], tier_of: Mapping[str, int]) -> list[str]:
    return sorted(f"{source} -> {target}" for source, targets in arrows.items() for target in targets
                  if tier_of[target] > tier_of[source])


def cycles(arrows: Mapping[str, set[str]]) -> list[list[str]]:
    """Every room cycle found by a depth-first walk (each reported once, from where it closes)."""
    found, done = [], set()

    def walk(room: str, path: list[str]) -> None:
        if room in path:
            found.append(path[path.index(room):] + [room])
            return
        if room in done:
            return
        for target in sorted(arrows.get(room, ())):
            walk(target, path + [room])
        done.add(room)

    for room in sorted(arrows):
        walk(room, [])
    return found


def test_every_room_has_a_tier():
    rooms = {room_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert rooms - set(TIER_OF) == set(), "place the new room in TIERS"


def test_no_room_imports_from_a_room_above_it():
    assert arrows_up(room_arrows(), TIER_OF) == []


def test_no_rooms_import_each_other_round_in_a_circle():
    assert cycles(room_arrows()) == []


def test_the_checks_catch_an_arrow_up_and_a_cycle():
    arrows = {"resources": {"controllers", "training"}, "training": {"resources"}}
    assert arrows_up(arrows, TIER_OF) == ["resources -> controllers"]
    assert cycles(arrows) == [["resources", "training", "resources"]]


def test_imports_are_resolved_to_modules_lazy_and_relative_ones_too():
    tree = ast.parse("from drafter_operator import API_GROUP, engines\n"
                     "def f():\n    from drafter_operator.resources.labels import SERVING_LABEL\n"
                     "from . import gate\n")
    assert sorted(imported_modules(tree, "resources.engine", False)) == \
        ["", "", "engines", "resources", "resources.gate", "resources.labels", "resources.labels"]
