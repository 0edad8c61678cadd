"""How many prompts a capture holds since a moment: what spec.retraining.minNewSamples is checked against.

The capture sidecar answers ``GET /samples?since=<time>`` on its port (sidecar.serve_samples) with the number of
prompt records on the whole claim (every pod's directory) written at or after that time. The operator asks one
Ready pod of the serving for the number and never sees a prompt; the sidecar, which writes the records, counts them.

Hour files only grow while their hour lasts and are appended to by one sidecar each, so `PromptTally` keeps, per
file, how far it has read and the times of the prompts it found there: a question reads only what was appended
since the last one, and skips the files whose hour ended before ``since``.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from drafter_operator.capture.records import PROMPT
from drafter_operator.capture.retention import hour_started
from drafter_operator.timestamps import format_seconds

#: The sidecar's port for the count (a named container port, "samples").
SAMPLES_PORT = 9419
SAMPLES_PATH = "/samples"
HOUR_S = 3600


def prompt_times(chunk: bytes) -> tuple[list[str], int]:
    """The times of the prompt records in the whole lines of ``chunk``, and how many bytes those lines take (a line
    still being appended is left for the next read). A line that is not a record is skipped."""
    end = chunk.rfind(b"\n") + 1
    times = []
    for line in chunk[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") == PROMPT and isinstance(record.get("time"), str):
            times.append(record["time"])
    return times, end


@dataclass
class _FileTally:
    #: The file's first line and the last line read: a file pruned and begun again under its name (the size cap took
    #: the current hour's file) is shorter than what was read, or differs there, where its inode may not tell (a
    #: freed inode is given again at once).
    head: bytes = b""
    tail: bytes = b""
    read: int = 0
    times: list[str] = field(default_factory=list)  # sorted: a sidecar appends in time order

    def still_the_file_read(self, source) -> bool:
        if not self.read:
            return True
        if os.fstat(source.fileno()).st_size < self.read or source.read(len(self.head)) != self.head:
            return False
        source.seek(self.read - len(self.tail))
        return source.read(len(self.tail)) == self.tail


class PromptTally:
    """The prompts on a claim, counted incrementally; safe to ask from the sidecar's HTTP threads."""

    def __init__(self, claim: Path):
        self.claim = claim
        self._files: dict[str, _FileTally] = {}
        self._lock = threading.Lock()

    def count_since(self, since: dt.datetime) -> int:
        """Prompt records written at or after ``since`` (an aware moment; records carry whole seconds)."""
        since_text, since_s = format_seconds(since), since.timestamp()
        with self._lock:
            present = set()
            total = 0
            for path in sorted(self.claim.glob("*/capture-*.jsonl")):
                name = str(path.relative_to(self.claim))
                started = hour_started(name)
                if started is None:
                    continue
                present.add(name)
                if started + HOUR_S <= since_s:
                    continue  # its hour ended before: nothing in it is new
                try:
                    with open(path, "rb") as source:
                        tally = self._files.get(name)
                        if tally is None or not tally.still_the_file_read(source):
                            tally = self._files[name] = _FileTally()  # new, or begun again since the last read
                        source.seek(tally.read)
                        chunk = source.read()
                        times, consumed = prompt_times(chunk)
                        if consumed:
                            whole = chunk[:consumed]
                            if not tally.head:
                                tally.head = whole[:whole.find(b"\n") + 1]
                            tally.tail = whole[whole.rfind(b"\n", 0, consumed - 1) + 1:]
                except FileNotFoundError:  # pruned between the listing and the read
                    present.discard(name)
                    continue
                tally.read += consumed
                tally.times += times
                total += len(tally.times) - bisect.bisect_left(tally.times, since_text)
            for gone in set(self._files) - present:
                del self._files[gone]  # pruned by retention or the size cap
            return total
