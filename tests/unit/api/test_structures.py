"""The nested-manifest comparison the CRD and pod-type round trips rely on: a helper that said yes too easily
would let a field the apiserver dropped pass those tests."""

from __future__ import annotations

from tests.structures import contains


def test_every_sent_field_must_come_back():
    assert contains({"a": 1, "b": {"c": [1, {"d": 2}]}}, {"a": 1, "b": {"c": [1, {"d": 2, "e": 3}]}, "f": 4})
    assert not contains({"a": 1, "b": 2}, {"a": 1})
    assert not contains({"b": {"c": 1}}, {"b": {"c": 2}})
    assert not contains({"b": {"c": 1}}, {"b": [1]})


def test_lists_match_item_by_item_and_length():
    assert not contains([1, 2], [1, 2, 3])
    assert not contains([{"a": 1}], [{"a": 2}])
    assert not contains([1], (1,))


def test_empty_fields_may_be_absent_only_when_asked():
    sent = {"name": "x", "args": [], "env": {}, "note": ""}
    assert not contains(sent, {"name": "x"})
    assert contains(sent, {"name": "x"}, empty_may_be_absent=True)
    assert not contains({"args": [1]}, {}, empty_may_be_absent=True)
    assert contains({"spec": {"x": [{"args": []}]}}, {"spec": {"x": [{}]}}, empty_may_be_absent=True)
