"""Operator processes run by hand beside the session's (tests/e2e/test_two_operators.py, test_sharded_operators.py):
`drafter-operator run` for one namespace with its Lease there, its /metrics and /healthz on loopback ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from drafter_operator import timestamps
from drafter_operator.controllers.leadership import Timings
from tests.processes import free_port

#: How long a test waits for a standby to lead, a guard against hanging rather than a measure (a loaded
#: 2-core machine stretches every step; what is asserted is why it took over, from the Lease and the log).
#: After the leader's death: the Lease duration after it saw the last renewal (seen up to a jittered retry
#: late, acted on at the first retry after), and the slack.
SLACK_SECONDS = 30
KILL_TAKEOVER_LIMIT = Timings().lease_duration + 2 * 1.2 * Timings().retry_period + SLACK_SECONDS
#: After a clean stop (the Lease released): one retry and the slack.
TERM_TAKEOVER_LIMIT = 1.2 * Timings().retry_period + SLACK_SECONDS


class Candidate:
    """`drafter-operator run` for one namespace, with its /metrics and /healthz on loopback ports."""

    def __init__(self, cluster, namespace: str, log_dir: Path, name: str, extra_args: tuple[str, ...] = ()):
        self.name, self.log_path = name, log_dir / f"{name}.log"
        self.metrics_port, self.health_port = free_port(), free_port()
        env = {**cluster.env, "PYTHONUNBUFFERED": "1", "POD_NAME": name}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "drafter_operator.cli", "run", "--namespace", namespace,
                 "--lease-namespace", namespace, "--metrics-port", str(self.metrics_port), "--metrics-host", "127.0.0.1",
                 "--health-port", str(self.health_port), "--health-host", "127.0.0.1", *extra_args],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def metric(self, name: str, **labels: str) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return None  # not listening yet, or gone
        return next((s.value for family in text_string_to_metric_families(text) for s in family.samples
                     if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())), None)

    def leads(self) -> bool:
        return self.metric("drafter_operator_leader") == 1.0

    def reconciles(self) -> float:
        return self.metric("drafter_reconcile_total", kind="DrafterServing", result="ok") or 0.0

    def healthz(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as response:
                return response.status
        except OSError:
            return None

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def log(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def unrenewed_seconds(last: dict, taken: dict) -> float:
    """From a dead leader's last renewal to its successor's acquisition, on the Lease's own times (both this
    machine's clock): never below the lease duration when the successor waited as it must."""
    return (timestamps.parse(taken["acquireTime"]) - timestamps.parse(last["renewTime"])).total_seconds()


def wait(what: str, predicate, timeout: float, candidates=(), interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(interval)
    logs = "\n".join(f"--- {c.name} (exit {c.proc.poll()}):\n{c.log()}" for c in candidates)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")
