"""No function of the runtime package takes seven parameters or more.

A long parameter list is a record nobody named: arguments that always travel together (a target's namespace
and name, a connection's URL and timeouts, a job's identity) become a frozen dataclass, and the function takes
the record. This reads every module's syntax tree and counts each function's parameters, ``self`` and ``cls``
left out, and ``*args`` and ``**kwargs`` too (kopf hands its handlers their arguments by name: a handler takes
the few it reads and ``**kwargs``).

The functions below are the ones left for later, each with why; the list only shrinks: an entry that no longer
names a long parameter list fails too, so it is taken off when its function is fixed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import drafter_operator

PACKAGE = Path(drafter_operator.__file__).parent
MOST = 6  # parameters a function may take

# "<module path>:<qualified name>" -> why it is left for now.
DECIDES = "a pure decide step of a controller, restructured with its decision's state"
PREFLIGHT = "a preflight rule's inputs, restructured with the preflight rules"
LEFT_FOR_LATER = {
    "controllers/benchmark/decide.py:bench_argv": DECIDES,
    "controllers/serving/acceptance.py:decide_acceptance": DECIDES,
    "controllers/serving/acceptance.py:act_on_degraded": DECIDES,
    "controllers/serving/decide.py:status_fields": DECIDES,
    "controllers/serving/drift.py:drift_verdict": DECIDES,
    "controllers/serving/pointer.py:pointer_write": DECIDES,
    "controllers/training/decide.py:_unshareable_claim": DECIDES,
    "controllers/training/decide.py:_stage_failed": DECIDES,
    "controllers/training/decide.py:_next_stage": DECIDES,
    "controllers/training/decide.py:_start": DECIDES,
    "preflight/__init__.py:preflight": PREFLIGHT,
    "preflight/rules/aux_layers.py:capture_problems": PREFLIGHT,
    "preflight/rules/aux_layers.py:trained_position_problems": PREFLIGHT,
}


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The named parameters, ``self`` and ``cls`` left out (``*args`` and ``**kwargs`` are not named ones)."""
    args = function.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, prefix + node.name + ".")
        else:
            yield from functions(node, prefix)


def long_parameter_lists() -> dict[str, int]:
    """"<module path>:<qualified name>" -> its parameters, for each function with more than MOST."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for name, function in functions(ast.parse(path.read_text(encoding="utf-8"))):
            if len(parameters(function)) > MOST:
                found[f"{module}:{name}"] = len(parameters(function))
    return found


def test_no_function_takes_seven_parameters_or_more():
    offenders = {where: count for where, count in long_parameter_lists().items() if where not in LEFT_FOR_LATER}
    assert not offenders, (
        f"functions with more than {MOST} parameters: {offenders}; group the ones that travel together into "
        "the record they are (a frozen dataclass, or an existing model)")


def test_every_function_left_for_later_still_takes_that_many():
    stale = sorted(set(LEFT_FOR_LATER) - set(long_parameter_lists()))
    assert not stale, f"no longer long parameter lists (or gone): take them off LEFT_FOR_LATER: {stale}"


def test_the_count_leaves_out_self_and_star_arguments():
    tree = ast.parse("class K:\n    def m(self, a, b, *rest, c, **kwargs): ...\ndef f(a, /, b, *, c): ...\n")
    counted = {name: parameters(function) for name, function in functions(tree)}
    assert counted == {"K.m": ["a", "b", "c"], "f": ["a", "b", "c"]}
