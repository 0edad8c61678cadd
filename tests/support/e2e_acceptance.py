"""End-to-end: the drafters the emulator knows, the engine pods of a serving, client traffic, Degraded, Events."""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from tests.support.e2e_serving import condition, serving_status

GOOD_DRAFTER = "/models/drafters/emulator-good-drafter"  # per-token acceptance 0.89: ~71% at k = 5
SEED_DRAFTER = "/models/drafters/kimi-k25-eagle3"  # the seed's: 0.432 per token, 15% at k = 5


def engine_pods(cluster, namespace: str, name: str, revision: str) -> list[dict]:
    items = cluster.get_json("-n", namespace, "pods", "-l",
                             f"drafter.dev/serving={name},drafter.dev/revision={revision}")["items"]
    return [p for p in items if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]


class Traffic(threading.Thread):
    """Completions sent back to back to every Ready pod of the serving (re-listed as revisions change),
    so each replica drafts; bounded in time."""

    def __init__(self, cluster, namespace: str, name: str, limit_seconds: float = 300):
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.name, self.limit = cluster, namespace, name, limit_seconds
        self.stop_event = threading.Event()
        self.sent = 0

    def _targets(self) -> list[str]:
        items = self.cluster.get_json("-n", self.namespace, "pods", "-l", f"drafter.dev/serving={self.name}")["items"]
        return [p["status"]["podIP"] for p in items if p.get("status", {}).get("podIP") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]

    def run(self) -> None:
        deadline = time.monotonic() + self.limit
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            targets = self._targets()
            for _ in range(10):
                for ip in targets:
                    body = json.dumps({"model": "/models/Kimi-K2.5", "prompt": "Explain speculative decoding.",
                                       "max_tokens": 48, "temperature": 0}).encode()
                    request = urllib.request.Request(f"http://{ip}:8000/v1/completions", data=body,
                                                     headers={"Content-Type": "application/json"})
                    try:
                        urllib.request.urlopen(request, timeout=20).read()
                        self.sent += 1
                    except (OSError, urllib.error.URLError):
                        pass  # a pod going away mid-swap; the next listing drops it
            if not targets:
                self.stop_event.wait(0.5)

    def __enter__(self) -> Traffic:
        self.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop_event.set()
        self.join(30)


def degraded(cluster, namespace: str, name: str, status: str, reason: str | None = None, timeout: float = 120) -> dict:
    def seen():
        current = serving_status(cluster, namespace, name)
        cond = condition(current, "Degraded")
        return cond.get("status") == status and (reason is None or cond.get("reason") == reason) and current
    return cluster.wait_for(f"{name} Degraded={status}" + (f"/{reason}" if reason else ""), seen, timeout=timeout)


def events(cluster, namespace: str, name: str) -> list[dict]:
    return cluster.get_json("-n", namespace, "events", "--field-selector",
                            f"involvedObject.name={name},involvedObject.kind=DrafterServing")["items"]
