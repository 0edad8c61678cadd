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


def documents(text: str) -> list[dict]:
    """The non-empty documents of a YAML stream, read by libyaml (PyYAML's CSafeLoader). safe_load_all builds the
    same objects with PyYAML's pure-Python reader, 11x slower: 0.83 s against 0.07 s for the chart's 700 KB
    rendering, which the chart tests read hundreds of times."""
    return [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d]


def render(*sets: str, namespace: str = "drafter-system", show_tests: bool = False) -> list[dict]:
    args = ["template", "drafter", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for item in sets:
        args += ["--set", item]
    objects = documents(helm(*args).stdout)
    if not show_tests:
        objects = [o for o in objects if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"]
    return objects


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def operator_container(objects: list[dict]) -> dict:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
