"""A half-open apiserver connection fails the operator's requests instead of stalling them.

Against a loopback server that accepts each connection and never answers (what a client sees of a peer gone
without a FIN or RST): a request of the operator's own client (Kube) and of kopf's (its session from the
operator's login handler, its timeouts from kube.kopf_timeouts) raises a timeout, and each connection's socket
has TCP keepalive on, so an idle connection to a vanished peer is dropped too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading

import kopf
import pytest
import urllib3
import yaml
from kopf._cogs.clients import api, auth
from kubernetes.config import kube_config

from drafter_operator import kube as kube_module
from drafter_operator.controllers import handlers
from drafter_operator.kube import Kube, load_api_client


def _client_socket_options(peer: tuple[str, int]) -> dict[str, int] | None:
    """The keepalive options of this process's socket whose local address is `peer` (the client end of an
    accepted connection), read through a duplicate of its file descriptor."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        try:
            if sock.family == socket.AF_INET and sock.getsockname() == peer:
                return {"SO_KEEPALIVE": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                        "TCP_KEEPIDLE": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                        "TCP_KEEPINTVL": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                        "TCP_KEEPCNT": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)}
        except OSError:
            pass
        finally:
            sock.close()  # the duplicate only
    return None


@pytest.fixture
def silent_server():
    """(url, options): a server that accepts and never answers; `options` gets each client socket's options."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    options: list[dict | None] = []

    def accept() -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except OSError:
                return  # closed at teardown
            held.append(conn)  # never read, never answered, never closed until teardown
            options.append(_client_socket_options(peer))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", options
    listener.close()
    for conn in held:
        conn.close()


def _kubeconfig(tmp_path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


EXPECTED_KEEPALIVE = {"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": kube_module.KEEPALIVE_IDLE_SECONDS,
                      "TCP_KEEPINTVL": kube_module.KEEPALIVE_INTERVAL_SECONDS,
                      "TCP_KEEPCNT": kube_module.KEEPALIVE_PROBES}


def _is_read_timeout(exc: BaseException) -> bool:
    # urllib3 retries an idempotent request's read error on a new connection, then wraps the last one.
    return isinstance(exc, urllib3.exceptions.ReadTimeoutError) or isinstance(
        getattr(exc, "reason", None), urllib3.exceptions.ReadTimeoutError)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("method", ["GET", "PATCH"])
def test_the_operators_client_times_out_on_a_silent_apiserver(tmp_path, silent_server, method):
    server, options = silent_server
    kube = Kube(load_api_client(_kubeconfig(tmp_path, server)), timeout=(2.0, 0.3))
    with pytest.raises(Exception) as raised:
        kube.request(method, "/api/v1/namespaces/x", body={} if method == "PATCH" else None,
                     content_type=kube_module.MERGE_PATCH)
    assert _is_read_timeout(raised.value), repr(raised.value)
    assert options and all(o == EXPECTED_KEEPALIVE for o in options), options


def test_the_operators_client_bounds_every_request_by_default(tmp_path):
    kube = Kube(load_api_client(_kubeconfig(tmp_path, "http://127.0.0.1:1")))
    assert kube.timeout == (kube_module.CONNECT_TIMEOUT_SECONDS, kube_module.REQUEST_TIMEOUT_SECONDS)


@pytest.mark.timeout(30)
def test_kopfs_requests_time_out_on_a_silent_apiserver(tmp_path, silent_server, monkeypatch):
    server, options = silent_server
    # kopf's login reads the default kubeconfig, whose path the kubernetes library took from KUBECONFIG at import.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", _kubeconfig(tmp_path, server))
    monkeypatch.setattr(kube_module, "REQUEST_TIMEOUT_SECONDS", 0.3)
    settings = kopf.OperatorSettings()
    kube_module.kopf_timeouts(settings)
    logger = logging.getLogger("test")

    async def request() -> None:
        connection = await handlers.login(logger=logger, settings=settings)
        context = auth.APIContext(connection)
        try:
            # backoffs=[]: one attempt (kopf retries a timeout with its error backoffs, each attempt bounded).
            await api.request("get", "/api/v1/pods", settings=settings, backoffs=[], context=context, logger=logger)
        finally:
            await context.close()

    with pytest.raises(TimeoutError):
        asyncio.run(request())
    assert options == [EXPECTED_KEEPALIVE]


def test_kopfs_watches_and_requests_are_bounded():
    settings = kopf.OperatorSettings()
    kube_module.kopf_timeouts(settings)
    assert settings.networking.request_timeout == kube_module.REQUEST_TIMEOUT_SECONDS
    connect = kube_module.CONNECT_TIMEOUT_SECONDS
    assert settings.networking.connect_timeout == settings.watching.connect_timeout == connect
