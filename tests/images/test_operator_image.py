"""The operator image as a pod would run it: its entrypoint in a chroot of its unpacked root filesystem, as
its non-root user, the root read-only and only /tmp writable.

The image is the OCI layout DRAFTER_OPERATOR_IMAGE names (`./dev test` sets it from `images/build operator`;
a narrower run builds it here). Building and running it need root (the declared `not-root` skip) and umoci,
which images/build installs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests import environments
from tests.declared_skips import skip_because
from tests.images import oci_chroot

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.images


@pytest.fixture(scope="module")
def image(request, tmp_path_factory) -> oci_chroot.Image:
    if os.geteuid() != 0:
        skip_because("not-root", "building and running the operator image need root (buildah, chroot, a mount "
                                 "namespace)")
    layout = environments.built(environments.OPERATOR_IMAGE, request.config)
    if not (Path(layout) / "index.json").is_file():
        pytest.fail(f"DRAFTER_OPERATOR_IMAGE={layout} is not an OCI image layout (no index.json): "
                    "run images/build operator")
    if shutil.which("umoci") is None:
        pytest.fail("unpacking the image needs umoci: apt-get install umoci (images/build installs it)")
    return oci_chroot.unpack(Path(layout), tmp_path_factory.mktemp("operator-image"))


def run(image: oci_chroot.Image, tmp_path: Path, *args: str):
    return oci_chroot.run(image, [*image.entrypoint, *args], tmp_path)


def test_config_runs_drafter_operator_as_a_fixed_non_root_user(image):
    assert image.entrypoint == ["drafter-operator"]
    assert image.config.get("Cmd") == ["run"]
    uid, _, gid = image.user.partition(":")
    assert uid.isdigit() and int(uid) != 0, f"image user {image.user!r} must be a numeric non-root UID"
    assert gid.isdigit() and int(gid) != 0, f"image user {image.user!r} must name a numeric non-root GID"


def test_help_lists_the_operator_commands(image, tmp_path):
    result = run(image, tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    commands, _, internal = result.stdout.partition("internal commands (run by the operator's pods, not by hand):")
    for command in ("run", "crds", "bench", "preflight"):
        assert f"    {command}" in commands
    for command in ("run-stage", "regenerate", "capture"):  # what the Jobs and sidecars run: apart, under their own heading
        assert f"  {command} " in internal
    assert "cluster, demo, emulate: developer tools of the drafter-testbed package: pip install -e ./testbed" \
        in result.stdout


def test_generated_crds_match_the_repository(image, tmp_path):
    result = run(image, tmp_path, "crds", "--output-dir", "/tmp/crds", "--docs", "")
    assert result.returncode == 0, result.stderr
    generated = sorted(p.name for p in (tmp_path / "crds").iterdir())
    assert generated == sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    for name in generated:
        assert (tmp_path / "crds" / name).read_text() == (REPO / "crds" / name).read_text(), name


def test_nothing_writes_outside_tmp(image, tmp_path):
    # The default output directory is relative to the working directory, which must be the writable /tmp;
    # an explicit path elsewhere is refused (read-only root, and not the user's to write anyway).
    assert run(image, tmp_path, "crds", "--docs", "").returncode == 0
    assert (tmp_path / "crds").is_dir()
    refused = run(image, tmp_path, "crds", "--output-dir", "/opt/crds", "--docs", "")
    assert refused.returncode != 0
    assert "Read-only file system" in refused.stderr or "Permission denied" in refused.stderr


def test_the_operator_modules_import_without_the_testbed(image, tmp_path):
    # What the Deployment, benchmark Jobs, preflight init containers and Generate's client run.
    modules = ("drafter_operator.controllers.runner", "drafter_operator.benchmark_client.run",
               "drafter_operator.preflight.cli", "drafter_operator.training.regenerate")
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "extra = sorted({m.split('.')[0] for m in sys.modules} & {'cryptography', 'tokenizers', 'jinja2', 'hypothesis', "
            "'drafter_testbed'})\n"
            "assert not extra, extra\n")
    result = oci_chroot.run(image, ["python", "-c", code], tmp_path)
    assert result.returncode == 0, result.stderr
    absent = oci_chroot.run(image, ["python", "-c", "import cryptography"], tmp_path)
    assert "No module named 'cryptography'" in absent.stderr


@pytest.mark.parametrize("command", ["cluster", "demo", "emulate"])
def test_testbed_commands_name_the_package_they_come_with(image, tmp_path, command):
    result = run(image, tmp_path, command, "up")
    assert result.returncode == 2
    assert f"drafter-operator {command} comes with the drafter-testbed package, not installed here: " \
        "pip install -e ./testbed" in result.stderr
