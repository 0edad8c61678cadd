"""A poll never indexes an object's status: an end-to-end test that waits for an object reads it before its
controller has written any status (a custom resource has none until the operator's first write; a Job's or a
pod's sub-keys come later), so a poll that writes `obj["status"]["x"]` or `obj["status"].get(...)` fails with a
KeyError on its first look instead of waiting. Polls read `(obj.get("status") or {})`.

A poll is a predicate handed to `wait_for` / `wait` (a lambda, or a function of the module by name, with the
functions nested in a test that it calls), or a `while` loop that sleeps. What a test asserts after a wait returned
the object is not a poll, and a condition's own "status" (compared, never indexed further) is not flagged."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("tests/e2e", "tests/support")
WAITS = {"wait_for", "wait"}
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _called(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def polls(tree: ast.AST) -> list[ast.AST]:
    """The predicates and sleeping loops of a module, with the nested functions they call."""
    defs: dict[str, list[ast.AST]] = {}
    nested: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, FUNCTIONS):
            defs.setdefault(node.name, []).append(node)
            for inner in ast.walk(node):
                if inner is not node and isinstance(inner, FUNCTIONS):
                    nested.setdefault(inner.name, []).append(inner)
    found: list[ast.AST] = []

    def add(node: ast.AST) -> None:
        if all(node is not f for f in found):
            found.append(node)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in WAITS:
            for predicate in node.args[1:2] + [k.value for k in node.keywords if k.arg == "predicate"]:
                if isinstance(predicate, ast.Lambda):
                    add(predicate)
                elif isinstance(predicate, ast.Name):
                    for d in defs.get(predicate.id, []):
                        add(d)
        if isinstance(node, ast.While) and any(isinstance(n, ast.Call) and _called(n) == "sleep" for n in ast.walk(node)):
            add(node)
    for poll in found:  # grows while it is walked: the nested helpers a poll calls are polls too
        for n in ast.walk(poll):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                for d in nested.get(n.func.id, []):
                    add(d)
    return found


def status_indexed_in_polls(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each `X["status"]` a poll indexes or calls a method on (through a walrus too)."""
    hits = set()
    for poll in polls(ast.parse(source)):
        parents = {id(c): p for p in ast.walk(poll) for c in ast.iter_child_nodes(p)}
        for n in ast.walk(poll):
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "status":
                user, below = parents.get(id(n)), n
                while isinstance(user, ast.NamedExpr):
                    user, below = parents.get(id(user)), user
                if isinstance(user, (ast.Subscript, ast.Attribute)) and user.value is below:
                    hits.add((n.lineno, ast.unparse(n)))
    return sorted(hits)


def test_the_scan_flags_status_indexed_in_a_poll():
    source = '''
def test_x(cluster):
    cluster.wait_for("ready", lambda: cluster.get_json("x")["status"]["phase"] == "Ready")
    cluster.wait_for("job", lambda: (s := cluster.get_json("job")["status"]).get("failed") == 1 and s)

    def ready_of(name):
        return cluster.get_json(name)["status"].get("conditions")

    def queued():
        return ready_of("second")

    cluster.wait_for("queued", queued, timeout=5)
    while True:
        body = cluster.get_json("y")
        if body["status"]["stage"] == "Done":
            break
        time.sleep(1)
'''
    assert [line for line, _ in status_indexed_in_polls(source)] == [3, 4, 7, 15]


def test_the_scan_leaves_waiting_reads_conditions_and_assertions_after_a_wait_alone():
    source = '''
def test_x(cluster):
    body = cluster.wait_for("ready", lambda: (cluster.get_json("x").get("status") or {}).get("phase") == "Ready")
    cluster.wait_for("c", lambda: any(c["status"] == "True" for c in (body.get("status") or {}).get("conditions") or []))
    assert body["status"]["phase"] == "Ready"
    for c in body["status"]["conditions"]:
        assert c["status"] == "True"
'''
    assert status_indexed_in_polls(source) == []


def test_no_poll_in_the_end_to_end_tests_reads_a_status_before_it_exists():
    found = [f"{path.relative_to(REPO)}:{line}: {expression}" for scanned in SCANNED
             for path in sorted((REPO / scanned).rglob("*.py"))
             for line, expression in status_indexed_in_polls(path.read_text())]
    assert found == [], "polls that index status (read (obj.get('status') or {}) instead):\n" + "\n".join(found)
