"""A thin JSON client over the kubernetes library's authenticated REST client.

The operator works with manifests as plain dicts (the builders return them, the apiserver sends them);
the typed client would convert each to snake_case models and back, and picks JSON Patch for dict
bodies. This wrapper keeps camelCase dicts end to end, chooses the patch type explicitly, and counts
requests so the benchmarks can report API requests per reconcile.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from urllib.parse import quote, urlencode

from kubernetes import client, config

from drafter_operator import __version__

# Names the operator's own requests in the apiserver's audit log and metrics (apiserver_request_total has no
# user label, but audit events carry userAgent); without it they showed as python-urllib3, like any script's.
USER_AGENT = f"drafter-operator/{__version__}"

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


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or the given path)."""
    if kubeconfig is None:
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            pass
    return config.new_client_from_config(config_file=kubeconfig)


def object_path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
                subresource: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = base + (f"/namespaces/{quote(namespace)}" if namespace else "") + f"/{plural}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


class Kube:
    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _send(self, method: str, path: str, body=None, content_type: str = "application/json",
              query: dict | None = None, accept: str = "application/json", timeout: float | None = None) -> bytes:
        url = self.api_client.configuration.host + path + (("?" + urlencode(query)) if query else "")
        with self._lock:
            self.requests[method] += 1
        headers = {"Content-Type": content_type, "Accept": accept, "User-Agent": USER_AGENT}
        # The REST client below the ApiClient only carries TLS client certificates; a bearer token (in-cluster
        # ServiceAccount token, kubeconfig token or tokenFile, exec and OIDC plugins) is a header the ApiClient
        # adds, refreshing a rotated in-cluster token on the way. Without it, token identities are anonymous.
        self.api_client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        resp = self.api_client.rest_client.request(method, url, body=body, headers=headers, _request_timeout=timeout)
        data = resp.read()
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, resp.reason or "", (data or b"").decode(errors="replace"))
        return data or b""

    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                query: dict | None = None, timeout: float | None = None) -> dict | None:
        """`timeout`: seconds for the whole request (None: no limit), for callers with a deadline."""
        data = self._send(method, path, body, content_type, query, timeout=timeout)
        return json.loads(data) if data else None

    def read_text(self, path: str, query: dict | None = None) -> str:
        """A GET whose answer is text, not JSON (a pod's log)."""
        return self._send("GET", path, query=query, accept="*/*").decode(errors="replace")  # the apiserver refuses text/plain

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

    def delete(self, path: str, propagation: str = "Background") -> bool:
        try:
            self.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                          "propagationPolicy": propagation})
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
