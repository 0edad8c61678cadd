"""Leader election against the apiserver: leadership.py's decisions, applied to a real Lease.

`drafter-operator run` acquires the Lease before kopf starts (controllers/runner.py). While it stands
by it serves /healthz (so the pod's probes pass and a rolling upgrade proceeds) and runs no handler.
Once it leads, a renewer thread renews every retryPeriod and a watchdog thread ends the process
(`os._exit`, exit status 3) the moment the renew deadline passes or a renewal finds the Lease lost,
so no handler acts after the deadline even when the event loop is busy or a request hangs: the pod
restarts and stands by. Both are threads, not asyncio tasks, so a blocked event loop cannot delay
them. A clean stop (SIGTERM) releases the Lease after kopf has stopped and the running reconciles
have finished, so a successor takes over within one retryPeriod.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import random
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from drafter_operator import settings
from drafter_operator.controllers import sharding
from drafter_operator.controllers.leadership import (
    LEASE_API, Action, Decision, LeaseRef, LeaseState, Memory, Timings, decide, lease_manifest, released_manifest,
    request_timeout)
from drafter_operator.kube import ApiError, Kube, object_path
from drafter_operator.monitoring import operator_metrics

log = logging.getLogger(__name__)

#: `drafter-operator run`'s exit status after losing the Lease (2 is the start-up permission check).
EXIT_LOST_LEADERSHIP = 3
#: In a pod, where the ServiceAccount's namespace is mounted (client-go reads the same file).
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: How often the watchdog looks at the renew deadline: a fraction of the 5 s between the deadline and
#: the earliest takeover by another candidate.
WATCHDOG_SECONDS = 0.25


def clock() -> float:
    """Seconds on a clock that keeps counting while the machine is suspended (CLOCK_BOOTTIME on Linux):
    a laptop resumed after an hour must see its deadline long passed, as CLOCK_MONOTONIC would not."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def holder_identity() -> str:
    """Who holds the Lease, for people reading it: the pod (or host) name, the pid and a random suffix,
    so two processes on one host, or a restarted container with the same pid, never share a name."""
    return f"{settings.POD_NAME.read() or socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


def default_lease_namespace() -> str:
    """POD_NAMESPACE (the chart sets it from the downward API), else the pod's ServiceAccount namespace,
    else the kubeconfig's current context's namespace, else "default"."""
    namespace = settings.POD_NAMESPACE.read()
    if namespace:
        return namespace
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        pass
    try:
        from kubernetes import config

        # The library reads KUBECONFIG once, at import; the loader itself takes a colon-separated list.
        _, current = config.list_kube_config_contexts(settings.KUBECONFIG.read() or None)
        return (current or {}).get("context", {}).get("namespace") or "default"
    except Exception:  # no kubeconfig (the apiserver check in `run` reports that on its own)
        return "default"


class LeaseNamespaceMissing(Exception):
    """The Lease cannot be created: its namespace does not exist (a start-up error, not a retry)."""


def _exit_lost(reason: str) -> None:
    print(f"drafter-operator: lost leadership: {reason}; exiting (status {EXIT_LOST_LEADERSHIP}) so that no "
          "handler acts any more", file=sys.stderr, flush=True)
    os._exit(EXIT_LOST_LEADERSHIP)


class LeaderElector:
    """One candidate for one Lease. `acquire` (main thread), then `start_renewing`, then `release`."""

    def __init__(self, kube: Kube, lease: LeaseRef, identity: str, timings: Timings = Timings(),
                 now: Callable[[], float] = clock, on_lost: Callable[[str], None] = _exit_lost):
        self.kube, self.lease, self.identity, self.timings = kube, lease, identity, timings
        self.namespace, self.name = lease.namespace, lease.name
        self.now, self.on_lost = now, on_lost
        self.memory = Memory()
        self.seen: LeaseState | None = None  # the Lease as last read
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_holder: str | None = None
        operator_metrics.set_leader(False)

    @property
    def where(self) -> str:
        return str(self.lease)

    def _path(self, name: str | None = None) -> str:
        return object_path(LEASE_API, "leases", self.namespace, name)

    def _request_timeout(self) -> float:
        return request_timeout(self.memory, self.now(), self.timings)

    def _read(self) -> LeaseState | None:
        try:
            lease = self.kube.request("GET", self._path(self.name), timeout=self._request_timeout())
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return LeaseState.from_manifest(lease)

    def step(self) -> Decision:
        """One round: read the Lease, decide, write what the decision says; `self.memory` records it."""
        try:
            lease = self._read()
        except Exception as exc:  # the apiserver unreachable or slow: the deadline decides, not this round
            if self.memory.leading and self.now() - self.memory.renewed_at >= self.timings.renew_deadline:
                return Decision(Action.LOST, self.memory, f"cannot read the Lease ({exc}) past the renew deadline")
            log.warning("leader election: cannot read the Lease %s: %s", self.where, exc)
            return Decision(Action.WAIT, self.memory, f"cannot read the Lease: {exc}")
        self.seen = lease
        decision = decide(lease, self.memory, self.identity, self.now(), self.timings)
        self.memory = decision.memory
        if decision.action in (Action.CREATE, Action.TAKE_OVER, Action.RENEW):
            self._write(decision, lease)
        return decision

    def _write(self, decision: Decision, lease: LeaseState | None) -> None:
        body = lease_manifest(decision.action, self.lease, self.identity, self.timings,
                              dt.datetime.now(dt.timezone.utc), lease)
        sent_at = self.now()  # the lease counts from here: no later than the apiserver stores it
        try:
            if decision.action is Action.CREATE:
                self.kube.request("POST", self._path(), body, timeout=self._request_timeout())
            else:
                self.kube.request("PUT", self._path(self.name), body, timeout=self._request_timeout())
        except ApiError as exc:
            if exc.status == 404 and decision.action is Action.CREATE:
                raise LeaseNamespaceMissing(
                    f"the Lease namespace {self.namespace} does not exist: create it, or pass --lease-namespace "
                    "(the chart's release namespace by default)") from exc
            if exc.status == 409:  # another candidate wrote first (AlreadyExists or Conflict): read again
                log.info("leader election: another candidate wrote the Lease %s first (%s)", self.where,
                         decision.action.value)
            else:
                log.warning("leader election: %s of the Lease %s failed: %s", decision.action.value, self.where, exc)
            return
        except Exception as exc:  # a timeout or a dropped connection: whether it landed is unknown
            log.warning("leader election: %s of the Lease %s failed: %s", decision.action.value, self.where, exc)
            return
        self.memory = self.memory.written(sent_at)

    def acquire(self, stop: threading.Event) -> bool:
        """Try every retryPeriod (jittered, as client-go) until this process leads (True) or `stop` is set.
        Raises LeaseNamespaceMissing when there is nowhere to create the Lease. The election of one shard."""
        return ShardElection([self]).acquire(stop) is not None

    def note_standby(self, decision: Decision) -> None:
        """Log who holds the Lease while this process stands by, once per holder."""
        holder = self.seen.holder if self.seen else None
        if decision.action is Action.WAIT and holder and holder != self._last_holder:
            self._last_holder = holder
            log.info("leader election: standing by as %s, the Lease %s is held by %s", self.identity, self.where,
                     holder)

    def start_renewing(self) -> None:
        """Renew every retryPeriod in one thread; end the process from another once the deadline passes."""
        self._threads = [threading.Thread(target=self._renew_forever, name="lease-renewer", daemon=True),
                         threading.Thread(target=self._watch_deadline, name="lease-watchdog", daemon=True)]
        for thread in self._threads:
            thread.start()

    def _renew_forever(self) -> None:
        while not self._stopped.wait(self.timings.retry_period):
            decision = self.step()
            if decision.action is Action.LOST:
                self.on_lost(f"{decision.reason} (Lease {self.where})")
                return

    def _watch_deadline(self) -> None:
        while not self._stopped.wait(WATCHDOG_SECONDS):
            renewed_at = self.memory.renewed_at
            if renewed_at is not None and self.now() - renewed_at >= self.timings.renew_deadline:
                self.on_lost(f"no renewal of the Lease {self.where} succeeded within the renew deadline "
                             f"({self.timings.renew_deadline:g} s)")
                return

    def release(self) -> bool:
        """Stop renewing and, if the Lease still names us, clear its holder. Call only once nothing acts
        for this process any more. True when released."""
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=3 * self.timings.retry_period)
        operator_metrics.set_leader(False)
        if not self.memory.leading or self.now() - self.memory.renewed_at >= self.timings.renew_deadline:
            return False
        self.memory = Memory()
        try:
            lease = self._read()
            if lease is None or lease.holder != self.identity:
                return False
            self.kube.request("PUT", self._path(self.name),
                              released_manifest(self.lease, dt.datetime.now(dt.timezone.utc), lease),
                              timeout=self._request_timeout())
        except Exception as exc:  # the successor then waits for the Lease to expire instead
            log.warning("leader election: could not release the Lease %s: %s", self.where, exc)
            return False
        log.info("leader election: released the Lease %s", self.where)
        return True


class ShardElection:
    """One candidate for any of the shards' Leases (sharding.lease_names): each round it steps every shard's
    elector in turn, shard 0 first, and leads the first one it takes; a replica holds at most one shard. Of
    replicas starting together, each takes the lowest shard nobody holds (a lost race is a 409, and the
    loser goes on to the next shard in the same round); a standby takes whichever shard's Lease expires or is
    released first."""

    def __init__(self, electors: list[LeaderElector]):
        if not electors:
            raise ValueError("a shard election needs at least one Lease")
        self.electors = electors
        operator_metrics.set_shard_count(len(electors))

    @property
    def where(self) -> str:
        if len(self.electors) == 1:
            return self.electors[0].where
        return f"one of {', '.join(e.where for e in self.electors)}"

    def acquire(self, stop: threading.Event) -> int | None:
        """Try every retryPeriod (jittered, as client-go) until this process leads one shard (its index) or `stop`
        is set (None). Raises LeaseNamespaceMissing when there is nowhere to create the Leases."""
        retry = self.electors[0].timings.retry_period
        while not stop.is_set():
            index = self.try_once(stop)
            if index is not None:
                return index
            stop.wait(retry * random.uniform(1.0, 1.2))
        return None

    def try_once(self, stop: threading.Event | None = None) -> int | None:
        """One round: step each shard's elector in turn until one leads (its index; the rest are not tried)."""
        for index, elector in enumerate(self.electors):
            if stop is not None and stop.is_set():
                return None
            decision = elector.step()
            if elector.memory.leading:
                operator_metrics.set_shard(sharding.Shard(index, len(self.electors)))
                operator_metrics.set_leader(True)
                shard = f"shard {index} of {len(self.electors)} " if len(self.electors) > 1 else ""
                log.info("leader election: leading %sthrough the Lease %s as %s (%s)", shard, elector.where,
                         elector.identity, decision.reason)
                return index
            elector.note_standby(decision)
        return None


class StandbyHealth:
    """/healthz while the process stands by: 200 with who holds the Lease, so liveness and readiness
    probes pass (a rolling upgrade proceeds) without kopf running. Stopped before kopf serves the port."""

    def __init__(self, host: str, port: int, where: str):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/healthz":
                    self.send_error(404)
                    return
                body = json.dumps({"leaderElection": "standby", "lease": where}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # probes every few seconds: not worth a log line each
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="standby-health", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
