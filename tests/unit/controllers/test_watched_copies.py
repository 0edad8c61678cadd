"""The operator's copies of watched objects leave out metadata.managedFields and nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers.watched_copies import kept_copy

values = st.recursive(st.none() | st.integers() | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                      max_leaves=10)


@given(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "metadata"), values, max_size=4),
       st.dictionaries(st.text(max_size=8), values, max_size=4), values)
def test_everything_but_managed_fields_is_kept_and_the_original_untouched(rest, metadata, managed):
    body = {**rest, "metadata": {**metadata, "managedFields": managed}}
    before = repr(body)
    kept = kept_copy(body)
    assert "managedFields" not in kept["metadata"]
    assert kept == {**rest, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    assert repr(body) == before  # a copy: the index never shares kopf's live body
    if isinstance(body["metadata"].get("managedFields"), list):
        body["metadata"]["managedFields"].append("x")
    assert "managedFields" not in kept["metadata"]


def test_a_body_without_metadata_gets_an_empty_one():
    assert kept_copy({"kind": "Pod"}) == {"kind": "Pod", "metadata": {}}
