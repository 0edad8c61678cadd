"""`drafter-operator run`: start kopf with our handlers, the operator's /metrics and kopf's /healthz."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from dataclasses import dataclass

import kopf
from prometheus_client import start_http_server

from drafter_operator import logs, memory_release
from drafter_operator.constants import OPERATOR_METRICS_PORT
from drafter_operator.controllers import leadership, sharding
from drafter_operator.settings import MEMORY_RELEASE_SECONDS, SettingError


@dataclass(frozen=True)
class Address:
    """Where a server listens: ``host`` and ``port`` (0: the server is off)."""

    host: str = "0.0.0.0"
    port: int = 0


@dataclass(frozen=True)
class LeaderElection:
    """Whether the operator acts only while it holds a Lease (``enabled``), which one (``lease_namespace``,
    default: leader_election.default_lease_namespace; ``lease_name``, default: named after the scope, see
    leadership.lease_name) and its ``timings`` (lease duration, renew deadline, retry period; default:
    client-go's). ``shards`` above 1 splits the objects between that many leaders, each holding a Lease of its own
    (sharding.py); a process leads one shard at most, and a replica beyond the count stands by for any of them."""

    enabled: bool = True
    lease_namespace: str | None = None
    lease_name: str | None = None
    timings: leadership.Timings = leadership.Timings()
    shards: int = 1


def run(namespaces: list[str], metrics: Address = Address(port=OPERATOR_METRICS_PORT), health: Address = Address(),
        leader_election: LeaderElection = LeaderElection(), verbose: bool = False, log_format: str = "text") -> int:
    """Run until interrupted. `namespaces` empty: cluster-wide; else only those (namespaced mode).

    `metrics`: where the operator's /metrics listens (port 0: off). `health`: serve a liveness endpoint
    (`/healthz`) for the pod's probes; port 0 leaves it off. kopf's answers while the operator leads (200
    while its event loop answers); before, the stand-by's does.

    `leader_election`: when enabled, act only while holding its Lease, so a second operator for the same
    scope stands by instead of acting too (docs/reliability.md).
    `log_format`: text or json (JSON lines, logs.py).

    Exits 2 before kopf starts when the apiserver denies a permission the operator needs where it is to
    act (permissions.py), naming each denied permission and the fix, or when the Lease's namespace does
    not exist; 3 when it loses the Lease."""
    from drafter_operator.controllers import handlers  # noqa: F401 - registers the handlers
    from drafter_operator.controllers import leader_election as election
    from drafter_operator.monitoring import operator_metrics

    leases: list[leadership.LeaseRef] = []
    if leader_election.enabled:
        lease_namespace = leader_election.lease_namespace or election.default_lease_namespace()
        base = leader_election.lease_name or leadership.lease_name(namespaces)
        leases = [leadership.LeaseRef(lease_namespace, name)
                  for name in sharding.lease_names(base, leader_election.shards)]
    elif leader_election.shards != 1:
        print("drafter-operator run: --shards needs leader election (a Lease per shard): drop "
              "--no-leader-election", file=sys.stderr)
        return 2
    refused = startup_problem(namespaces, leases[0].namespace if leases else None)
    if refused is not None:
        print(refused, file=sys.stderr)
        return 2
    release_seconds = memory_release_seconds()
    if isinstance(release_seconds, str):
        print(release_seconds, file=sys.stderr)
        return 2
    start_side_services(log_format, verbose, metrics, release_seconds)
    liveness = f"http://{health.host}:{health.port}/healthz" if health.port else None
    if not leases:
        operator_metrics.set_leader(True)
        operator_metrics.set_shard(sharding.WHOLE)
        asyncio.run(kopf.operator(namespaces=namespaces, clusterwide=not namespaces, standalone=True,
                                  liveness_endpoint=liveness))
        return 0
    return run_leading(namespaces, liveness, leases, leader_election.timings, health)


def startup_problem(namespaces: list[str], lease_namespace: str | None) -> str | None:
    """What stops the operator before kopf starts: a permission the apiserver denies where it is to act
    (permissions.py, each denied permission and the fix), or a malformed tenant setting."""
    from drafter_operator import permissions
    from drafter_operator.kube import Kube, load_api_client

    missing = permissions.missing_access(Kube(load_api_client()), namespaces, lease_namespace)
    if missing:
        return permissions.explain_missing(missing, namespaces)
    # What tenants may use (chart values prometheus.endpoints and tenancy.*): a malformed value stops the
    # operator here, with the variable named, rather than refusing every serving later.
    from drafter_operator.acceptance import prometheus_source
    from drafter_operator.resources.pod_policy import TenantPolicy
    try:
        prometheus_source.endpoints_from_env()
        TenantPolicy.from_env()
    except ValueError as exc:
        return f"drafter-operator: {exc}"
    return None


def memory_release_seconds() -> float | str:
    """How often freed memory goes back to the kernel (memory_release.py; 0: never), or why the setting
    DRAFTER_MEMORY_RELEASE_SECONDS is refused."""
    try:
        return MEMORY_RELEASE_SECONDS.read()
    except SettingError as exc:
        return (f"drafter-operator: {exc.name}={exc.raw!r} is not a number of seconds; "
                f"set it to e.g. 60, or 0 to turn the periodic release of freed memory off")


def start_side_services(log_format: str, verbose: bool, metrics: Address, release_seconds: float) -> None:
    """Logging, the operator's /metrics (port 0: off) and the periodic release of the memory a cold start
    leaves freed (0: off)."""
    logs.configure(log_format, verbose)
    if metrics.port:
        start_http_server(metrics.port, addr=metrics.host)
    if release_seconds > 0:
        memory_release.PeriodicRelease(release_seconds).start()


def run_leading(namespaces: list[str], liveness: str | None, leases: list[leadership.LeaseRef],
                lease_timings: leadership.Timings, health: Address) -> int:
    """Stand by until this process holds a Lease (``leases``: one per shard, sharding.lease_names), then run kopf
    for that shard while renewing it; release it once nothing acts any more. 0 on a signal, 2 when the Leases'
    namespace does not exist."""
    from drafter_operator.controllers import leader_election as election
    from drafter_operator.kube import Kube, load_api_client

    # Its own client: the lease traffic stays out of drafter_operator_api_requests, the reconciles' figure.
    kube, identity = Kube(load_api_client()), election.holder_identity()
    shards = election.ShardElection([election.LeaderElector(kube, lease, identity, timings=lease_timings)
                                     for lease in leases])
    stop = threading.Event()  # SIGTERM or SIGINT while standing by
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    standby = election.StandbyHealth(health.host, health.port, shards.where) if health.port else None
    try:
        index = shards.acquire(stop)
    except election.LeaseNamespaceMissing as exc:
        print(f"drafter-operator: {exc}", file=sys.stderr)
        return 2
    finally:
        if standby:
            standby.stop()  # kopf serves /healthz on the same port from here on
    if index is None:
        return 0
    elector = shards.electors[index]
    elector.start_renewing()
    memo = kopf.Memo()
    memo.shard = sharding.Shard(index, len(leases))  # what every handler's filter asks (handlers.py)
    try:
        asyncio.run(lead(namespaces, liveness, memo, tuple(previous), stop))
    finally:
        # Release only once nothing acts for this process: kopf has stopped its handlers, and the reconciles
        # its cleanup left running in the pool finish while the renewer still holds the Lease.
        pool = getattr(memo, "reconcile_pool", None)
        if pool is not None:
            pool.shutdown(wait=True)
        elector.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


async def lead(namespaces: list[str], liveness: str | None, memo: kopf.Memo, signals: tuple[signal.Signals, ...],
               stop: threading.Event) -> None:
    """Run kopf until it ends or a signal comes. A signal before kopf installs its own handlers (it replaces
    these) cancels kopf. Not kopf's stop_flag: kopf leaves that flag's waiter running after a signal and
    then waits 5 s for it."""
    loop = asyncio.get_running_loop()
    early = asyncio.Event()
    for sig in signals:
        loop.add_signal_handler(sig, early.set)
    if stop.is_set():  # a signal that came while acquiring
        return
    operator = asyncio.create_task(kopf.operator(namespaces=namespaces, clusterwide=not namespaces,
                                                 standalone=True, liveness_endpoint=liveness, memo=memo))
    signalled = asyncio.create_task(early.wait())
    await asyncio.wait({operator, signalled}, return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    if not operator.done():
        operator.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await operator
