"""The runtime package holds only the operator: the testbed and the emulator are drafter-testbed's
(testbed/), which the operator never imports and its wheel never carries (issue 26)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import drafter_operator

PACKAGE = Path(drafter_operator.__file__).resolve().parent
REPO = PACKAGE.parents[1]
TESTBED = "drafter_testbed"

# Every module of drafter_operator imported in one fresh interpreter, then the names of the loaded modules.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import drafter_operator
failed = {}
for module in pkgutil.walk_packages(drafter_operator.__path__, "drafter_operator."):
    try:
        importlib.import_module(module.name)
    except ImportError as exc:  # a module whose optional framework is absent here (training adapters)
        failed[module.name] = repr(exc)
print(json.dumps({"loaded": sorted(sys.modules), "failed": failed}))
"""


def imported_names(tree: ast.AST) -> list[str]:
    """The modules an abstract syntax tree imports (``import a.b``, ``from a.b import c``), at any depth."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_imported_names_sees_nested_and_from_imports():
    tree = ast.parse("import a.b\ndef f():\n    from c.d import e\n    import drafter_testbed as t\nfrom . import x\n")
    assert imported_names(tree) == ["a.b", "c.d", "drafter_testbed"]


def test_importing_every_operator_module_never_imports_the_testbed():
    # drafter_testbed importable too: an import of it would succeed, and show among the loaded modules.
    path = os.pathsep.join([str(REPO / "operator"), str(REPO / "testbed")])
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    loaded = [name for name in report["loaded"] if name.startswith("drafter_operator")]
    assert len(loaded) > 100, loaded  # the walk reached the whole package, not just its top
    assert not any(failure for name, failure in report["failed"].items() if TESTBED in failure), report["failed"]
    assert [name for name in report["loaded"] if name.split(".")[0] == TESTBED] == []


def test_no_operator_module_imports_the_testbed():
    offenders = {str(path.relative_to(REPO)): name
                 for path in PACKAGE.rglob("*.py")
                 for name in imported_names(ast.parse(path.read_text(), str(path)))
                 if name.split(".")[0] == TESTBED}
    assert offenders == {}


def test_the_operator_package_holds_no_testbed_or_emulator_folder():
    assert not (PACKAGE / "testbed").exists() and not (PACKAGE / "emulator").exists()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """drafter-operator's wheel as pip builds it (its build backend in an isolated environment), from a copy
    of what the build reads, so the checkout gets no build/ or egg-info from it."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "operator", source / "operator", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("drafter_operator-*.whl")
    return zipfile.ZipFile(path)


def test_the_operator_wheel_carries_no_testbed_or_emulator_module(wheel):
    names = wheel.namelist()
    assert "drafter_operator/cli.py" in names and "drafter_operator/controllers/runner.py" in names
    assert [n for n in names if n.startswith((f"{TESTBED}/", "drafter_operator/testbed/", "drafter_operator/emulator/"))
            or n.endswith("emulator-profiles.yaml")] == []
    # What the runtime reads stays in: the known-bad list, the bench prompts, the flag tables, the tokenizer.
    for data in ("data/known-bad.yaml", "data/bench-prompts.yaml", "data/tokenizer/tokenizer.json"):
        assert f"drafter_operator/{data}" in names


def test_the_operator_wheel_declares_no_testbed_entry_points_or_extra(wheel):
    metadata = "\n".join(wheel.read(n).decode() for n in wheel.namelist()
                         if n.endswith((".dist-info/METADATA", ".dist-info/entry_points.txt")))
    assert "drafter_operator.commands" not in metadata
    assert "Provides-Extra: testbed" not in metadata
    assert "drafter-operator = drafter_operator.cli:main" in metadata


#: Runtime modules nothing imports, and how the operator still uses them.
NOT_IMPORTED_BUT_USED = {
    "drafter_operator.data": "a data package the operator reads with importlib.resources",
    "drafter_operator.engines.flagtables": "a data package: the engines' generated flag tables",
    "drafter_operator.training.adapters": "scripts the trainer image runs by path (training/specforge.py, "
                                          "speculators.py: paths.adapters)",
}
#: Where the operator starts: its console scripts (pyproject's [project.scripts]).
ENTRY_MODULES = ("drafter_operator.cli", "drafter_operator.kubectl_plugin.cli")


def runtime_modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The runtime modules one module imports (relative imports resolved; a package's parents count)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    reached = set()
    for imported in found:
        while imported:
            if imported in modules:
                reached.add(imported)
            imported = imported.rpartition(".")[0]
    return reached


def test_every_runtime_module_is_reached_from_the_operators_entry_points():
    """A module no entry point reaches is not the operator's: test or demo code (the tiny checkpoints and the
    emulator's batching model were found this way and moved to drafter-testbed) or dead code."""
    modules = runtime_modules()
    assert set(ENTRY_MODULES) <= set(modules)
    reached, todo = set(), list(ENTRY_MODULES)
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += imports_of(name, modules[name], modules)
    unreached = {name for name in set(modules) - reached
                 if not any(name == used or name.startswith(used + ".") for used in NOT_IMPORTED_BUT_USED)}
    assert not unreached, f"no entry point of the operator imports these; move them to drafter-testbed: {sorted(unreached)}"


def test_the_reach_walk_follows_relative_and_from_imports(tmp_path):
    modules = {"pkg": tmp_path / "pkg" / "__init__.py", "pkg.a": tmp_path / "pkg" / "a.py",
               "pkg.b": tmp_path / "pkg" / "b.py", "pkg.sub.c": tmp_path / "pkg" / "sub" / "c.py"}
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    modules["pkg.a"].write_text("from . import b\nfrom .sub.c import thing\nimport os\n")
    assert imports_of("pkg.a", modules["pkg.a"], modules) == {"pkg", "pkg.b", "pkg.sub.c"}
