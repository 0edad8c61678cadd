"""Where the runtime package spells a name that has one home (an engine's, a drafter family's): the syntax-tree
scan tests/unit/policy/test_engine_literals.py and test_method_literals.py share."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import drafter_operator

PACKAGE = Path(drafter_operator.__file__).parent


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _assigned_name(node: ast.AST) -> str | None:
    """The name a top-level statement assigns (NAME = ..., NAME: T = ...), else None."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    names = [target.id for target in targets if isinstance(target, ast.Name)]
    return names[0] if names else None


def literals(tree: ast.Module, names: frozenset[str], *, name_top_level: bool = False) -> Iterator[tuple[int, str, str]]:
    """(line, place, the name) for each string constant (not a docstring) in ``names``. The place is the enclosing
    function or class; at the top level "<module>", or with ``name_top_level`` the name the statement assigns."""
    skip = _docstrings(tree)

    def visit(node: ast.AST, place: str) -> Iterator[tuple[int, str, str]]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            place = node.name
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names \
                and id(node) not in skip:
            yield node.lineno, place, node.value
        for child in ast.iter_child_nodes(node):
            yield from visit(child, place)

    for statement in tree.body:
        yield from visit(statement, (name_top_level and _assigned_name(statement)) or "<module>")


def runtime_modules(homes: tuple[str, ...]) -> Iterator[tuple[str, ast.Module]]:
    """Every runtime module outside ``homes`` (path prefixes relative to the package), parsed, by that path."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if not relative.startswith(homes):
            yield relative, ast.parse(path.read_text(), filename=relative)


def found(homes: tuple[str, ...], names: frozenset[str], *, name_top_level: bool = False) -> list[tuple[str, int, str, str]]:
    """(module, line, place, name) of every such literal outside ``homes``."""
    return [(relative, line, place, name) for relative, tree in runtime_modules(homes)
            for line, place, name in literals(tree, names, name_top_level=name_top_level)]
