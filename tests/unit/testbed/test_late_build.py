"""The demo's background build of the cluster's late steps (drafter_testbed/late_build.py): what waits for a step runs
once the step is built (at once when it already is), a scene waiting on a step returns then, and a build that fails
or an action that raises is said where the scene waits, with the build's log. The build is a real child process; it
plays the Go compile by writing the step's outputs into a bin directory of the test's own."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from drafter_testbed import build, late_build
from drafter_testbed.versions import bin_dir


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A toolchain cache where every step is built but those named by `unbuild`."""
    monkeypatch.setenv("DRAFTER_CACHE_DIR", str(tmp_path / "cache"))
    out = bin_dir()
    out.mkdir(parents=True)
    for step in build.STEPS:
        for output in step.outputs:
            (out / output).write_text("built\n")

    def unbuild(*names: str) -> list[str]:
        outputs = [o for s in build.STEPS if s.name in names for o in s.outputs]
        for output in outputs:
            (out / output).unlink()
        return [str(out / o) for o in outputs]

    return unbuild


def _writes(paths: list[str], once: Path | None = None) -> list[str]:
    """A build that writes `paths` (once the file `once` exists, where given: the test says when)."""
    wait = f"while not pathlib.Path({str(once)!r}).exists(): time.sleep(0.05)\n" if once else ""
    return [sys.executable, "-c", f"import time, pathlib\n{wait}for p in {paths!r}: pathlib.Path(p).write_text('built')"]


def _late(tmp_path) -> late_build.LateBuild:
    return late_build.LateBuild(tmp_path / "logs" / "late.log", Console(file=io.StringIO()))


def test_what_waits_for_a_built_step_runs_at_once_and_for_an_unbuilt_one_once_the_build_writes_it(cache, tmp_path):
    outputs = cache("coredns")
    late = _late(tmp_path)
    ran: dict[str, str] = {}
    # The build waits for the test's word, so "not yet run" below is certain, not a race.
    go = tmp_path / "go"
    assert late.start_build(_writes(outputs, once=go)) == ["coredns"]
    late.when_built("coredns", lambda: ran.setdefault("coredns", threading.current_thread().name))
    late.when_built("kwok", lambda: ran.setdefault("kwok", threading.current_thread().name))
    assert ran == {"kwok": threading.current_thread().name}  # built already: in the caller's thread, at once
    assert late_build.unbuilt_late_steps() == ["coredns"]
    go.write_text("")
    late.wait("coredns", "a test")
    assert ran["coredns"] == "late-build"  # in the watcher, after the build wrote it
    late.finish()
    assert late_build.unbuilt_late_steps() == [] and late.process.returncode == 0


def test_a_warm_cache_starts_no_build(cache, tmp_path):
    late = _late(tmp_path)
    assert late.start_build([sys.executable, "-c", "raise SystemExit(9)"]) == []
    assert late.process is None
    ran = []
    late.when_built("prometheus", lambda: ran.append("prometheus"))
    late.finish()
    assert ran == ["prometheus"]


def test_a_failed_build_is_said_where_a_scene_waits_with_its_status_and_log(cache, tmp_path):
    cache("prometheus", "kwok")
    late = _late(tmp_path)
    late.start_build([sys.executable, "-c", "print('go: module lookup disabled'); raise SystemExit(3)"])
    ran = []
    late.when_built("prometheus", lambda: ran.append("prometheus"))
    with pytest.raises(build.BuildError) as error:
        late.wait("prometheus", "the alerts")
    assert "status 3" in str(error.value) and "go: module lookup disabled" in str(error.value)
    assert "prometheus" in str(error.value) and str(late.log) in str(error.value)
    assert ran == []
    with pytest.raises(build.BuildError, match="kwok"):
        late.wait("kwok", "the cluster left running")


def test_an_action_that_raises_is_said_where_the_scene_waits(cache, tmp_path):
    outputs = cache("coredns")
    late = _late(tmp_path)
    go = tmp_path / "go"
    late.start_build(_writes(outputs, once=go))

    def join():
        raise RuntimeError("coredns did not become ready within 60s")

    late.when_built("coredns", join)
    go.write_text("")
    with pytest.raises(build.BuildError, match="RuntimeError: coredns did not become ready"):
        late.wait("coredns", "the training's pods")
