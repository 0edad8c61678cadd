"""Free ports and whose listener is on them: a test must never talk to another test's server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.processes import free_port, wait_until_listening
from drafter_testbed.processes import listens_on

SERVE = "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(60)"


def test_free_port_never_hands_out_a_port_twice():
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_listener_is_told_apart_from_another_processs():
    port = free_port()
    assert listens_on(1, port) is None
    with socket.socket() as held:  # this test process listens; the child below does not
        held.bind(("127.0.0.1", port))
        held.listen()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert listens_on(child.pid, port) is False
            assert listens_on(os.getpid(), port) is True
        finally:
            child.kill()
            child.wait()


def test_waiting_accepts_the_process_own_listener_and_refuses_anothers():
    port = free_port()
    child = subprocess.Popen([sys.executable, "-c", SERVE, str(port)], stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(child, port)
        assert listens_on(child.pid, port) is True
        # a second server on the same port cannot bind: waiting on it fails, it does not reach the first
        second = subprocess.Popen([sys.executable, "-c", SERVE, str(port)], stderr=subprocess.PIPE, text=True)
        with pytest.raises(AssertionError, match="exited|another process listens"):
            wait_until_listening(second, port, timeout=30)
        second.wait()
    finally:
        child.kill()
        child.wait()
