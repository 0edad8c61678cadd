"""The one harness that starts clusters and operators: the tests (tests/conftest.py, tests/e2e/conftest.py),
the bench scripts (bench/serving_scale.py and the scripts built on it) and the demo use it.

- ``Cluster``: a cluster reached through a kubeconfig with the pinned kubectl (run it, read JSON, poll).
- ``start_local``: the embedded local cluster, started, or reused when it runs already.
- ``install_crds``: the CRDs applied and Established.
- ``OperatorProcess``: `drafter-operator run` as a subprocess, kept running as a Deployment would when asked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drafter_testbed import cluster as local
from drafter_testbed.processes import free_port
from drafter_testbed.reads import ApiReads, ReadFailed
from drafter_testbed.versions import bin_dir


class KubectlError(AssertionError):
    """A kubectl call that failed. An AssertionError, so a test that meets one fails rather than errors
    (pytest's distinction between a wrong result and a broken test)."""


@dataclass
class Cluster:
    kubeconfig: str
    local: bool  # the embedded cluster with a process runner (pods really run)
    bin_dir: Path
    _reads: ApiReads | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.kubeconfig, "PATH": f"{self.bin_dir}:{os.environ['PATH']}"}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(self.bin_dir / "kubectl"), *args], input=input, capture_output=True,
                              text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def get_json(self, *args: str) -> dict:
        """`kubectl get <args> -o json`'s answer; the plain forms are read over a kept-alive connection instead of
        a kubectl process each (reads.py says why), the others run kubectl."""
        if self._reads is None:
            self._reads = ApiReads(self.kubeconfig)
        try:
            answer = self._reads.get(args)
        except ReadFailed as failed:
            raise KubectlError(f"kubectl get {' '.join(args)} -o json failed (1): {failed}") from None
        return answer if answer is not None else json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def api_client(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig)

    def wait_for(self, what: str, predicate, timeout: float = 60, interval: float = 0.5):
        """Poll `predicate` until it returns something truthy; fail with `what` on timeout."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    def add_nodes(self, count: int, runtime: str, gpus: int = 8, prefix: str | None = None,
                  gpu_product: str | None = None) -> list[str]:
        """Register simulated GPU nodes (the embedded local cluster only)."""
        if not self.local:
            raise local.ClusterError("adding simulated GPU nodes needs the embedded local cluster")
        from drafter_testbed.nodes import DEFAULT_GPU_PRODUCT

        return local.add_nodes(count, runtime, gpus, gpu_product or DEFAULT_GPU_PRODUCT, prefix)


def external(kubeconfig: str, kind: type[Cluster] = Cluster) -> Cluster:
    """The cluster a kubeconfig points at (as ``kind``, a Cluster or a subclass); pods there are not run by
    the local process runner."""
    return kind(kubeconfig=kubeconfig, local=False, bin_dir=bin_dir())


def start_local(layout: local.Layout | None = None, kind: type[Cluster] = Cluster,
                audit: bool = False, join_later: bool = False) -> tuple[Cluster, bool]:
    """The embedded local cluster (as ``kind``), and whether this call started it (False: it ran already
    and is reused). Under the cluster's lock: parallel callers (pytest-xdist workers) start one cluster and
    share it. ``audit``: a cluster this call starts writes the apiserver's audit log; ``join_later``: it starts
    without the components still being built elsewhere (both: cluster.up)."""
    layout = layout or local.Layout()
    was_running = local.is_up(layout)
    local.up(layout=layout, audit=audit, join_later=join_later)
    return kind(kubeconfig=str(layout.kubeconfig), local=True, bin_dir=bin_dir()), not was_running


def install_crds(kubectl: Callable[..., object], timeout_seconds: int = 60) -> None:
    """Apply the CRDs and wait until the apiserver serves them. Rendered from the API models, as
    `drafter-operator crds` writes crds/ (the drift test keeps the two equal), so this works from an
    installed package as well as from a checkout. ``kubectl(*args, input=...)`` runs kubectl, failing on error."""
    from drafter_operator.api import KINDS
    from drafter_operator.constants import API_GROUP
    from drafter_operator.api.generate import render_crd

    for kind in KINDS:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=render_crd(kind))
    kubectl("wait", "--for=condition=Established", f"--timeout={timeout_seconds}s",
            *[f"crd/{kind.plural}.{API_GROUP}" for kind in KINDS])


class OperatorError(RuntimeError):
    """The operator process did not come up."""


class OperatorProcess:
    """`drafter-operator run` as a subprocess against ``cluster`` (anything with an ``env`` of KUBECONFIG
    and PATH), in its own process group, its /metrics on 127.0.0.1:``metrics_port``.

    ``start(keep_running=True)`` restarts it as the chart's Deployment would when it exits on its own (it
    loses its Lease while a test restarts the apiserver, as it must): each restart is counted in
    ``exit_codes`` and written to its log. ``stop`` ends that."""

    def __init__(self, cluster, log_path: Path, *, namespaces: Sequence[str] = (), env: dict[str, str] | None = None,
                 announce: Callable[[str], None] | None = None):
        self.cluster, self.log_path = cluster, Path(log_path)
        self.namespaces = list(namespaces)  # empty: every namespace
        self.env = dict(env or {})
        self.announce = announce  # also told of each restart (a bench's progress log), beside the operator's log
        self.metrics_port = free_port()
        # What runs `drafter-operator run` (bench/fleet_scale.py --heap-snapshots runs it under a heap profiler).
        self.command: list[str] = [sys.executable, "-m", "drafter_operator.cli", "run"]
        self.extra_args: list[str] = []  # more `drafter-operator run` options
        self.proc: subprocess.Popen | None = None
        self.exit_codes: list[int] = []  # of the exits it was not told to make
        self._lock, self._wanted, self._watcher = threading.Lock(), False, None

    @property
    def restarts(self) -> int:
        return len(self.exit_codes)

    def argv(self) -> list[str]:
        namespaces = [arg for namespace in self.namespaces for arg in ("--namespace", namespace)]
        return [*self.command, "--metrics-port", str(self.metrics_port), "--metrics-host", "127.0.0.1",
                *namespaces, *self.extra_args]

    def start(self, keep_running: bool = False, wait_seconds: float | None = None) -> None:
        """Start it; with ``wait_seconds``, return only once its /metrics answers (OperatorError if it
        exits or stays silent that long)."""
        with self._lock:
            self._wanted = True
            self._spawn()
        if keep_running and self._watcher is None:
            self._watcher = threading.Thread(target=self._keep_running, name="operator-supervisor", daemon=True)
            self._watcher.start()
        if wait_seconds is not None:
            self.wait_serving(wait_seconds)

    def _spawn(self) -> None:
        env = {**self.cluster.env, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def _keep_running(self) -> None:
        while True:
            time.sleep(0.5 if not self.restarts else 2.0)  # a little back-off once it has crashed, as a kubelet's
            with self._lock:
                if self._wanted and self.proc is not None and self.proc.poll() is not None:
                    self.exit_codes.append(self.proc.returncode)
                    message = (f"the operator exited with status {self.proc.returncode}; "
                               f"restart {self.restarts}")
                    with open(self.log_path, "a") as log:
                        log.write(f"[test supervisor] {message}\n")
                    if self.announce:
                        self.announce(message)
                    self._spawn()

    def wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise OperatorError(f"the operator exited with {self.proc.returncode}; see {self.log_path}")
            try:
                self.samples()
                return
            except OSError:
                time.sleep(0.2)
        raise OperatorError(f"operator /metrics not answering after {timeout}s; see {self.log_path}")

    def kill_and_restart(self) -> None:
        """SIGKILL, then start it again at once (a crash the supervisor does not count)."""
        with self._lock:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
            self._spawn()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        with self._lock:
            self._wanted = False
            if self.proc and self.proc.poll() is None:
                os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            self.proc = None

    def samples(self) -> list:
        """Every sample of its /metrics, parsed by prometheus_client."""
        return metric_samples(self.metrics_port)

    def metric(self, metric: str, /, **labels: str) -> float | None:
        """One sample of the operator's own /metrics, or None when the series is absent."""
        for sample in self.samples():
            if sample.name == metric and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
        return None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def metric_samples(port: int) -> list:
    """Every sample the /metrics on 127.0.0.1:``port`` exposes, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
