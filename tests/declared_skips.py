"""Why a test may be skipped: the one list of declared reasons, and every run's account of its skips.

The suite a contributor runs must be the suite CI runs, so a test skips only for a reason a person declared
here, with what makes it unavoidable. Tests skip through `skip_because(reason, detail)`. Any other skip (a
bare `pytest.skip`, a `skipif` with free text, `importorskip`, a tier whose environment is missing) is
undeclared: the closing lines of every run count skips by reason and list the undeclared ones by test, and
with `--undeclared-skips=fail` (the whole suite, `tests/suite`, hence `./dev test` and CI) an undeclared skip
fails the run.

`--outcomes-file PATH` writes the run's counts as JSON; `python -m tests.declared_skips FILE...` prints the
closing lines of several runs together (the suite's lanes).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

# reason -> why it cannot be avoided on the machines it applies to (shown in the closing lines).
DECLARED: dict[str, str] = {
    "not-root": "the image tier builds the operator image (buildah, mmdebstrap) and runs it in a chroot with a "
                "mount namespace, all of which need root; every other tier runs as any user",
    "no-system-python": "krew installs the kubectl plugin as an archive that runs under the machine's own "
                        "/usr/bin/python3; a machine without one cannot run the installed plugin at all",
    "external-cluster": "with DRAFTER_TEST_USE_KUBECONFIG=1 the end-to-end tests run against another cluster, "
                        "which cannot add simulated GPU nodes or run pods on the local cluster's process runner",
}

_TAG = re.compile(r"^(?:Skipped: )?\[declared: (?P<reason>[a-z0-9-]+)\] ")


def skip_because(reason: str, detail: str) -> None:
    """Skip the running test for a declared reason (a KeyError names an undeclared one at once)."""
    if reason not in DECLARED:
        raise KeyError(f"undeclared skip reason {reason!r}: declare it in tests/declared_skips.py DECLARED "
                       f"(known: {', '.join(sorted(DECLARED))})")
    pytest.skip(f"[declared: {reason}] {detail}")


def declared_reason(message: str) -> str | None:
    """The declared reason a skip message carries, or None for an undeclared skip."""
    match = _TAG.match(message)
    return match["reason"] if match and match["reason"] in DECLARED else None


def _skip_message(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def outcomes(stats: dict, seconds: float) -> dict:
    """The counts of one run from pytest's terminal statistics (under xdist, the controller's: every
    worker's reports). A test that failed in setup or teardown is an error; a skip is counted once."""
    def reports(key: str) -> list:
        return list(stats.get(key, []))
    declared: Counter[str] = Counter()
    undeclared: list[dict] = []
    for report in reports("skipped"):
        message = _skip_message(report)
        reason = declared_reason(message)
        if reason:
            declared[reason] += 1
        else:
            undeclared.append({"test": report.nodeid, "message": message.removeprefix("Skipped: ")})
    return {
        "passed": len(reports("passed")),
        "failed": len(reports("failed")),
        "errors": len(reports("error")),
        "skipped": sum(declared.values()) + len(undeclared),
        "declared": dict(declared),
        "undeclared": undeclared,
        "xfailed": len(stats.get("xfailed", [])),
        "xpassed": len(stats.get("xpassed", [])),
        "seconds": round(seconds, 1),
    }


def closing_lines(runs: dict[str, dict]) -> list[str]:
    """What every run ends with: counts, and every skip with its reason (summed over `runs`)."""
    total: Counter[str] = Counter()
    declared: Counter[str] = Counter()
    undeclared: list[dict] = []
    for run in runs.values():
        for key in ("passed", "failed", "errors", "skipped", "xfailed", "xpassed"):
            total[key] += run.get(key, 0)
        declared.update(run.get("declared", {}))
        undeclared.extend(run.get("undeclared", []))
    lines = []
    if len(runs) > 1:
        for name, run in runs.items():
            lines.append(f"{name}: {run['passed']} passed, {run['failed']} failed, {run['errors']} errors, "
                         f"{run['skipped']} skipped in {run['seconds']:.0f}s")
    summary = (f"{total['passed']} passed, {total['failed']} failed, {total['errors']} errors, "
               f"{total['skipped']} skipped ({sum(declared.values())} declared, {len(undeclared)} undeclared)")
    if total["xfailed"] or total["xpassed"]:
        summary += f", {total['xfailed']} xfailed, {total['xpassed']} xpassed"
    lines.append(summary)
    for reason, count in sorted(declared.items()):
        lines.append(f"  skipped {count} [declared: {reason}]: {DECLARED[reason]}")
    for skip in undeclared:
        lines.append(f"  UNDECLARED skip {skip['test']}: {skip['message']}")
    if undeclared:
        lines.append("  a test may skip only through tests.declared_skips.skip_because with a reason declared "
                     "there; make the test run, or declare why it cannot")
    return lines


# --- the pytest plugin (tests/conftest.py loads it) -----------------------------------------------------

def pytest_addoption(parser) -> None:
    group = parser.getgroup("declared skips")
    group.addoption("--undeclared-skips", choices=("report", "fail"), default="report",
                    help="what an undeclared skip does: reported in the closing lines (default), or fails the run "
                         "(the whole suite)")
    group.addoption("--outcomes-file", default=None, metavar="PATH",
                    help="write this run's counts and skips as JSON (tests/suite sums its lanes' files)")


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")  # an xdist worker: its controller accounts for the whole run


def pytest_sessionstart(session) -> None:
    session.config._declared_skips_started = time.monotonic()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _is_worker(config) or reporter is None:
        return
    run = outcomes(reporter.stats, time.monotonic() - config._declared_skips_started)
    config._declared_skips_outcomes = run
    if run["undeclared"] and config.getoption("--undeclared-skips") == "fail" \
            and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = config.getoption("--outcomes-file")
    if path:
        Path(path).write_text(json.dumps(run, indent=1))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    run = getattr(config, "_declared_skips_outcomes", None)
    if run is None:
        return
    strict = config.getoption("--undeclared-skips") == "fail"
    title = "skips" + (" (undeclared skips fail this run)" if strict else "")
    terminalreporter.write_sep("=", title, red=bool(run["undeclared"]) and strict)
    for line in closing_lines({"run": run}):
        terminalreporter.write_line(line)


def main(paths: list[str]) -> int:
    """Print the closing lines of the runs whose --outcomes-file are `paths` (name: the file's stem); exit 1
    when one of them has an undeclared skip."""
    runs = {Path(p).stem: json.loads(Path(p).read_text()) for p in paths if Path(p).is_file()}
    for line in closing_lines(runs):
        print(line)
    missing = [Path(p).stem for p in paths if not Path(p).is_file()]
    for name in missing:
        print(f"  {name}: no outcomes (the run stopped before its end); its tests are not counted above")
    return 1 if missing or any(run["undeclared"] for run in runs.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
