"""The skip policy (tests/declared_skips.py) in real pytest runs: an undeclared skip fails the whole suite,
a declared one does not, and the closing lines count both with their reasons, under xdist too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import declared_skips

REPO = Path(__file__).resolve().parents[3]

SAMPLE = '''
import pytest
from tests.declared_skips import skip_because

def test_passes():
    pass

def test_bare_skip():
    pytest.skip("no reason anyone declared")

@pytest.mark.skipif(True, reason="free text in a mark")
def test_skipif_mark():
    pass

def test_declared():
    skip_because("not-root", "needs root here")

def test_unknown_reason():
    skip_because("it-is-late", "nobody declared this")
'''

MODULE_SKIP = '''
import pytest
pytest.skip("a whole module skipped at import", allow_module_level=True)

def test_never_collected():
    pass
'''


def run_pytest(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    outcomes = tmp_path / "outcomes.json"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.declared_skips", "-p", "no:cacheprovider",
                           "-q", "--rootdir", str(tmp_path), "--outcomes-file", str(outcomes), *args, *files],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return proc, json.loads(outcomes.read_text()) if outcomes.is_file() else {}


def test_an_undeclared_skip_fails_the_whole_suite_and_is_named(tmp_path):
    proc, run = run_pytest(tmp_path, {"test_sample.py": SAMPLE}, "--undeclared-skips=fail")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout
    assert run["passed"] == 1 and run["skipped"] == 3 and run["declared"] == {"not-root": 1}
    assert sorted(s["test"] for s in run["undeclared"]) == ["test_sample.py::test_bare_skip",
                                                            "test_sample.py::test_skipif_mark"]
    assert run["failed"] == 1  # an undeclared reason name is a KeyError in the test, not a skip
    assert "UNDECLARED skip test_sample.py::test_bare_skip: no reason anyone declared" in proc.stdout
    assert "skipped 1 [declared: not-root]: " + declared_skips.DECLARED["not-root"] in proc.stdout
    assert "1 passed, 1 failed, 0 errors, 3 skipped (1 declared, 2 undeclared)" in proc.stdout


def test_declared_skips_alone_keep_the_run_green(tmp_path):
    sample = SAMPLE.split("def test_bare_skip")[0] + 'def test_declared():\n    skip_because("external-cluster", "x")\n'
    proc, run = run_pytest(tmp_path, {"test_sample.py": sample}, "--undeclared-skips=fail")
    assert proc.returncode == 0, proc.stdout
    assert run["declared"] == {"external-cluster": 1} and run["undeclared"] == []


def test_by_default_undeclared_skips_are_reported_not_fatal(tmp_path):
    proc, run = run_pytest(tmp_path, {"test_sample.py": SAMPLE}, "-k", "not unknown")
    assert proc.returncode == 0, proc.stdout
    assert len(run["undeclared"]) == 2 and "UNDECLARED skip" in proc.stdout


def test_a_module_skipped_at_import_is_undeclared(tmp_path):
    proc, run = run_pytest(tmp_path, {"test_module.py": MODULE_SKIP, "test_ok.py": "def test_ok():\n    pass\n"},
                           "--undeclared-skips=fail")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout
    assert run["passed"] == 1
    assert [s["message"] for s in run["undeclared"]] == ["a whole module skipped at import"]


def test_xdist_workers_skips_are_counted_once_by_the_controller(tmp_path):
    serial, serial_run = run_pytest(tmp_path, {"test_sample.py": SAMPLE}, "--undeclared-skips=fail")
    parallel, parallel_run = run_pytest(tmp_path, {"test_sample.py": SAMPLE}, "--undeclared-skips=fail", "-n", "2")
    assert parallel.returncode == serial.returncode == pytest.ExitCode.TESTS_FAILED
    for key in ("passed", "failed", "skipped", "declared"):
        assert parallel_run[key] == serial_run[key], key
    assert sorted(map(str, parallel_run["undeclared"])) == sorted(map(str, serial_run["undeclared"]))


def test_the_suite_sums_its_runs_and_fails_on_a_missing_one(tmp_path, capsys):
    clean = {"passed": 3, "failed": 0, "errors": 0, "skipped": 1, "declared": {"not-root": 1}, "undeclared": [],
             "xfailed": 0, "xpassed": 0, "seconds": 12.0}
    (tmp_path / "lane-a.json").write_text(json.dumps(clean))
    (tmp_path / "lane-b.json").write_text(json.dumps({**clean, "passed": 5, "skipped": 0, "declared": {}}))
    assert declared_skips.main([str(tmp_path / "lane-a.json"), str(tmp_path / "lane-b.json")]) == 0
    out = capsys.readouterr().out
    assert "lane-a: 3 passed, 0 failed, 0 errors, 1 skipped in 12s" in out
    assert "8 passed, 0 failed, 0 errors, 1 skipped (1 declared, 0 undeclared)" in out
    assert declared_skips.main([str(tmp_path / "lane-a.json"), str(tmp_path / "crashed.json")]) == 1
    assert "crashed: no outcomes" in capsys.readouterr().out


@given(reason=st.sampled_from(sorted(declared_skips.DECLARED)), detail=st.text(max_size=80))
def test_a_declared_reason_is_read_back_from_its_message(reason, detail):
    with pytest.raises(pytest.skip.Exception) as skipped:
        declared_skips.skip_because(reason, detail)
    assert declared_skips.declared_reason(skipped.value.msg) == reason
    assert declared_skips.declared_reason("Skipped: " + skipped.value.msg) == reason


@given(message=st.text(max_size=120))
def test_free_text_never_passes_for_a_declared_reason(message):
    tagged = any(message.startswith(p + f"[declared: {r}] ") for r in declared_skips.DECLARED
                 for p in ("", "Skipped: "))
    assert (declared_skips.declared_reason(message) is not None) == tagged


def test_only_declared_reasons_can_be_named():
    with pytest.raises(KeyError, match="declare it in tests/declared_skips.py"):
        declared_skips.skip_because("because-i-said-so", "x")
    assert declared_skips.declared_reason("[declared: because-i-said-so] x") is None


def test_no_test_module_skips_but_through_a_declared_reason():
    """The runtime accounting catches an undeclared skip only on a machine where it happens; this catches the
    code that could take one anywhere (a bare skip, skipif, importorskip) before it runs."""
    import ast

    tests_root = Path(declared_skips.__file__).parent
    found = []
    for path in sorted(tests_root.rglob("*.py")):
        if path.name == "declared_skips.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        # What is called or used as a mark (pytest.skip.Exception, caught in a test, is neither).
        used = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)] + \
            [mark for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))
             for mark in node.decorator_list] + \
            [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)]
        for node in used:
            if ast.unparse(node) in ("pytest.skip", "pytest.importorskip", "pytest.mark.skip", "pytest.mark.skipif"):
                found.append(f"{path.relative_to(tests_root)}:{node.lineno} {ast.unparse(node)}")
    assert not found, f"skip through tests.declared_skips.skip_because with a declared reason: {found}"
