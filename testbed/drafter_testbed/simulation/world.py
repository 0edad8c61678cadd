"""The simulated world: clock, apiserver, cluster controllers, traffic, engines and the operator,
wired together, and the operations applied to it.

`World(seed, setup)` builds it; `apply(op)` performs one operation and `run_for(seconds, check)` lets
the world run, calling `check()` after every event (the invariants). All randomness comes from one
`random.Random`, re-seeded from (seed, op salt) at each operation, so an operation's effects do not
depend on which earlier operations a shrinker dropped.
"""

from __future__ import annotations

import datetime as dt
import json
import random

import pydantic

from drafter_operator.api import DrafterServingSpec
from drafter_operator.constants import GATE_LABEL, RETRY_ANNOTATION
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.engines import DEFAULT_IMAGES
from drafter_operator.resources.group import group_name
from drafter_operator.resources.labels import MANAGED_BY, REVISION_LABEL, SERVING_LABEL, deployment_name
from drafter_operator.resources.workloads import GROUP
from drafter_operator.settings import ALLOWED_IMAGE_PREFIXES, PROMETHEUS_ENDPOINTS as PROMETHEUS_ENDPOINTS_SETTING

from drafter_testbed.simulation.apiserver import FakeApiserver
from drafter_testbed.simulation.clock import Clock
from drafter_testbed.simulation.cluster import NS, POD_COLLECTION, Cluster, owner_uid, ready
from drafter_testbed.simulation.engines import Engines
from drafter_testbed.simulation.fault_operations import FaultOperations
from drafter_testbed.simulation.groups import SET_LABEL, is_worker
from drafter_testbed.simulation.invariants import Tracks
from drafter_testbed.simulation.objects import WORKLOAD_PLURALS, workloads_of
from drafter_testbed.simulation.operations import DEFAULT_CONFIG, render
from drafter_testbed.simulation.operator_sim import WATCH_LATENCY, OperatorSim
from drafter_testbed.simulation.traffic import STREAM_SECONDS, Traffic

GROUP_PATH = f"/apis/drafter.dev/v1alpha1/namespaces/{NS}/drafterservings"
BENCHMARKS = f"/apis/drafter.dev/v1alpha1/namespaces/{NS}/drafterbenchmarks"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
GROUPS = f"/apis/{GROUP.api_version}/namespaces/{NS}/{GROUP.plural}"


class World(FaultOperations):
    def __init__(self, seed: int, setup: dict, safety_interval: float = 300.0, acceptance_interval: float = 60.0,
                 drain: dt.timedelta | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = Clock()
        self.namespace, self.name = NS, setup["name"]
        self.serving_key = f"{GROUP_PATH}/{self.name}"
        self.config = {**DEFAULT_CONFIG, **setup["config"]}
        # Each revision a LeaderWorkerSet of whole-node groups (spec.resources.nodesPerReplica), or a Deployment.
        self.spans_nodes = self.config["nodesPerReplica"] > 1
        self.settings = AdminSettings()
        self.track = Tracks(self)
        self.api = FakeApiserver(self.clock, lambda: self.rng, self.on_write)
        self.cluster = Cluster(self, setup["nodes"])
        self.traffic = Traffic(self)
        self.engines = Engines(self)
        self.metrics_fault: str | None = None
        self.pending_restart_after = 30.0
        self.operator = OperatorSim(self, safety_interval, acceptance_interval, drain)
        self.settings.apply_to(self.operator)
        self.operator.start()
        self.gc_due = False
        self.events = 0
        self._desired_cache: dict = {}

    # ------------------------------------------------------------------ the store's change feed
    def on_write(self, actor, plural, key, old, new, ok, detail) -> None:
        t = self.clock.t
        if ok:
            self.operator.written(plural, key, old, new)
            if plural in WORKLOAD_PLURALS:
                if new is not None:
                    self.cluster.workload_changed(key)
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
                self._maybe_second_swap()
            elif plural == "drafterbenchmarks" and old is None and new is not None:
                self.cluster.benchmark_created(key, new)
                self.track.benchmark_created(actor, new)
            if new is None and plural != "pods":
                self.schedule_gc()  # the garbage collector follows every delete
            elif old is None and new is not None and new["metadata"].get("ownerReferences"):
                # ...and every new dependent: one whose owner is already gone (created from a stale view of
                # a deleted serving) is deleted, as the real garbage collector's graph does.
                self.schedule_gc()
        self.track.on_write(actor, plural, key, old, new, ok, detail)

    def schedule_gc(self) -> None:
        if not self.gc_due:
            self.gc_due = True
            self.clock.after(self.rng.uniform(1, 30), self.gc)

    def gc(self) -> None:
        self.gc_due = False
        self.cluster.collect_pods_of_gone_workloads()
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

        # A freeze of Deployments freezes the revisions' workloads, of either kind.
        frozen = WORKLOAD_PLURALS if plural == "deployments" else (plural,)

        def rule(method, p, path, body, frozen=frozen, plural=plural):
            if plural == "status":
                return (code, message) if p == "drafterservings" and path.endswith("/status") else None
            return (code, message) if p in frozen and method in ("POST", "PATCH") else None

        name = f"freeze-{op['salt']}"
        self.api.faults.admission[name] = rule
        self.track.admission_rules[name] = message
        self.track.admission_periods.append((self.clock.t, self.clock.t + op["for"]))
        self.clock.after(op["for"], self._end_admission, name)

    def _end_admission(self, name: str) -> None:
        self.api.faults.admission.pop(name, None)

    def op_foreign(self, op: dict) -> None:
        """An object with a child's name that the serving does not own, made by hand: with no label (the Service of a
        migration: never in the operator's label-selected watches), with the serving's label only (not selected
        either), or with the managed-by and serving labels (a copy of a child: in the watches)."""
        labels = {"none": {}, "serving": {SERVING_LABEL: self.name},
                  "managed": {**MANAGED_BY, SERVING_LABEL: self.name}}[op.get("labels", "serving")]
        if op["what"] == "service":
            key = f"/api/v1/namespaces/{NS}/services/{self.name}"
            body = {"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": self.name, "namespace": NS, "labels": labels},
                    "spec": {"selector": {"app": "something-else"}, "ports": [{"port": 80}]}}
        else:
            revision = self.desired_revision() if op.get("desired") else None
            if revision is None:
                revisions = ((self.serving() or {}).get("status") or {}).get("revisions") or []
                if not revisions:
                    return
                revision = revisions[-1]["name"]
            key = self.workload_key(revision)
            name = key.rsplit("/", 1)[1]
            template = {"metadata": {"labels": {"app": "hand-made"}},
                        "spec": {"containers": [{"name": "x", "image": "busybox"}]}}
            metadata = {"name": name, "namespace": NS,
                        "labels": {**labels, **({REVISION_LABEL: revision} if labels else {})}}
            if self.spans_nodes:  # the revision's workload is a LeaderWorkerSet: the hand-made one takes its name
                body = {"apiVersion": GROUP.api_version, "kind": GROUP.kind, "metadata": metadata,
                        "spec": {"replicas": 0, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": template,
                                                                         "workerTemplate": template}}}
            else:
                body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
                        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "hand-made"}}, "template": template}}
        if key in self.api.store:
            return
        created = self.api.put("user", key, body)
        self.track.foreign_uids.add(created["metadata"]["uid"])
        if op.get("for"):  # its owner moves it away in the end (the migration is over, the conflict read)
            self.clock.after(op["for"], self._remove_foreign, key, created["metadata"]["uid"])

    def _remove_foreign(self, key: str, uid: str) -> None:
        if (self.api.store.get(key) or {}).get("metadata", {}).get("uid") == uid:
            self.api.remove("user", key)

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
        """One kind's watch lags or stalls (its connection dropped; kopf re-lists that kind when it comes back)."""
        kind = op.get("watch", "all")
        # The drawn "deployments" is the revisions' workloads' watch: the LeaderWorkerSets' where revisions are sets.
        kinds = [GROUP.plural] if kind == "deployments" and self.spans_nodes else [kind]
        streams = [s for p, s in self.operator.streams.items() if self.spans_nodes or p != GROUP.plural] \
            if kind == "all" else [self.operator.streams[k] for k in kinds if k in self.operator.streams]
        for stream in streams:
            if op["stall"]:
                stream.stall(self.clock.t + op["for"])
            else:
                stream.lag = op["lag"]
                stream.lag_salt = op["salt"]
                self.clock.after(op["for"], self._end_lag, stream, op["salt"])

    def _end_lag(self, stream, salt: int) -> None:
        if getattr(stream, "lag_salt", None) == salt:
            stream.lag = WATCH_LATENCY

    # ------------------------------------------------------------------ hands on children (users, GitOps)
    def owned_workloads(self) -> list[tuple[str, dict]]:
        """The serving's Deployments or LeaderWorkerSets, by key."""
        serving = self.serving()
        return sorted(workloads_of(self.api.store, serving["metadata"]["uid"] if serving else None).items())

    def workload_key(self, revision: str) -> str:
        """Where the revision's workload lives: a LeaderWorkerSet where a replica spans nodes, else a Deployment."""
        if self.spans_nodes:
            return f"{GROUPS}/{group_name(self.name, revision)}"
        return f"{DEPLOYMENTS}/{deployment_name(self.name, revision)}"

    def serving_pods(self) -> list[str]:
        """The keys of the pods of the serving's revisions: those carrying its label, and its groups' workers."""
        sets = {o["metadata"]["name"] for _, o in self.owned_workloads()}
        return sorted(k for k, p in self.api.store.items() if k.startswith(POD_COLLECTION + "/")
                      and ((p["metadata"].get("labels") or {}).get(SERVING_LABEL) == self.name
                           or (is_worker(p) and p["metadata"]["labels"].get(SET_LABEL) in sets)))

    def op_hands(self, op: dict) -> None:
        """Someone acts on the serving's children: `kubectl delete deploy` (the active one mid-swap, to restart it),
        a GitOps prune of another, `kubectl scale`, `kubectl rollout restart`, labels stripped by a GitOps tool,
        the Service deleted, a pod deleted."""
        what = op["what"]
        selected = self.selected_revision()
        deployments = self.owned_workloads()
        pick = self.rng.choice
        target = None
        if what == "delete_active":
            target = next((k for k, d in deployments if d["metadata"]["labels"].get(REVISION_LABEL) == selected), None)
        elif what in ("delete_other", "scale", "restart", "strip_labels"):
            others = [k for k, d in deployments if d["metadata"]["labels"].get(REVISION_LABEL) != selected]
            target = pick(others) if others and (what == "delete_other" or self.rng.random() < 0.5) else \
                pick([k for k, _ in deployments]) if deployments else None
        elif what == "delete_service":
            target = f"/api/v1/namespaces/{NS}/services/{self.name}" if self.owned_service() else None
        elif what == "delete_pod":
            pods = self.serving_pods()
            target = pick(pods) if pods else None
        if target is None:
            return
        obj = self.api.store[target]
        revision = (obj["metadata"].get("labels") or {}).get(REVISION_LABEL)
        self.track.hands_on(what, revision)
        if what in ("delete_active", "delete_other", "delete_service"):
            self.api.remove("user", target)
        elif what == "delete_pod":
            self.cluster.delete_pod(target, "deleted-by-hand")
        elif what == "scale":
            self.api.put("user", target, {**obj, "spec": {**obj["spec"], "replicas": op["replicas"]}})
        elif what == "restart":
            self.api.put("user", target, restarted(obj, self.clock.iso()))
        elif what == "strip_labels":
            labels = {k: v for k, v in obj["metadata"]["labels"].items() if k not in MANAGED_BY}
            self.api.put("user", target, {**obj, "metadata": {**obj["metadata"], "labels": labels}})

    def op_retry(self, op: dict) -> None:
        """`kubectl annotate drafterserving ... drafter.dev/retry=<new value>`: try a failed revision again."""
        serving = self.serving()
        if serving is None or serving["metadata"].get("deletionTimestamp"):
            return
        meta = serving["metadata"]
        self.api.put("user", self.serving_key, {**serving, "metadata": {
            **meta, "annotations": {**(meta.get("annotations") or {}), RETRY_ANNOTATION: f"r{op['salt']}"}}})
        self.track.asked_again("retry")
        # A failed revision may start again now without a spec change: that is what the annotation asks.
        self.track.failed = {k: g for k, g in self.track.failed.items() if k[0] != meta["uid"]}
        for (uid, revision), facts in self.track.revision_facts.items():
            if uid == meta["uid"]:  # a failure after the retry needs a reason of its own: an earlier failed gate
                # is none (a passed one still lets traffic back), and the gate deadline counts afresh, from now for
                # a revision already Ready.
                facts.gates = [verdict for verdict in facts.gates if verdict == "Passed"]
                facts.first_ready = self.clock.t if self.ready_pods(uid, revision) else None
        if self.track.action is not None:  # an action's failed revision starts again: its bound counts from now
            self.track.action = (*self.track.action[:4], self.clock.t)

    def op_scale_cycle(self, op: dict) -> None:
        """Scale to zero (a night, a cost cut), then back to N: a revision that never served is asked for again."""
        self.config["replicas"] = 0
        self.track.spec_edited("replicas")
        self.write_spec()
        self.clock.after(op["gap"], self._scale_back, op["replicas"], op["salt"])
        self._scale_salt = op["salt"]

    def _scale_back(self, replicas: int, salt: int) -> None:
        if getattr(self, "_scale_salt", None) == salt and self.config["replicas"] == 0:
            self.config["replicas"] = replicas
            self.track.spec_edited("replicas")
            self.write_spec()

    # ------------------------------------------------------------------ administrators
    def op_admin(self, op: dict) -> None:
        """An administrator changes the operator's settings (`helm upgrade`: the operator restarts with them), or
        upgrades the operator: a release with other default images, or one that refuses a field the stored spec
        kept from an older CRD."""
        what, value = op["what"], op["value"]
        if what == "allow_list":
            self.settings.image_prefixes = ALLOW_LISTS[value]
        elif what == "prometheus":
            self.settings.prometheus = value
        elif what == "drain":
            self.settings.drain_seconds = value
        elif what == "upgrade":
            self.settings.default_images = UPGRADED_IMAGES if value else None
        elif what == "legacy":
            self.config["legacy"] = value
            self.write_spec()
        self.settings.apply_to(self.operator)
        self.track.asked_again(f"admin:{what}")
        self.operator.restart(op["down"])

    # ------------------------------------------------------------------ traffic and engines
    def op_swap_twice(self, op: dict) -> None:
        """Two swaps in a row: clients start streams of minutes, the user edits the drafter, and as soon as traffic
        has moved to its revision edits it again to one that loads in under a minute, so the second switch comes
        while the first revision still finishes its streams."""
        self.traffic.stream_seconds = op["seconds"]
        self._streams_salt = op["salt"]
        self.clock.after(3600.0, self._end_long_streams, op["salt"])
        self._second_swap = (op["second"], self.selected_revision())
        self.op_set({"field": "drafter", "value": op["first"]})

    def _maybe_second_swap(self) -> None:
        """After a switch: the second edit of `op_swap_twice`, once."""
        armed = getattr(self, "_second_swap", None)
        if armed is None or self.selected_revision() in (None, armed[1]):
            return
        self._second_swap = None
        self.config["drafter"] = armed[0]
        revision = self.desired_revision()
        if revision:
            self.cluster.fast_start.add(revision)
        self.clock.after(5.0, self.op_set, {"field": "drafter", "value": armed[0]})

    def op_long_streams(self, op: dict) -> None:
        """Clients start streams longer than a swap takes (long generations, agents) for a while."""
        self.traffic.stream_seconds = op["seconds"]
        self._streams_salt = op["salt"]
        self.clock.after(op["for"], self._end_long_streams, op["salt"])

    def _end_long_streams(self, salt: int) -> None:
        if getattr(self, "_streams_salt", None) == salt:
            self.traffic.stream_seconds = STREAM_SECONDS

    def op_in_flight_fault(self, op: dict) -> None:
        """The engines' /metrics cannot be read for a while: in-flight counts are unknown."""
        self.traffic.unreadable = True
        self._in_flight_salt = op["salt"]
        self.clock.after(op["for"], self._end_in_flight_fault, op["salt"])

    def _end_in_flight_fault(self, salt: int) -> None:
        if getattr(self, "_in_flight_salt", None) == salt:
            self.traffic.unreadable = False

    # ------------------------------------------------------------------ tenants' benchmarks
    def op_tenant_benchmark(self, op: dict) -> None:
        """A tenant creates a DrafterBenchmark about this serving that the operator does not run against it: an
        endpoint run (any URL) carrying the serving's and its active revision's labels (with the gate label or not),
        or a run against another serving of the same spec (so of the same revision name) labelled with this
        serving's name. Or, legitimately, a run by hand against this serving (spec.servingRef)."""
        revision = self.selected_revision()
        if revision is None:
            return
        variant = op["variant"]
        name = f"tenant-{op['salt']}"
        labels, spec = {}, {"concurrencyLevels": [1, 8, 32], "baseline": {"tokensPerSecond": "80"}}
        if variant in ("endpoint", "endpoint_gate"):
            labels = {SERVING_LABEL: self.name, REVISION_LABEL: revision}
            if variant == "endpoint_gate":
                labels[GATE_LABEL] = "true"
            spec["endpoint"] = "http://bench.tenant.example:8000/v1"
        elif variant == "other_serving":
            labels = {SERVING_LABEL: self.name}
            spec["servingRef"] = {"name": "other"}
        else:
            spec["servingRef"] = {"name": self.name}
        self.track.tenant_benchmarks[name] = variant
        self.api.put("tenant", f"{BENCHMARKS}/{name}", {
            "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
            "metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": spec})
        # What the benchmark controller records: an endpoint run's revision is its label (no serving to ask), a run
        # against a serving measures that serving's active revision (the other serving runs the same spec).
        self.clock.after(op["seconds"], self.cluster.finish_tenant_benchmark, f"{BENCHMARKS}/{name}", revision,
                         op["speedup"])

    # ------------------------------------------------------------------ what the world knows of the spec
    def desired_revision(self) -> str | None:
        """The revision the user's spec asks for, with the operator's default images (None: the spec is dynamic, so
        the revision depends on what was measured)."""
        spec_body = render(self.config)
        if (spec_body.get("drafter") or {}).get("dynamic"):
            return None
        key = (json.dumps(spec_body, sort_keys=True), json.dumps(self.settings.default_images, sort_keys=True))
        if key not in self._desired_cache:
            try:
                spec = DrafterServingSpec.model_validate(spec_body)
            except pydantic.ValidationError:
                self._desired_cache[key] = None
            else:
                images = self.settings.default_images or DEFAULT_IMAGES
                self._desired_cache[key] = revision_hash(spec, spec.image or images[spec.engine])
        return self._desired_cache[key]

    def ready_pods(self, uid: str, revision: str) -> int:
        """Ready, live replicas of a revision of the serving with this uid: its pods, a group's leader standing for the
        group (it is Ready only with every worker running)."""
        workloads = {o["metadata"]["uid"] for o in workloads_of(self.api.store, uid).values()
                     if (o["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision}
        return sum(1 for k, p in self.api.store.items() if k.startswith(POD_COLLECTION + "/")
                   and owner_uid(p) in workloads and not p["metadata"].get("deletionTimestamp") and ready(p)
                   and not is_worker(p))

    def name_held(self, revision: str | None) -> bool:
        """Whether an object the serving does not own holds the name of its Service or of this revision's Deployment
        (any child's name, for None)."""
        names = {f"/api/v1/namespaces/{NS}/services/{self.name}"}
        if revision:
            names.add(self.workload_key(revision))
        return any(o["metadata"]["uid"] in self.track.foreign_uids and (revision is None or k in names)
                   for k, o in self.api.store.items())

    def spec_refused(self) -> bool:
        """Whether the operator's settings refuse the spec (the administrator's allow-list, a Prometheus endpoint
        removed, a field an upgraded operator no longer accepts)."""
        spec = render(self.config)
        images = self.settings.default_images or DEFAULT_IMAGES
        image = spec.get("image") or images[spec["engine"]]
        prefixes = self.settings.image_prefixes
        if prefixes and not image.startswith(tuple(prefixes)):
            return True
        acceptance = spec.get("acceptance") or {}
        if acceptance.get("prometheus") and not self.settings.prometheus:
            return True
        return "prometheusUrl" in acceptance


def restarted(workload: dict, at: str) -> dict:
    """`kubectl rollout restart`: the pod templates annotated with the time, so every pod is made again."""
    spec = workload["spec"]
    keys = ("leaderTemplate", "workerTemplate") if "leaderWorkerTemplate" in spec else ("template",)
    holder = spec["leaderWorkerTemplate"] if "leaderWorkerTemplate" in spec else spec
    templates = {}
    for key in keys:
        template = holder.get(key) or {}
        meta = {**(template.get("metadata") or {})}
        meta["annotations"] = {**(meta.get("annotations") or {}), "kubectl.kubernetes.io/restartedAt": at}
        templates[key] = {**template, "metadata": meta}
    if "leaderWorkerTemplate" in spec:
        return {**workload, "spec": {**spec, "leaderWorkerTemplate": {**holder, **templates}}}
    return {**workload, "spec": {**spec, **templates}}


#: tenancy.allowedImagePrefixes values an administrator sets (None: unset, anything goes).
ALLOW_LISTS = [None, ["vllm/", "lmsysorg/"], ["vllm/vllm-openai:v0.33.0"], ["lmsysorg/"], ["registry.internal/"]]
#: The default images of a later release of the operator.
UPGRADED_IMAGES = {"vllm": "vllm/vllm-openai:v0.33.1", "sglang": "lmsysorg/sglang:v0.5.23"}
PROMETHEUS_ENDPOINTS = {"main": "http://prometheus.monitoring:9090"}


class AdminSettings:
    """The operator's chart values that administrators change (tenancy, prometheus.endpoints, drain seconds) and its
    release (default images)."""

    def __init__(self):
        self.image_prefixes: list[str] | None = None
        self.prometheus = True  # prometheus.endpoints has the entry "main" that specs name
        self.drain_seconds: float | None = None
        self.default_images: dict[str, str] | None = None

    def apply_to(self, operator) -> None:
        environ = {ALLOWED_IMAGE_PREFIXES.name: json.dumps(self.image_prefixes) if self.image_prefixes else "",
                   PROMETHEUS_ENDPOINTS_SETTING.name: json.dumps(PROMETHEUS_ENDPOINTS if self.prometheus else {})}
        operator.environ = environ
        operator.default_images = self.default_images
        if self.drain_seconds is not None:
            operator.drain = dt.timedelta(seconds=self.drain_seconds)
