"""Redaction of captured records by a container the user names (spec.capture.redaction), before they reach the claim.

The capture sidecar and the redaction container share one directory (an emptyDir of the pod); the redaction
container never mounts the claim. One batch (the records one poll kept from one spool file) goes through it so:

1. the sidecar writes the records, one JSON line each, to ``<id>.writing`` and renames it ``<id>.in``;
2. the container's wrapper (`WRAPPER_SCRIPT`, POSIX sh, so any image with a shell will do) runs the user's command
   once for that file: standard input from ``<id>.in``, standard output to ``<id>.partial``, renamed ``<id>.out``
   when the command exits 0, or its exit status written to ``<id>.failed``; it then deletes ``<id>.in``;
3. the sidecar reads the output (`redacted`): one JSON line per record, in order, each the record rewritten (an
   object that keeps its record's engine, requestId and kind) or ``null`` to drop it.

Files, not pipes: a command that buffers its output, dies half-way or never starts blocks nothing; the sidecar waits
for an answer up to a timeout. Whatever goes wrong (no answer, a failed command, output that breaks the contract)
raises `RedactionFailed`: the poll appends nothing and keeps its spool offsets, and the next poll sends the same
lines again. So no record reaches the claim without having been through the command, and none is lost to a
redaction that failed once (only, at the pod's end, those the final drain could not get redacted: they stay in the
spool and go with the pod).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The redaction container's command line runs the user's command under this wrapper: ``sh -c WRAPPER_SCRIPT redact
#: <directory> <command...>``. It traps TERM (a shell as a container's PID 1 would otherwise ignore it until the
#: grace period ends) and looks for batches every second. A batch's input is gone before its answer appears, and an
#: answer appears whole (renamed into place): the sidecar, once it has read one, finds nothing of that batch left.
WRAPPER_SCRIPT = """\
trap 'exit 0' TERM
cd "$1" || exit 1
shift
while :; do
  for batch in *.in; do
    [ -e "$batch" ] || continue
    id="${batch%.in}"
    "$@" < "$batch" > "$id.partial"
    status=$?
    rm -f "$batch"
    if [ "$status" -ne 0 ]; then echo "$status" > "$id.partial"; mv "$id.partial" "$id.failed"; else mv "$id.partial" "$id.out"; fi
  done
  sleep 1
done
"""
#: The record fields a redaction must keep as they were: which request a record is, and what of it.
IDENTITY_FIELDS = ("engine", "requestId", "kind")
#: How long the sidecar waits for a batch's answer before it gives the poll up (and retries it the next poll).
DEFAULT_TIMEOUT_S = 120.0
#: How often it looks for the answer meanwhile.
CHECK_EVERY_S = 0.2


class RedactionFailed(OSError):
    """The redaction gave no usable answer for a batch; the message says why. An OSError, so the sidecar's loop
    retries the poll as it does a failed read or write."""


@dataclass(frozen=True)
class Redaction:
    """The directory shared with the redaction container, and how long a batch may take."""

    directory: Path
    timeout_s: float = DEFAULT_TIMEOUT_S


def redacted(records: list[dict[str, Any]], output: str) -> list[dict[str, Any]]:
    """The records the redaction's output keeps (pure): one JSON line per record sent, in order; ``null`` drops a
    record, an object replaces it and must keep its identity fields. Anything else raises RedactionFailed."""
    lines = output.splitlines()
    if len(lines) != len(records):
        raise RedactionFailed(f"the redaction wrote {len(lines)} lines for {len(records)} records; it must write "
                              "exactly one JSON line (a record or null) per line it reads")
    kept = []
    for number, (record, line) in enumerate(zip(records, lines), start=1):
        try:
            answer = json.loads(line)
        except ValueError:
            raise RedactionFailed(f"the redaction's line {number} is not JSON") from None
        if answer is None:
            continue
        if not isinstance(answer, dict):
            raise RedactionFailed(f"the redaction's line {number} is a JSON {type(answer).__name__}; write the record "
                                  "(an object) or null")
        changed = [field for field in IDENTITY_FIELDS if answer.get(field) != record.get(field)]
        if changed:
            raise RedactionFailed(f"the redaction's line {number} changed {', '.join(changed)}; rewrite the record's "
                                  "content, keep which request it is")
        kept.append(answer)
    return kept


def clear_stale(directory: Path) -> None:
    """Remove what an earlier batch left (a sidecar restarted while waiting, an answer that came too late): one
    sidecar sends one batch at a time, so whatever is there is stale."""
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False) and entry.name.endswith((".writing", ".in", ".out", ".failed")):
            Path(entry.path).unlink(missing_ok=True)


def redact(redaction: Redaction, records: list[dict[str, Any]], *, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> list[dict[str, Any]]:
    """Send one batch through the redaction container and return what it keeps; RedactionFailed when it gives no
    usable answer within the timeout."""
    if not records:
        return []
    directory = redaction.directory
    clear_stale(directory)
    batch = uuid.uuid4().hex
    writing = directory / f"{batch}.writing"
    writing.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8")
    os.replace(writing, directory / f"{batch}.in")
    out, failed = directory / f"{batch}.out", directory / f"{batch}.failed"
    deadline = clock() + redaction.timeout_s
    while True:
        if out.exists():
            try:
                return redacted(records, out.read_text(encoding="utf-8", errors="strict"))
            except UnicodeDecodeError:
                raise RedactionFailed("the redaction's output is not UTF-8") from None
            finally:
                out.unlink(missing_ok=True)
        if failed.exists():
            status = failed.read_text().strip()
            failed.unlink(missing_ok=True)
            raise RedactionFailed(f"the redaction command exited with status {status}; see the redaction "
                                  "container's log")
        if clock() >= deadline:
            (directory / f"{batch}.in").unlink(missing_ok=True)
            raise RedactionFailed(f"no answer from the redaction container within {redaction.timeout_s:g}s (is it "
                                  "running? its log says why not)")
        sleep(CHECK_EVERY_S)
