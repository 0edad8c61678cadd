"""Pydantic models -> structural OpenAPI v3 schemas and CustomResourceDefinitions.

Kubernetes wants a structural schema (every node typed, no $ref, no anyOf of types, no `title`, no
`additionalProperties` beside `properties`), while pydantic writes JSON Schema 2020-12. The converter:
- inlines `$ref`/`$defs` (a field's own description wins over its class docstring);
- turns `anyOf: [X, {type: null}]` into X with `nullable: true`;
- turns `const` into a one-value `enum`, drops `title`, `additionalProperties: false` and `default: null`;
- keeps defaults in `spec` (the apiserver applies them) and drops them in `status`;
- emits each model's `Rule`s as `x-kubernetes-validations` (see common.Rule);
- refuses what it cannot translate faithfully (JSON Schema's numeric exclusiveMinimum, oneOf, ...).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from drafter_operator.constants import API_GROUP, API_VERSION, NAME_LABEL, PART_OF_LABEL
from drafter_operator.api.kind import NAME_MAX_LENGTH, KindModel

CATEGORY = "drafter"

_KEY_ORDER = (
    "description", "type", "format", "nullable", "enum", "default",
    "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems", "maxProperties",
    "required", "properties", "additionalProperties", "items",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-validations",
)
_DROP = {"title", "$defs", "$schema"}
_UNSUPPORTED = {"oneOf", "not", "exclusiveMinimum", "exclusiveMaximum", "const_", "prefixItems", "uniqueItems",
                "patternProperties", "propertyNames", "if", "then", "else", "dependentRequired"}


class SchemaError(ValueError):
    """The model uses a construct the structural-schema converter cannot translate faithfully."""


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {key: i for i, key in enumerate(_KEY_ORDER)}
    return {key: node[key] for key in sorted(node, key=lambda k: (rank.get(k, len(rank)), k))}


def _deref(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Replace a $ref (or a one-element allOf) by the referenced schema, siblings winning."""
    if "$ref" in node:
        name = node["$ref"].split("/")[-1]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return {**copy.deepcopy(defs[name]), **siblings}
    if "allOf" in node and len(node["allOf"]) == 1:
        siblings = {k: v for k, v in node.items() if k != "allOf"}
        return {**_deref(node["allOf"][0], defs), **siblings}
    return node


def convert(node: dict[str, Any], defs: dict[str, Any], *, keep_defaults: bool = True, path: str = "") -> dict[str, Any]:
    """One JSON Schema node (with its $defs) -> a structural OpenAPI v3 node."""
    node = _deref(dict(node), defs)
    nullable = False
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) != 1:
            raise SchemaError(f"{path or '<root>'}: anyOf with {len(options)} non-null options is not structural")
        nullable = len(options) < len(node["anyOf"])
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_deref(dict(options[0]), defs), **rest}
    if "allOf" in node:
        raise SchemaError(f"{path or '<root>'}: allOf is not supported")
    bad = _UNSUPPORTED & set(node)
    if bad:
        raise SchemaError(f"{path or '<root>'}: {sorted(bad)} cannot be expressed in a CRD schema; use ge/le constraints")

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "default":
            if value is not None and keep_defaults:
                out["default"] = value
        elif key == "properties":
            out["properties"] = {
                name: convert(sub, defs, keep_defaults=keep_defaults, path=f"{path}.{name}")
                for name, sub in value.items()
            }
        elif key == "items":
            out["items"] = convert(value, defs, keep_defaults=keep_defaults, path=f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = convert(value, defs, keep_defaults=keep_defaults, path=f"{path}{{}}")
            # `false` (extra="forbid") is the apiserver's default behaviour (pruning): nothing to emit.
        elif key == "x-kubernetes-validations":
            order = ("rule", "message", "messageExpression", "fieldPath", "reason")
            out[key] = [{k: rule[k] for k in order if k in rule} for rule in value]
        elif key == "maxLength" and node.get("type") == "array":
            out["maxItems"] = value
        elif key == "minLength" and node.get("type") == "array":
            out["minItems"] = value
        elif key == "maxLength" and node.get("type") == "object":
            out["maxProperties"] = value
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if nullable:
        out["nullable"] = True
    if "properties" in out and "type" not in out:
        out["type"] = "object"
    if "type" not in out:
        raise SchemaError(f"{path or '<root>'}: node has no type: {node}")
    if isinstance(out["type"], list):
        raise SchemaError(f"{path or '<root>'}: multiple types {out['type']}")
    return _ordered(out)


def model_schema(model: type[BaseModel], *, keep_defaults: bool = True) -> dict[str, Any]:
    """The structural schema of one pydantic model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return convert(raw, defs, keep_defaults=keep_defaults)


def openapi_schema(kind_model: type[KindModel]) -> dict[str, Any]:
    """openAPIV3Schema of a kind: TypeMeta, metadata.name constraints, spec (required) and status."""
    fields = kind_model.model_fields
    spec_model = fields["spec"].annotation
    status_model = _unwrap_optional(fields["status"].annotation)
    spec = model_schema(spec_model)
    status = model_schema(status_model, keep_defaults=False)
    spec["description"] = fields["spec"].description or spec.get("description", "")
    status["description"] = fields["status"].description or status.get("description", "")
    name_schema = {"type": "string", "maxLength": NAME_MAX_LENGTH}
    root: dict[str, Any] = {
        "description": (kind_model.__doc__ or "").strip(),
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this object: drafter.dev/v1alpha1."},
            "kind": {"type": "string", "description": f"Kind of this object: {kind_model.kind_name}."},
            "metadata": {"type": "object", "properties": {"name": dict(name_schema), "generateName": dict(name_schema)}},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [rule.to_schema() for rule in kind_model.rules],
    }
    return _ordered(root)


def _unwrap_optional(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if args:
        real = [a for a in args if a is not type(None)]
        if len(real) == 1:
            return real[0]
    return annotation


def crd_manifest(kind_model: type[KindModel]) -> dict[str, Any]:
    """The CustomResourceDefinition of a kind, as a dict ready for yaml.safe_dump or the API."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{kind_model.plural}.{API_GROUP}",
            "labels": {NAME_LABEL: "drafter-operator", PART_OF_LABEL: "drafter-operator"},
        },
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind_model.kind_name,
                "listKind": f"{kind_model.kind_name}List",
                "plural": kind_model.plural,
                "singular": kind_model.singular,
                "shortNames": list(kind_model.short_names),
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(column) for column in kind_model.printer_columns],
                    "schema": {"openAPIV3Schema": openapi_schema(kind_model)},
                }
            ],
        },
    }


def iter_nodes(node: dict[str, Any], path: str = ""):
    """Yield (path, node) for every schema node, depth first (used by the docs and the tests)."""
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from iter_nodes(sub, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        yield from iter_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from iter_nodes(node["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """What makes a schema non-structural (empty when it is structural); a self-check for the tests."""
    problems = []
    for path, node in iter_nodes(schema):
        where = path or "<root>"
        if "type" not in node and not node.get("x-kubernetes-int-or-string") and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{where}: no type")
        for key in ("$ref", "$defs", "title", "anyOf", "oneOf", "allOf", "not", "uniqueItems", "const"):
            if key in node:
                problems.append(f"{where}: has {key}")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties beside additionalProperties")
        if node.get("type") == "array" and not isinstance(node.get("items"), dict):
            problems.append(f"{where}: array without items")
    return problems
