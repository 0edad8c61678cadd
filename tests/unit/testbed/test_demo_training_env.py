"""The demo's training environment, built in the background by `./dev demo` while the story starts: the training
scene waits for it, takes its interpreter when it is built, and falls back (saying why) when the build failed."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from pathlib import Path

from rich.console import Console

from drafter_testbed import demo_training

REPO = Path(__file__).resolve().parents[3]


def quiet() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200), out


def test_a_build_that_ends_while_the_scene_waits_gives_its_python(tmp_path):
    (tmp_path / "build.log").write_text("Collecting torch\n")

    def finish():
        time.sleep(1.5)
        (tmp_path / "python").write_text(sys.executable + "\n")
        (tmp_path / "status").write_text("0\n")
    threading.Thread(target=finish, daemon=True).start()
    console, out = quiet()
    assert demo_training.wait_for_background_build(tmp_path, console, timeout=60) == sys.executable
    assert "is ready" in out.getvalue()


def test_a_failed_build_falls_back_and_shows_its_log(tmp_path):
    (tmp_path / "build.log").write_text("pip: no matching distribution for torch==2.14.1\n")
    (tmp_path / "status").write_text("1\n")
    console, out = quiet()
    assert demo_training.wait_for_background_build(tmp_path, console, timeout=60) is None
    assert "exited with status 1" in out.getvalue() and "no matching distribution" in out.getvalue()


def test_a_build_that_never_ends_is_given_up_after_the_bound(tmp_path):
    console, out = quiet()
    assert demo_training.wait_for_background_build(tmp_path, console, timeout=0.5) is None
    assert "did not finish within" in out.getvalue()


def test_the_environment_variable_wins_and_the_dev_script_sets_the_one_the_scene_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTER_TRAINING_PYTHON", sys.executable)
    monkeypatch.setenv(demo_training.TRAINING_ENV_BUILD, str(tmp_path))  # never read: no status file, no wait
    assert demo_training.training_python(quiet()[0]) == sys.executable
    assert f"export {demo_training.TRAINING_ENV_BUILD}=" in (REPO / "dev").read_text()
    assert os.access(REPO / "dev", os.X_OK)
