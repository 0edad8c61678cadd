"""No test outside the `timing` lane puts an upper bound on a time it measured.

A loaded CI machine stretches every wall-clock interval: "it took under 0.3 s" passes on a quiet laptop and
fails in CI, where both lanes share two cores (two such asserts failed a whole stop). What a test may do with
a measured interval is bound it from below (a sleep or a modelled delay only ever gets longer), print it, or
poll against a deadline that guards a hang. Tests whose point is a wall-clock figure carry
``@pytest.mark.timing`` and run alone after both lanes.

This reads every test module's syntax tree and names each assert that compares an elapsed time (a clock
reading minus another value, directly or through a local name) as the smaller side, and each assert that orders
two figures measured on the wall clock (a speedup or a throughput against another): a stall of one of the two
measurements on a loaded machine flips the order (one such assert failed a stop).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns"}
#: Attributes that hold a figure measured on the wall clock by the benchmark client and the emulator's streams.
MEASURED_FIGURES = {"speedup", "tokens_per_second", "baseline_tokens_per_second", "ms_per_token", "ttft_ms"}


def _reads_the_clock(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CLOCKS
               and isinstance(n.func.value, ast.Name) and n.func.value.id == "time" for n in ast.walk(node))


def _is_elapsed(node: ast.AST, elapsed_names: set[str]) -> bool:
    """A clock reading minus something, or a name that was assigned one."""
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and _reads_the_clock(n.left):
            return True
        if isinstance(n, ast.Name) and n.id in elapsed_names:
            return True
    return False


def _is_timing(function: ast.AST) -> bool:
    return any("timing" in ast.unparse(d) for d in getattr(function, "decorator_list", []))


def _functions_outside_timing(source: str) -> list[ast.AST]:
    """The functions of a test module that the `timing` lane does not run (its mark on them or on the module)."""
    tree = ast.parse(source)
    if any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
           and "timing" in ast.unparse(n.value) for n in tree.body):
        return []
    return [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_timing(f)]


def _offenders(checker) -> list[str]:
    """``path:line`` of every assert ``checker`` finds in the test modules."""
    return [f"{path.relative_to(TESTS.parent)}:{line}"
            for path in sorted(TESTS.rglob("*.py")) for line in checker(path.read_text())]


def upper_bounds_on_elapsed_time(source: str) -> list[int]:
    """Line numbers of asserts bounding a measured interval from above, outside `timing` tests."""
    found: list[int] = []
    for function in _functions_outside_timing(source):
        elapsed_names = {t.id for n in ast.walk(function) if isinstance(n, ast.Assign)
                         and any(isinstance(v, ast.BinOp) and isinstance(v.op, ast.Sub) and _reads_the_clock(v.left)
                                 for v in ast.walk(n.value))
                         for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert):
                continue
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [compare.left, *compare.comparators]
                for op, (left, right) in zip(compare.ops, zip(sides, sides[1:])):
                    smaller = left if isinstance(op, (ast.Lt, ast.LtE)) else right if isinstance(
                        op, (ast.Gt, ast.GtE)) else None
                    larger = right if smaller is left else left
                    # An elapsed time below something that is not itself measured: an upper bound.
                    if smaller is not None and _is_elapsed(smaller, elapsed_names) \
                            and not _is_elapsed(larger, elapsed_names):
                        found.append(node.lineno)
    return sorted(set(found))


def _is_measured_figure(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in MEASURED_FIGURES


def orders_of_measured_figures(source: str) -> list[int]:
    """Line numbers of asserts ordering one wall-clock figure against another (``a.speedup > b.speedup``),
    outside `timing` tests; a figure against a constant (``speedup > 0``) is a floor and passes."""
    found: list[int] = []
    for function in _functions_outside_timing(source):
        for node in (n for n in ast.walk(function) if isinstance(n, ast.Assert)):
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [compare.left, *compare.comparators]
                if any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and _is_measured_figure(left)
                       and _is_measured_figure(right) for op, (left, right) in zip(compare.ops, zip(sides, sides[1:]))):
                    found.append(node.lineno)
    return sorted(set(found))


def test_the_order_checker_finds_two_measured_figures_and_lets_floors_pass():
    source = '''
import pytest
def test_a():
    assert rows["code"].speedup > rows["chat"].speedup
def test_b():
    assert row.tokens_per_second > 0 and row.speedup == pytest.approx(1.2)
@pytest.mark.timing
def test_c():
    assert a.tokens_per_second < b.tokens_per_second
'''
    assert orders_of_measured_figures(source) == [4]


def test_no_test_orders_two_wall_clock_figures_outside_the_timing_lane():
    offenders = _offenders(orders_of_measured_figures)
    assert offenders == [], ("these asserts order two figures measured on the wall clock; a loaded machine flips "
                             "them. Mark the test `timing`: " + ", ".join(offenders))


def test_the_checker_finds_upper_bounds_and_lets_floors_and_guards_pass():
    flagged = '''
import time
def test_a():
    start = time.monotonic()
    work()
    assert time.monotonic() - start < 5
def test_b():
    started = time.perf_counter()
    elapsed = time.perf_counter() - started
    assert 0 <= elapsed < 30
def test_c():
    took = time.monotonic() - t0
    assert ok and 2.0 > took
'''
    allowed = '''
import time
import pytest
def test_floor():
    started = time.monotonic()
    elapsed = time.monotonic() - started
    assert elapsed >= 0.2
def test_guard():
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "stuck"
def test_inside_the_call():
    started = time.monotonic()
    call_seconds = time.monotonic() - started
    assert 0 <= record_seconds <= call_seconds
@pytest.mark.timing
def test_measured():
    started = time.monotonic()
    assert time.monotonic() - started < 1
'''
    assert upper_bounds_on_elapsed_time(flagged) == [6, 10, 13]
    assert upper_bounds_on_elapsed_time(allowed) == []


def test_no_test_bounds_a_measured_time_from_above():
    offenders = _offenders(upper_bounds_on_elapsed_time)
    assert offenders == [], ("these asserts bound a wall-clock interval from above; a loaded machine breaks them. "
                             "Bound it from below, print it, or mark the test `timing`: " + ", ".join(offenders))
