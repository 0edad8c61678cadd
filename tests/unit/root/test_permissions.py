"""The operator's start-up permission check: what it asks the apiserver and what it says when denied."""

from __future__ import annotations

import pytest

from drafter_operator import permissions
from drafter_operator.permissions import Access


class ReviewingApiserver:
    """Answers SelfSubjectAccessReviews: allowed unless (namespace, resource, verb) is in `denied`."""

    def __init__(self, denied: set[tuple[str, str, str]] = frozenset()):
        self.denied, self.reviews = denied, []

    def request(self, method, path, body=None):
        assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        self.reviews.append(body)
        attributes = body["spec"]["resourceAttributes"]
        resource = attributes["resource"] + (f"/{attributes['subresource']}" if "subresource" in attributes else "")
        allowed = (attributes.get("namespace", ""), resource, attributes["verb"]) not in self.denied
        return {**body, "status": {"allowed": allowed}}


def test_every_namespace_is_asked_every_namespaced_permission_and_nothing_cluster_wide():
    needed = permissions.required_access(["team-a", "team-b"])
    per_namespace = sum(len(r.resources) * len(r.verbs) for r in permissions.NAMESPACED_RULES)
    assert len(needed) == 2 * per_namespace
    assert {a.namespace for a in needed} == {"team-a", "team-b"}
    assert not [a for a in needed if a.group == "apiextensions.k8s.io"]


def test_cluster_wide_mode_asks_across_all_namespaces_and_for_crd_discovery():
    needed = permissions.required_access([])
    assert {a.namespace for a in needed} == {""}
    assert Access("", "apiextensions.k8s.io", "customresourcedefinitions", "watch") in needed
    assert Access("", "drafter.dev", "drafterservings", "watch") in needed


def test_namespace_patterns_are_left_to_kopf():
    assert permissions.required_access(["e2e-*", "!kube-system"]) == []
    assert {a.namespace for a in permissions.required_access(["team-*", "team-a"])} == {"team-a"}


def test_a_subresource_is_reviewed_as_resource_plus_subresource():
    review = Access("ns", "drafter.dev", "drafterservings/status", "patch").review()
    assert review["spec"]["resourceAttributes"] == {"group": "drafter.dev", "resource": "drafterservings",
                                                    "subresource": "status", "verb": "patch", "namespace": "ns"}
    assert "namespace" not in Access("", "", "pods", "list").review()["spec"]["resourceAttributes"]


def test_all_allowed_means_nothing_missing():
    apiserver = ReviewingApiserver()
    assert permissions.missing_access(apiserver, ["team-a"]) == []
    assert len(apiserver.reviews) == len(permissions.required_access(["team-a"]))


def test_a_namespace_without_the_role_is_named_with_the_fix():
    denied = {("other", resource, verb) for rule in permissions.NAMESPACED_RULES
              for resource in rule.resources for verb in rule.verbs}
    missing = permissions.missing_access(ReviewingApiserver(denied), ["mine", "other"])
    assert missing and {a.namespace for a in missing} == {"other"}
    message = permissions.explain_missing(missing, ["mine", "other"])
    assert "watch drafterservings.drafter.dev in namespace other" in message
    assert "operator.watchNamespaces" in message and "Role in other" in message
    assert "... and" in message  # 45 denials are summarised, not all printed


@pytest.mark.parametrize("denied, says", [
    (("", "customresourcedefinitions", "watch"), "watch customresourcedefinitions.apiextensions.k8s.io in all namespaces"),
    (("", "pods/log", "get"), "get pods/log in all namespaces"),
])
def test_cluster_wide_denials_name_the_permission_and_the_cluster_role(denied, says):
    missing = permissions.missing_access(ReviewingApiserver({denied}), [])
    assert [str(a) for a in missing] == [says]
    assert "ClusterRole" in permissions.explain_missing(missing, [])


def test_every_rule_says_why_and_grants_no_wildcard():
    for rule in permissions.NAMESPACED_RULES + permissions.CLUSTER_RULES + permissions.LEASE_RULES:
        assert len(rule.why) > 20
        assert "*" not in rule.resources + rule.verbs + (rule.group,)


def test_leader_election_asks_for_the_lease_verbs_in_the_lease_namespace_only():
    needed = permissions.required_access(["team-a"], lease_namespace="drafter-system")
    leases = [a for a in needed if a.resource == "leases"]
    assert {(a.namespace, a.group, a.verb) for a in leases} == {
        ("drafter-system", "coordination.k8s.io", verb) for verb in ("get", "create", "update")}
    assert len(needed) == len(permissions.required_access(["team-a"])) + 3
    assert not [a for a in permissions.required_access([], None) if a.resource == "leases"]


def test_a_denied_lease_is_named_with_its_own_fix():
    denied = {("drafter-system", "leases", "update")}
    missing = permissions.missing_access(ReviewingApiserver(denied), ["team-a"], lease_namespace="drafter-system")
    assert [str(a) for a in missing] == ["update leases.coordination.k8s.io in namespace drafter-system"]
    message = permissions.explain_missing(missing, ["team-a"])
    assert message.startswith("drafter-operator may not hold its leader-election Lease")
    assert "--lease-namespace" in message and "--no-leader-election" in message
    assert "operator.watchNamespaces" not in message  # the watched namespaces are fine


def test_lease_rules_are_their_own_section_of_the_chart_rules():
    import yaml

    document = yaml.safe_load(permissions.rules_document())
    assert document["leaderElection"] == [rule.manifest() for rule in permissions.LEASE_RULES]
    assert not [r for r in document["namespaced"] + document["clusterWide"] if "leases" in r["resources"]]
