"""Faults of the emulator's ``/metrics`` endpoint, switched at run time on a running engine.

A sick engine does not always die: its metrics endpoint can stop answering, answer late, dribble its
answer, answer garbage, answer an error, or drop the connection, while generation goes on (the engines
serve ``/metrics`` from the same HTTP server as the API, so a stalled event loop or an exporter bug
shows there first). ``POST /emulator/metrics-fault`` with ``{"mode": ...}`` (``none``, ``hang``,
``slow``, ``trickle``, ``garbage``, ``status``, ``reset``) makes the emulator answer every later
``/metrics`` request that way, until ``{"mode": "none"}``; everything else it serves is unchanged.
What a client sees in each mode: docs/emulator.md, "Metrics faults".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal, get_args

Mode = Literal["none", "hang", "slow", "trickle", "garbage", "status", "reset"]
MODES: tuple[str, ...] = get_args(Mode)
#: Longest delay a fault may ask for: long enough for any client's timeout, short enough that a
#: forgotten fault cannot hold a request for hours.
MAX_SECONDS = 3600.0
#: The default garbage: fixed (seeded) random bytes, not UTF-8 and not Prometheus text.
JUNK = random.Random(13).randbytes(4096)

USAGE = ('expected {"mode": one of ' + ", ".join(MODES) + '} with "seconds" (slow, trickle), "status" (status) '
         'or an optional "body" (garbage)')


@dataclass(frozen=True)
class MetricsFault:
    mode: Mode = "none"
    seconds: float = 0.0
    status: int = 500
    body: bytes = JUNK

    @classmethod
    def from_json(cls, doc: object) -> MetricsFault:
        """The fault a control request asks for; ValueError naming the field and what it takes."""
        if not isinstance(doc, dict) or doc.get("mode") not in MODES:
            raise ValueError(f"mode: {USAGE}")
        mode = doc["mode"]
        allowed = {"mode"} | {"slow": {"seconds"}, "trickle": {"seconds"}, "status": {"status"},
                              "garbage": {"body"}}.get(mode, set())
        unknown = sorted(set(doc) - allowed)
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a field of mode {mode}; {USAGE}")
        fault = cls(mode=mode)
        if mode in ("slow", "trickle"):
            seconds = doc.get("seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                    or not 0 < seconds <= MAX_SECONDS:
                raise ValueError(f"seconds: mode {mode} needs a number of seconds in (0, {MAX_SECONDS:g}]")
            fault = cls(mode=mode, seconds=float(seconds))
        elif mode == "status":
            status = doc.get("status", 500)
            if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
                raise ValueError("status: mode status needs an HTTP error status, an integer from 400 to 599")
            fault = cls(mode=mode, status=status)
        elif mode == "garbage" and "body" in doc:
            if not isinstance(doc["body"], str):
                raise ValueError("body: mode garbage takes the body to serve as a string")
            fault = cls(mode=mode, body=doc["body"].encode("utf-8", "surrogatepass"))
        return fault

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode}
        if self.mode in ("slow", "trickle"):
            out["seconds"] = self.seconds
        elif self.mode == "status":
            out["status"] = self.status
        elif self.mode == "garbage":
            out["bodyBytes"] = len(self.body)
        return out
