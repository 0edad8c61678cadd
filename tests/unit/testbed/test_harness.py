"""The shared harness (drafter_testbed/harness.py) without a cluster: kubectl through a stand-in, the CRDs
it installs, and the operator process with stand-in programs for `drafter-operator run`."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
import yaml

from drafter_operator.api import KINDS
from drafter_testbed import cluster as local
from drafter_testbed import harness

# A stand-in for `drafter-operator run`: serves a one-line /metrics on the port the harness passes.
SERVES_METRICS = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[sys.argv.index("--metrics-port") + 1])
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'drafter_reconcile_total{kind="DrafterServing",result="ok"} 7\\n'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


class Stand:
    """What OperatorProcess needs of a cluster: the environment its process runs with."""

    env = dict(os.environ)
    local = False


def fake_kubectl(tmp_path: Path, script: str) -> harness.Cluster:
    (tmp_path / "kubectl").write_text(f"#!/bin/sh\n{script}\n")
    (tmp_path / "kubectl").chmod(stat.S_IRWXU)
    return harness.Cluster(kubeconfig=str(tmp_path / "kubeconfig"), local=False, bin_dir=tmp_path)


def operator(tmp_path: Path, code: str, **kwargs) -> harness.OperatorProcess:
    handle = harness.OperatorProcess(Stand(), tmp_path / "operator.log", **kwargs)
    handle.command = [sys.executable, "-c", code]
    return handle


def test_kubectl_answers_its_output_and_fails_as_an_assertion_with_its_stderr(tmp_path):
    cluster = fake_kubectl(tmp_path, 'if [ "$1" = ok ]; then echo "$KUBECONFIG"; else echo nope >&2; exit 4; fi')
    assert cluster.kubectl("ok").stdout.strip() == cluster.kubeconfig
    with pytest.raises(harness.KubectlError, match=r"kubectl get x failed \(4\): nope") as failure:
        cluster.kubectl("get", "x")
    assert isinstance(failure.value, AssertionError)
    assert cluster.kubectl("get", "x", check=False).returncode == 4


def test_wait_for_returns_the_first_truthy_answer_or_fails_naming_what(tmp_path):
    cluster = fake_kubectl(tmp_path, "true")
    answers = iter([0, None, "there"])
    assert cluster.wait_for("an answer", lambda: next(answers), timeout=5, interval=0.01) == "there"
    with pytest.raises(AssertionError, match="waiting for never"):
        cluster.wait_for("never", lambda: False, timeout=0.05, interval=0.01)


def test_nodes_are_added_only_to_the_embedded_cluster():
    with pytest.raises(local.ClusterError, match="embedded local cluster"):
        harness.external("/dev/null").add_nodes(1, "kwok")


def test_external_makes_the_kind_asked_for():
    class Mine(harness.Cluster):
        pass

    made = harness.external("/tmp/kc", Mine)
    assert type(made) is Mine and made.kubeconfig == "/tmp/kc" and not made.local


def test_install_crds_applies_every_kind_then_waits_until_each_is_established():
    calls = []
    harness.install_crds(lambda *args, input=None: calls.append((args, input)), timeout_seconds=30)
    applied = [yaml.safe_load(text) for args, text in calls[:-1]]
    assert [doc["spec"]["names"]["kind"] for doc in applied] == [kind.kind_name for kind in KINDS]
    assert all(args == ("apply", "--server-side", "--force-conflicts", "-f", "-") for args, _ in calls[:-1])
    wait, _ = calls[-1]
    assert wait[:3] == ("wait", "--for=condition=Established", "--timeout=30s")
    assert list(wait[3:]) == [f"crd/{doc['metadata']['name']}" for doc in applied]


def test_install_crds_matches_the_files_in_crds():
    calls = []
    harness.install_crds(lambda *args, input=None: calls.append(input))
    repo = Path(__file__).resolve().parents[3]
    assert sorted(filter(None, calls)) == sorted(path.read_text() for path in (repo / "crds").glob("*.yaml"))


def test_argv_runs_the_operator_with_its_metrics_port_namespaces_and_extra_options(tmp_path):
    handle = harness.OperatorProcess(Stand(), tmp_path / "log", namespaces=["a-*", "b"])
    handle.extra_args = ["--no-leader-election"]
    assert handle.argv() == [sys.executable, "-m", "drafter_operator.cli", "run", "--metrics-port",
                             str(handle.metrics_port), "--metrics-host", "127.0.0.1", "--namespace", "a-*",
                             "--namespace", "b", "--no-leader-election"]
    assert "--namespace" not in harness.OperatorProcess(Stand(), tmp_path / "log").argv()  # every namespace


def test_start_waits_for_its_metrics_then_reads_them(tmp_path):
    handle = operator(tmp_path, SERVES_METRICS, env={"DRAFTER_RECHECK_SECONDS": "5"})
    try:
        handle.start(wait_seconds=30)
        assert handle.metric("drafter_reconcile_total", kind="DrafterServing") == 7
        assert handle.metric("drafter_reconcile_total", kind="DrafterTraining") is None
        assert open(f"/proc/{handle.proc.pid}/environ", "rb").read().count(b"DRAFTER_RECHECK_SECONDS=5") == 1
    finally:
        handle.stop()
    assert handle.proc is None


def test_start_fails_naming_the_log_when_the_operator_exits(tmp_path):
    handle = operator(tmp_path, "import sys; print('no kubeconfig'); sys.exit(3)")
    with pytest.raises(harness.OperatorError, match=r"exited with 3; see .*operator.log"):
        handle.start(wait_seconds=30)
    assert "no kubeconfig" in handle.log_tail()


def test_keep_running_starts_it_again_counts_the_exits_and_says_so(tmp_path):
    told = []
    handle = operator(tmp_path, "import sys; sys.exit(5)", announce=told.append)
    try:
        handle.start(keep_running=True)
        deadline = time.monotonic() + 120
        while handle.restarts < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        handle.stop()
    assert handle.exit_codes[:2] == [5, 5]
    assert told[0] == "the operator exited with status 5; restart 1"
    assert "[test supervisor] the operator exited with status 5; restart 1" in handle.log_tail()


def test_stop_is_not_an_exit_to_restart(tmp_path):
    handle = operator(tmp_path, SERVES_METRICS)
    handle.start(keep_running=True, wait_seconds=30)
    handle.stop()
    time.sleep(1.2)  # two supervisor rounds
    assert handle.proc is None and handle.exit_codes == []


def test_kill_and_restart_replaces_the_process_without_counting_an_exit(tmp_path):
    handle = operator(tmp_path, SERVES_METRICS)
    try:
        handle.start(keep_running=True, wait_seconds=30)
        first = handle.proc.pid
        handle.kill_and_restart()
        handle.wait_serving(30)
        assert handle.proc.pid != first and handle.exit_codes == []
    finally:
        handle.stop()
