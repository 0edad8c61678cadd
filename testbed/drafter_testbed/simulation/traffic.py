"""Client traffic through the serving's Service: streams on pods, cut streams, failed requests.

Load is continuous while `on` (a request every few seconds, each a stream of up to 4,000 tokens at
12 ms/token, about 48 s; `stream_seconds`, longer in spells of long streams: agents, long generations).
So, without tracking each request: a pod has a stream in flight while it is an endpoint of the Service
(Ready, not terminating, matched by the selector) and for the stream length after it stopped being one,
and a stream is cut when such a pod is deleted; a stream stays on the pod it started on even when the
selector moves away (connection-level). The engines report those streams as requests running
(`in_flight_at`, what monitoring/in_flight.py reads from each pod's /metrics): 0 once they are done,
None when a pod cannot be read (a metrics fault, or an IP no pod has any more). A request fails
whenever the Service selects no Ready pod: an outage, recorded from its start to its end with what
was going on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drafter_operator.resources.labels import REVISION_LABEL

STREAM_SECONDS = 4000 * 0.012
INF = float("inf")


@dataclass
class Cut:
    t: float
    pod: str
    revision: str | None
    cause: str
    strategy: str
    left_at: float | None = None  # when traffic left the pod (None: it was still an endpoint)


@dataclass
class Outage:
    start: float
    end: float | None = None
    context: dict = field(default_factory=dict)


class Traffic:
    def __init__(self, world):
        self.world = world
        self.on = True
        self.endpoints: set[str] = set()
        self.last_served: dict[str, float] = {}  # pod key -> last moment it was an endpoint (INF: it is one)
        self.busy_until: dict[str, float] = {}  # pod key -> when its last stream ends (INF: an endpoint now)
        self.stream_seconds = STREAM_SECONDS  # the longest stream a client starts now
        self.unreadable = False  # the engines' in-flight counts cannot be read (a metrics fault)
        self.cuts: list[Cut] = []
        self.outage: Outage | None = None
        self.outages: list[Outage] = []

    def service(self) -> dict | None:
        w = self.world
        return w.api.store.get(f"/api/v1/namespaces/{w.namespace}/services/{w.name}")

    def update(self) -> None:
        """Recompute the Service's endpoints (call after any pod or Service change)."""
        t = self.world.clock.t
        service = self.service()
        selector = ((service or {}).get("spec") or {}).get("selector") or None
        now: set[str] = set()
        if selector:
            prefix = f"/api/v1/namespaces/{self.world.namespace}/pods/"
            for key, pod in self.world.api.store.items():
                if key.startswith(prefix) and not pod["metadata"].get("deletionTimestamp") and \
                        pod["status"].get("podIP") and _ready(pod):
                    labels = pod["metadata"].get("labels") or {}
                    if all(labels.get(k) == v for k, v in selector.items()):
                        now.add(key)
        for key in self.endpoints - now:
            self.last_served[key] = t
            self.busy_until[key] = t + self.stream_seconds
        for key in now:
            self.last_served[key] = INF
            self.busy_until[key] = INF
        self.endpoints = now
        if now and service is not None:
            # Served by this serving: its own Service routing to pods of its own Deployments (not those of a
            # deleted serving of the same name that the garbage collector has not reached yet).
            serving = self.world.serving()
            uid = serving["metadata"]["uid"] if serving else None
            store, by_uid = self.world.api.store, self.world.api.by_uid
            if uid and any(r.get("uid") == uid for r in service["metadata"].get("ownerReferences") or []) and any(
                    any(r.get("uid") == uid for r in store.get(by_uid.get(_owner(store[k]) or ""), {}).get(
                        "metadata", {}).get("ownerReferences") or []) for k in now):
                self.world.track.ever_ready[uid] = True
        if service is not None and not now and self.on:
            if self.outage is None:
                self.outage = Outage(t, context=self.world.outage_context())
        elif self.outage is not None:
            self.outage.end = t
            self.outage.context["end"] = self.world.outage_context()
            self.outages.append(self.outage)
            self.outage = None

    def pod_going(self, key: str, pod: dict, cause: str) -> None:
        """A pod is deleted (terminating) or vanished: its in-flight streams are cut."""
        t = self.world.clock.t
        last = self.last_served.pop(key, None)
        busy = self.busy_until.pop(key, None)
        if last is not None and busy is not None and busy > t and self.on:
            self.cuts.append(Cut(t, pod["metadata"]["name"], (pod["metadata"].get("labels") or {}).get(REVISION_LABEL),
                                 cause, self.world.config.get("strategy", "Recreate"), None if last == INF else last))

    def in_flight_at(self, ips: list[str]) -> int | None:
        """Requests running on the pods at these IPs, as monitoring/in_flight.requests_in_flight sums them: None when
        any pod cannot be read, 0 for no pod at all."""
        if not ips:
            return 0
        if self.unreadable:
            return None
        t = self.world.clock.t
        prefix = f"/api/v1/namespaces/{self.world.namespace}/pods/"
        by_ip = {p["status"].get("podIP"): k for k, p in self.world.api.store.items()
                 if k.startswith(prefix) and p["status"].get("podIP")}
        total = 0
        for ip in ips:
            key = by_ip.get(ip)
            if key is None:
                return None  # no pod answers at this IP (a ghost the view kept): connection refused
            total += 1 if self.busy_until.get(key, 0.0) > t else 0
        return total


def _owner(obj: dict) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return refs[0].get("uid") if refs else None


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or [])
