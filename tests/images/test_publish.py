"""images/publish against a real registry: the operator image's OCI layout (images/build) pushed to crane's
registry on loopback under two tags, then pulled back by a second client call and compared digest by digest
and blob by blob.

The registry is `crane registry serve` (go-containerregistry's registry, the pinned crane that `drafter-operator
cluster build` makes): it implements the OCI distribution API that ghcr.io, Docker Hub and the CNCF registry
speak, in memory, so nothing is left behind. Building the layout needs root (the declared `not-root` skip)
unless DRAFTER_OPERATOR_IMAGE names one already built.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from drafter_testbed.versions import bin_dir
from tests import environments
from tests.declared_skips import skip_because
from tests.processes import free_port, wait_until_listening

REPO = Path(__file__).resolve().parents[2]
PUBLISH = REPO / "images" / "publish"

pytestmark = pytest.mark.images


def _crane() -> Path:
    crane = bin_dir() / "crane"
    if not crane.is_file():
        pytest.fail(f"no crane in {crane.parent}: run `drafter-operator cluster build` (./dev test does)")
    return crane


@pytest.fixture(scope="module")
def layout(request) -> Path:
    if not os.environ.get(environments.OPERATOR_IMAGE.variable) and os.geteuid() != 0:
        skip_because("not-root", "building the operator image needs root (buildah, mmdebstrap)")
    path = Path(environments.built(environments.OPERATOR_IMAGE, request.config))
    assert (path / "index.json").is_file(), f"{path} is not an OCI image layout"
    return path


@pytest.fixture(scope="module")
def registry():
    """crane's in-memory registry on a free loopback port; yields host:port."""
    port = free_port()
    proc = subprocess.Popen([str(_crane()), "registry", "serve", "--address", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(proc, port)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def _blob(layout: Path, digest: str) -> bytes:
    algorithm, hex_digest = digest.split(":")
    return (layout / "blobs" / algorithm / hex_digest).read_bytes()


def _only_manifest(layout: Path) -> dict:
    manifests = json.loads((layout / "index.json").read_text())["manifests"]
    assert len(manifests) == 1, manifests
    return manifests[0]


def _publish(*args: str) -> subprocess.CompletedProcess:
    # CRANE unset: the script finds the pinned crane itself, as a developer's or the workflow's run does.
    env = {k: v for k, v in os.environ.items() if k != "CRANE"}
    return subprocess.run([str(PUBLISH), *args], capture_output=True, text=True, env=env, timeout=300)


def test_publish_pushes_the_layout_and_the_registry_serves_the_same_digests(layout, registry, tmp_path):
    repository = f"{registry}/drafter-dev/drafter-operator"
    result = _publish(str(layout), f"{repository}:0.1.0", f"{repository}:latest")
    assert result.returncode == 0, result.stderr

    expected = _only_manifest(layout)["digest"]
    # One line per reference, the repository pinned by the layout's manifest digest.
    assert result.stdout.splitlines() == [f"{repository}@{expected}"] * 2

    crane = str(_crane())
    for tag in ("0.1.0", "latest"):
        served = subprocess.run([crane, "manifest", f"{repository}:{tag}"], capture_output=True, check=True).stdout
        assert "sha256:" + hashlib.sha256(served).hexdigest() == expected, tag
        assert served == _blob(layout, expected), tag

    # A full pull by digest into a fresh layout: the manifest, the config and every layer come back byte-equal.
    pulled = tmp_path / "pulled"
    subprocess.run([crane, "pull", "--format", "oci", f"{repository}@{expected}", str(pulled)],
                   capture_output=True, check=True, timeout=300)
    assert _only_manifest(pulled)["digest"] == expected
    manifest = json.loads(_blob(layout, expected))
    blobs = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])]
    assert len(blobs) >= 2  # a config and at least one layer: an empty manifest would compare equal trivially
    for digest in blobs:
        data = _blob(pulled, digest)
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
        assert data == _blob(layout, digest), digest


def test_publish_refuses_what_it_cannot_push_and_says_the_fix(layout, registry, tmp_path):
    untagged = _publish(str(layout), f"{registry}/drafter-dev/drafter-operator")
    assert untagged.returncode != 0
    assert "has no tag. Fix: REGISTRY/REPOSITORY:TAG" in untagged.stderr

    not_a_layout = _publish(str(tmp_path), f"{registry}/drafter-dev/drafter-operator:0.1.0")
    assert not_a_layout.returncode != 0
    assert "is not an OCI image layout" in not_a_layout.stderr and "images/build operator" in not_a_layout.stderr

    # A port nothing listens on: crane's error, then the script's fix.
    closed = _publish(str(layout), f"127.0.0.1:{free_port()}/drafter-dev/drafter-operator:0.1.0")
    assert closed.returncode != 0
    assert "crane push to" in closed.stderr and "Fix: log in" in closed.stderr
    assert closed.stdout == ""
