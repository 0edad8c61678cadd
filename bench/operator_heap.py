"""Where the operator's memory goes: `drafter-operator run` under tracemalloc, with heap snapshots on demand.

Two commands:

    python bench/operator_heap.py run DIR [--figures-only] [drafter-operator run options]
        The operator, with tracemalloc tracing (25 frames). Each SIGUSR1 writes DIR/heap-<n>.snap (a
        tracemalloc snapshot) and appends a line to DIR/heap.jsonl: the Python heap traced, VmRSS and
        the malloc arenas' own figures (glibc's mallinfo2: in use, free inside the arenas, mmapped), so
        the heap can be set against the RSS. Each SIGUSR2 calls glibc's malloc_trim(0) (free memory
        handed back to the kernel) and appends the figures before and after it. --figures-only: no
        tracemalloc, no snapshots, the operator at its normal speed; each line adds instead the collector's
        objects by type (count, shallow size), and pymalloc's statistics go to the operator's log. bench/fleet_scale.py
        --heap-snapshots DIR runs the operator this way and signals it after the cold start and after
        the steady window (--heap-trim: and trims after the steady window).

    python bench/operator_heap.py report DIR/heap-1.snap [--top 25] [--group-by traceback|lineno|filename]
        The largest allocation sites of one snapshot, each with the frames that lead to it (our code and
        kopf's first), so a figure can be traced to the structure that holds it.

tracemalloc slows the operator down (roughly twice the CPU) and adds its own bookkeeping (not counted in
the traced heap, counted in RSS): use it to find where memory lives, never for the RSS figure itself.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import linecache
import os
import signal
import sys
import time
import tracemalloc
from pathlib import Path

FRAMES = 25


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_figures() -> dict[str, float]:
    """glibc's own view of the C heap, MiB: what is in use, what is free but kept, what is mmapped."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    mib = 2 ** 20
    return {"arenaMiB": round(info.arena / mib, 1), "inUseMiB": round(info.uordblks / mib, 1),
            "freeInArenasMiB": round(info.fordblks / mib, 1), "mmappedMiB": round(info.hblkhd / mib, 1)}


def vm_status() -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key + "MiB"] = round(int(value.split()[0]) / 1024, 1)
        elif key == "Threads":
            out["threads"] = int(value)
    return out


def census(top: int = 25) -> list[dict]:
    """The garbage collector's objects by type, the largest total first: count and shallow size (what the objects
    themselves take, not what they refer to; strings, numbers and bytes are not the collector's and are left out).
    Cheap enough for --figures-only, where tracemalloc is off."""
    import gc

    totals: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        kind = type(obj)
        entry = totals.setdefault(f"{kind.__module__}.{kind.__qualname__}", [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(obj)
    largest = sorted(totals.items(), key=lambda item: -item[1][1])[:top]
    return [{"type": name, "count": count, "MiB": round(size / 2**20, 2)} for name, (count, size) in largest]


def run(directory: Path, operator_args: list[str]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    figures_only = operator_args[:1] == ["--figures-only"]
    operator_args = operator_args[1:] if figures_only else operator_args
    if not figures_only:
        tracemalloc.start(FRAMES)
    count = 0

    def write(line: dict) -> None:
        with open(directory / "heap.jsonl", "a") as out:
            out.write(json.dumps(line) + "\n")

    def dump(_signum, _frame) -> None:
        nonlocal count
        count += 1
        started = time.monotonic()
        line: dict = {"at": time.time()}
        if not figures_only:
            path = directory / f"heap-{count}.snap"
            tracemalloc.take_snapshot().dump(str(path))
            traced, peak = tracemalloc.get_traced_memory()
            line.update({"snapshot": path.name, "tracedMiB": round(traced / 2**20, 1),
                         "tracedPeakMiB": round(peak / 2**20, 1),
                         "tracemallocOverheadMiB": round(tracemalloc.get_tracemalloc_memory() / 2**20, 1)})
        else:
            line["objectsByType"] = census()
            sys._debugmallocstats()  # pymalloc's arenas, pools and blocks per size class, into the operator's log
        write({**line, **vm_status(), **malloc_figures(), "dumpSeconds": round(time.monotonic() - started, 2)})

    def trim(_signum, _frame) -> None:
        before = {**vm_status(), **malloc_figures()}
        started = time.monotonic()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        write({"at": time.time(), "trim": True, "before": before, "after": {**vm_status(), **malloc_figures()},
               "trimSeconds": round(time.monotonic() - started, 3)})

    signal.signal(signal.SIGUSR1, dump)
    signal.signal(signal.SIGUSR2, trim)
    from drafter_operator.cli import main

    return main(["run", *operator_args])


def _ours_first(frames) -> list:
    """The frames of a traceback, innermost first, with the operator's and kopf's frames kept and the
    standard library's and other libraries' dropped unless nothing else is left."""
    kept = [f for f in frames if "drafter_operator" in f.filename or "/kopf/" in f.filename]
    return kept or list(frames)


def report(snapshot_path: Path, top: int, group_by: str) -> None:
    snapshot = tracemalloc.Snapshot.load(str(snapshot_path)).filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])
    stats = snapshot.statistics(group_by)
    total = sum(s.size for s in stats)
    print(f"{snapshot_path}: {total / 2**20:.1f} MiB traced in {sum(s.count for s in stats):,} blocks")
    for stat in stats[:top]:
        frames = list(reversed(stat.traceback)) if group_by == "traceback" else list(stat.traceback)
        innermost = stat.traceback[-1] if group_by == "traceback" else stat.traceback[0]
        print(f"\n{stat.size / 2**20:8.2f} MiB {stat.count:>9,} blocks  {innermost.filename}:{innermost.lineno}")
        print(f"    {linecache.getline(innermost.filename, innermost.lineno).strip()}")
        for frame in _ours_first(frames)[:6]:
            print(f"      <- {frame.filename.split('site-packages/')[-1]}:{frame.lineno} "
                  f"{linecache.getline(frame.filename, frame.lineno).strip()[:90]}")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "run":
        return run(Path(sys.argv[2]), sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="the largest allocation sites of a snapshot")
    rep.add_argument("snapshot", type=Path)
    rep.add_argument("--top", type=int, default=25)
    rep.add_argument("--group-by", choices=("traceback", "lineno", "filename"), default="traceback")
    sub.add_parser("run", help="run DIR [drafter-operator run options]: the operator under tracemalloc")
    args = parser.parse_args()
    if args.command == "run":
        parser.error("usage: run DIR [drafter-operator run options]")
    report(args.snapshot, args.top, args.group_by)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
