"""`kubectl drafter` against the local cluster: kubectl itself finds the plugin on PATH and runs it on a
real serving (get's tree, a benchmark followed to its end, a rollback the operator carries out)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import emulator_settings
from tests.support.e2e_serving import apply, seed_serving, serving_status, wait_ready

pytestmark = pytest.mark.e2e


@pytest.fixture
def kubectl_drafter(cluster, namespace, tmp_path: Path):
    # What `pip install drafter-operator` puts on PATH: an executable named kubectl-drafter running the
    # console script's function (pyproject.toml), here with this test run's Python.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "kubectl-drafter"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from drafter_operator.kubectl_plugin.cli "
                    f"import main; sys.exit(main())' \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{cluster.bin_dir}{os.pathsep}{os.environ['PATH']}",
           "KUBECONFIG": cluster.kubeconfig, "PYTHONPATH": os.pathsep.join(sys.path)}

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        # kubectl, not the shim: the plugin mechanism itself is part of what is tested.
        return subprocess.run([str(Path(cluster.bin_dir) / "kubectl"), "drafter", "-n", namespace, *args],
                              env=env, capture_output=True, text=True, timeout=timeout)
    return run


def test_get_benchmark_and_rollback_on_a_real_serving(fast_engines, kubectl_drafter):
    cluster, namespace, operator = fast_engines
    emulator_settings(cluster, namespace, time_scale="0.1", startup_seconds="1")
    serving = seed_serving("kimi")
    serving["spec"]["swap"] = {"strategy": "Recreate"}
    apply(cluster, namespace, serving)
    first = wait_ready(cluster, namespace, "kimi")["activeRevision"]

    got = kubectl_drafter("get", "kimi")
    assert got.returncode == 0, got.stderr
    assert re.search(r"Status:\s+✔ Healthy", got.stdout), got.stdout
    assert f"revision {first}: vllm" in got.stdout
    assert re.search(rf"└──# revision {first} \(active\)\s+Revision\s+✔ Serving", got.stdout), got.stdout
    pods = cluster.get_json("-n", namespace, "pods", "-l", f"drafter.dev/revision={first}")["items"]
    assert pods and all(re.search(rf"└──□ {p['metadata']['name']}\s+Pod\s+✔ Running", got.stdout) for p in pods)
    assert re.search(r"Ready\s+True", got.stdout)
    # The seed is a known-bad combination: the table, filtered to the serving, says which row and where it is cited.
    table = kubectl_drafter("known-bad", "--serving", "kimi")
    assert table.returncode == 0, table.stderr
    assert re.search(r"^matches\s+vllm-eagle3-deepseek-mla\s", table.stdout, re.M), table.stdout

    bench = kubectl_drafter("benchmark", "kimi", "--num-prompts", "1", "--max-tokens", "32", "--interval", "1")
    assert bench.returncode == 0, (bench.stdout, bench.stderr, operator.log_tail())
    name = re.search(r"drafterbenchmark/(kimi-bench-\w+) created", bench.stdout).group(1)
    assert f"{name}: Succeeded" in bench.stdout and "tok/s" in bench.stdout
    assert f"{name}: Running" in bench.stderr  # followed while it ran (no terminal: one line per state)
    got = kubectl_drafter("get", "kimi")
    assert re.search(rf"Acceptance at promotion:\s+rate [\d.]+.*\(benchmark {name}\)", got.stdout), got.stdout
    versus = kubectl_drafter("compare", name)  # one level, no baseline: nothing to compare, and it says what to set
    assert versus.returncode == 1 and "spec.concurrencyLevels and a spec.baseline" in versus.stderr, versus.stderr

    apply(cluster, namespace, seed_serving("kimi", drafter={**serving["spec"]["drafter"], "numSpeculativeTokens": 2},
                                           swap={"strategy": "Recreate"}))
    second = cluster.wait_for("the second revision active", lambda: (
        (s := serving_status(cluster, namespace, "kimi")).get("activeRevision") not in (None, first)
        and any(c["type"] == "Ready" and c["status"] == "True" for c in s.get("conditions") or [])
        and s["activeRevision"]), timeout=120)
    back = kubectl_drafter("rollback", "kimi")
    assert back.returncode == 0, back.stderr
    assert f"spec restored to revision {first}" in back.stdout
    wait_ready(cluster, namespace, "kimi", revision=first, timeout=120)
    got = kubectl_drafter("get", "kimi")
    assert re.search(rf"# revision {first} \(active\)\s+Revision\s+✔ Serving", got.stdout), got.stdout
    assert re.search(rf"# revision {second} \(previous\)", got.stdout), got.stdout

    again = kubectl_drafter("retry", "kimi")  # nothing failed: refused, naming why
    assert again.returncode == 1 and "nothing to retry" in again.stderr
