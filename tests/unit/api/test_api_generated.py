"""The generated CRDs and docs/api.md: current, structural, and what users see in kubectl."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from drafter_operator.api import KINDS, DrafterBenchmark, DrafterServing, DrafterTraining, crd_manifest
from drafter_operator.api import generate
from drafter_operator.api.schema import SchemaError, convert, iter_nodes, model_schema, structural_problems

ROOT = Path(__file__).resolve().parents[3]


def _schema(kind):
    return crd_manifest(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_crds_and_docs_on_disk_are_current():
    files = generate.rendered_files(str(ROOT / "crds"), str(ROOT / "docs" / "api.md"))
    stale = [str(path.relative_to(ROOT)) for path, content in files.items()
             if not path.exists() or path.read_text() != content]
    assert not stale, f"out of date, run `drafter-operator crds`: {stale}"


def test_check_mode_fails_on_drift_and_write_mode_fixes_it(tmp_path, capsys):
    out, docs = tmp_path / "crds", tmp_path / "api.md"
    assert generate.main(str(out), str(docs), check=True) == 1  # nothing written yet
    assert generate.main(str(out), str(docs), check=False) == 0
    assert generate.main(str(out), str(docs), check=True) == 0
    crd = out / generate.crd_filename(DrafterServing)
    crd.write_text(crd.read_text().replace("maxLength: 52", "maxLength: 53", 1))
    assert generate.main(str(out), str(docs), check=True) == 1
    assert "out of date" in capsys.readouterr().err


#: What client-side `kubectl apply` keeps of an object in its last-applied-configuration annotation: at most this many
#: bytes in all of an object's annotations (the apiserver's limit), so a CRD above it cannot be applied that way.
ANNOTATIONS_LIMIT = 262144


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_crd_fits_kubectls_last_applied_annotation_with_room_to_grow(kind):
    """`kubectl apply -f crds/` (client-side) stores the whole CRD, as compact JSON, in an annotation: a CRD past the
    limit is refused ("metadata.annotations: Too long"). Embedding the DrafterTraining schema in spec.retraining's
    template did that; it is kept without a schema instead (api/serving/retraining.py)."""
    import json

    size = len(json.dumps(crd_manifest(kind), separators=(",", ":")))
    assert size < 0.8 * ANNOTATIONS_LIMIT, f"{kind.__name__}'s CRD is {size} bytes of JSON"


def test_crd_files_parse_back_to_the_manifests():
    for kind in KINDS:
        text = (ROOT / "crds" / generate.crd_filename(kind)).read_text()
        assert yaml.safe_load(text) == crd_manifest(kind)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind_name)
def test_schema_is_structural(kind):
    schema = _schema(kind)
    assert structural_problems(schema) == []
    text = yaml.safe_dump(schema)
    for forbidden in ("$ref", "$defs", "title:", "anyOf", "additionalProperties: false"):
        assert forbidden not in text


def test_structural_checker_catches_what_it_should():
    bad = {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                                            "b": {"title": "B", "type": "string"}, "c": {"type": "array"}}}
    problems = structural_problems(bad)
    assert any("a: no type" in p for p in problems)
    assert any("b: has title" in p for p in problems)
    assert any("c: array without items" in p for p in problems)


def test_converter_turns_optional_into_nullable_and_refuses_unions():
    node = convert({"anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}], "default": None, "description": "field doc"},
                   {"X": {"type": "object", "title": "X", "description": "class doc", "properties": {"a": {"type": "string", "title": "A"}}}})
    assert node == {"description": "field doc", "type": "object", "nullable": True, "properties": {"a": {"type": "string"}}}
    with pytest.raises(SchemaError):
        convert({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
    with pytest.raises(SchemaError):
        convert({"type": "number", "exclusiveMinimum": 0}, {})


def test_names_columns_and_categories():
    names = {k.kind_name: crd_manifest(k)["spec"]["names"] for k in KINDS}
    assert names["DrafterServing"]["shortNames"] == ["dsv"]
    assert names["DrafterBenchmark"]["shortNames"] == ["dbench"]
    assert names["DrafterTraining"]["shortNames"] == ["dtrain"]
    builtin = {"ds", "deploy", "po", "svc", "cm", "sts", "rs", "ns", "no", "pv", "pvc", "sa", "ep", "ing", "cj", "hpa", "pdb", "rc", "ev", "netpol"}
    for n in names.values():
        assert n["categories"] == ["drafter"]
        assert not builtin & set(n["shortNames"])

    def columns(kind, wide):
        cols = crd_manifest(kind)["spec"]["versions"][0]["additionalPrinterColumns"]
        return [c["name"].upper() for c in cols if bool(c.get("priority")) == wide]

    assert columns(DrafterServing, False) == ["ENGINE", "DRAFTER", "READY", "DEGRADED", "ACCEPTANCE", "SPEEDUP", "AGE"]
    assert columns(DrafterServing, True) == ["REVISION", "TP"]
    assert columns(DrafterBenchmark, False) == ["SERVING", "DRAFTER", "TOK/S", "SPEEDUP", "ACCEPTANCE", "STATUS", "AGE"]
    assert columns(DrafterTraining, False) == ["STAGE", "PROGRESS", "AGE"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind_name)
def test_no_column_prints_a_raw_float(kind):
    """A printer column cannot format a number: a figure column reads the text the operator writes in
    status.display ("1.68x", "15.0%"), never the float beside it (1.6793)."""
    schema = _schema(kind)
    for column in crd_manifest(kind)["spec"]["versions"][0]["additionalPrinterColumns"]:
        assert column["type"] != "number", column
        if column["name"] in ("Speedup", "Acceptance", "Tok/s"):
            assert column["jsonPath"].startswith(".status.display.") and column["type"] == "string", column
            key = column["jsonPath"].rsplit(".", 1)[1]
            assert schema["properties"]["status"]["properties"]["display"]["properties"][key]["type"] == "string"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind_name)
def test_printer_column_paths_exist_in_the_schema(kind):
    schema = _schema(kind)
    paths = {path for path, _ in iter_nodes(schema)}
    for column in crd_manifest(kind)["spec"]["versions"][0]["additionalPrinterColumns"]:
        json_path = column["jsonPath"].lstrip(".")
        json_path = re.sub(r"\[\?\(.*\)\]", "[]", json_path)
        if json_path.startswith("metadata."):
            continue
        assert json_path.replace(".status", "status") in paths or json_path in paths, column


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind_name)
def test_every_field_is_described_for_kubectl_explain(kind):
    schema = _schema(kind)
    missing = [path for path, node in iter_nodes(schema["properties"]["spec"], "spec")
               if not path.endswith("[]") and not path.endswith("{}") and not node.get("description")]
    assert missing == []


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind_name)
def test_spec_has_no_floats_and_every_string_is_bounded(kind):
    spec = _schema(kind)["properties"]["spec"]
    for path, node in iter_nodes(spec, "spec"):
        assert node["type"] != "number", f"{path}: floats do not belong in spec"
        if node["type"] == "string":
            assert "maxLength" in node or "enum" in node, f"{path}: unbounded string (CEL cost)"
        if node["type"] == "array":
            assert "maxItems" in node, f"{path}: unbounded list (CEL cost)"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind_name)
def test_every_cel_rule_has_a_message_naming_a_field(kind):
    rules = [(path, rule) for path, node in iter_nodes(_schema(kind)) for rule in node.get("x-kubernetes-validations", [])]
    assert rules
    for path, rule in rules:
        assert rule["message"] and len(rule["message"]) < 400
        assert re.search(r"[a-zA-Z\]]\.[a-z][a-zA-Z]+", rule["message"]), (path, rule["message"])
        assert ":" in rule["message"] or " e.g. " in rule["message"] or " or " in rule["message"], (path, rule["message"])


def test_defaults_match_the_models():
    spec = _schema(DrafterServing)["properties"]["spec"]["properties"]
    assert spec["resources"]["default"] == {}
    assert spec["resources"]["properties"]["gpusPerReplica"]["default"] == 8
    assert spec["target"]["properties"]["tensorParallelSize"]["default"] == 8
    assert spec["startup"]["properties"]["timeout"]["default"] == "45m"
    assert spec["swap"]["properties"]["strategy"]["default"] == "Recreate"
    assert spec["drafter"]["properties"]["allowKnownBad"]["default"] is True
    status = _schema(DrafterServing)["properties"]["status"]
    assert not [p for p, n in iter_nodes(status) if "default" in n]
    bench = _schema(DrafterBenchmark)["properties"]["spec"]["properties"]
    assert (bench["numPrompts"]["default"], bench["maxTokens"]["default"], bench["concurrency"]["default"]) == (5, 512, 1)


def test_numbers_in_strings_are_quoted_for_yaml_1_2_readers():
    text = generate.dump_yaml({"a": "1e-4", "b": "0", "c": "45m", "d": "true", "e": "0.95"})
    assert text == 'a: "1e-4"\nb: "0"\nc: 45m\nd: "true"\ne: "0.95"\n'


def test_docs_list_every_spec_field_and_every_rule():
    docs = (ROOT / "docs" / "api.md").read_text()
    for kind in KINDS:
        schema = _schema(kind)
        assert f"## {kind.kind_name}" in docs
        for path, node in iter_nodes(schema["properties"]["spec"], "spec"):
            for name in node.get("properties", {}):
                assert f"| `{name}`" in docs, f"{path}.{name} missing from docs/api.md"
            for rule in node.get("x-kubernetes-validations", []):
                assert rule["message"] in docs


def test_model_schema_of_a_plain_model_has_rules_inline():
    from drafter_operator.api.benchmark_gate import Gate

    schema = model_schema(Gate)
    assert schema["x-kubernetes-validations"][0]["rule"].startswith("has(self.minSpeedup)")
