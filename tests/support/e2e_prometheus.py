"""End-to-end: the prometheus acceptance source's set-up (the engine's port, the target, the scrape interval)."""
from __future__ import annotations

import json
import urllib.request

ENGINE_PORT = 8000  # vLLM's
TARGET_MODEL = "/models/Kimi-K2.5"
GOOD_DRAFTER = "/models/drafters/emulator-good-drafter"  # ~71% acceptance at k = 5
SEED_PER_TOKEN = 0.432  # the seed drafter's per-token acceptance: 15% at k = 5
SCRAPE_INTERVAL = 1
WINDOW, FOR = 30, 10
ACCEPTANCE = {"minAcceptanceRate": "0.4", "window": f"{WINDOW}s", "for": f"{FOR}s", "minDraftTokens": 200,
              "source": "prometheus"}


def engine_pods(cluster, namespace: str, revision: str) -> list[dict]:
    items = cluster.get_json("-n", namespace, "pods", "-l", f"drafter.dev/serving=kimi,drafter.dev/revision={revision}")
    return [p for p in items["items"]
            if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]


def set_acceptance(pod: dict, per_token: float) -> None:
    body = json.dumps({"acceptance": per_token}).encode()
    request = urllib.request.Request(f"http://{pod['status']['podIP']}:{ENGINE_PORT}/emulator/acceptance", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
