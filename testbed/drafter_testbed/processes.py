"""Start, find and stop the local cluster's long-running processes by pid file.

A pid file records the pid and the process's start time from /proc, so a recycled pid is never
mistaken for ours (and never killed).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (state) on, or None when the process is gone. The command name (field 2)
    may hold spaces and parentheses, so the fields are counted after its last ")"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields else None  # field 22, starttime


def start(name: str, argv: list[str], run_dir: Path, log_dir: Path, env: dict[str, str] | None = None) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"{name}.log", "ab")
    # A new session: the component outlives the `cluster up` command and is not hit by its Ctrl-C.
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True, close_fds=True)
    log.close()
    (run_dir / f"{name}.pid").write_text(f"{proc.pid} {_start_time(proc.pid)}\n")
    return proc.pid


def running_pid(name: str, run_dir: Path) -> int | None:
    """The pid of our `name` process if it is still the same process we started, else None."""
    try:
        pid_text, started = (run_dir / f"{name}.pid").read_text().split()
    except (OSError, ValueError):
        return None
    pid = int(pid_text)
    state = _proc_state(pid)
    if state is None or state == "Z" or _start_time(pid) != started:
        return None
    return pid


def _proc_state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def stop(name: str, run_dir: Path, timeout: float = 10.0) -> bool:
    """SIGTERM the process group, SIGKILL after `timeout`; True if something was stopped."""
    pid = running_pid(name, run_dir)
    (run_dir / f"{name}.pid").unlink(missing_ok=True)
    if pid is None:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _proc_state(pid)
        if state is None or state == "Z":
            return True
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, and not one this process handed out before.

    The kernel may give a closed probe's port again at the next probe: two servers started one after the
    other would then be told the same port, and the second's readiness check would reach the first.
    """
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def listener_inodes(port: int) -> set[int]:
    """The socket inodes listening on TCP ``port`` (any local address, IPv4 or IPv6), from /proc/net."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXADDR:HEXPORT; state 0A is LISTEN; field 9 is the inode
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def process_tree(pid: int) -> set[int]:
    """``pid`` and every process descended from it (a server may listen from a child)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(int(entry.name))
        if fields:
            parents[int(entry.name)] = int(fields[1])  # field 4, ppid
    tree, grew = {pid}, True
    while grew:
        found = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return tree


def socket_inodes(pids: set[int]) -> set[int]:
    """The socket inodes the processes ``pids`` hold open."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:["):-1]))
    return inodes


def listens_on(pid: int, port: int) -> bool | None:
    """Whether ``pid`` (or a descendant) listens on ``port``: None when nothing listens there,
    False when another process does."""
    listening = listener_inodes(port)
    if not listening:
        return None
    return bool(listening & socket_inodes(process_tree(pid)))


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def rss_kib(pid: int) -> int:
    """Resident memory of one process in KiB (0 if gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
