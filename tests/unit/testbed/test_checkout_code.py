"""Nothing crosses between checkouts: `./dev` runs its own checkout's code through PYTHONPATH and never re-points
the virtualenv that checkouts share, and the local process runner hands its own code's roots to every pod."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from drafter_testbed import launch
from drafter_testbed.code_roots import source_pythonpath

REPO = Path(__file__).resolve().parents[3]


def fake_shared_venv(cache: Path) -> Path:
    """The venv ./dev would use for this checkout, already complete (as another checkout left it): its pip
    records any call, its drafter-operator prints the PYTHONPATH it was given."""
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes() + (REPO / "testbed" / "pyproject.toml").read_bytes())
    venv = cache / f"venv-{key.hexdigest()[:12]}-py{sys.version_info[0]}{sys.version_info[1]}"
    (venv / "bin").mkdir(parents=True)
    (venv / ".complete").touch()
    (venv / "bin" / "python").symlink_to(sys.executable)
    for name, body in (("pip", f'echo "$@" >> {cache}/pip-calls'), ("drafter-operator", 'echo "PYTHONPATH=$PYTHONPATH"')):
        (venv / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
        (venv / "bin" / name).chmod(0o755)
    return venv


def test_dev_runs_this_checkouts_code_and_leaves_the_shared_venv_alone(tmp_path):
    fake_shared_venv(tmp_path)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DRAFTER_CACHE_DIR": str(tmp_path),
           "PYTHON": sys.executable, "PYTHONPATH": "/elsewhere"}
    out = subprocess.run([str(REPO / "dev"), "cluster", "status"], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert f"PYTHONPATH={REPO}/operator:{REPO}/testbed:{REPO}:/elsewhere" in out.splitlines()
    assert not (tmp_path / "pip-calls").exists()  # nothing re-installed: another checkout's run keeps its code


def test_a_pods_python_imports_the_runners_own_checkout(tmp_path):
    container = {"name": "main", "command": ["python3", "-c", "import drafter_operator"]}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [container]}}
    plan = launch.plan(pod, container, "127.10.0.9", tmp_path, 16442, lambda *a: {}, {})
    roots = plan.env["PYTHONPATH"].split(os.pathsep)
    assert plan.env["PYTHONPATH"] == source_pythonpath()
    assert set(roots) == {str(REPO / "testbed"), str(REPO / "operator")}  # run from this checkout: its roots
    found = subprocess.run([*plan.argv[:1], "-c", "import drafter_operator; print(drafter_operator.__file__)"],
                           env=plan.env, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert found == str(REPO / "operator" / "drafter_operator" / "__init__.py")


def test_a_containers_own_pythonpath_wins(tmp_path):
    container = {"name": "main", "command": ["true"], "env": [{"name": "PYTHONPATH", "value": "/app"}]}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [container]}}
    assert launch.plan(pod, container, "127.10.0.9", tmp_path, 1, lambda *a: {}, {}).env["PYTHONPATH"] == "/app"


def test_the_host_interpreter_stays_itself_under_a_path_the_pod_mounts_over(tmp_path):
    # A cache under /tmp (DRAFTER_CACHE_DIR=/tmp/...) holds the virtualenv, and the operator's pod mounts an
    # emptyDir at /tmp: the interpreter is the host's and runs from where it is; the container's own /tmp paths
    # still map into the pod's volume.
    container = {"name": "operator", "command": ["drafter-operator", "run", "--state=/tmp/state"],
                 "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"containers": [container], "volumes": [{"name": "tmp", "emptyDir": {}}]}}
    python = "/tmp/cache/venv/bin/python3"
    plan = launch.plan(pod, container, "127.10.0.9", tmp_path, 16442, lambda *a: {}, {}, python=python)
    assert plan.argv[0] == python
    assert plan.argv[-1] == f"--state={tmp_path}/volumes/tmp/state"
