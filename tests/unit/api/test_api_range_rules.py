"""decimal_range_rule, duration_range_rule and exactly_one_rule: one declaration gives the same CEL, message
and field path as the Rule written out by hand, and a Python check that reads the field's attribute."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.common import (
    DECIMAL_PATTERN,
    DURATION_PATTERN,
    cel_decimal_range,
    cel_duration_range,
    decimal_ok,
    decimal_range_rule,
    duration_ok,
    duration_range_rule,
    exactly_one_rule,
    field_names,
)
from drafter_operator.api.serving.acceptance import AcceptanceSpec

DECIMALS = st.one_of(st.none(), st.from_regex(r"-?[0-9]{1,3}(\.[0-9]{1,3})?", fullmatch=True),
                     st.sampled_from(["", "abc", "1.", "0", "0.0"]))
DURATIONS = st.one_of(st.none(), st.from_regex(r"[0-9]{1,3}(s|m|h)", fullmatch=True),
                      st.sampled_from(["", "1h30m", "90", "0s", "24h", "25h"]))


@pytest.mark.parametrize("name, expected", [
    ("window", ("self.window", "window")),
    ("minTokensPerSecond", ("self.minTokensPerSecond", "min_tokens_per_second")),
    ("gpuMemoryUtilization", ("self.gpuMemoryUtilization", "gpu_memory_utilization")),
    ("for", ("self.__for__", "for_")),  # a keyword of CEL and of Python
])
def test_field_names_give_the_cel_path_and_the_attribute(name, expected):
    assert field_names(name) == expected


@given(value=DECIMALS, minimum=st.sampled_from([None, 0.0, 1.0]), maximum=st.sampled_from([None, 1.0, 10.0]),
       exclusive=st.booleans())
def test_decimal_range_rule_is_the_rule_written_out(value, minimum, maximum, exclusive):
    if minimum is None and maximum is None:
        maximum = 1.0  # a range has at least one bound
    rule = decimal_range_rule("minTokensPerSecond", DECIMAL_PATTERN, "the message",
                              minimum=minimum, maximum=maximum, exclusive_minimum=exclusive)
    bounds = {"minimum": minimum, "maximum": maximum, "exclusive_minimum": exclusive}
    assert rule.cel == cel_decimal_range("self.minTokensPerSecond", DECIMAL_PATTERN, **bounds)
    assert (rule.message, rule.field_path, rule.reason) == ("the message", ".minTokensPerSecond", None)
    model = SimpleNamespace(min_tokens_per_second=value)
    assert rule.check(model) == decimal_ok(value, DECIMAL_PATTERN, **bounds)


@given(value=DURATIONS, bounds=st.sampled_from([("0s", "24h"), ("1m", "48h"), ("30s", "24h")]))
def test_duration_range_rule_is_the_rule_written_out(value, bounds):
    rule = duration_range_rule("for", *bounds, "the message")
    assert rule.cel == cel_duration_range("self.__for__", *bounds)
    assert DURATION_PATTERN in rule.cel
    assert (rule.message, rule.field_path, rule.reason) == ("the message", ".for", None)
    assert rule.check(SimpleNamespace(for_=value)) == duration_ok(value, *bounds)


@given(value=DURATIONS)
def test_a_range_rule_reads_its_field_on_the_model(value):
    """AcceptanceSpec's `for` rule reads `for_`: a value over 24h is refused, one within is not."""
    rule = next(r for r in AcceptanceSpec.rules if r.field_path == ".for")
    spec = AcceptanceSpec.model_construct(for_=value)
    assert rule.check(spec) == duration_ok(value, "0s", "24h")


@pytest.mark.parametrize("names, cel", [
    (("value", "valueFrom"), "has(self.value) != has(self.valueFrom)"),
    (("servingRef", "benchmarkRef", "tokensPerSecond"),
     "[has(self.servingRef), has(self.benchmarkRef), has(self.tokensPerSecond)].filter(x, x).size() == 1"),
])
def test_exactly_one_rule_cel(names, cel):
    rule = exactly_one_rule(names, "the message")
    assert (rule.cel, rule.message, rule.field_path) == (cel, "the message", None)


@given(st.lists(st.booleans(), min_size=2, max_size=4))
def test_exactly_one_rule_accepts_one_set_field_and_nothing_else(set_fields):
    names = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")[:len(set_fields)]
    model = SimpleNamespace(**{field_names(n)[1]: ({} if on else None) for n, on in zip(names, set_fields)})
    assert exactly_one_rule(names, "m").check(model) == (sum(set_fields) == 1)
