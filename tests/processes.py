"""Helpers for tests that start a server process on loopback: a free port, and waiting for it to listen."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator

from drafter_testbed.processes import free_port, listens_on  # free_port: the tests import it from here


# How long a started server may take to listen. Generous on purpose: CI runs the end-to-end lane (apiserver,
# etcd, kubelets) beside these tests on 2 cores, and an emulator's interpreter start and imports took over 30 s
# there once. A server that fails exits, and that is reported at once; this bound only catches a hang.
STARTUP_TIMEOUT_S = 180.0


def wait_until_listening(proc: subprocess.Popen, port: int, timeout: float = STARTUP_TIMEOUT_S) -> None:
    """Return once ``proc`` (or its child) listens on 127.0.0.1:port and accepts connections; fail with the
    process's stderr if it exits first. A listener of another process does not count: a connection to it
    would let the test talk to the wrong server."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"the process exited ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}"
        owned = listens_on(proc.pid, port)
        if owned:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                pass
        elsewhere = " (another process listens there)" if owned is False else ""
        assert time.monotonic() < deadline, f"the process did not listen on 127.0.0.1:{port} within {timeout:.0f}s{elsewhere}"
        time.sleep(0.1)


@contextlib.contextmanager
def listening_process(argv: list[str], env: dict[str, str], port: int,
                      timeout: float = STARTUP_TIMEOUT_S) -> Iterator[subprocess.Popen]:
    """Start ``argv``, yield it once it listens on 127.0.0.1:port, and always stop it afterwards."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(proc, port, timeout=timeout)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@contextlib.contextmanager
def loopback_http(handler, backlog: int = 5) -> Iterator[str]:
    """Serve ``handler`` (a BaseHTTPRequestHandler class) on 127.0.0.1 in a thread; yields its base URL.
    ``backlog``: connections the kernel queues before the server accepts them (raise it for many at once)."""
    import threading
    from http.server import ThreadingHTTPServer

    server_class = type("LoopbackServer", (ThreadingHTTPServer,), {"request_queue_size": backlog})
    server = server_class(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
