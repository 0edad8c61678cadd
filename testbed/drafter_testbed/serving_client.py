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


def stream_outcome(ip: str, port: int, model: str, max_tokens: int, timeout: float = 60) -> tuple[str, str]:
    """One streamed completion, judged: ("ok", ""), ("failed", why) when no token arrived (refused, no
    endpoint, an error answer), or ("cut", why) when it broke after tokens had arrived (its pod went away
    mid-stream), or ended early (finish_reason other than "length" for a fixed max_tokens)."""
    body = json.dumps({"model": model, "prompt": "Explain speculative decoding.", "max_tokens": max_tokens,
                       "stream": True, "temperature": 0}).encode()
    request = urllib.request.Request(f"http://{ip}:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    chunks: list[dict] = []
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    finish = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"][0].get("finish_reason")]
                    return ("ok", "") if finish == ["length"] else ("cut", f"finished with {finish}")
                if line.startswith("data: "):
                    chunks.append(json.loads(line[len("data: "):]))
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return ("cut" if chunks else "failed"), f"{time.strftime('%H:%M:%S')} after {len(chunks)} chunks: {exc!r}"
    return ("cut" if chunks else "failed"), f"{time.strftime('%H:%M:%S')} ended without data: [DONE]"


class ClientLoop(threading.Thread):
    """Sends completions through the Service back to back and counts failures (bounded in time); with
    ``streams`` > 1, that many at once. Long completions (``max_tokens`` in the thousands) are what a swap
    must not cut: ``cut`` lists streams that broke after their first token, ``failures`` the others."""

    def __init__(self, ip: str, port: int, model: str, limit_seconds: float = 240, max_tokens: int = 8,
                 streams: int = 1):
        super().__init__(daemon=True)
        self.ip, self.port, self.model, self.limit, self.max_tokens = ip, port, model, limit_seconds, max_tokens
        self.streams = streams
        self.stop_event = threading.Event()
        self.ok, self.failures, self.cut = 0, [], []
        self._lock = threading.Lock()

    def run(self) -> None:
        workers = [threading.Thread(target=self._one_client, daemon=True) for _ in range(self.streams)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    def _one_client(self) -> None:
        deadline = time.monotonic() + self.limit
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            outcome, why = stream_outcome(self.ip, self.port, self.model, self.max_tokens)
            with self._lock:
                if outcome == "ok":
                    self.ok += 1
                else:
                    (self.cut if outcome == "cut" else self.failures).append(why)

    def stop(self, timeout: float = 120) -> None:
        """Stop sending new requests; the streams in flight finish (a long one takes its time)."""
        self.stop_event.set()
        self.join(timeout)


def set_acceptance(pod: dict, per_token: float) -> None:
    body = json.dumps({"acceptance": per_token}).encode()
    request = urllib.request.Request(f"http://{pod['status']['podIP']}:8000/emulator/acceptance", data=body,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
