"""What the capture sidecar reads of the spool at each poll, from a listing of it and the byte offsets already
consumed: pure, so that "no line is read twice, no line is read torn" is decided here and tested without files.

Offsets are kept by inode, not by name: a rotated or renamed file keeps its inode, so a file the sidecar was
tailing under its live name is read on from where the tail stopped once the engine has renamed it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drafter_operator.capture.spool import ReopenedLog, RotatedLogs, SpoolKind

#: What a taken (renamed-away) log is called until it is read and deleted: ``<name>.taken``.
TAKEN_SUFFIX = ".taken"


@dataclass(frozen=True)
class SpoolFile:
    name: str
    inode: int
    size: int


@dataclass(frozen=True)
class Read:
    """Read ``name`` from byte ``start``. A final file is read to its end (its writer is done with it) and then
    deleted; a live one only up to its last complete line, the offset kept for the next poll."""

    name: str
    inode: int
    start: int
    final: bool


@dataclass(frozen=True)
class Plan:
    reads: tuple[Read, ...]
    #: (from, to) renames done after the reads: a ReopenedLog's live file taken for the next poll.
    takes: tuple[tuple[str, str], ...] = ()


def _start(offsets: Mapping[int, int], f: SpoolFile) -> int:
    offset = offsets.get(f.inode, 0)
    return offset if offset <= f.size else 0  # a smaller file under a known inode is a new file (inode reused)


def plan(kind: SpoolKind, files: list[SpoolFile], offsets: Mapping[int, int], *, draining: bool = False) -> Plan:
    """The reads (and takes) of one poll. ``draining``: the last poll before the sidecar exits, at the pod's end
    (the engine has stopped writing): every file is read to its end and deleted."""
    by_name = {f.name: f for f in files}
    if isinstance(kind, ReopenedLog):
        taken, live = by_name.get(kind.name + TAKEN_SUFFIX), by_name.get(kind.name)
        reads = [Read(f.name, f.inode, _start(offsets, f), final=True) for f in (taken,) if f is not None]
        if live is not None and draining:
            reads.append(Read(live.name, live.inode, _start(offsets, live), final=True))
        takes = (((live.name, live.name + TAKEN_SUFFIX),) if live is not None and live.size > 0 and not draining
                 else ())
        return Plan(tuple(reads), takes)
    if isinstance(kind, RotatedLogs):
        rotated = sorted((f for f in files if kind.suffix + "." in f.name), key=lambda f: f.name)
        live = sorted((f for f in files if f.name.endswith(kind.suffix)), key=lambda f: f.name)
        # Rotated first: a live file's older lines are in its rotated predecessor.
        return Plan(tuple([Read(f.name, f.inode, _start(offsets, f), final=True) for f in rotated]
                          + [Read(f.name, f.inode, _start(offsets, f), final=draining) for f in live]))
    raise TypeError(f"not a spool kind: {kind!r}")


def complete_lines(data: bytes, *, final: bool) -> tuple[list[str], int]:
    """The lines in ``data`` read from a file, and how many bytes of it they took. A live file's last line may be
    half written: it stays for the next poll unless the file is final (whose unterminated tail is a whole line)."""
    end = len(data) if final else data.rfind(b"\n") + 1
    lines = [line.decode("utf-8", errors="replace") for line in data[:end].split(b"\n")]
    return [line for line in lines if line], end


def offsets_kept(offsets: Mapping[int, int], files: list[SpoolFile]) -> dict[int, int]:
    """The offsets of files still in the spool (a deleted file's inode may be given to a new file)."""
    present = {f.inode for f in files}
    return {inode: offset for inode, offset in offsets.items() if inode in present}
