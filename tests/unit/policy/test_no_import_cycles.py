"""No module of operator/drafter_operator imports itself back, through any chain of imports.

Every import counts, wherever it is written: at the top, inside a function (a deferred import that only hides a
cycle from the interpreter at load time) and under ``if TYPE_CHECKING:`` (a type-only cycle still means two
modules that each need the other: what both need belongs in a third). tests/unit/policy/test_layering.py keeps
the arrows between rooms one-way; this keeps them one-way between the modules inside a room too.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Mapping

import drafter_operator

PACKAGE = Path(drafter_operator.__file__).parent
ROOT = PACKAGE.name


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path) -> dict[str, Path]:
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def imported(tree: ast.AST, name: str, is_package: bool, known: set[str], root: str) -> set[str]:
    """The package's modules that ``tree`` (module ``name``) imports: ``from a.b import c`` names a.b.c when
    that is a module, else a.b; relative imports are resolved against ``name``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {t for t in targets if t == root or t.startswith(root + ".")} & known
    found.discard(name)
    return found


def import_arrows(package: Path) -> dict[str, set[str]]:
    known = modules(package)
    names = set(known)
    return {name: imported(ast.parse(path.read_text()), name, path.name == "__init__.py", names, package.name)
            for name, path in known.items()}


def cycles(arrows: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted, the groups sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(arrows.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(arrows):
        if node not in index:
            visit(node)
    return sorted(groups)


def test_no_module_of_the_operator_imports_itself_back():
    found = cycles(import_arrows(PACKAGE))
    assert found == [], ("import cycles among these modules (move what both need into a module both import): "
                         + "; ".join(" <-> ".join(group) for group in found))


def test_the_check_counts_deferred_and_type_only_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("def f():\n    from pkg.sub.b import g\n")
    (package / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import h\n")
    (package / "sub" / "c.py").write_text("from pkg.sub import a\n")
    (package / "d.py").write_text("from pkg.sub.a import f\n")
    arrows = import_arrows(package)
    assert arrows["pkg.sub.a"] == {"pkg.sub.b"} and arrows["pkg.sub.b"] == {"pkg.sub.c"}
    assert arrows["pkg.sub.c"] == {"pkg.sub.a"} and arrows["pkg.d"] == {"pkg.sub.a"}
    assert cycles(arrows) == [["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]
