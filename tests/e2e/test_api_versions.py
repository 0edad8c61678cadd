"""The v1alpha1 -> v1beta1 path of docs/api-versions.md, rehearsed on the real apiserver before it is needed:
v1alpha1 objects of all three kinds survive a CRD upgrade that adds a served v1beta1 (same schema, conversion
None), the flip of the storage version, the storage version migration (a no-op update of every object, as
kube-storage-version-migrator does), the removal of v1alpha1 from status.storedVersions, and finally the
removal of v1alpha1 itself.

CRDs are cluster-scoped and shared by every test on the cluster, so this test never touches drafter.dev: it
installs copies of the generated CRDs (crds/*.yaml, transformed here, nothing committed) under a group of its
own per run, with kinds and resource names of their own (`RehearsalDrafterServing`, ...) and without the short
names and the `drafter` category. The names matter as much as the group: kubectl resolves `drafterserving` to
whichever group discovery lists first, so a copy named `drafterservings` in another group made every other
test's `kubectl get drafterserving` read the copy while this test ran. No operator watches that group; what
is tested is the apiserver's handling of the versions.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
import yaml

from drafter_operator.api import KINDS
from drafter_operator.constants import API_GROUP as GROUP, API_VERSION as VERSION
from drafter_operator.api.generate import crd_filename

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NEXT = "v1beta1"
# One example of each kind: valid under the generated schemas (tests/e2e/test_api_crds.py applies them all).
EXAMPLES = {"DrafterServing": "serving-vllm-kimi-k25-eagle3.yaml", "DrafterBenchmark": "benchmark-5x512.yaml",
            "DrafterTraining": "training-kimi-k25-eagle3.yaml"}


PREFIX = "Rehearsal"


def plural(kind) -> str:
    """The copy's resource name: no other CRD on the cluster serves it, in any group."""
    return PREFIX.lower() + kind.plural


def kind_name(kind) -> str:
    return PREFIX + kind.kind_name


def renamed_crd(kind, group: str, versions: list[tuple[str, bool, bool]]) -> dict:
    """The generated CRD of `kind` under `group`, with `versions` as (name, served, storage), each a copy of the
    generated v1alpha1 version (schema, subresources, printer columns): v1beta1 starts as v1alpha1's schema."""
    crd = yaml.safe_load((ROOT / "crds" / crd_filename(kind)).read_text())
    (generated,) = crd["spec"]["versions"]
    assert generated["name"] == VERSION
    crd["metadata"]["name"] = f"{plural(kind)}.{group}"
    crd["spec"]["group"] = group
    names = crd["spec"]["names"]
    names.update(plural=plural(kind), singular=plural(kind)[:-1], kind=kind_name(kind),
                 listKind=kind_name(kind) + "List")
    crd["spec"]["names"].pop("shortNames", None)
    crd["spec"]["names"].pop("categories", None)
    crd["spec"]["versions"] = [{**copy.deepcopy(generated), "name": name, "served": served, "storage": storage}
                               for name, served, storage in versions]
    # Same schema in both versions: the apiserver only rewrites apiVersion between them (conversion None).
    crd["spec"]["conversion"] = {"strategy": "None"}
    return crd


def _example(kind, group: str, namespace: str) -> dict:
    obj = yaml.safe_load((ROOT / "examples" / EXAMPLES[kind.kind_name]).read_text())
    assert obj["kind"] == kind.kind_name
    obj["kind"] = kind_name(kind)
    obj["apiVersion"] = f"{group}/{VERSION}"
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["labels"] = {"drafter.dev/test": "api-versions"}
    obj["metadata"]["annotations"] = {"drafter.dev/note": "created as v1alpha1"}
    return obj


def _kept(obj: dict) -> dict:
    """What must survive every step unchanged: identity, labels, annotations, spec, status, generation."""
    meta = obj["metadata"]
    return {"name": meta["name"], "uid": meta["uid"], "labels": meta.get("labels"),
            "annotations": meta.get("annotations"), "generation": meta["generation"],
            "spec": obj["spec"], "status": obj.get("status")}


@pytest.fixture
def group(cluster):
    name = f"drafter-upgrade-{uuid.uuid4().hex[:6]}.example.com"
    yield name
    for kind in KINDS:  # deleting a CRD deletes its objects
        cluster.kubectl("delete", "crd", f"{plural(kind)}.{name}", "--ignore-not-found", "--wait=false", check=False)


def test_v1alpha1_objects_survive_served_v1beta1_storage_flip_and_migration(cluster, namespace, group):
    def apply(versions: list[tuple[str, bool, bool]], check: bool = True):
        # As JSON: PyYAML writes the string default "1e-4" unquoted, which kubectl's YAML 1.2 reads as a number.
        manifests = {"apiVersion": "v1", "kind": "List", "items": [renamed_crd(k, group, versions) for k in KINDS]}
        result = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                                 input=json.dumps(manifests), check=check)
        if check:
            for kind in KINDS:
                cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{plural(kind)}.{group}")
        return result

    def read(kind, version: str) -> dict:
        # The object through one served version; a version is served a moment after the CRD update.
        resource = f"{plural(kind)}.{version}.{group}"
        return cluster.wait_for(f"{resource} to be served", lambda: (
            (got := cluster.kubectl("-n", namespace, "get", resource, "-o", "json", check=False)).returncode == 0
            and json.loads(got.stdout)["items"]), timeout=60)[0]

    def stored_versions(kind) -> list[str]:
        return cluster.get_json(f"crd/{plural(kind)}.{group}")["status"]["storedVersions"]

    # 1. Today's API: v1alpha1 only. One object of each kind, with a status written by its subresource.
    apply([(VERSION, True, True)])
    before = {}
    for kind in KINDS:
        obj = _example(kind, group, namespace)
        cluster.wait_for(f"{kind.kind_name} to be created", lambda o=obj: cluster.kubectl(
            "create", "-f", "-", input=json.dumps(o), check=False).returncode == 0, timeout=60)
        cluster.kubectl("-n", namespace, "patch", f"{plural(kind)}.{VERSION}.{group}", obj["metadata"]["name"],
                        "--subresource=status", "--type=merge", "-p", json.dumps({"status": {"observedGeneration": 1}}))
        before[kind.kind_name] = read(kind, VERSION)
        assert before[kind.kind_name]["status"]["observedGeneration"] == 1
        assert stored_versions(kind) == [VERSION]

    # 2. v1beta1 added and served; storage stays v1alpha1. Both versions read the same objects.
    apply([(VERSION, True, True), (NEXT, True, False)])
    for kind in KINDS:
        old, new = read(kind, VERSION), read(kind, NEXT)
        assert old["apiVersion"] == f"{group}/{VERSION}" and new["apiVersion"] == f"{group}/{NEXT}"
        assert _kept(old) == _kept(new) == _kept(before[kind.kind_name])
        assert stored_versions(kind) == [VERSION]

    # 3. Storage flips to v1beta1: new writes are stored as v1beta1; objects already in etcd stay v1alpha1,
    # so the apiserver now records both.
    apply([(VERSION, True, False), (NEXT, True, True)])
    for kind in KINDS:
        assert stored_versions(kind) == [VERSION, NEXT]
    # v1alpha1 cannot be dropped from the CRD while objects may still be stored as it: the apiserver refuses.
    refused = apply([(NEXT, True, True)], check=False)
    assert refused.returncode != 0
    assert "status.storedVersions" in refused.stderr and VERSION in refused.stderr

    # 4. Storage version migration: a no-op update of every object (PUT of the object as read), which makes
    # the apiserver write it again in the storage version. The new resourceVersion proves it was written;
    # the unchanged generation proves the spec did not change (no reconcile is triggered).
    for kind in KINDS:
        current = read(kind, NEXT)
        cluster.kubectl("replace", "-f", "-", input=json.dumps(current))
        migrated = read(kind, NEXT)
        assert migrated["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"], kind.kind_name
        assert _kept(migrated) == _kept(before[kind.kind_name])

    # 5. Every object is stored as v1beta1 now: v1alpha1 leaves status.storedVersions (what the migrator does
    # when it finishes), and then the CRD can drop v1alpha1 altogether.
    for kind in KINDS:
        cluster.kubectl("patch", f"crd/{plural(kind)}.{group}", "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"storedVersions": [NEXT]}}))
        assert stored_versions(kind) == [NEXT]
    apply([(NEXT, True, True)])
    for kind in KINDS:
        crd = cluster.get_json(f"crd/{plural(kind)}.{group}")
        assert [v["name"] for v in crd["spec"]["versions"]] == [NEXT]
        after = read(kind, NEXT)
        assert after["apiVersion"] == f"{group}/{NEXT}"
        assert _kept(after) == _kept(before[kind.kind_name]), kind.kind_name
        gone = cluster.kubectl("-n", namespace, "get", f"{plural(kind)}.{VERSION}.{group}", check=False)
        assert gone.returncode != 0  # v1alpha1 is no longer served


def test_the_renamed_copies_leave_the_real_crds_alone(cluster, group):
    # The transformation keeps the schema and touches only names: the real drafter.dev CRDs are never the
    # ones changed, and the copies claim no short name or category the real ones use.
    for kind in KINDS:
        crd = renamed_crd(kind, group, [(VERSION, True, True), (NEXT, True, False)])
        assert crd["metadata"]["name"] == f"{plural(kind)}.{group}" != f"{kind.plural}.{GROUP}"
        names = crd["spec"]["names"]
        assert "shortNames" not in names and "categories" not in names
        # No resource name, singular or kind of the real CRDs: `kubectl get drafterserving` stays unambiguous.
        real = {n for k in KINDS for n in (k.plural, k.plural[:-1], k.kind_name.lower())}
        assert not real & {names["plural"], names["singular"], names["kind"].lower()}
        generated = yaml.safe_load((ROOT / "crds" / crd_filename(kind)).read_text())["spec"]["versions"][0]
        for version in crd["spec"]["versions"]:
            assert version["schema"] == generated["schema"]
            assert version["subresources"] == generated["subresources"]
