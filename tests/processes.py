"""Helpers for tests that start a server process on loopback: a free port, and waiting for it to listen."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator

from drafter_testbed.processes import free_port  # noqa: F401 (the tests import it from here)


def wait_until_listening(proc: subprocess.Popen, port: int, timeout: float = 30.0) -> None:
    """Return once 127.0.0.1:port accepts connections; fail with the process's stderr if it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"the process exited ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listened on 127.0.0.1:{port} within {timeout:.0f}s"
            time.sleep(0.1)


@contextlib.contextmanager
def listening_process(argv: list[str], env: dict[str, str], port: int,
                      timeout: float = 30.0) -> Iterator[subprocess.Popen]:
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
def loopback_http(handler) -> Iterator[str]:
    """Serve ``handler`` (a BaseHTTPRequestHandler class) on 127.0.0.1 in a thread; yields its base URL."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
