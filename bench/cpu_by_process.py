"""Where a machine's CPU goes, by kind of process: samples /proc every --interval seconds and adds up each
process's user and system time under a category read from its command line (kube-apiserver, an emulated
engine, an operator, a pytest worker, a training framework's stage ...). Run it beside what you measure, e.g.
the whole suite:

    python bench/cpu_by_process.py --out /tmp/cpu.json &   # then ./dev test; kill it when the suite ends
    python bench/cpu_by_process.py --seconds 600 --out /tmp/cpu.json

It rewrites --out after every sample (CPU seconds per category, processes seen per category, one command line of
each, and the whole machine's busy seconds), so killing it loses nothing. Processes already running when it
starts count from then on. A process that starts and ends between two samples is not seen at all (a kubectl
call, say): the machine's busy seconds beside the sum say how much that leaves out.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")

#: Command-line fragments of Python processes, first match wins: the operator's and the testbed's own processes.
PYTHON_KINDS = (
    ("exec(eval(sys.stdin.readline()))", "pytest-xdist worker"),
    ("drafter_operator.cli run", "operator"),
    ("drafter_operator.cli emulate", "engine emulator"),
    ("drafter_testbed.process_runner", "process runner (the nodes' pods)"),
    ("tests.simulation.mutant_run", "mutant scenarios"),
    ("-m pytest", "pytest"),
)


def category(argv: list[str]) -> str:
    """A process's category from its command line: the executable's name, or for Python what it runs."""
    if not argv:
        return "kernel threads"
    executable = os.path.basename(argv[0])
    if "python" not in executable:
        return executable[:40]
    line = " ".join(argv)
    for fragment, kind in PYTHON_KINDS:
        if fragment in line:
            return f"python: {kind}"
    rest = [a for a in argv[1:] if a not in ("-u", "-B")]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return f"python -m {rest[1][:60]}"
    if rest[:1] == ["-c"]:
        return "python -c " + " ".join(rest[1:2])[:40].replace("\n", " ")
    return "python " + " ".join(os.path.basename(a) for a in rest[:2])[:60]


def command_line(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)  # less idle and iowait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the JSON file rewritten after every sample")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: run until killed)")
    args = parser.parse_args()

    seen: dict[int, tuple[str, int]] = {}  # pid -> (category, ticks at the last sample)
    spent: collections.Counter[str] = collections.Counter()
    started: collections.Counter[str] = collections.Counter()
    example: dict[str, str] = {}
    busy0, total0 = machine_ticks()
    began, first = time.monotonic(), True
    while True:
        now: dict[int, tuple[str, int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            ticks = cpu_ticks(pid)
            if ticks is None:
                continue
            if pid in seen:
                kind, before = seen[pid]
                spent[kind] += ticks - before
            else:
                argv = command_line(pid)
                if argv is None:
                    continue
                kind = category(argv)
                example.setdefault(kind, " ".join(argv)[:300])
                if not first:  # new since the last sample: its whole life so far
                    spent[kind] += ticks
                    started[kind] += 1
            now[pid] = (kind, ticks)
        seen, first = now, False
        busy, total = machine_ticks()
        elapsed = time.monotonic() - began
        report = {"seconds": round(elapsed, 1), "machine_busy_cpu_seconds": round((busy - busy0) / TICKS, 1),
                  "machine_cpu_seconds": round((total - total0) / TICKS, 1),
                  "cpu_seconds": {k: round(v / TICKS, 1) for k, v in spent.most_common()},
                  "processes_started": dict(started.most_common()), "example_command_lines": example}
        partial = args.out.with_suffix(".partial")
        partial.write_text(json.dumps(report, indent=1))
        partial.replace(args.out)
        if args.seconds and elapsed >= args.seconds:
            return
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
