"""End-to-end: what an emulated engine pod says about itself (/emulator/state)."""
from __future__ import annotations

import json
import urllib.request


def emulator_state(pod: dict) -> dict:
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]  # the engine's own: 8000 vLLM, 30000 SGLang
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/emulator/state", timeout=10) as resp:
        return json.loads(resp.read())
