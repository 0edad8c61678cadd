"""`helm upgrade` under running servings, then `helm uninstall` and deletes: what docs/chart.md's "Install,
upgrade, uninstall" section says, done here in that order.

The chart is installed (cluster-wide, the operator pod on the local process runner as in
test_chart_install.py), two servings become Ready (one speculative, whose engine pod carries the operator's
image in its preflight init container, and one baseline), and the release is upgraded to a newer chart
version whose appVersion, and so the operator image, changed. During and after the upgrade:
- no engine pod restarted: the same pod UIDs, the same restart counts, and the engine Deployments' pod
  templates untouched (the new operator renders another preflight image but must not roll a running
  engine for it: controllers/serving/patches.py `deployment_write`);
- no status lost: each serving's status after the new operator has reconciled it equals the status before,
  timestamps aside;
- no condition flapped: a watch records every version of every serving from before the upgrade until the
  new operator has reconciled both; Ready is True in every one, and no condition changed status.
Then `helm uninstall` keeps the CRDs and the servings, and deleting the servings completes without the
operator (they carry no finalizer; docs/guarantees.md) and takes their engine Deployments with them.

The upgraded chart is a copy of the repository's chart with Chart.yaml's version and appVersion raised: the
image tag comes from appVersion, as it would in a real release. The local process runner runs
`drafter-operator` from this checkout whatever the image tag (drafter_testbed/launch.py), so the new pod is a new
image to the cluster and the same code; what the test proves is what the cluster sees across a chart
upgrade that rolls the operator: the handover and the new operator's first reconciles.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from drafter_operator.resources.engine import PREFLIGHT_CONTAINER
from drafter_operator.resources.labels import SERVING_LABEL
from drafter_testbed.launch import EMULATOR_CONFIGMAP, EMULATOR_ENV_PREFIX
from drafter_testbed.volumes import static_claim
from tests.support.e2e_chart import (CHART, CRDS, adopt_crds, delete_namespaces, helm, local_values, make_namespace,
                                     operator_log, operator_pods, ready, wait_operator_ready)
from tests.support.e2e_serving import condition, seed_serving

# The chart's operator watches every namespace, so no other test's objects may be about meanwhile.
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

RELEASE = "upgraded"
#: Status fields that are moments, not state: the one thing allowed to differ across the upgrade.
TIMESTAMP_KEYS = ("lastTransitionTime", "lastUpdateTime", "lastProbeTime")



def next_patch(version: str) -> str:
    major, minor, patch = version.split("-")[0].split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


def newer_chart(tmp_path: Path) -> tuple[Path, str, str]:
    """A copy of the chart as its next release: version and appVersion (the default image tag) raised."""
    copy = tmp_path / CHART.name
    shutil.copytree(CHART, copy)
    meta_path = copy / "Chart.yaml"
    meta = yaml.safe_load(meta_path.read_text())
    meta["version"], meta["appVersion"] = next_patch(str(meta["version"])), next_patch(str(meta["appVersion"]))
    meta_path.write_text(yaml.safe_dump(meta, sort_keys=False))
    return copy, meta["version"], meta["appVersion"]


def without_timestamps(value):
    if isinstance(value, dict):
        return {k: without_timestamps(v) for k, v in value.items() if k not in TIMESTAMP_KEYS}
    if isinstance(value, list):
        return [without_timestamps(v) for v in value]
    return value


def servings(cluster, namespace: str) -> dict[str, dict]:
    return {s["metadata"]["name"]: s for s in cluster.get_json("drafterservings", "-n", namespace)["items"]}


def engine_pods(cluster, namespace: str) -> dict[str, dict]:
    """uid -> what a restart would change: the pod's name and every container's restart count."""
    pods = cluster.get_json("pods", "-n", namespace, "-l", SERVING_LABEL)["items"]
    return {p["metadata"]["uid"]: {
        "name": p["metadata"]["name"],
        "restarts": {c["name"]: c["restartCount"] for c in (p["status"].get("initContainerStatuses") or [])
                     + (p["status"].get("containerStatuses") or [])}} for p in pods}


def engine_deployments(cluster, namespace: str) -> dict[str, dict]:
    deployments = cluster.get_json("deployments", "-n", namespace, "-l", SERVING_LABEL)["items"]
    return {d["metadata"]["name"]: {"generation": d["metadata"]["generation"], "template": d["spec"]["template"]}
            for d in deployments}


def operator_metrics(pod: dict, port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def reconciled_by(pod: dict, port: int, namespace: str, names: list[str]) -> bool:
    """Whether the operator in `pod` has reconciled each serving and found it Ready (its own gauge, which only
    a reconcile by this process sets) and reconciled servings at least twice as often as there are servings."""
    try:
        samples = operator_metrics(pod, port)
    except OSError:
        return False
    ready_here = {dict(labels)["name"] for (name, labels), value in samples.items()
                  if name == "drafter_serving_ready" and dict(labels).get("namespace") == namespace and value == 1}
    reconciles = sum(value for (name, labels), value in samples.items()
                     if name == "drafter_reconcile_total" and dict(labels).get("kind") == "DrafterServing")
    return set(names) <= ready_here and reconciles >= 2 * len(names)


def metrics_port(args: list[str]) -> int:
    return int(next(a.split("=", 1)[1] for a in args if a.startswith("metrics.port=")))


def watched_versions(watch: subprocess.Popen) -> list[tuple[str, str, dict[str, str]]]:
    """(name, resourceVersion, {condition: status}) of every version the watch delivered; it must still be
    running (a watch that ended early would have missed versions)."""
    alive = watch.poll() is None
    watch.terminate()
    output, errors = watch.communicate(timeout=10)
    assert alive, f"the watch ended early ({watch.returncode}): {errors}"
    # `--watch -o json` writes one JSON document per version, one after another.
    decoder, rest, versions = json.JSONDecoder(), output.lstrip(), []
    while rest:
        obj, end = decoder.raw_decode(rest)
        rest = rest[end:].lstrip()
        conditions = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
        versions.append((obj["metadata"]["name"], obj["metadata"]["resourceVersion"], conditions))
    return versions


def transitions(versions: list[tuple[str, str, dict[str, str]]]) -> list[str]:
    """Every change of a condition's status between consecutive versions of the same serving."""
    last: dict[str, dict[str, str]] = {}
    changed = []
    for name, resource_version, conditions in versions:
        before = last.get(name)
        if before is not None:
            for kind in sorted(set(before) | set(conditions)):
                if before.get(kind) != conditions.get(kind):
                    changed.append(f"{name}@{resource_version}: {kind} {before.get(kind)} -> {conditions.get(kind)}")
        last[name] = conditions
    return changed


def test_helm_upgrade_keeps_servings_running_and_uninstall_then_delete_works(local_cluster_only, operator,
                                                                            engine_nodes, tmp_path, capsys):
    # `operator`: its fixture scales a demo's cluster-wide operator to zero (one operator per object); the
    # session's own watches only the session's prefixed namespaces, which these are not.
    cluster = local_cluster_only
    namespace, workload = make_namespace(cluster, "upgrade-op"), make_namespace(cluster, "upgrade-work")
    watch = None
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            static_claim(workload, "models", f"/tmp/drafter-e2e/{workload}")))
        # Engines ten times faster than real time, ready 2 s after start (tests/e2e/conftest.py fast_engines).
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": EMULATOR_CONFIGMAP, "namespace": workload},
            "data": {f"{EMULATOR_ENV_PREFIX}TIME_SCALE": "0.1", f"{EMULATOR_ENV_PREFIX}STARTUP_SECONDS": "2"}}))

        adopt_crds(cluster, RELEASE, namespace)
        install_args = local_values(cluster, namespace)
        helm(cluster, "install", RELEASE, str(CHART), "-n", namespace, *install_args)
        old_pod = wait_operator_ready(cluster, namespace, RELEASE)
        old_image = old_pod["spec"]["containers"][0]["image"]

        # No acceptance monitoring: no traffic runs here, and its verdicts are not what this test is about.
        speculative = seed_serving("spec")
        speculative["spec"].pop("acceptance", None)
        baseline = seed_serving("base", drafter={"method": "none"})
        baseline["spec"].pop("acceptance", None)
        names = ["spec", "base"]
        cluster.kubectl("-n", workload, "apply", "-f", "-", input=yaml.safe_dump_all([speculative, baseline]))

        def all_ready():
            found = servings(cluster, workload)
            return len(found) == 2 and all(condition(s.get("status") or {}, "Ready").get("status") == "True"
                                           for s in found.values())
        try:
            cluster.wait_for("both servings Ready", all_ready, timeout=120)
        except AssertionError:
            raise AssertionError(f"not Ready: {json.dumps({n: s.get('status') for n, s in servings(cluster, workload).items()})}"
                                 f"\nthe operator's log:\n{operator_log(cluster, namespace, RELEASE)}") from None
        # Settled: every engine pod running with its containers ready, so a restart could not hide in a rollout.
        cluster.wait_for("every engine pod Ready", lambda: (pods := cluster.get_json(
            "pods", "-n", workload, "-l", SERVING_LABEL)["items"]) and len(pods) == 2 and all(map(ready, pods)),
            timeout=60)
        preflight_images = {d["metadata"]["name"]: c["image"] for d in cluster.get_json(
            "deployments", "-n", workload, "-l", SERVING_LABEL)["items"]
            for c in d["spec"]["template"]["spec"].get("initContainers") or [] if c["name"] == PREFLIGHT_CONTAINER}
        assert list(preflight_images.values()) == [old_image], preflight_images  # the speculative serving's only

        status_before = {n: without_timestamps(s["status"]) for n, s in servings(cluster, workload).items()}
        pods_before, deployments_before = engine_pods(cluster, workload), engine_deployments(cluster, workload)

        watch = subprocess.Popen([str(cluster.bin_dir / "kubectl"), "-n", workload, "get", "drafterservings",
                                  "--watch", "-o", "json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env)
        new_chart, new_version, new_app_version = newer_chart(tmp_path)
        upgrade_args = local_values(cluster, namespace)
        helm(cluster, "upgrade", RELEASE, str(new_chart), "-n", namespace, *upgrade_args)
        new_pod = cluster.wait_for("the upgraded operator pod Ready", lambda: next(
            (p for p in operator_pods(cluster, namespace, RELEASE)
             if p["metadata"]["uid"] != old_pod["metadata"]["uid"] and ready(p)), None), timeout=180)
        new_image = new_pod["spec"]["containers"][0]["image"]
        assert new_image != old_image and new_image.endswith(f":{new_app_version}"), (old_image, new_image)
        release = json.loads(helm(cluster, "list", "-n", namespace, "-o", "json").stdout)
        assert [r["chart"] for r in release if r["name"] == RELEASE] == [f"drafter-operator-{new_version}"]

        port = metrics_port(upgrade_args)
        try:
            cluster.wait_for("the new operator reconciling both servings",
                             lambda: reconciled_by(new_pod, port, workload, names), timeout=120)
        except AssertionError:
            raise AssertionError(f"the new operator's log:\n{operator_log(cluster, namespace, RELEASE)}") from None
        versions = watched_versions(watch)

        pods_after, deployments_after = engine_pods(cluster, workload), engine_deployments(cluster, workload)
        assert pods_after == pods_before, "an engine pod was replaced or restarted by the upgrade"
        assert deployments_after == deployments_before, "the upgrade rewrote an engine Deployment"
        status_after = {n: without_timestamps(s["status"]) for n, s in servings(cluster, workload).items()}
        assert status_after == status_before
        seen = {name for name, _, _ in versions}
        assert seen == set(names), versions  # the watch's initial listing at least
        not_ready = [v for v in versions if v[2].get("Ready") != "True"]
        assert not not_ready, f"Ready was not True in: {not_ready}"
        assert transitions(versions) == []
        with capsys.disabled():
            print(f"\nupgrade {old_image} -> {new_image}: {len(versions)} serving versions watched, "
                  f"{len(pods_after)} engine pods kept, 0 condition transitions")

        # Uninstall keeps the CRDs (resource policy) and so the servings; deleting them needs no operator.
        helm(cluster, "uninstall", RELEASE, "-n", namespace, "--wait", timeout=180)
        cluster.wait_for("the operator pod gone", lambda: not operator_pods(cluster, namespace, RELEASE), timeout=60)
        for crd in CRDS:
            assert cluster.kubectl("get", "crd", crd, check=False).returncode == 0, f"{crd} was deleted"
        assert set(servings(cluster, workload)) == set(names)
        assert all(not s["metadata"].get("finalizers") for s in servings(cluster, workload).values())
        deleted = cluster.kubectl("-n", workload, "delete", "drafterservings", "--all", "--timeout=90s",
                                  check=False, timeout=120)
        assert deleted.returncode == 0, f"the servings' delete did not finish: {deleted.stderr}"
        assert servings(cluster, workload) == {}
        cluster.wait_for("the garbage collector removing the engine Deployments",
                         lambda: not engine_deployments(cluster, workload), timeout=90)
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        helm(cluster, "uninstall", RELEASE, "-n", namespace, check=False)
        cluster.kubectl("delete", "pv", f"{workload}-models", "--wait=false", check=False)
        delete_namespaces(cluster, workload, namespace)
