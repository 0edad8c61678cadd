"""The tagged-release workflow (.github/workflows/release.yaml) without GitHub: actionlint (the pinned one
`drafter-operator cluster build` makes) with shellcheck over its `run:` scripts finds nothing, finds the
mistakes it is there to find in a broken copy, the workflow publishes what docs/images.md says in that
order, and its tag check, run here with bash, refuses a tag that is not pyproject.toml's version.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from drafter_operator import __version__
from drafter_testbed.versions import bin_dir

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"
LINT = ROOT / ".ci" / "lint-workflows"


@pytest.fixture(scope="module")
def actionlint() -> Path:
    binary = bin_dir() / "actionlint"
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: run `drafter-operator cluster build` (./dev test does) to build the "
                    "pinned actionlint")
    return binary


def lint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), *map(str, paths)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_actionlint_and_shellcheck_find_nothing(actionlint):
    result = lint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_the_linter_catches_a_wrong_job_output_and_an_unquoted_variable(actionlint, tmp_path):
    # Proof that the clean result above means something: the same file with two typical mistakes.
    text = WORKFLOW.read_text()
    broken = text.replace("needs.version.outputs.version }}", "needs.version.outputs.verison }}", 1)
    broken = broken.replace('helm lint charts/drafter-operator', 'helm lint charts/drafter-operator $VERSION', 1)
    assert broken.count("verison") == 1 and "$VERSION\n" in broken  # both edits landed
    copy = tmp_path / "release.yaml"
    copy.write_text(broken)
    result = lint(copy)
    assert result.returncode != 0
    assert 'property "verison" is not defined' in result.stdout
    assert "SC2086" in result.stdout  # shellcheck ran on the run: script (double quote to prevent globbing)


def test_publishes_both_images_with_images_publish_then_the_chart(workflow):
    assert workflow[True]["push"]["tags"] == ["v*"]  # PyYAML reads the key `on` as True
    jobs = workflow["jobs"]

    def script(job: str) -> str:
        return "\n".join(step.get("run", "") for step in jobs[job]["steps"])

    assert "images/build operator" in script("operator-image")
    for job, image in (("operator-image", "drafter-operator"), ("trainer-image", "drafter-trainer")):
        assert "images/publish " in script(job), job
        assert jobs[job]["permissions"]["packages"] == "write", job
        publish = next(step for step in jobs[job]["steps"] if step.get("id") == "publish")
        assert publish["env"]["IMAGE"] == f"ghcr.io/${{{{ needs.version.outputs.owner }}}}/{image}"
    assert "images/trainer/Dockerfile" in script("trainer-image")
    # The chart goes out only once both images are in the registry.
    assert set(jobs["chart"]["needs"]) == {"version", "operator-image", "trainer-image"}
    assert re.search(r'helm package charts/drafter-operator --version "\$VERSION" --app-version "\$VERSION"',
                     script("chart"))
    assert 'helm push "/tmp/chart/drafter-operator-$VERSION.tgz" "oci://ghcr.io/$OWNER/charts"' in script("chart")
    # Only the jobs that push may write packages.
    assert workflow["permissions"] == {"contents": "read"}


@pytest.mark.parametrize("tag, ok", [(f"v{__version__}", True), (f"v{__version__}.1", False), (__version__, False)])
def test_the_tag_check_accepts_only_v_and_the_package_version(workflow, tmp_path, tag, ok):
    # The workflow's own step script, run with bash in a copy of the repository root's pyproject.toml.
    step = next(s for s in workflow["jobs"]["version"]["steps"] if s.get("id") == "version")
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    output = tmp_path / "github_output"
    output.touch()
    env = {**os.environ, "TAG": tag, "OWNER": "Drafter-Dev", "GITHUB_OUTPUT": str(output)}
    result = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=30)
    if ok:
        assert result.returncode == 0, result.stdout + result.stderr
        assert output.read_text().splitlines() == [f"version={__version__}", "owner=drafter-dev"]
    else:
        assert result.returncode == 1
        assert f"does not match pyproject.toml's version {__version__}" in result.stdout
        assert output.read_text() == ""


def test_the_kubectl_plugin_job_builds_every_platform_of_the_krew_manifest(workflow):
    # The archives the job attaches are the ones plugins/krew/drafter.yaml names: one per platform selector.
    job = workflow["jobs"]["kubectl-plugin"]
    assert set(job["needs"]) == {"version", "chart"}  # no release before the images and the chart are out
    assert job["permissions"] == {"contents": "write"}  # creates the GitHub release; pushes nothing else
    script = "\n".join(step.get("run", "") for step in job["steps"])
    built = re.search(r'plugins/krew/build-archives "\$VERSION" /tmp/krew ((?:\S+/\S+ ?)+)', script)[1].split()
    template = (ROOT / "plugins" / "krew" / "drafter.yaml").read_text()
    named = re.findall(r"kubectl-drafter_(\w+?)_(\w+)\.tar\.gz", template)
    assert sorted(built) == sorted(f"{os_}/{arch}" for os_, arch in named)
    bot = next(step for step in job["steps"] if step.get("uses", "").startswith("rajatjindal/krew-release-bot@"))
    assert (ROOT / bot["with"]["krew_template_file"]).is_file()
