"""reads.parse: which `kubectl get` forms the harness reads over its own connection, and what it asks for them.
Every other form must answer None, so that kubectl itself runs (an output option, two names, a list of types)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_testbed.reads import Query, Resource, parse


@pytest.mark.parametrize(("args", "query"), [
    (("pods",), Query("pods", None, None, False, ())),
    (("-n", "ns1", "drafterserving", "kimi"), Query("drafterserving", "kimi", "ns1", False, ())),
    (("pod/web-0", "--namespace=ns1"), Query("pod", "web-0", "ns1", False, ())),
    (("Nodes", "-l", "a=b,c!=d"), Query("nodes", None, None, False, (("labelSelector", "a=b,c!=d"),))),
    (("events", "-A", "--field-selector", "reason=Swapped"),
     Query("events", None, None, True, (("fieldSelector", "reason=Swapped"),))),
    (("leaderworkersets.leaderworkerset.x-k8s.io", "--selector=x"),
     Query("leaderworkersets.leaderworkerset.x-k8s.io", None, None, False, (("labelSelector", "x"),))),
])
def test_plain_forms_are_read_as_kubectl_reads_them(args, query):
    assert parse(args) == query


@pytest.mark.parametrize("args", [
    ("pods", "-o", "name"),  # an output option: kubectl formats it
    ("pods", "a", "b"),  # two names
    ("pods,services",),  # two types
    (),  # no type
    ("-n",),  # a flag without its value
    ("pods", "x", "-l", "a=b"),  # a name and a selector, which kubectl refuses
    ("pods", "--sort-by", ".metadata.name"),
])
def test_other_forms_are_left_to_kubectl(args):
    assert parse(args) is None


@given(st.lists(st.sampled_from(["-o", "--output=json", "--show-labels", "-w", "--chunk-size=5", "--ignore-not-found"]),
                min_size=1, max_size=3), st.booleans())
def test_any_flag_it_does_not_know_hands_the_form_to_kubectl(flags, flags_first):
    args = (*flags, "pods") if flags_first else ("pods", *flags)
    assert parse(args) is None


def test_paths_follow_the_group_and_the_scope():
    pods = Resource("v1", "pods", "Pod", namespaced=True)
    nodes = Resource("v1", "nodes", "Node", namespaced=False)
    servings = Resource("drafter.dev/v1alpha1", "drafterservings", "DrafterServing", namespaced=True)
    assert pods.path("ns1", "web-0") == "/api/v1/namespaces/ns1/pods/web-0"
    assert pods.path(None, None) == "/api/v1/pods"  # all namespaces
    assert nodes.path("ns1", "n1") == "/api/v1/nodes/n1"  # a namespace does not scope a cluster-wide kind
    assert servings.path("ns1", None) == "/apis/drafter.dev/v1alpha1/namespaces/ns1/drafterservings"
