"""Kubernetes quantity strings and who accepts each: our pattern, kubernetes.utils.parse_quantity, the apiserver."""
from __future__ import annotations

from decimal import Decimal, localcontext

from kubernetes.utils import parse_quantity

# (string, our pattern accepts, kubernetes.utils.parse_quantity accepts, the apiserver accepts it in a Pod's resources)
# The last column is checked against the real apiserver by tests/e2e/test_pod_types_contract.py.
QUANTITY_SAMPLES: list[tuple[str, bool, bool, bool]] = [
    ("0", True, True, True), ("500m", True, True, True), ("2", True, True, True), ("1.5", True, True, True),
    ("64Gi", True, True, True), ("1e3", True, True, True), ("128974848", True, True, True), ("129M", True, True, True),
    ("123Mi", True, True, True), ("1E", True, True, True), ("1Ei", True, True, True), ("1.5Gi", True, True, True),
    ("0.1", True, True, True), ("1n", True, True, True), ("1.5n", True, True, True), ("0.5u", True, True, True),
    ("7e-3", True, True, True), ("1E+2", True, True, True), ("1e99", True, True, True), ("999999999999999999", True, True, True),
    ("1.000000001", True, True, True), ("01", True, True, True), ("8Ei", True, True, True), ("1.5e-12", True, True, True),
    ("1k", True, True, True), ("2T", True, True, True), ("3P", True, True, True),
    ("1.123456789Ei", True, True, True), ("7.999999999Ei", True, True, True), ("999999999999999999.999999999Ki", True, True, True),
    # refused by all three
    ("1ki", False, False, False), ("1mi", False, False, False), ("1e", False, False, False), ("1.5.5", False, False, False),
    ("", False, False, False), ("abc", False, False, False), ("1KB", False, False, False), ("1Gb", False, False, False),
    ("0x10", False, False, False), ("1m5", False, False, False),
    # parse_quantity is laxer than the apiserver (Python's Decimal reads these; Go's parser does not)
    ("1K", False, True, False), ("1e3k", False, True, False), ("1e3Ki", False, True, False), ("1 Gi", False, True, False),
    ("NaN", False, True, False), ("Infinity", False, True, False), ("inf", False, True, False), ("1_000", False, True, False),
    ("-1", False, True, False),  # Go reads it; a Pod refuses a negative resource
    # we are stricter than both: a sign, a bare or trailing point, more digits than we allow, blanks
    ("+1", False, True, True), (".5", False, True, True), ("5.", False, True, True), ("1.Gi", False, True, True),
    ("1.0000000001", False, True, True), ("1e100", False, True, True), ("9999999999999999999", False, True, True),
    (" 1", False, True, True), ("-0", False, True, True),
    # ... and Go reads "e3" (no digits: zero), which parse_quantity does not
    ("e3", False, False, True),
]


def _exact(text: str) -> Decimal:
    """parse_quantity's value without Decimal's default 28-digit rounding (1.123456789Ei has 29 digits)."""
    with localcontext() as context:
        context.prec = 200
        return parse_quantity(text)
