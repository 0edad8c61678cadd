"""The Helm chart rendered without a cluster: the pinned helm, `helm template` with values, one object of a kind."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from drafter_testbed.versions import bin_dir

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "drafter-operator"

KUBE_VERSION = "1.35.4"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    binary = bin_dir() / "helm"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `drafter-operator cluster build` (./dev test does) to build the pinned helm")
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def render(*sets: str, namespace: str = "drafter-system", show_tests: bool = False) -> list[dict]:
    args = ["template", "drafter", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for item in sets:
        args += ["--set", item]
    objects = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
    if not show_tests:
        objects = [o for o in objects if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"]
    return objects


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def operator_container(objects: list[dict]) -> dict:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
