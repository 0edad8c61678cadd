"""End-to-end fixtures: the CRDs installed, the operator running, GPU nodes whose pods really run."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

import pytest
import yaml

from drafter_testbed import harness
from tests.conftest import NAMESPACE_PREFIX, XDIST_WORKER
from tests.processes import free_port

REPO = Path(__file__).resolve().parents[2]
# A GPU product only the test's own process nodes carry, so engine pods land where the emulator runs.
E2E_GPU_PRODUCT = "NVIDIA-H200"


@contextlib.contextmanager
def _whole_cluster(locks: Path, exclusive: bool):
    """A readers-writer lock over the shared cluster: every test holds it shared, a test marked `exclusive`
    (it restarts the apiserver, or installs an operator that watches every namespace) holds it alone. The
    turnstile lets a waiting exclusive test in before tests that arrive after it (flock alone would let a
    stream of shared holders starve it)."""
    from drafter_testbed.cluster import file_lock

    with contextlib.ExitStack() as held:
        with file_lock(locks / "turnstile.lock"):
            held.enter_context(file_lock(locks / "cluster.lock", fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH))
        yield


@pytest.fixture(autouse=True)
def cluster_share(request):
    """Under pytest-xdist the workers share one cluster: `exclusive` tests run alone (and `timing` ones, whose
    wall-clock figures the other workers' load would skew), and tests marked
    `cluster_lock("name")` (they need a node of a product only they use, in a known state) one at a time per
    name. Without workers there is nothing to share and nothing is locked."""
    if not XDIST_WORKER:
        yield
        return
    from drafter_testbed import cluster as local

    locks = local.Layout().root / "test-locks"
    locks.mkdir(parents=True, exist_ok=True)
    names = sorted({marker.args[0] for marker in request.node.iter_markers("cluster_lock")})
    with contextlib.ExitStack() as held:
        alone = any(request.node.get_closest_marker(m) is not None for m in ("exclusive", "timing"))
        held.enter_context(_whole_cluster(locks, alone))
        for name in names:  # sorted: two tests never take two names in opposite orders
            held.enter_context(local.file_lock(locks / f"{name}.lock"))
        yield


@pytest.fixture(scope="session")
def crds(cluster):
    harness.install_crds(cluster.kubectl)
    return True


class OperatorProcess(harness.OperatorProcess):
    """The harness's operator process as the end-to-end tests configure it: it watches only this session's
    namespaces (a glob), measures acceptance every few seconds, knows a Prometheus endpoint, and is kept
    running (`start`) as the chart's Deployment would."""

    #: How often the operator measures a watched serving's acceptance here (production default 15 s).
    ACCEPTANCE_INTERVAL_SECONDS = 2
    #: The Prometheus endpoint name the operator is configured with (as the chart's prometheus.endpoints
    #: would); a test's Prometheus listens on ``prometheus_port`` (drafter_testbed/prometheus.py ``port``).
    PROMETHEUS_ENDPOINT = "default"

    def __init__(self, cluster, log_path: Path, namespaces: str = f"{NAMESPACE_PREFIX}*"):
        self.prometheus_port = free_port()
        env = {"DRAFTER_ACCEPTANCE_INTERVAL_SECONDS": str(self.ACCEPTANCE_INTERVAL_SECONDS),
               "DRAFTER_PROMETHEUS_ENDPOINTS": json.dumps(
                   {self.PROMETHEUS_ENDPOINT: f"http://127.0.0.1:{self.prometheus_port}"})}
        if cluster.local:
            env["DRAFTER_TRAINING_CPU"] = "1"  # no GPU: training stages take the CPU adapters
        super().__init__(cluster, log_path, namespaces=[namespaces], env=env)

    def start(self) -> None:
        super().start(keep_running=True)


def _pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@contextlib.contextmanager
def _demo_operator_held_down(cluster):
    """One operator per cluster: the demo's would reconcile the same objects as the one under test. The demo
    installs it with the chart: the first session worker scales its Deployment to zero and records the replicas it
    found, the last one to end scales it back to them (tests/support/demo_operator.py), so a demo running before
    `./dev test` runs again after it. Nothing is restored that no session scaled down."""
    from drafter_testbed import cluster as local
    from drafter_testbed.demo import OPERATOR_NAMESPACE, OPERATOR_RELEASE
    from tests.support import demo_operator

    layout = local.Layout()
    record, deployment = layout.root / "demo-operator-paused.json", f"deployment/{OPERATOR_RELEASE}"

    def replicas(count: int) -> None:
        cluster.kubectl("-n", OPERATOR_NAMESPACE, "scale", deployment, f"--replicas={count}", check=False)

    def update(change) -> None:
        with local.file_lock(layout.root / "demo-operator.lock"):
            paused = json.loads(record.read_text()) if record.exists() else None
            paused, scale_to = change(paused)
            if paused is None:
                record.unlink(missing_ok=True)
            else:
                record.write_text(json.dumps(paused))
            if scale_to is not None:
                replicas(scale_to)

    def found() -> int | None:
        out = cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", deployment, "-o", "json", check=False)
        return json.loads(out.stdout)["spec"].get("replicas", 1) if out.returncode == 0 else None

    def enter(paused):
        paused, scale_down = demo_operator.enter(paused, os.getpid(), _pid_alive, found())
        return paused, 0 if scale_down else None

    update(enter)
    try:
        yield
    finally:
        update(lambda paused: demo_operator.leave(paused, os.getpid(), _pid_alive))


@pytest.fixture(scope="session")
def operator(cluster, crds, tmp_path_factory):
    """The operator under test, a process watching this session's namespaces. On the local cluster the demo's
    operator, if one runs, is held at zero replicas meanwhile and given its replicas back when the session's last
    worker ends; a process started by an older demo is stopped."""
    with contextlib.ExitStack() as held:
        if cluster.local:
            from drafter_testbed import cluster as local, processes
            from drafter_testbed.demo import LEGACY_OPERATOR_PROCESS

            processes.stop(LEGACY_OPERATOR_PROCESS, local.Layout().run)
            held.enter_context(_demo_operator_held_down(cluster))
        handle = OperatorProcess(cluster, tmp_path_factory.mktemp("operator") / "operator.log")
        handle.start()
        yield handle
        handle.stop()


@pytest.fixture
def own_namespace(local_cluster_only, crds):
    """A namespace outside the session operator's prefix, for operator processes a test runs itself
    (tests/support/operator_candidates.py) with their Leases in it: they exclude each other and nobody else."""
    from tests.support.e2e_chart import delete_namespaces, make_namespace

    namespace = make_namespace(local_cluster_only, "lease-e2e")
    yield local_cluster_only, namespace
    delete_namespaces(local_cluster_only, namespace)


def process_gpu_nodes(cluster, product: str, count: int, prefix: str) -> list[str]:
    """``count`` 8-GPU nodes of ``product`` run by the local process runner, per xdist worker (the GPUs its tests
    fill are its own): those already there under the worker's prefix, and new ones for the rest."""
    prefix = f"{prefix}-{XDIST_WORKER}" if XDIST_WORKER else prefix
    existing = [n["metadata"]["name"] for n in cluster.get_json(
        "nodes", "-l", f"nvidia.com/gpu.product={product},drafter.dev/node-runtime=process")["items"]
        if n["metadata"]["name"].rsplit("-", 1)[0] == prefix]
    if len(existing) < count:
        from drafter_testbed import cluster as local

        existing += local.add_nodes(count - len(existing), "process", 8, product, prefix)
    return existing


@pytest.fixture(scope="session")
def engine_nodes(local_cluster_only):
    """Two 8-GPU nodes run by the local process runner (engine pods become emulator processes); a BlueGreen
    swap holds two revisions."""
    return process_gpu_nodes(local_cluster_only, E2E_GPU_PRODUCT, 2, "e2e-gpu")


@pytest.fixture
def model_volume(cluster, namespace):
    """A pre-bound PersistentVolume + claim `models` (no provisioner runs on the local cluster)."""
    from drafter_testbed.volumes import static_claim

    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(static_claim(namespace, "models", f"/tmp/drafter-e2e/{namespace}")))
    yield "models"
    cluster.kubectl("delete", "pv", f"{namespace}-models", "--wait=false", check=False)


def emulator_settings(cluster, namespace: str, **env: str) -> None:
    """Tune the engine emulator for the pods of one namespace (see drafter_testbed/launch.py)."""
    from drafter_testbed.launch import EMULATOR_CONFIGMAP, EMULATOR_ENV_PREFIX

    data = {f"{EMULATOR_ENV_PREFIX}{k.upper()}": v for k, v in env.items()}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": EMULATOR_CONFIGMAP, "namespace": namespace},
          "data": data}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(cm))


@pytest.fixture
def fast_engines(cluster, namespace, operator, engine_nodes, model_volume):
    """The cluster, a namespace whose engine pods run ten times faster than real time (same token counts
    and ratios, shorter tests) and start in 2 s, and the session's operator."""
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="2")
    return cluster, namespace, operator


#: How many of the session operator's log lines naming the test's namespace a failure report carries.
FAILURE_LOG_LINES = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed end-to-end test says what the cluster and the session's operator knew of its namespace: the
    operator's log lines naming it (and whether the process restarted), the namespace's objects and Events. A
    wait that timed out says only "last: False"; this is what explains it once the run's temp files are gone."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    cluster, namespace, operator = funcargs.get("cluster"), funcargs.get("namespace"), funcargs.get("operator")
    if cluster is None or not isinstance(namespace, str):
        return
    if isinstance(operator, OperatorProcess):
        lines = operator.log_path.read_text(errors="replace").splitlines() if operator.log_path.exists() else []
        named = [line for line in lines if namespace in line or line.startswith("[test supervisor]")]
        report.sections.append((f"session operator's log lines naming {namespace} (restarts: {operator.restarts})",
                                "\n".join(named[-FAILURE_LOG_LINES:]) or "none"))
    for what, args in (("objects", ("get", "drafterservings,drafterbenchmarks,deployments,pods", "-o", "wide")),
                       ("events", ("get", "events", "--sort-by=.lastTimestamp"))):
        found = cluster.kubectl("-n", namespace, *args, check=False)
        report.sections.append((f"{namespace}: {what}", (found.stdout + found.stderr)[-6000:]))
