"""The API against the real apiserver: CRDs install, examples round-trip, invalid manifests are refused
with a message naming the field, the models and the apiserver agree, kubectl shows columns and docs."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from drafter_operator.api import (
    KINDS,
    DrafterBenchmarkSpec,
    DrafterServing,
    DrafterServingSpec,
    DrafterTrainingSpec,
    crd_manifest,
    parse_object,
)
from drafter_operator.constants import API_GROUP as GROUP, API_VERSION as VERSION, DRAFTER_METHODS
from drafter_operator.api.generate import crd_filename
from tests.api_strategies import benchmark_specs, mutated_serving_specs, serving_specs, training_specs
from tests.structures import contains

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = sorted((ROOT / "tests" / "e2e" / "invalid").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
E2E_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def crds(cluster):
    """The generated CRDs, applied from crds/ and Established."""
    for kind in KINDS:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds" / crd_filename(kind)))
    for kind in KINDS:
        cluster.kubectl("wait", "--for", "condition=established", "--timeout=60s", f"crd/{kind.plural}.{GROUP}")
    # The apiserver serves a new kind a moment after Established; wait until a list works.
    for kind in KINDS:
        cluster.wait_for(f"{kind.plural} to be served",
                         lambda k=kind: cluster.kubectl("get", k.plural, "-A", check=False).returncode == 0, timeout=60)
    return KINDS


@pytest.fixture(scope="module")
def scratch_namespace(cluster, crds):
    """One namespace for the many refused manifests (nothing is created in it)."""
    name = f"t-api-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _custom_api(cluster):
    from kubernetes import client

    return client.CustomObjectsApi(cluster.api_client())


def _object(kind: str, name: str, spec: dict) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}


# --- installation -----------------------------------------------------------------------------------------


def test_installed_crds_equal_the_generated_ones(cluster, crds):
    for kind in KINDS:
        live = cluster.get_json(f"crd/{kind.plural}.{GROUP}")
        expected = crd_manifest(kind)["spec"]
        assert live["spec"]["names"]["shortNames"] == expected["names"]["shortNames"]
        assert live["spec"]["names"]["categories"] == ["drafter"]
        live_schema = live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert live_schema == expected["versions"][0]["schema"]["openAPIV3Schema"]
        conditions = {c["type"]: c["status"] for c in live["status"]["conditions"]}
        assert conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"


# --- examples ---------------------------------------------------------------------------------------------


def test_examples_apply_and_read_back_unchanged_apart_from_defaults(cluster, crds, namespace):
    for path in EXAMPLES:
        cluster.kubectl("-n", namespace, "apply", "--server-side", "-f", str(path))
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            model = parse_object(doc)
            live = cluster.get_json("-n", namespace, model.plural, model.name)
            assert contains(doc["spec"], live["spec"]), f"{path.name}: a field changed on the way through the apiserver"
            # the only additions are the defaults, and they are the models' defaults
            assert live["spec"] == model.to_json()["spec"], path.name
            assert type(model).model_validate(live) .spec == model.spec


# --- the catalogue of invalid manifests ---------------------------------------------------------------------


def test_catalogue_has_at_least_twenty_cases():
    assert len(CATALOGUE) >= 20


@pytest.mark.parametrize("path", CATALOGUE, ids=lambda p: p.stem)
def test_apiserver_refuses_invalid_manifest_naming_the_field(cluster, scratch_namespace, path):
    text = path.read_text()
    field = re.search(r"^# field: (.+)$", text, re.M).group(1).strip()
    message = re.search(r"^# message: (.+)$", text, re.M).group(1).strip()
    manifest = yaml.safe_load(text)
    proc = cluster.kubectl("-n", scratch_namespace, "apply", "--server-side", "-f", "-", input=text, check=False)
    assert proc.returncode != 0, f"{path.name} was accepted:\n{proc.stdout}"
    assert field in proc.stderr, f"the error does not name {field}:\n{proc.stderr}"
    assert message in proc.stderr, f"the error does not say {message!r}:\n{proc.stderr}"
    plural = next(k.plural for k in KINDS if k.kind_name == manifest["kind"])
    assert cluster.kubectl("-n", scratch_namespace, "get", plural, manifest["metadata"]["name"], check=False).returncode != 0


# --- round trips and agreement with the models ---------------------------------------------------------------


@pytest.mark.parametrize("kind, spec_model, strategy", [
    ("DrafterServing", DrafterServingSpec, serving_specs()),
    ("DrafterBenchmark", DrafterBenchmarkSpec, benchmark_specs()),
    ("DrafterTraining", DrafterTrainingSpec, training_specs()),
], ids=["serving", "benchmark", "training"])
def test_round_trip_through_the_apiserver_is_lossless(cluster, crds, namespace, kind, spec_model, strategy):
    api = _custom_api(cluster)
    plural = next(k.plural for k in KINDS if k.kind_name == kind)

    @E2E_SETTINGS
    @given(strategy)
    def run(spec):
        model = spec_model.model_validate(spec)
        name = f"rt-{uuid.uuid4().hex[:10]}"
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, _object(kind, name, model.to_json()))
        live = api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        assert spec_model.model_validate(live["spec"]) == model
        assert live["spec"] == model.to_json()
        api.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)

    run()


def test_models_and_apiserver_agree_on_mutated_specs(cluster, crds, namespace):
    """Random edits of valid specs: whatever the models decide, the apiserver decides too (and back)."""
    from kubernetes.client.exceptions import ApiException
    from pydantic import ValidationError

    api = _custom_api(cluster)
    seen = {"accepted": 0, "rejected": 0}

    @settings(E2E_SETTINGS, max_examples=60)
    @given(mutated_serving_specs())
    def run(spec):
        try:
            DrafterServingSpec.model_validate(spec)
            model_says, model_error = True, ""
        except ValidationError as error:
            model_says, model_error = False, str(error)
        body = _object("DrafterServing", f"mut-{uuid.uuid4().hex[:10]}", spec)
        try:
            api.create_namespaced_custom_object(GROUP, VERSION, namespace, "drafterservings", body, dry_run="All")
            server_says, server_error = True, ""
        except ApiException as error:
            assert error.status == 422, error.body
            server_says, server_error = False, json.loads(error.body).get("message", "")
        seen["accepted" if server_says else "rejected"] += 1
        assert model_says == server_says, (
            f"models {'accept' if model_says else 'reject'}, apiserver {'accepts' if server_says else 'rejects'}:\n"
            f"{json.dumps(spec, indent=1)}\nmodels: {model_error}\napiserver: {server_error}")

    run()
    assert seen["accepted"] and seen["rejected"], seen  # the mutations exercise both outcomes


# --- what kubectl shows ------------------------------------------------------------------------------------------


def _table(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        rows.append(dict(zip(names, cells)))
    return rows


def _column_value(obj: dict, json_path: str) -> str:
    """What kubectl prints for one of our printer-column JSONPaths (the subset the CRDs use)."""
    node: object = obj
    for part in re.findall(r'[A-Za-z]+|\[\?\(@\.type=="[A-Za-z]+"\)\]', json_path):
        if part.startswith("[?"):
            wanted = re.search(r'"(\w+)"', part).group(1)
            node = next((c for c in node or [] if c.get("type") == wanted), None)
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def _consistent_row(cluster, namespace: str, kind, name: str, wide: bool = False) -> tuple[dict, dict]:
    """A table row and the object it was printed from, read so that the object did not change in between
    (an operator may be reconciling the same objects while the test runs)."""

    def attempt():
        before = cluster.get_json("-n", namespace, kind.plural, name)
        args = ["-n", namespace, "get", kind.plural, name] + (["-o", "wide"] if wide else [])
        row = _table(cluster.kubectl(*args).stdout)[0]
        after = cluster.get_json("-n", namespace, kind.plural, name)
        same = before["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
        return (row, after) if same else None

    return cluster.wait_for(f"a stable read of {kind.kind_name} {name}", attempt, timeout=30, interval=0.2)


def _check_columns(cluster, namespace: str, kind, name: str) -> dict[str, str]:
    columns = crd_manifest(kind)["spec"]["versions"][0]["additionalPrinterColumns"]
    for wide in (False, True):
        row, obj = _consistent_row(cluster, namespace, kind, name, wide)
        shown = [c for c in columns if wide or not c.get("priority")]
        assert list(row) == ["NAME"] + [c["name"].upper() for c in shown]
        for column in shown:
            if column["type"] == "date":
                assert re.fullmatch(r"\d+[smhd]\S*", row[column["name"].upper()]), row
            else:
                expected = _column_value(obj, column["jsonPath"])
                assert row[column["name"].upper()] == expected, (column, row, obj.get("status"))
    return row


def test_printer_columns_show_spec_and_status(cluster, crds, namespace):
    from drafter_operator.api import DrafterBenchmark, DrafterTraining

    for path in EXAMPLES:
        cluster.kubectl("-n", namespace, "apply", "--server-side", "-f", str(path))
    status = {"observedGeneration": 1, "activeRevision": "7f3c9a1b2d",
              "conditions": [{"type": "Ready", "status": "True", "reason": "Serving", "message": "1/1 replicas ready",
                              "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
              "acceptance": {"rate": 0.15, "meanLength": 1.75, "draftTokens": 7530},
              "lastBenchmark": {"name": "kimi-k25-vllm-eagle3-5x512", "tokensPerSecond": 54.4, "speedup": 0.66},
              # ENGINE and DRAFTER describe what serves (status.serving), which the operator may not have written yet
              "serving": {"revision": "7f3c9a1b2d", "engine": "vllm", "method": "eagle3"}}
    patched = cluster.kubectl("-n", namespace, "patch", "drafterserving", "kimi-k25-vllm-eagle3", "--subresource=status",
                              "--type=merge", "-p", json.dumps({"status": status}), "-o", "json")
    # status goes through the status subresource and parses with the model
    live = DrafterServing.model_validate(json.loads(patched.stdout))
    assert live.status.acceptance.mean_length == 1.75 and live.status.conditions[0].reason == "Serving"
    row = _check_columns(cluster, namespace, DrafterServing, "kimi-k25-vllm-eagle3")
    assert (row["ENGINE"], row["DRAFTER"], row["TP"]) == ("vllm", "eagle3", "8")
    cluster.kubectl("-n", namespace, "patch", "drafterserving", "kimi-k25-baseline", "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"serving": {"engine": "vllm", "method": "none"}}}))
    assert _check_columns(cluster, namespace, DrafterServing, "kimi-k25-baseline")["DRAFTER"] == "none"

    # a write through the main resource changes spec but cannot write status
    after = json.loads(cluster.kubectl("-n", namespace, "patch", "dsv", "kimi-k25-vllm-eagle3", "--type=merge", "-o", "json",
                                       "-p", json.dumps({"spec": {"replicas": 2}, "status": {"activeRevision": "overwritten"}})).stdout)
    assert after["spec"]["replicas"] == 2 and after.get("status", {}).get("activeRevision") != "overwritten"

    cluster.kubectl("-n", namespace, "patch", "dbench", "kimi-k25-vllm-eagle3-5x512", "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"state": "Succeeded", "drafter": "eagle3",
                                                 "result": {"tokensPerSecond": 54.4, "speedup": 0.66, "acceptanceRate": 0.15}}}))
    assert _check_columns(cluster, namespace, DrafterBenchmark, "kimi-k25-vllm-eagle3-5x512")["SERVING"] == "kimi-k25-vllm-eagle3"
    cluster.kubectl("-n", namespace, "patch", "dtrain", "kimi-k25-eagle3-ft", "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"stage": "Train", "progress": {"epoch": 3, "epochs": 5, "summary": "epoch 3/5"}}}))
    _check_columns(cluster, namespace, DrafterTraining, "kimi-k25-eagle3-ft")

    # the category lists all three kinds
    everything = cluster.kubectl("-n", namespace, "get", "drafter", "-o", "name").stdout.split()
    assert len(everything) == len([d for p in EXAMPLES for d in yaml.safe_load_all(p.read_text())])


def test_column_values_follow_the_json_paths():
    obj = {"spec": {"engine": "vllm"}, "status": {"conditions": [{"type": "Degraded", "status": "False"},
                                                                 {"type": "Ready", "status": "True"}], "acceptance": {"rate": 0.15}}}
    assert _column_value(obj, ".spec.engine") == "vllm"
    assert _column_value(obj, '.status.conditions[?(@.type=="Ready")].status') == "True"
    assert _column_value(obj, ".status.acceptance.rate") == "0.15"
    assert _column_value(obj, ".status.lastBenchmark.speedup") == ""


def test_kubectl_explain_shows_the_field_docs(cluster, crds):
    def explain():
        proc = cluster.kubectl("explain", "drafterserving.spec.drafter", check=False)
        return proc.stdout if proc.returncode == 0 and "numSpeculativeTokens" in proc.stdout else None

    text = cluster.wait_for("kubectl explain to know DrafterServing", explain, timeout=90, interval=2)
    assert "The speculative drafter" in text
    assert "Tokens drafted per step (k)" in text
    assert "SGLang only: draft steps per verification" in text
    assert re.search(r"method\s+<string>\s+-required-", text)
    enum_text = cluster.kubectl("explain", "drafterserving.spec.drafter.method").stdout
    assert all(method in enum_text for method in DRAFTER_METHODS)


# --- exhaustive boundary grids: every arithmetic rule, on both sides of its edge ---------------------------------


def _serving(**over) -> dict:
    spec = {"engine": "vllm", "target": {"model": "/models/T"}, "drafter": {"method": "ngram", "numSpeculativeTokens": 5}}
    spec.update(over)
    return spec


def _training(**over) -> dict:
    spec = {"target": {"model": "/models/T"}, "storage": {"modelClaim": "models"},
            "data": {"dataset": "d/x", "numSamples": 1}, "hiddenStates": {"storage": {"size": "1Ti"}},
            "output": {"path": "/models/drafters/out"}}
    spec.update(over)
    return spec


def _boundary_cases() -> list[tuple[str, dict]]:
    cases: list[tuple[str, dict]] = []
    for tp in range(1, 9):
        for gpus in range(1, 10):
            cases.append(("DrafterServing", _serving(target={"model": "/models/T", "tensorParallelSize": tp},
                                                     resources={"gpusPerReplica": gpus})))
            cases.append(("DrafterTraining", _training(target={"model": "/models/T", "tensorParallelSize": tp},
                                                       resources={"gpus": gpus})))
    for timeout in ["0s", "59s", "60s", "1m", "61s", "47h59m59s", "48h", "48h1s", "2880m", "2881m", "172800s", "172801s", "250ms"]:
        cases.append(("DrafterServing", _serving(startup={"timeout": timeout})))
        cases.append(("DrafterBenchmark", {"servingRef": {"name": "s"}, "timeout": timeout}))
    for window in ["29s", "30s", "24h", "24h1s", "1440m", "1441m", "29999ms", "30000ms"]:
        cases.append(("DrafterServing", _serving(acceptance={"minAcceptanceRate": "0.5", "window": window, "for": window})))
    for ratio in ["0", "0.0", "0.0001", "0.5", "1", "1.0", "1.0001", "1.5"]:
        cases.append(("DrafterServing", _serving(target={"model": "/models/T", "gpuMemoryUtilization": ratio})))
        cases.append(("DrafterServing", _serving(acceptance={"minAcceptanceRate": ratio})))
    for k in (1, 5, 16):
        for length in ["0.99", "1", "1.0", "2", "5.99", "6", "6.0", "6.01", "17", "17.0001", "17.5"]:
            cases.append(("DrafterServing", _serving(drafter={"method": "ngram", "numSpeculativeTokens": k},
                                                     acceptance={"minAcceptanceLength": length})))
    for steps in range(1, 4):
        for topk in (1, 2):
            for draft in range(1, 6):
                cases.append(("DrafterServing", _serving(engine="sglang", drafter={
                    "method": "eagle3", "model": "org/d", "numSteps": steps, "eagleTopk": topk, "numDraftTokens": draft},
                    acceptance={"minAcceptanceLength": "3.5"})))
    for engine in ("vllm", "sglang"):
        for method in DRAFTER_METHODS:
            for model in (None, "org/d", "/models/T"):
                for k in (None, 4):
                    drafter = {"method": method, **({"model": model} if model else {}), **({"numSpeculativeTokens": k} if k else {})}
                    cases.append(("DrafterServing", _serving(engine=engine, drafter=drafter)))
    for speedup in ["0", "0.0", "0.01", "1", "1.2"]:
        for baseline in (None, {"tokensPerSecond": "82.5"}, {"tokensPerSecond": "0"}, {"servingRef": {"name": "b"}, "tokensPerSecond": "1"}):
            gate = {"minSpeedup": speedup, **({"baseline": baseline} if baseline else {})}
            cases.append(("DrafterServing", _serving(swap={"strategy": "BlueGreen", "gate": gate})))
    for rate in ["0", "1e-4", "5E-6", "1", "1.0", "1.1", "1e1", "9e-9", "0.0"]:
        cases.append(("DrafterTraining", _training(train={"learningRate": rate})))
    for prompts in range(1, 5):
        for concurrency in range(1, 5):
            for inline in (None, 2):
                spec = {"servingRef": {"name": "s"}, "numPrompts": prompts, "concurrency": concurrency}
                if inline:
                    spec["prompts"] = {"inline": ["a"] * inline}
                cases.append(("DrafterBenchmark", spec))
    for layers in ([2, 30, 58], [30, 2, 58], [2, 58, 30], [0, 1, 1023], [5, 5, 6]):
        cases.append(("DrafterTraining", _training(hiddenStates={"layers": layers, "storage": {"size": "1Ti"}})))
    # Path spellings (api/training/spec.py, api/common.py): CEL's matches/lastIndexOf/startsWith against the models' Python.
    for path in ["/models/drafters/x", "/models/drafters/x/", "/models//drafters/x", "/models/drafters/./x",
                 "/models/drafters/../x", "/models/drafters/...", "/models/drafters/.x", "/models/drafters/x..",
                 "/models/x", "/models", "/models/", "/modelsx/d/x", "/models/T/x", "/models/T", "/models/T/..",
                 "/elsewhere/d/x", "/.", "/"]:
        cases.append(("DrafterTraining", _training(output={"path": path})))
        cases.append(("DrafterTraining", _training(output={"path": "/models/drafters/out", "overwrite": True},
                                                   data={"dataset": path, "numSamples": 1})))
        cases.append(("DrafterTraining", _training(target={"model": path})))
        cases.append(("DrafterTraining", _training(baseDrafter=path)))
    for mount in ["/models", "/models/.", "/models/..", "/mnt/./w", "/.x"]:
        cases.append(("DrafterTraining", _training(storage={"modelClaim": "models", "mountPath": mount},
                                                   target={"model": "org/t"},
                                                   output={"path": f"{mount}/drafters/out"})))
    return cases


def test_models_and_apiserver_agree_at_every_boundary(cluster, crds, namespace):
    from kubernetes.client.exceptions import ApiException
    from pydantic import ValidationError

    api = _custom_api(cluster)
    models = {"DrafterServing": DrafterServingSpec, "DrafterBenchmark": DrafterBenchmarkSpec, "DrafterTraining": DrafterTrainingSpec}
    plurals = {k.kind_name: k.plural for k in KINDS}
    disagreements, outcomes = [], {True: 0, False: 0}
    for kind, spec in _boundary_cases():
        try:
            models[kind].model_validate(spec)
            model_says = True
        except ValidationError:
            model_says = False
        try:
            api.create_namespaced_custom_object(GROUP, VERSION, namespace, plurals[kind],
                                                _object(kind, f"edge-{uuid.uuid4().hex[:10]}", spec), dry_run="All")
            server_says, detail = True, ""
        except ApiException as error:
            assert error.status == 422, error.body
            server_says, detail = False, json.loads(error.body).get("message", "")
        outcomes[server_says] += 1
        if model_says != server_says:
            disagreements.append(f"{kind} {json.dumps(spec)}: models {model_says}, apiserver {server_says} {detail}")
    assert not disagreements, "\n".join(disagreements)
    assert outcomes[True] > 50 and outcomes[False] > 50, outcomes
