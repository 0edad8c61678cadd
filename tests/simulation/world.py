"""The simulated world: clock, apiserver, cluster controllers, traffic, engines and the operator,
wired together, and the operations applied to it.

`World(seed, setup)` builds it; `apply(op)` performs one operation and `run_for(seconds, check)` lets
the world run, calling `check()` after every event (the invariants). All randomness comes from one
`random.Random`, re-seeded from (seed, op salt) at each operation, so an operation's effects do not
depend on which earlier operations a shrinker dropped.
"""

from __future__ import annotations

import copy
import datetime as dt
import random

from drafter_operator.resources.labels import REVISION_LABEL, SERVING_LABEL

from tests.simulation.apiserver import FakeApiserver
from tests.simulation.clock import Clock
from tests.simulation.cluster import NS, Cluster, owner_uid
from tests.simulation.engines import Engines
from tests.simulation.fault_operations import FaultOperations
from tests.simulation.invariants import Tracks
from tests.simulation.operations import render
from tests.simulation.operator_sim import OperatorSim
from tests.simulation.traffic import Traffic

GROUP_PATH = f"/apis/drafter.dev/v1alpha1/namespaces/{NS}/drafterservings"


class World(FaultOperations):
    def __init__(self, seed: int, setup: dict, safety_interval: float = 300.0, acceptance_interval: float = 60.0,
                 drain: dt.timedelta | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = Clock()
        self.namespace, self.name = NS, setup["name"]
        self.serving_key = f"{GROUP_PATH}/{self.name}"
        self.config = dict(setup["config"])
        self.watch_log: list[tuple[float, str, dict | None]] = []
        self.track = Tracks(self)
        self.api = FakeApiserver(self.clock, lambda: self.rng, self.on_write)
        self.cluster = Cluster(self, setup["nodes"])
        self.traffic = Traffic(self)
        self.engines = Engines(self)
        self.metrics_fault: str | None = None
        self.pending_restart_after = 30.0
        self.operator = OperatorSim(self, safety_interval, acceptance_interval, drain)
        self.operator.start()
        self.gc_due = False
        self.events = 0

    # ------------------------------------------------------------------ the store's change feed
    def on_write(self, actor, plural, key, old, new, ok, detail) -> None:
        t = self.clock.t
        if ok:
            self.watch_log.append((t, key, new))
            if plural == "deployments":
                if new is not None:
                    self.cluster.deployment_changed(key)
                else:
                    self.cluster.deleted_by[old["metadata"]["uid"]] = actor
                    self.schedule_gc()
            elif plural == "pods":
                if new is None or (new["metadata"].get("deletionTimestamp") and not old["metadata"].get("deletionTimestamp")):
                    self.traffic.pod_going(key, old if new is None else new,
                                           self.cluster.removal_cause.get(key, "unknown"))
                self.traffic.update()
                self.track.gpus_dirty = True
            elif plural == "services":
                self.traffic.update()
            elif plural == "drafterbenchmarks" and old is None and new is not None:
                self.cluster.benchmark_created(key, new)
            if new is None and plural != "pods":
                self.schedule_gc()  # the garbage collector follows every delete
            elif old is None and new is not None and new["metadata"].get("ownerReferences"):
                # ...and every new dependent: one whose owner is already gone (created from a stale view of
                # a deleted serving) is deleted, as the real garbage collector's graph does.
                self.schedule_gc()
            obj = new or old
            labels = obj["metadata"].get("labels") or {}
            if key == self.serving_key or labels.get(SERVING_LABEL) == self.name:
                self.operator.saw_write()
        self.track.on_write(actor, plural, key, old, new, ok, detail)

    def schedule_gc(self) -> None:
        if not self.gc_due:
            self.gc_due = True
            self.clock.after(self.rng.uniform(1, 30), self.gc)

    def gc(self) -> None:
        self.gc_due = False
        self.cluster.collect_pods_of_gone_deployments()
        removed = 0
        for key in self.api.orphans():
            if "/pods/" not in key:
                self.api.remove("garbage-collector", key)
                removed += 1
        if removed:
            self.schedule_gc()

    # ------------------------------------------------------------------ what the invariants ask
    def serving(self) -> dict | None:
        return self.api.store.get(self.serving_key)

    def service(self) -> dict | None:
        return self.api.store.get(f"/api/v1/namespaces/{NS}/services/{self.name}")

    def owned_service(self, uid: str | None = None) -> dict | None:
        serving = self.serving()
        uid = uid or (serving["metadata"]["uid"] if serving else None)
        service = self.service()
        return service if service is not None and uid and owner_uid(service) == uid else None

    def selected_revision(self) -> str | None:
        service = self.owned_service()
        return ((service or {}).get("spec") or {}).get("selector", {}).get(REVISION_LABEL) if service else None

    def outage_context(self) -> dict:
        serving = self.serving()
        uid = serving["metadata"]["uid"] if serving else None
        return {"t": self.clock.t, "strategy": self.config["strategy"], "replicas": self.config["replicas"],
                "uid": uid, "ever_ready": self.track.ever_ready.get(uid, False),
                "service_owned": self.owned_service() is not None, "selected": self.selected_revision()}

    # ------------------------------------------------------------------ running
    def run_for(self, seconds: float, check) -> None:
        self.events += self.clock.run_for(seconds, check)

    # ------------------------------------------------------------------ operations
    def apply(self, op: dict) -> None:
        self.rng = random.Random(self.seed * 1_000_003 + op["salt"])
        getattr(self, "op_" + op["kind"])(op)

    def write_spec(self) -> None:
        serving = self.serving()
        if serving is None or serving["metadata"].get("deletionTimestamp"):
            return
        self.api.put("user", self.serving_key, {**serving, "spec": render(self.config)})

    def op_create(self, op: dict) -> None:
        if self.serving() is not None:
            return
        self.api.put("user", self.serving_key, {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
                                                "metadata": {"name": self.name, "namespace": NS},
                                                "spec": render(self.config)})

    def op_set(self, op: dict) -> None:
        self.config[op["field"]] = op["value"]
        self.track.spec_edited(op["field"])
        self.write_spec()

    def op_node_loss(self, op: dict) -> None:
        nodes = sorted(self.cluster.nodes)
        if nodes:
            self.cluster.lose_node(nodes[op["node"] % len(nodes)], op["back"])

    def op_acceptance(self, op: dict) -> None:
        revision = self.selected_revision()
        if revision is None:
            return
        if op["rate"] is None:
            self.engines.override.pop(revision, None)
        else:
            self.engines.override[revision] = op["rate"]

    def op_metrics(self, op: dict) -> None:
        self.metrics_fault = op["mode"]
        self.clock.after(op["for"], self._end_metrics_fault, op["salt"])
        self._metrics_salt = op["salt"]

    def _end_metrics_fault(self, salt: int) -> None:
        if getattr(self, "_metrics_salt", None) == salt:
            self.metrics_fault = None

    def op_admission(self, op: dict) -> None:
        plural, code = op["rule"], op["code"]
        message = (f'admission webhook "policy.example.com" denied the request: {plural} writes are frozen '
                   f'by change freeze CF-{op["salt"]}')

        def rule(method, p, path, body, plural=plural):
            if plural == "status":
                return (code, message) if p == "drafterservings" and path.endswith("/status") else None
            return (code, message) if p == plural and method in ("POST", "PATCH") else None

        name = f"freeze-{op['salt']}"
        self.api.faults.admission[name] = rule
        self.track.admission_rules[name] = message
        self.clock.after(op["for"], self._end_admission, name)

    def _end_admission(self, name: str) -> None:
        self.api.faults.admission.pop(name, None)

    def op_foreign(self, op: dict) -> None:
        """An object with a child's name that the serving does not own (made by hand)."""
        serving = self.serving()
        if op["what"] == "service":
            key = f"/api/v1/namespaces/{NS}/services/{self.name}"
            body = {"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": self.name, "namespace": NS, "labels": {SERVING_LABEL: self.name}},
                    "spec": {"selector": {"app": "something-else"}, "ports": [{"port": 80}]}}
        else:
            revisions = ((serving or {}).get("status") or {}).get("revisions") or []
            if not revisions:
                return
            revision = revisions[-1]["name"]
            from drafter_operator.resources.labels import deployment_name
            name = deployment_name(self.name, revision)
            key = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}"
            body = {"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name, "namespace": NS,
                                 "labels": {SERVING_LABEL: self.name, REVISION_LABEL: revision}},
                    "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "hand-made"}},
                             "template": {"metadata": {"labels": {"app": "hand-made"}},
                                          "spec": {"containers": [{"name": "x", "image": "busybox"}]}}}}
        if key in self.api.store:
            return
        created = self.api.put("user", key, body)
        self.track.foreign_uids.add(created["metadata"]["uid"])

    def op_recreate(self, op: dict) -> None:
        serving = self.serving()
        if serving is None:
            self.op_create(op)
            return
        if op["operator_down"] and self.operator.up:
            self.operator.up = False
            self.operator.down_since = self.clock.t
            self.clock.after(op["gap"] + 600.0, self.operator.start)
        self.track.serving_deleted(serving["metadata"]["uid"])
        self.api.remove("user", self.serving_key)
        self.clock.after(op["gap"], self.op_create, op)

    def op_watch_lag(self, op: dict) -> None:
        if op["stall"]:
            self.operator.stall_until = self.clock.t + op["for"]
        else:
            self.operator.lag = op["lag"]
            self._lag_salt = op["salt"]
            self.clock.after(op["for"], self._end_lag, op["salt"])

    def _end_lag(self, salt: int) -> None:
        if getattr(self, "_lag_salt", None) == salt:
            self.operator.lag = 0.0
            self.operator.relist()
