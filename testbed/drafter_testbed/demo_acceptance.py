"""The demo's acceptance chapter: the seed's drafter goes Degraded under traffic and the operator acts.

Traffic runs through each watched serving's Service while a live table shows what the operator
reports (Degraded, acceptance, the revision serving); when the bad drafter has been replaced by the
no-speculation baseline (`onDegraded: DisableSpeculation`), a timeline says when each step happened,
as seen from this process (apply, Ready, first verdict, Degraded, action, recovered).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from drafter_testbed import demo_client as bench

#: The seed's thresholds, with a short window and `for` so the demo takes a minute, not ten (`for` is
#: long enough for the first single-stream measurement to see the bad drafter before the operator acts).
DEMO_ACCEPTANCE = {"minAcceptanceRate": "0.4", "window": "30s", "for": "30s", "minDraftTokens": 200}
#: How often the demo's operator measures acceptance (the production default is 15 s).
DEMO_ACCEPTANCE_INTERVAL_SECONDS = 5


def condition(item: dict, kind: str) -> dict:
    return next((c for c in (item.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


@dataclass
class Timeline:
    """The first moment (seconds since the apply) each step was seen, per serving, with what was seen."""

    started: float
    seen: dict[str, dict[str, tuple[float, str]]] = field(default_factory=dict)

    def mark(self, name: str, step: str, detail: str = "") -> None:
        self.seen.setdefault(name, {}).setdefault(step, (time.monotonic() - self.started, detail))

    def observe(self, item: dict) -> None:
        name, status = item["metadata"]["name"], item.get("status") or {}
        ready = condition(item, "Ready").get("status") == "True"
        if ready:
            self.mark(name, "Ready", f"revision {status.get('activeRevision')}")
        degraded = condition(item, "Degraded")
        if degraded.get("status") in ("True", "False"):
            self.mark(name, "first verdict", f"Degraded={degraded['status']} ({degraded.get('reason')})")
        action = status.get("degradedAction")
        if degraded.get("status") == "True" or action:
            # The LowAcceptanceRate condition can be replaced by the action's within one poll.
            self.mark(name, "Degraded", (action or {}).get("message") or degraded.get("message", ""))
        if action:
            self.mark(name, "action", f"{action['action']}: revision {action['revision']} instead of "
                                      f"{action['degradedRevision']}")
            if status.get("activeRevision") == action["revision"] and ready:
                self.mark(name, "recovered", f"revision {action['revision']} Ready and serving")

    def recovered(self, name: str) -> bool:
        return "recovered" in self.seen.get(name, {})


class Traffic(threading.Thread):
    """One stream of completions back to back through a Service (the load a drafter is judged on)."""

    def __init__(self, base_url: str, model: str, max_tokens: int = 128):
        super().__init__(daemon=True)
        self.base_url, self.model, self.max_tokens = base_url, model, max_tokens
        self.stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self.stop_event.is_set():
                try:
                    bench.stream_completion(client, self.base_url, self.model, bench.DEFAULT_PROMPTS[0], self.max_tokens)
                except httpx.HTTPError:
                    self.stop_event.wait(0.5)  # a swap moving the Service; the next request finds the new pods


def _live_table(items: dict[str, dict], elapsed: float) -> Table:
    table = Table(title=f"Acceptance watch, {elapsed:.0f} s (traffic through each Service)")
    for column in ("serving", "revision", "drafter", "acceptance", "Degraded", "why"):
        table.add_column(column)
    for name, item in items.items():
        status = item.get("status") or {}
        revision = status.get("activeRevision") or "-"
        drafter = next((r.get("drafter") for r in status.get("revisions") or [] if r["name"] == revision), "-")
        rate = (status.get("acceptance") or {}).get("rate")
        degraded = condition(item, "Degraded")
        table.add_row(name, revision, drafter or "-", f"{rate:.1%}" if rate is not None else "-",
                      f"{degraded.get('status', '-')} ({degraded.get('reason', '')})",
                      (degraded.get("message") or "")[:70])
    return table


def watch_until_acted(console: Console, get_items: Callable[[], dict[str, dict]], service_urls: dict[str, str],
                      model: str, degrading: str, timeline: Timeline, timeout: float = 300) -> dict[str, dict]:
    """Drive traffic, show the live table, and return once `degrading` serves its replacement (or time out)."""
    traffic = [Traffic(url, model) for url in service_urls.values()]
    for thread in traffic:
        thread.start()
    deadline = time.monotonic() + timeout
    items = get_items()
    try:
        with Live(_live_table(items, 0), console=console, refresh_per_second=2) as live:
            while time.monotonic() < deadline:
                items = get_items()
                for item in items.values():
                    timeline.observe(item)
                live.update(_live_table(items, time.monotonic() - timeline.started))
                if timeline.recovered(degrading) and all(
                        condition(i, "Degraded").get("status") in ("True", "False") for i in items.values()):
                    return items
                time.sleep(1)
    finally:
        for thread in traffic:
            thread.stop_event.set()
    raise TimeoutError(f"{degrading} was not replaced within {timeout:.0f}s: see "
                       f"`kubectl describe drafterserving {degrading}` and the operator log")


def print_timeline(console: Console, timeline: Timeline) -> None:
    table = Table(title="Timeline (seconds since kubectl apply, as this demo saw it)")
    for column in ("serving", "at", "step", "what"):
        table.add_column(column)
    for name, steps in timeline.seen.items():
        for step, (at, detail) in sorted(steps.items(), key=lambda kv: kv[1][0]):
            table.add_row(name, f"{at:.0f}", step, detail)
    console.print(table)


def describe_action(item: dict) -> str:
    status = item.get("status") or {}
    action = status.get("degradedAction") or {}
    return json.dumps({k: action.get(k) for k in ("action", "degradedRevision", "revision", "message")}, indent=2)
