"""A thin JSON client over the kubernetes library's authenticated REST client.

The operator works with manifests as plain dicts (the builders return them, the apiserver sends them);
the typed client would convert each to snake_case models and back, and picks JSON Patch for dict
bodies. This wrapper keeps camelCase dicts end to end, chooses the patch type explicitly, and counts
requests so the benchmarks can report API requests per reconcile.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from kubernetes import client, config

from drafter_operator import __version__

# Names the operator's own requests in the apiserver's audit log and metrics (apiserver_request_total has no
# user label, but audit events carry userAgent); without it they showed as python-urllib3, like any script's.
USER_AGENT = f"drafter-operator/{__version__}"

# Every request the operator sends to the apiserver, from this client and from kopf's (its watches, patches and
# Events: kopf_connection, kopf_timeouts), is bounded and its connection probed, so a half-open connection (the
# apiserver or a load balancer gone without a FIN or RST) fails a request instead of stalling a reconcile or a
# watch for as long as the kernel keeps the socket (hours with the kernel's default of no keepalive).
CONNECT_TIMEOUT_SECONDS = 10.0
# The apiserver answers a non-watch request within its own --request-timeout (1 minute by default) or fails it;
# no answer by then means nobody is answering. For this client it bounds each wait for bytes (urllib3's read
# timeout), for kopf's the whole request.
REQUEST_TIMEOUT_SECONDS = 60.0
# An idle connection (pooled, or a quiet watch) is probed after 30 s of silence, every 10 s, and dropped after 3
# unanswered probes: about a minute, as the request bound. client-go probes after 30 s too.
KEEPALIVE_IDLE_SECONDS = 30
KEEPALIVE_INTERVAL_SECONDS = 10
KEEPALIVE_PROBES = 3

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str):
        self.status, self.reason, self.body = status, reason, body
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        super().__init__(f"{status} {reason}: {message}")


def keepalive_options() -> list[tuple[int, int, int]]:
    """(level, option, value) for setsockopt: TCP keepalive with the probes above, and no Nagle delay (urllib3's
    default option, which a socket_options list replaces rather than extends)."""
    options = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1), (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_SECONDS), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_SECONDS),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        if hasattr(socket, name):  # Linux has all three; macOS lacks TCP_KEEPIDLE (a developer's laptop)
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def keepalive_socket(addr_info) -> socket.socket:
    """aiohttp's socket factory (TCPConnector(socket_factory=...)): a socket with keepalive_options set."""
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    for level, option, value in keepalive_options():
        sock.setsockopt(level, option, value)
    return sock


def api_client_for(configuration: client.Configuration) -> client.ApiClient:
    """The ApiClient of a loaded configuration, its connections with TCP keepalive (Kube bounds each request)."""
    configuration.socket_options = keepalive_options()  # read when the ApiClient builds its connection pool
    return client.ApiClient(configuration)


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or the given path)."""
    # A fresh Configuration (not the process-wide default, which the loaders would otherwise change).
    configuration = type.__call__(client.Configuration)
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
            return api_client_for(configuration)
        except config.ConfigException:
            pass
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return api_client_for(configuration)


def kopf_connection(info):
    """kopf's connection (a `kopf.AiohttpSession` for an `on.login` handler to return) for the credentials
    `info` (a `kopf.ConnectionInfo`): kopf's own session, plus TCP keepalive, which kopf's has no setting for.
    Called on the event loop (an aiohttp session belongs to the loop it is made on)."""
    import aiohttp
    import kopf

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context(), socket_factory=keepalive_socket),
        headers=info.as_http_headers(), proxy=info.proxy_url, trust_env=info.trust_env)
    return kopf.AiohttpSession(server=info.server, default_namespace=info.default_namespace, priority=info.priority,
                               expiration=info.expiration, aiohttp_session=session)


def kopf_timeouts(settings) -> None:
    """Bound kopf's requests (`kopf.OperatorSettings`): its default request timeout is 5 minutes and its
    connections have none. A watch stays open for minutes by design: it is bounded by kopf's own inactivity
    timeout (70 s with no event or bookmark; the apiserver sends a bookmark every minute) and the watch
    timeouts configure sets; here only its connection is."""
    settings.networking.request_timeout = REQUEST_TIMEOUT_SECONDS
    settings.networking.connect_timeout = CONNECT_TIMEOUT_SECONDS
    settings.watching.connect_timeout = CONNECT_TIMEOUT_SECONDS


def object_path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
                subresource: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = base + (f"/namespaces/{quote(namespace)}" if namespace else "") + f"/{plural}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


@dataclass(frozen=True)
class MediaTypes:
    """A request's Content-Type (what its body is) and Accept (what answer it takes)."""

    content_type: str = "application/json"
    accept: str = "application/json"


class Kube:
    def __init__(self, api_client: client.ApiClient,
                 timeout: tuple[float, float] = (CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)):
        """`timeout`: (connect, read) seconds for a request whose caller gives none."""
        self.api_client = api_client
        self.timeout = timeout
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _send(self, method: str, path: str, body=None, query: dict | None = None, media: MediaTypes = MediaTypes(),
              timeout: float | None = None) -> bytes:
        url = self.api_client.configuration.host + path + (("?" + urlencode(query)) if query else "")
        with self._lock:
            self.requests[method] += 1
        headers = {"Content-Type": media.content_type, "Accept": media.accept, "User-Agent": USER_AGENT}
        # The REST client below the ApiClient only carries TLS client certificates; a bearer token (in-cluster
        # ServiceAccount token, kubeconfig token or tokenFile, exec and OIDC plugins) is a header the ApiClient
        # adds, refreshing a rotated in-cluster token on the way. Without it, token identities are anonymous.
        self.api_client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        resp = self.api_client.rest_client.request(method, url, body=body, headers=headers,
                                                   _request_timeout=self.timeout if timeout is None else timeout)
        data = resp.read()
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, resp.reason or "", (data or b"").decode(errors="replace"))
        return data or b""

    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                query: dict | None = None, timeout: float | None = None) -> dict | None:
        """`timeout`: seconds for connecting and for each wait for the answer, for callers with a deadline
        (None: the client's own, see Kube)."""
        data = self._send(method, path, body, query, MediaTypes(content_type=content_type), timeout=timeout)
        return json.loads(data) if data else None

    def read_text(self, path: str, query: dict | None = None) -> str:
        """A GET whose answer is text, not JSON (a pod's log)."""
        # The apiserver refuses text/plain.
        return self._send("GET", path, query=query, media=MediaTypes(accept="*/*")).decode(errors="replace")

    # convenience verbs
    def get(self, path: str) -> dict | None:
        """The object, or None when it does not exist."""
        try:
            return self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, label_selector: str | None = None, field_selector: str | None = None) -> list[dict]:
        query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        return (self.request("GET", path, query=query) or {}).get("items", [])

    def create(self, path: str, body: dict) -> dict | None:
        """Create; an existing object (409) is not an error: handlers are retried and must be idempotent."""
        try:
            return self.request("POST", path, body)
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    def patch(self, path: str, body: dict, content_type: str = MERGE_PATCH) -> dict | None:
        return self.request("PATCH", path, body, content_type)

    def delete(self, path: str, propagation: str = "Background", resource_version: str | None = None) -> bool:
        """Delete ``path`` (False: already gone). With ``resource_version``, only the object as read at that version:
        one changed since is kept and the apiserver answers 409 Conflict (DeleteOptions.preconditions)."""
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if resource_version is not None:
            options["preconditions"] = {"resourceVersion": resource_version}
        try:
            self.request("DELETE", path, options)
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
