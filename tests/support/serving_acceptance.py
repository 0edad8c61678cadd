"""Acceptance in the DrafterServing decision (pure): a measured window fed to the World, onDegraded actions."""
from __future__ import annotations

import dataclasses
import datetime as dt

from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance.measurement import Measurement
from drafter_operator.controllers.serving.decide import decide
from tests.support.servings import World, seed_body


def measured(world: World, status: str = "False", rate: float = 0.7, revision: str | None = None) -> Measurement:
    revision = revision or world.body["status"]["activeRevision"]
    reason = {"True": a.LOW_RATE, "False": a.HEALTHY, "Unknown": a.INSUFFICIENT_DATA}[status]
    verdict = a.AcceptanceVerdict(status=status, reason=reason, message=f"acceptance {rate:.1%} over 5m (700/1000 draft tokens)")
    block = {"rate": rate, "meanLength": 1 + 5 * rate, "draftTokens": 1000, "drafts": 200, "windowSeconds": 300,
             "windowEnd": world.now.strftime("%Y-%m-%dT%H:%M:%SZ"), "source": "engine", "revision": revision}
    return Measurement(revision=revision, verdict=verdict, previous=None, status=block)


def look(world: World, measurement: Measurement):
    """One decision with a measurement, applied."""
    plan = decide(dataclasses.replace(world.state(), acceptance=measurement))
    world.apply(plan)
    return plan


def converge_with(world: World, measurement_for, steps: int = 12) -> None:
    """Converge while the watch keeps looking at whatever is active (`measurement_for(world)`)."""
    for _ in range(steps):
        plan = look(world, measurement_for(world))
        if not plan.writes_anything():
            return
        world.settle()
        world.now += dt.timedelta(seconds=20)
    raise AssertionError("no steady state")


def on_degraded(policy: str, **changes) -> dict:
    body = seed_body(swap={"strategy": "BlueGreen"}, **changes)
    body["spec"]["acceptance"]["onDegraded"] = policy
    return body


def change_drafter(world: World, tokens: int) -> None:
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = tokens
    world.body["metadata"]["generation"] += 1
    world.converge()


def auto_body(**acceptance) -> dict:
    body = seed_body(swap={"strategy": "BlueGreen", "gate": {"minSpeedup": "0.5", "baseline": {"tokensPerSecond": "82.5"}}})
    body["spec"]["acceptance"] = {"minAcceptanceLength": "auto", "window": "5m", "minDraftTokens": 1000, "for": "0s",
                                  "onDegraded": "Alert", **acceptance}
    return body


def gated_swap(world: World, result: dict, drafter: dict | None = None) -> str:
    """A new drafter (``drafter``, else the seed's with a new model) through a gated swap whose benchmark
    measured ``result``; the new active revision."""
    if drafter is None:
        world.body["spec"]["drafter"]["model"] = "/models/drafters/kimi-k25-eagle3-v2"
    else:
        world.body["spec"]["drafter"] = drafter
    world.body["metadata"]["generation"] += 1
    world.apply(world.decide())
    world.settle()
    world.apply(world.decide())  # the gate benchmark is created
    (gate,) = [b for b in world.benchmarks.values() if "status" not in b]
    gate["status"] = {"state": "Succeeded", "result": {"verdict": "Passed", "verdictMessage": "met", **result}}
    world.converge()
    return world.body["status"]["activeRevision"]
