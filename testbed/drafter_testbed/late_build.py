"""The cluster's late steps (build.LATE_STEPS: CoreDNS, Prometheus, kwok), built while a demo already runs.

A first `./dev demo` on a new 2-core machine would wait the whole toolchain's compile (about 12 minutes) before its
first line. Nothing its first scenes run needs those three, so the cluster starts after the other steps
(build.START_STEPS) and a niced `drafter-operator cluster build` compiles them meanwhile on the CPU the story leaves.
As each is built, what waits for it runs (`when_built`): CoreDNS and kwok join the cluster (cluster.join_late), the
demo starts its Prometheus. A scene that needs one waits for it by name (`wait`), showing the build's last line.
On a warm machine nothing is missing: no build starts and everything runs at once, in the demo's order.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from rich.console import Console

from drafter_testbed.build import LATE_STEPS, BuildError, missing_steps

#: How often the watcher looks for finished steps: a few seconds late is nothing beside a minutes-long compile.
POLL_SECONDS = 2.0
#: How long a scene waits for a step before it gives up: a cold Prometheus alone is about 4 minutes on 2 cores
#: with the story beside it; this leaves room for a slow module proxy.
WAIT_SECONDS = 30 * 60


def unbuilt_late_steps() -> list[str]:
    unbuilt = {step.name for step in missing_steps()}
    return [step for step in LATE_STEPS if step in unbuilt]


class LateBuild(threading.Thread):
    """Builds the late steps still missing in a niced child process and runs, in this thread, what waits for each
    as it finishes. `start_build` begins it; `when_built` registers what waits; `wait` blocks a scene on one."""

    def __init__(self, log: Path, console: Console):
        super().__init__(daemon=True, name="late-build")
        self.log, self.console = log, console
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.waiting: dict[str, list[Callable[[], None]]] = {step: [] for step in LATE_STEPS}
        self.done = {step: threading.Event() for step in LATE_STEPS}
        self.errors: dict[str, str] = {}
        self.stop_event = threading.Event()

    def start_build(self, command: list[str] | None = None) -> list[str]:
        """Start building what is missing (nothing on a warm machine) and the watcher; return the steps it builds.
        ``command``: what builds them instead of `drafter-operator cluster build --only <them>`."""
        missing = unbuilt_late_steps()
        if missing:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("w") as out:
                # nice 19: the compile takes only what the story leaves of the 2 cores, so the demo's timings (and
                # the emulators' token pacing) stay what they are on a warm machine.
                self.process = subprocess.Popen(
                    ["nice", "-n", "19", *(command or [sys.executable, "-m", "drafter_operator.cli", "cluster", "build",
                                                       "--only", ",".join(missing)])],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.start()
        return missing

    def when_built(self, step: str, action: Callable[[], None]) -> None:
        """Run `action` once `step` is built: now, in the caller's thread, when it already is; else in the watcher.
        Never for a step whose build failed: that is said where a scene waits for it."""
        with self.lock:  # the watcher takes a step's actions under the same lock: each action runs once
            built = step not in unbuilt_late_steps()
            if not built and not self.done[step].is_set():
                self.waiting[step].append(action)
                return
        if built:
            action()
            self.done[step].set()

    def run(self) -> None:
        while not self.stop_event.is_set():
            ended = self.process is None or self.process.poll() is not None  # before the look: nothing lands after
            unbuilt = set(unbuilt_late_steps())
            for step in LATE_STEPS:
                if step not in unbuilt and not self.done[step].is_set():
                    self._finish(step)
            if ended:
                # Whatever the build left unbuilt stays so: say why once, to whoever waits.
                for step in unbuilt:
                    self.errors.setdefault(step, self.failure())
                    self.done[step].set()
                return
            self.stop_event.wait(POLL_SECONDS)

    def _finish(self, step: str) -> None:
        with self.lock:
            actions, self.waiting[step] = self.waiting[step], []
        for action in actions:
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - said where the scene waits, not lost in a thread
                self.errors[step] = f"{type(exc).__name__}: {exc}"
        self.done[step].set()

    def failure(self) -> str:
        code = self.process.poll() if self.process else None
        tail = "\n".join(_read(self.log).splitlines()[-15:])
        return f"the background build exited with status {code} (its log: {self.log}):\n{tail}"

    def last_line(self) -> str:
        return next((line for line in reversed(_read(self.log).splitlines()) if line.strip()), "")

    def wait(self, step: str, why: str, timeout: float = WAIT_SECONDS) -> None:
        """Block until `step` is built and what waited for it ran; raise BuildError (with the log) if it failed."""
        started = time.monotonic()
        if not self.done[step].is_set():
            with self.console.status(f"waiting for {step} ({why})") as shown:
                while not self.done[step].wait(1) and time.monotonic() - started < timeout:
                    shown.update(f"waiting for {step}, built in the background ({why}; "
                                 f"{time.monotonic() - started:.0f} s): {self.last_line()[-90:]}")
            self.console.print(f"{step} ready after {time.monotonic() - started:.0f} s of waiting ({why}).")
        if step in self.errors:
            raise BuildError(f"step '{step}': {self.errors[step]}")
        if not self.done[step].is_set():
            raise BuildError(f"step '{step}' was not built within {timeout / 60:.0f} min (its log: {self.log}). Fix: "
                             f"`drafter-operator cluster build --only {step}` shows why, then run the demo again.")

    def finish(self, timeout: float = WAIT_SECONDS) -> None:
        """Wait for every step (the demo's end: the cluster it leaves runs everything) and stop the watcher."""
        for step in LATE_STEPS:
            self.wait(step, "the cluster the demo leaves running", timeout)
        self.stop_event.set()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
