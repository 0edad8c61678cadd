"""Types shared by the three kinds: the model base class, validated string types, and the rule mechanism.

Conventions (see docs/api.md):
- JSON field names are camelCase (pydantic alias generator); Python attributes are snake_case and both
  are accepted on input (`populate_by_name`).
- No floats in `spec`: thresholds are decimal strings validated by pattern ("0.5"), durations are
  strings like "45m" or "1h30m", sizes are Kubernetes quantities ("64Gi"). `status` may use floats.
- Every cross-field rule is declared once as a `Rule`: its CEL expression becomes an
  `x-kubernetes-validations` entry in the generated CRD (the apiserver enforces it at `kubectl apply`)
  and its Python predicate runs in the model's validator, so `Model.model_validate()` rejects exactly
  what the apiserver rejects, with the same message.
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel, to_snake


# ---------------------------------------------------------------------------------------------------
# Rules: one declaration, two enforcers (the apiserver through CEL, the models through Python).


@dataclass(frozen=True)
class Rule:
    """A validation rule on one object of the schema.

    `cel` is evaluated by the apiserver with `self` bound to the object the rule is attached to;
    `check` is the same rule in Python, called with the model instance (True = valid). `field_path`
    (relative, e.g. ".timeout") makes the apiserver report the error on that child field; `reason` is
    one of FieldValueInvalid (default), FieldValueForbidden, FieldValueRequired.
    """

    cel: str
    message: str
    check: Callable[[Any], bool]
    field_path: str | None = None
    reason: str | None = None

    def to_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.cel, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


def _schema_extra(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """Adds a model's rules as x-kubernetes-validations, and `default: {}` for object fields whose
    default is the empty object (so the apiserver applies the nested defaults, as pydantic does)."""
    rules = getattr(cls, "rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.to_schema() for rule in rules]
    for name, field in cls.model_fields.items():
        factory = field.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            alias = field.alias or name
            schema.setdefault("properties", {}).setdefault(alias, {})["default"] = {}


class ApiModel(BaseModel):
    """Base of every spec model: camelCase JSON, unknown fields refused, rules enforced."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        json_schema_extra=_schema_extra,
    )

    # Cross-field rules of this object; emitted as x-kubernetes-validations on the object's schema.
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _enforce_rules(self) -> Any:
        failed = [rule.message for rule in type(self).rules if not rule.check(self)]
        if failed:
            raise ValueError("; ".join(failed))
        return self

    def to_json(self) -> dict[str, Any]:
        """The object as the apiserver stores it: camelCase keys, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StatusModel(BaseModel):
    """Base of status models: written by the operator, read leniently (unknown fields ignored, so an
    older operator can read a newer status)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_attribute_docstrings=True,
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# ---------------------------------------------------------------------------------------------------
# Validated string types. Every string gets a maxLength: it bounds the cost of CEL rules that read it.

DURATION_PATTERN = r"^([0-9]{1,5}(ms|s|m|h)){1,4}$"
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(DURATION_PATTERN)
_DURATION_PART_RE = re.compile(r"([0-9]+)(ms|s|m|h)")

Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN, max_length=24)]
"""A duration such as "30s", "5m", "45m", "1h30m" (units ms, s, m, h)."""

RATIO_PATTERN = r"^(0(\.[0-9]{1,4})?|1(\.0{1,4})?)$"
Ratio = Annotated[str, StringConstraints(pattern=RATIO_PATTERN, max_length=6)]
"""A decimal between 0 and 1 written as a string, e.g. "0.5" (at most 4 decimals)."""

DECIMAL_PATTERN = r"^[0-9]{1,6}(\.[0-9]{1,4})?$"
Decimal = Annotated[str, StringConstraints(pattern=DECIMAL_PATTERN, max_length=11)]
"""A non-negative decimal written as a string, e.g. "1.5" (at most 6 digits before the point, 4 after)."""

QUANTITY_PATTERN = r"^[0-9]{1,12}(\.[0-9]{1,6})?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=24)]
"""A Kubernetes quantity such as "64Gi" or "2Ti"."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

ObjectName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, min_length=1, max_length=253)]
"""The name of an object in the same namespace (lowercase DNS subdomain)."""

QueueName = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
"""A Kueue LocalQueue in the same namespace (a label value on the Jobs: at most 63 characters)."""

ResourceName = Annotated[str, StringConstraints(pattern=DNS1035_LABEL_PATTERN, min_length=1, max_length=52)]
"""The name of a drafter.dev object in the same namespace."""

MODEL_PATTERN = r"^[^\s-][^\s]*$"
ModelRef = Annotated[str, StringConstraints(pattern=MODEL_PATTERN, min_length=1, max_length=512)]
"""A model: an absolute path inside the pod (usually under the model volume) or a hub id "org/name"."""

#: Where a volume is mounted: an absolute path of plain segments (spec.storage.mountPath and cachePath).
MOUNT_PATH_PATTERN = r"^(/[A-Za-z0-9._-]+)+$"

ABS_PATH_PATTERN = r"^/[^\s]*$"
AbsPath = Annotated[str, StringConstraints(pattern=ABS_PATH_PATTERN, min_length=1, max_length=512)]
"""An absolute path inside the pod."""

# Normalised paths. The operator compares path fields as strings (a path lies under another when it starts
# with it and a '/'), so each place has exactly one spelling: no '.' or '..' segment (which would climb
# out of a directory or alias another one), no empty segment ('//'), no trailing '/'. Hub ids (no
# leading '/') are not paths and pass.
DOT_SEGMENT_PATTERN = r"(^|/)[.][.]?(/|$)"
PATH_FIX = "no '.' or '..' segments, no '//', no trailing '/'"


def path_normalised(path: str | None) -> bool:
    """Python side of cel_path_normalised: unset, a hub id, or an absolute path in its one spelling."""
    if path is None or not path.startswith("/"):
        return True
    return "//" not in path and not path.endswith("/") and re.search(DOT_SEGMENT_PATTERN, path) is None


def cel_path_normalised(expr: str) -> str:
    """CEL for path_normalised of the string at ``expr`` (the caller guards an optional field with has())."""
    return (f"!{expr}.startsWith('/') || (!{expr}.contains('//') && !{expr}.endsWith('/') "
            f"&& !{expr}.matches('{DOT_SEGMENT_PATTERN}'))")


def path_within(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies under it (both normalised)."""
    return path == root or path.startswith(root + "/")


def paths_overlap(a: str, b: str) -> bool:
    """One of two normalised paths is the other or lies under it."""
    return path_within(a, b) or path_within(b, a)


def cel_paths_overlap(a: str, b: str) -> str:
    """CEL for paths_overlap of the strings at ``a`` and ``b``."""
    return f"({a} == {b} || {a}.startsWith({b} + '/') || {b}.startsWith({a} + '/'))"


def path_on_mount(path: str | None, mount: str) -> bool:
    """False only for an absolute path outside the volume mounted at ``mount``: unset and hub ids pass (they are
    not on any volume), and so does a path under ``mount`` (the mount point itself is a directory, not a model)."""
    return path is None or not path.startswith("/") or path.startswith(mount + "/")


IMAGE_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$"
Image = Annotated[str, StringConstraints(pattern=IMAGE_PATTERN, min_length=1, max_length=512)]
"""A container image reference, e.g. "vllm/vllm-openai:v0.33.0"."""

URL_PATTERN = r"^https?://[^\s]+$"
Url = Annotated[str, StringConstraints(pattern=URL_PATTERN, max_length=2048)]
"""An http:// or https:// URL."""

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN, max_length=63)]
"""A label value (at most 63 characters: alphanumerics, '-', '_', '.')."""


# ---------------------------------------------------------------------------------------------------
# Parsing helpers (pure; used by the operator, the benchmark client and the rules' Python side).


def parse_duration(value: str) -> float:
    """Seconds in a duration string: "45m" -> 2700.0, "1h30m" -> 5400.0, "250ms" -> 0.25.

    Raises ValueError for anything the CRD pattern would refuse.
    """
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r}: use a number with a unit ms, s, m or h, e.g. '45m' or '1h30m'")
    return _parse_duration_text(value)


# Cached: every reconcile reads the spec's few duration strings again through its rules and windows (250,000
# calls in eight simulated scenarios, 6% of their time); a failed parse raises and is not cached.
@functools.lru_cache(maxsize=1024)
def _parse_duration_text(value: str) -> float:
    if not _DURATION_RE.match(value):
        raise ValueError(f"invalid duration {value!r}: use a number with a unit ms, s, m or h, e.g. '45m' or '1h30m'")
    return sum(int(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART_RE.findall(value))


def format_duration(seconds: float) -> str:
    """The inverse of parse_duration for whole seconds: 2700 -> "45m", 5400 -> "1h30m", 0 -> "0s"."""
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return out or "0s"


def parse_decimal(value: str) -> float:
    """The number in a decimal string such as "0.5" (thresholds are strings in spec)."""
    return float(value)


def duration_ok(value: str | None, minimum: str | None = None, maximum: str | None = None) -> bool:
    """Python side of a duration range rule; a malformed value passes here (its pattern fails instead)."""
    if value is None or not _DURATION_RE.match(value):
        return True
    seconds = parse_duration(value)
    if minimum is not None and seconds < parse_duration(minimum):
        return False
    if maximum is not None and seconds > parse_duration(maximum):
        return False
    return True


def cel_duration_range(path: str, minimum: str | None, maximum: str | None) -> str:
    """CEL for "path is a duration within [minimum, maximum]", guarded like duration_ok."""
    checks = []
    if minimum is not None:
        checks.append(f"duration({path}) >= duration('{minimum}')")
    if maximum is not None:
        checks.append(f"duration({path}) <= duration('{maximum}')")
    field = path.rsplit(".", 1)
    presence = f"!has({path}) || " if len(field) == 2 else ""
    return f"{presence}!{path}.matches(r'{DURATION_PATTERN}') || ({' && '.join(checks)})"


def decimal_ok(value: str | None, pattern: str, minimum: float | None = None, maximum: float | None = None,
               exclusive_minimum: bool = False) -> bool:
    """Python side of a decimal range rule; a malformed value passes here (its pattern fails instead)."""
    if value is None or not re.match(pattern, value):
        return True
    number = float(value)
    if minimum is not None and (number <= minimum if exclusive_minimum else number < minimum):
        return False
    if maximum is not None and number > maximum:
        return False
    return True


def cel_decimal_range(path: str, pattern: str, minimum: float | None = None, maximum: float | None = None,
                      exclusive_minimum: bool = False) -> str:
    checks = []
    if minimum is not None:
        checks.append(f"double({path}) {'>' if exclusive_minimum else '>='} {minimum!r}")
    if maximum is not None:
        checks.append(f"double({path}) <= {maximum!r}")
    return f"!has({path}) || !{path}.matches(r'{pattern}') || ({' && '.join(checks)})"


# CEL escapes its reserved words used as field names as __word__ (spec.acceptance.for is `self.__for__`).
CEL_RESERVED = frozenset({"as", "break", "const", "continue", "else", "false", "for", "function", "if",
                          "import", "in", "let", "loop", "namespace", "null", "package", "return", "true", "var"})


def field_names(name: str) -> tuple[str, str]:
    """(the CEL path, the Python attribute) of the JSON field `name` of `self`: `for` is `self.__for__`
    in CEL and `for_` in Python (a keyword in both)."""
    cel = f"__{name}__" if name in CEL_RESERVED else name
    attr = to_snake(name)
    return f"self.{cel}", attr + "_" if keyword.iskeyword(attr) else attr


def decimal_range_rule(name: str, pattern: str, message: str, minimum: float | None = None,
                       maximum: float | None = None, exclusive_minimum: bool = False) -> Rule:
    """The range of the decimal field `name` (its JSON name) as one Rule: the same bounds in CEL and in
    Python, reported on the field."""
    path, attr = field_names(name)
    bounds = {"minimum": minimum, "maximum": maximum, "exclusive_minimum": exclusive_minimum}
    return Rule(
        cel=cel_decimal_range(path, pattern, **bounds),
        message=message,
        check=lambda model: decimal_ok(getattr(model, attr), pattern, **bounds),
        field_path=f".{name}",
    )


def duration_range_rule(name: str, minimum: str, maximum: str, message: str) -> Rule:
    """The range of the duration field `name` (its JSON name) as one Rule: the same bounds in CEL and in
    Python, reported on the field."""
    path, attr = field_names(name)
    return Rule(
        cel=cel_duration_range(path, minimum, maximum),
        message=message,
        check=lambda model: duration_ok(getattr(model, attr), minimum, maximum),
        field_path=f".{name}",
    )


def cel_in(expr: str, values: tuple[str, ...]) -> str:
    """CEL for "the string at ``expr`` is one of ``values``", rendered from the constants so that no rule
    carries a hand-written copy of a list (e.g. ``cel_in('self.method', METHODS_WITH_MODEL)``)."""
    return f"{expr} in [{', '.join(repr(value) for value in values)}]"


def spoken(values: tuple[str, ...], conjunction: str = "and") -> str:
    """``values`` as a message names them: "a", "a and b", "a, b and c"."""
    if len(values) <= 1:
        return "".join(values)
    return f"{', '.join(values[:-1])} {conjunction} {values[-1]}"


def needs_rule(name: str, needed: str, message: str, field_path: str, reason: str | None = None) -> Rule:
    """The field `name` (its JSON name) may be set only with the field `needed`, in CEL and in Python, reported at
    `field_path` (the one to set or the one to remove)."""
    (path, attr), (needed_path, needed_attr) = field_names(name), field_names(needed)
    return Rule(cel=f"!has({path}) || has({needed_path})", message=message,
                check=lambda model: getattr(model, attr) is None or getattr(model, needed_attr) is not None,
                field_path=field_path, reason=reason)


def not_both_rule(first: str, second: str, message: str, field_path: str) -> Rule:
    """At most one of the fields `first` and `second` (JSON names) is set, in CEL and in Python."""
    (path, attr), (other_path, other_attr) = field_names(first), field_names(second)
    return Rule(cel=f"!has({path}) || !has({other_path})", message=message,
                check=lambda model: getattr(model, attr) is None or getattr(model, other_attr) is None,
                field_path=field_path)


def exactly_one_rule(names: tuple[str, ...], message: str) -> Rule:
    """Exactly one of the fields `names` (JSON names) is set, in CEL and in Python."""
    paths, attrs = zip(*(field_names(name) for name in names))
    present = [f"has({path})" for path in paths]
    cel = " != ".join(present) if len(names) == 2 else f"[{', '.join(present)}].filter(x, x).size() == 1"
    return Rule(cel=cel, message=message,
                check=lambda model: sum(getattr(model, attr) is not None for attr in attrs) == 1)


# ---------------------------------------------------------------------------------------------------
# Small shared objects.


class LocalObjectReference(ApiModel):
    """A reference to an object in the same namespace."""

    name: ResourceName
    """Name of the object."""


class ConfigMapKeyReference(ApiModel):
    """A key of a ConfigMap in the same namespace."""

    name: ObjectName
    """Name of the ConfigMap."""
    key: Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]+$", min_length=1, max_length=253)] = "prompts"
    """Key in the ConfigMap whose value holds the prompts, one per line or as a JSON list of strings."""


# ---------------------------------------------------------------------------------------------------
# Status building blocks.


class Condition(StatusModel):
    """A Kubernetes condition."""

    type: str
    """Condition type in PascalCase, e.g. Ready."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str | None = None
    """One CamelCase word saying why."""
    message: str | None = None
    """Details for people."""
    last_transition_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation this condition was computed from."""


def condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    """The condition of a type, if present."""
    for item in conditions or []:
        if item.type == type_:
            return item
    return None


CONDITIONS_SCHEMA_EXTRA: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}
