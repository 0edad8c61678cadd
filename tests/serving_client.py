"""Clients of a DrafterServing's engines from the test side: completions through the Service (the local
process runner plays kube-proxy on its loopback ClusterIP) and the emulator's run-time acceptance knob."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request


def stream_completion(ip: str, port: int, model: str, max_tokens: int, timeout: float = 30) -> list[dict]:
    body = json.dumps({"model": model, "prompt": "Explain speculative decoding.", "max_tokens": max_tokens,
                       "stream": True, "temperature": 0}).encode()
    request = urllib.request.Request(f"http://{ip}:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    chunks = []
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return chunks
            chunks.append(json.loads(line[len("data: "):]))
    raise AssertionError("stream ended without data: [DONE]")


class ClientLoop(threading.Thread):
    """Sends completions through the Service back to back and counts failures (bounded in time)."""

    def __init__(self, ip: str, port: int, model: str, limit_seconds: float = 240, max_tokens: int = 8):
        super().__init__(daemon=True)
        self.ip, self.port, self.model, self.limit, self.max_tokens = ip, port, model, limit_seconds, max_tokens
        self.stop_event = threading.Event()
        self.ok, self.failures = 0, []

    def run(self) -> None:
        deadline = time.monotonic() + self.limit
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            try:
                chunks = stream_completion(self.ip, self.port, self.model, max_tokens=self.max_tokens, timeout=20)
                assert sum(len(c["choices"][0]["text"]) > 0 for c in chunks) >= 1
                self.ok += 1
            except (OSError, AssertionError, urllib.error.URLError, ValueError) as exc:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {exc!r}")

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def set_acceptance(pod: dict, per_token: float) -> None:
    body = json.dumps({"acceptance": per_token}).encode()
    request = urllib.request.Request(f"http://{pod['status']['podIP']}:8000/emulator/acceptance", data=body,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
