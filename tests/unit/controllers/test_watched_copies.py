"""The operator's copies of watched objects leave out metadata.managedFields and nothing else, and each read is a
copy of its own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.controllers.watched_copies import kept, thawed_all

values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                      | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                      max_leaves=10)


@given(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "metadata"), values, max_size=4),
       st.dictionaries(st.text(max_size=8), values, max_size=4), values)
def test_everything_but_managed_fields_is_kept_and_the_original_untouched(rest, metadata, managed):
    body = {**rest, "metadata": {**metadata, "managedFields": managed}}
    before = repr(body)
    copy = kept(body)
    thawed = copy.thawed()
    assert "managedFields" not in thawed["metadata"]
    assert thawed == {**rest, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    assert repr(body) == before  # a copy: the index never shares kopf's live body
    if isinstance(body["metadata"].get("managedFields"), list):
        body["metadata"]["managedFields"].append("x")
    assert "managedFields" not in copy.thawed()["metadata"]


@given(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "metadata"), values, min_size=1, max_size=4))
def test_each_read_is_a_copy_of_its_own(rest):
    copy = kept(rest)
    first, second = thawed_all([copy, copy])
    first["metadata"]["labels"] = {"changed": "by one reader"}
    first.clear()
    assert second == {**rest, "metadata": {}}
    assert copy.thawed() == second


def test_a_body_without_metadata_gets_an_empty_one():
    assert kept({"kind": "Pod"}).thawed() == {"kind": "Pod", "metadata": {}}


def test_a_pod_is_kept_in_a_fraction_of_what_its_decoded_body_takes():
    import sys

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "kimi-0", "namespace": "team", "labels": {"drafter.dev/serving": "kimi", "a": "b"},
                        "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {f"f:{i}": {}
                                                                                          for i in range(40)}}}]},
           "spec": {"containers": [{"name": "engine", "args": [f"--flag-{i}" for i in range(30)],
                                    "ports": [{"containerPort": 8000, "protocol": "TCP"}]}]},
           "status": {"phase": "Running", "conditions": [{"type": t, "status": "True"} for t in "ABCDE"]}}

    def deep_size(obj) -> int:
        inner = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
        keys = obj.keys() if isinstance(obj, dict) else ()
        return sys.getsizeof(obj) + sum(map(deep_size, inner)) + sum(map(sys.getsizeof, keys))

    copy = kept(pod)
    assert sys.getsizeof(copy.encoded) * 3 < deep_size(copy.thawed())
