"""Validated strings of the pod-level types: variable names, Secret and ConfigMap keys, label keys, namespace
names and Kubernetes quantities (with the apiserver's reading of a quantity), and the list checks they share."""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, localcontext
from typing import Annotated, Any

from pydantic import StringConstraints

from drafter_operator.api.common import DNS_LABEL_PATTERN

ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN, min_length=1, max_length=256)]
"""An environment variable name: letters, digits, '-', '_' and '.', not starting with a digit, e.g. VLLM_LOGGING_LEVEL."""

ENV_PREFIX_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"

# A ConfigMap or Secret key (Kubernetes IsConfigMapKey): at least one character other than '.', so "."
# and ".." are refused as Kubernetes refuses them.
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]*[-_a-zA-Z0-9][-._a-zA-Z0-9]*$"
ConfigKey = Annotated[str, StringConstraints(pattern=CONFIG_KEY_PATTERN, min_length=1, max_length=253)]
"""A key of a ConfigMap or Secret: letters, digits, '-', '_' and '.'."""

# A label key (Kubernetes qualified name): an optional lowercase DNS-subdomain prefix and '/', then a name
# of at most 63 characters. Kubernetes allows a 253-character prefix beside a 63-character name (317 in
# all); capping the whole key at 255 keeps every prefix within 253 without a second rule.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_KEY_MAX_LENGTH = 255
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN, min_length=1, max_length=LABEL_KEY_MAX_LENGTH)]
"""A label key: an optional DNS-subdomain prefix and '/', then up to 63 letters, digits, '-', '_', '.', e.g. topology.kubernetes.io/zone."""
_LABEL_KEY_RE = re.compile(LABEL_KEY_PATTERN)

NamespaceName = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
"""A namespace name (lowercase DNS label)."""

# What the apiserver accepts as a resource quantity (resource.ParseQuantity), restricted to non-negative
# plain decimals: up to 18 digits, an optional fraction of up to 9, then a binary suffix (Ki..Ei), a decimal
# suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent of up to 2 digits (e3, E-2). Kubernetes also
# accepts a sign, ".5", "5.", "e3" (zero) and surrounding blanks; those are refused here, so everything this
# pattern accepts the apiserver reads the same way (tests/e2e/test_pod_types_contract.py checks it).
KUBE_QUANTITY_PATTERN = r"^[0-9]{1,18}(\.[0-9]{1,9})?([eE][-+]?[0-9]{1,2}|[KMGTPE]i|[numkMGTPE])?$"
KubeQuantity = Annotated[str, StringConstraints(pattern=KUBE_QUANTITY_PATTERN, min_length=1, max_length=36)]
"""A Kubernetes quantity written as a string, e.g. "500m", "2", "1.5", "64Gi", "129M", "1e3" (numbers must be quoted in YAML: cpu: "2")."""
_KUBE_QUANTITY_RE = re.compile(KUBE_QUANTITY_PATTERN)

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: resource.ParseQuantity caps a value with a binary suffix at the largest int64 (other values are unbounded)
#: and rounds a non-zero value up to a whole nano.
QUANTITY_BINARY_MAX = Decimal(2**63 - 1)
_NANO = Decimal("1e-9")


def parse_kube_quantity(value: str) -> Decimal:
    """The value of a KubeQuantity as the apiserver's resource.ParseQuantity (and CEL's quantity()) reads it:
    "500m" -> 0.5, "64Gi" -> 68719476736, "1.5n" -> 2E-9 (rounded up to a whole nano), "8Ei" -> 2^63-1 (a
    binary value is capped at the largest int64).

    Raises ValueError for anything KUBE_QUANTITY_PATTERN refuses. (A Pod's resources are then rounded up to
    a whole milli by the Pod's defaulting; CEL compares the values before that.)
    """
    match = _KUBE_QUANTITY_RE.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"invalid quantity {value!r}: use digits with an optional suffix, e.g. '500m', '2', '64Gi'")
    suffix = match.group(2) or ""
    with localcontext() as context:
        context.prec = 160  # every step exact, whatever the digits and the suffix
        number = Decimal(value[: len(value) - len(suffix)])
        if suffix in _BINARY_SUFFIXES:
            amount = number * (Decimal(1024) ** _BINARY_SUFFIXES[suffix])
        elif suffix in _DECIMAL_SUFFIXES:
            amount = number.scaleb(_DECIMAL_SUFFIXES[suffix])
        else:  # a decimal exponent
            amount = number.scaleb(int(suffix[1:]))
        if amount != 0 and amount.as_tuple().exponent < -9:
            amount = amount.quantize(_NANO, rounding=ROUND_UP)
        if suffix in _BINARY_SUFFIXES and amount > QUANTITY_BINARY_MAX:
            amount = QUANTITY_BINARY_MAX
        return amount


def quantity_ok(value: str) -> bool:
    return bool(_KUBE_QUANTITY_RE.fullmatch(value))


def label_key_ok(key: str) -> bool:
    return len(key) <= LABEL_KEY_MAX_LENGTH and bool(_LABEL_KEY_RE.fullmatch(key))


def cel_label_keys(path: str) -> str:
    """CEL: every key of the map at `path` is a label key (absent map: true)."""
    return f"!has({path}) || {path}.all(k, k.size() <= {LABEL_KEY_MAX_LENGTH} && k.matches(r'{LABEL_KEY_PATTERN}'))"


def unique_names(items: list[Any]) -> list[Any]:
    names = [item.name for item in items]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ValueError(f"Duplicate value: name {duplicate!r}")
    return items

