"""A stage's progress as its runner reports it: ``drafter-progress`` lines from its commands' output and the
growth of its outputs on disk (docs/training.md, "Progress"; training/progress.py parses and formats).

The runner (stage_runner.py) feeds every output line to a :class:`ProgressReporter` and ticks it while a
command is silent; the reporter prints a line at the start, when the progress changed (at most every
PROGRESS_INTERVAL seconds), and at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

from drafter_operator.training import progress

#: Seconds between two progress lines at least (the operator reads the log every ~10 s), and between
#: two measurements of the outputs' size (a walk over the hidden-states directory).
PROGRESS_INTERVAL = 5.0


def tree_bytes(path: str) -> int | None:
    """Bytes under ``path`` (a file or a directory), None when it does not exist."""
    root = Path(path)
    if root.is_file():
        return root.stat().st_size
    if not root.is_dir():
        return None
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def where_outputs_are(plan: Mapping) -> dict[str, str]:
    """Output name -> where it is on this machine: the host paths under the local process runner
    (``outputsOnHost``: container_paths.py), else the container paths."""
    return dict(plan.get("outputsOnHost") or plan.get("outputs") or {})


class ProgressReporter:
    """The ``drafter-progress`` lines of one stage: its commands' output parsed (training/progress.py),
    with the growth of its outputs (``bytesWritten``: e.g. Extract's hidden states) when they grow."""

    def __init__(self, plan: Mapping, write: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 measure: Callable[[str], int | None] = tree_bytes, interval: float = PROGRESS_INTERVAL):
        self.stage = plan["stage"]
        self.state = progress.start(plan)
        self.outputs = list(where_outputs_are(plan).values())
        self.write, self.clock, self.wall, self.measure, self.interval = write, clock, wall, measure, interval
        self.baseline = self._bytes()  # what was there before (a resumed stage): growth is what counts
        self.bytes_written: int | None = None
        self.estimated_bytes: int | None = plan.get("estimatedBytes")
        self.cost: dict | None = plan.get("cost")
        self.measured = self.emitted = self.clock()
        self.last: dict | None = None

    def _bytes(self) -> int | None:
        sizes = [size for path in self.outputs if (size := self.measure(path)) is not None]
        return sum(sizes) if sizes else None

    def _measure(self) -> None:
        size = self._bytes()
        if size is not None and size > (self.baseline or 0):
            self.bytes_written = size
        self.measured = self.clock()

    def _output(self) -> progress.OutputBytes:
        return progress.OutputBytes(written=self.bytes_written, estimated=self.estimated_bytes)

    def _emit(self, outcome: str | None = None) -> None:
        self.last = progress.record(self.state, self.stage, self.wall(), self._output(), outcome, self.cost)
        self.write(progress.format_line(self.last))
        self.emitted = self.clock()

    def begin(self) -> None:
        self._emit()

    def line(self, text: str) -> None:
        self.state = progress.advance(self.state, text, self.stage, self.clock())
        self.tick()

    def tick(self) -> None:
        """Print a line when the progress changed and the last one is PROGRESS_INTERVAL old."""
        now = self.clock()
        if now - self.emitted < self.interval:
            return
        if now - self.measured >= self.interval:
            self._measure()
        candidate = progress.record(self.state, self.stage, self.wall(), self._output(), None, self.cost)
        if self.last is None or {**candidate, "updated": None} != {**self.last, "updated": None}:
            self._emit()

    def end(self, outcome: str) -> dict:
        self._measure()
        self._emit(outcome)
        return self.last
