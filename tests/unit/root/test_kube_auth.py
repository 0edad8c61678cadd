"""The operator's API client authenticates with bearer tokens, not only with client certificates.

Against a loopback HTTP server that records each request's Authorization header: a kubeconfig whose
user is a token file (the chart's ServiceAccount token, as in a pod) must send that token.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from drafter_operator.kube import USER_AGENT, Kube, load_api_client


@pytest.fixture
def recording_server():
    seen: list[str | None] = []
    agents: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(self.headers.get("Authorization"))
            agents.append(self.headers.get("User-Agent"))
            body = json.dumps({"kind": "Namespace", "metadata": {"name": "x"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen, agents
    server.shutdown()


def kubeconfig(tmp_path, server: str, user: dict) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


def test_a_token_file_beside_the_kubeconfig_is_sent_as_a_bearer_token(tmp_path, recording_server):
    server, seen, _ = recording_server
    (tmp_path / "token").write_text("projected-sa-token")
    kube = Kube(load_api_client(kubeconfig(tmp_path, server, {"tokenFile": "token"})))
    assert kube.get("/api/v1/namespaces/x")["metadata"]["name"] == "x"
    assert seen == ["Bearer projected-sa-token"]


def test_an_inline_token_is_sent_on_every_request(tmp_path, recording_server):
    server, seen, _ = recording_server
    kube = Kube(load_api_client(kubeconfig(tmp_path, server, {"token": "abc"})))
    kube.get("/api/v1/namespaces/x")
    kube.read_text("/api/v1/namespaces/x")
    assert seen == ["Bearer abc", "Bearer abc"]


def test_no_credentials_send_no_authorization_header(tmp_path, recording_server):
    server, seen, _ = recording_server
    Kube(load_api_client(kubeconfig(tmp_path, server, {}))).get("/api/v1/namespaces/x")
    assert seen == [None]


def test_requests_name_the_operator_in_their_user_agent(tmp_path, recording_server):
    # An audit log tells the operator's requests from kubectl's and scripts' by userAgent (bench/fleet_scale.py
    # counts them so); urllib3's default agent would make them anonymous.
    server, _, agents = recording_server
    (tmp_path / "token").write_text("t")
    Kube(load_api_client(kubeconfig(tmp_path, server, {"tokenFile": "token"}))).get("/api/v1/namespaces/x")
    assert agents == [USER_AGENT] and USER_AGENT.startswith("drafter-operator/")
