"""The DrafterServing decision played in a small world (pure): the seed serving, a World that runs decide and
applies its plan as the apiserver would, the gate's finish, a training's Promote."""
from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path

import yaml

from drafter_operator import timestamps
from drafter_operator.controllers.serving.decide import decide
from drafter_operator.controllers.plan import Plan
from drafter_operator.controllers.serving.state import ServingState
from drafter_operator.controllers.serving.observe import observed_from
from drafter_operator.resources.labels import REVISION_LABEL

REPO = Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples" / "serving-vllm-kimi-k25-eagle3.yaml").read_text())
T0 = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)
DRAIN = dt.timedelta(seconds=15)
IMAGES = {"vllm": "vllm/vllm-openai:v0.33.0", "sglang": "lmsysorg/sglang:v0.5.23"}


def seed_body(**spec_changes) -> dict:
    body = copy.deepcopy(SEED)
    body["metadata"] = {"name": "kimi", "namespace": "team", "uid": "u-1", "generation": 1}
    body["spec"].update(spec_changes)
    return body


def merge_patch(target: dict, patch: dict) -> dict:
    """RFC 7386, as the apiserver applies application/merge-patch+json."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):  # a new object too: its nulls are dropped, as the apiserver drops them
            out[key] = merge_patch(out[key] if isinstance(out.get(key), dict) else {}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class World:
    def __init__(self, body: dict, now: dt.datetime = T0):
        self.body, self.now = body, now
        self.deployments: dict[str, dict] = {}  # by name
        self.service: dict | None = None
        self.benchmarks: dict[str, dict] = {}  # gate DrafterBenchmarks, by name
        self.events: list[tuple[str, str, str]] = []
        self.in_flight: dict[str, int] = {}  # revision -> requests its engines report (default 0)

    def state(self) -> ServingState:
        # Every replica's pod exists and was scheduled when its Deployment was created; settled ones are Ready.
        pods = [{"metadata": {"name": f"{d['metadata']['name']}-{i}", "creationTimestamp": d["metadata"]["creationTimestamp"],
                              "labels": {REVISION_LABEL: d["metadata"]["labels"][REVISION_LABEL]}},
                 "status": {"podIP": f"10.0.{n}.{i}", "conditions": [
                     {"type": "PodScheduled", "status": "True", "lastTransitionTime": d["metadata"]["creationTimestamp"]},
                     {"type": "Ready", "status": "True" if i < d.get("status", {}).get("readyReplicas", 0) else "False"}]}}
                for n, d in enumerate(self.deployments.values())
                for i in range(max(d["spec"].get("replicas", 1), d.get("status", {}).get("readyReplicas", 0)))]
        observed = observed_from(copy.deepcopy(list(self.deployments.values())), pods, copy.deepcopy(self.service),
                                 self.body["metadata"].get("uid"), copy.deepcopy(list(self.benchmarks.values())))
        # No client traffic in this world: every engine reports nothing in flight, unless a test says so.
        observed.in_flight = {revision: self.in_flight.get(revision, 0) for revision in observed.deployments}
        return ServingState(serving=copy.deepcopy(self.body), observed=observed, now=self.now, default_images=IMAGES,
                            drain=DRAIN)

    def decide(self) -> Plan:
        return decide(self.state())

    def apply(self, plan: Plan) -> None:
        if plan.record_first:
            self.body["status"] = merge_patch(self.body.get("status") or {}, plan.record_first)
        for write in plan.writes:
            if write.plural == "drafterbenchmarks":
                self.benchmarks[write.body["metadata"]["name"]] = copy.deepcopy(write.body)
                continue
            if write.plural == "services":
                self.service = write.body if write.verb == "create" else merge_patch(self.service, write.body)
                continue
            if write.verb == "create":
                manifest = copy.deepcopy(write.body)
                manifest["metadata"].update(creationTimestamp=timestamps.format_seconds(self.now), generation=1)
                self.deployments[manifest["metadata"]["name"]] = manifest
            else:
                name = write.path.rsplit("/", 1)[1]
                patched = merge_patch(self.deployments[name], write.body)
                patched["metadata"]["generation"] += 1
                self.deployments[name] = patched
        if plan.status:
            self.body["status"] = merge_patch(self.body.get("status") or {}, plan.status)
        for path in plan.deletes:
            (self.benchmarks if "/drafterbenchmarks/" in path else self.deployments).pop(path.rsplit("/", 1)[1], None)
        self.events += plan.events

    def ask_for_k(self, tokens: int) -> None:
        """A spec edit of the drafter's k (a new revision), as kubectl apply makes it: a new generation."""
        self.body["spec"]["drafter"]["numSpeculativeTokens"] = tokens
        self.body["metadata"]["generation"] = self.body["metadata"].get("generation", 1) + 1

    def settle(self) -> None:
        for d in self.deployments.values():
            d["status"] = {"readyReplicas": d["spec"]["replicas"], "observedGeneration": d["metadata"]["generation"]}

    def converge(self, steps: int = 12) -> None:
        """Decide, apply, let the cluster catch up, let time pass (drains end); until nothing is left to do."""
        for _ in range(steps):
            plan = self.decide()
            if not plan.writes_anything():
                return
            self.apply(plan)
            self.settle()
            self.now += dt.timedelta(seconds=20)
        raise AssertionError(f"no steady state after {steps} steps: {self.decide()}")

    def condition(self, kind: str) -> dict:
        return next(c for c in self.body["status"]["conditions"] if c["type"] == kind)


def gated_body(**gate) -> dict:
    body = seed_body(swap={"strategy": "BlueGreen", "gate": {"minSpeedup": "1.2", "baseline": {"tokensPerSecond": "82.5"},
                                                              **gate}})
    return body


def finish_gate(world: World, passed: bool, message: str) -> None:
    (gate,) = [b for b in world.benchmarks.values() if "status" not in b]
    gate["status"] = {"state": "Succeeded", "result": {"verdict": "Passed" if passed else "Failed",
                                                       "verdictMessage": message}}


DIGEST = "sha256:" + "cd" * 32


def promote(world: World, tokens_per_second: float = 41.0, digest: str = DIGEST) -> dict:
    """Apply the merge patch a DrafterTraining's Promote writes (controllers.training.promotion.promotion_patch)."""
    from drafter_operator.api.training import DrafterTraining
    from drafter_operator.controllers.training.promotion import promotion_patch

    training = yaml.safe_load((REPO / "examples" / "training-kimi-k25-eagle3.yaml").read_text())
    spec = DrafterTraining.model_validate(training).spec
    patch = promotion_patch(world.body, spec, "kimi-ft (generation 1)", tokens_per_second, digest)
    world.body = merge_patch(world.body, patch)
    world.body["metadata"]["generation"] += 1
    return patch


def swapped(plan: Plan) -> str | None:
    """The swap strategy of the traffic a serving's plan moves (its swap count), None when it moves none."""
    count = plan.counted("swap")
    return count.labels[-1] if count else None


def rolled_back(plan: Plan) -> bool:
    """Whether a serving's plan counts a rollback."""
    return plan.counted("rollback") is not None
