"""The chart's RBAC grants every request the operator's code sends, with the verb it sends it with.

The needs are read from the source (tests/operator_requests.py: every Kube call and every path a decision
puts in its plan, with the verb it goes out with), from kopf's own registry (what it watches), and checked
against the requests the real reconcilers send in the simulated worlds, so the reading cannot miss what
they do. The chart is rendered with the pinned helm (test_chart.render), in both modes, and must grant each
need, and nothing that no need, kopf or the apiserver asks for.
"""

from __future__ import annotations

import sys
from functools import cache

import pytest

from drafter_operator import permissions
from tests.operator_requests import Need, Scan, need_of_request
from tests.support.chart import one, render

LEASES = ("coordination.k8s.io", "leases")
#: Every authenticated identity may create these (the system:basic-user ClusterRole): the start-up check.
GRANTED_BY_KUBERNETES = {Need("authorization.k8s.io", "selfsubjectaccessreviews", "create")}
#: What kopf sends by itself, beyond the watches its registry names, and why (docs/chart.md, RBAC).
KOPF_OWN = {
    Need("", "events", "create"): "the Events the reconcilers post through kopf.event, and kopf's warnings",
    **{Need("drafter.dev", plural, "patch"): "kopf patches away the finalizer an older operator version left"
       for plural in ("drafterservings", "drafterbenchmarks", "draftertrainings")},
}
KOPF_CLUSTER_WIDE = {Need("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("list", "watch")}
#: Granted for the apiserver's sake, not for a request: blockOwnerDeletion on a child needs update on its
#: owner's finalizers where OwnerReferencesPermissionEnforcement runs.
FOR_OWNER_REFERENCES = {Need("drafter.dev", f"{plural}/finalizers", "update")
                        for plural in ("drafterservings", "drafterbenchmarks", "draftertrainings")}
#: Cluster-scoped reads a Role cannot grant: namespaced mode does without them (the known-bad rows keyed by GPU
#: product check spec.placement.gpuProduct only, and DrafterCompatible says so), the ClusterRole grants them.
NOT_IN_NAMESPACED_MODE = {Need("", "nodes", "get")}


@cache
def scan() -> Scan:
    return Scan()


def kopf_watches() -> set[Need]:
    """list and watch on every resource a kopf handler or index of the operator is registered for."""
    import kopf

    import drafter_operator.controllers.handlers  # noqa: F401 (registers the handlers)

    registry = kopf.get_default_registry()
    selectors = {h.selector for r in (registry._indexing, registry._watching, registry._spawning, registry._changing)
                 for h in r.get_all_handlers()}
    assert selectors, "kopf's registry lists no handler: the scan of kopf's watches reads nothing"
    return {Need(s.group or "", s.any_name or s.plural, verb) for s in selectors for verb in ("list", "watch")}


def needs() -> set[Need]:
    return set(scan().needs) | kopf_watches() | set(KOPF_OWN)


def granted(rules: list[dict]) -> set[Need]:
    return {Need(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_every_request_the_code_sends_is_read():
    """Nothing is skipped: a path the scan cannot read fails here, naming its line."""
    assert scan().unreadable == []
    assert len(scan().kube_sites) >= 40


def test_the_reading_finds_the_reads_a_table_once_missed():
    """`get` on a Job (a benchmark reading the same-named Job its create collided with) and on a Deployment
    (a serving reading who holds a name its create found taken): two 403s in production."""
    sites = scan().needs
    assert any(s.file == "drafter_operator/controllers/benchmark/apply.py" for s in sites[Need("batch", "jobs", "get")])
    assert any(s.file == "drafter_operator/controllers/serving/apply.py" for s in sites[Need("apps", "deployments", "get")])
    assert Need("drafter.dev", "drafterservings", "patch") in sites  # a training's Promote, from its plan
    assert Need("", "pods/log", "get") in sites and Need("drafter.dev", "drafterservings/status", "patch") in sites


@pytest.mark.parametrize("sets", [(), ("operator.watchNamespaces={team-a,team-b}",)], ids=["cluster-wide", "namespaced"])
def test_the_rendered_chart_grants_every_need_and_nothing_else(sets):
    objects = render(*sets)
    lease_role = granted(one(objects, "Role", "drafter-drafter-operator-leader-election")["rules"])
    if sets:
        roles = [o for o in objects if o["kind"] == "Role" and not o["metadata"]["name"].endswith("-leader-election")]
        assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
        workload = [granted(role["rules"]) for role in roles]
        cluster_wide: set[Need] = set()
    else:
        workload = [granted(one(objects, "ClusterRole")["rules"])]
        cluster_wide = KOPF_CLUSTER_WIDE
    wanted = needs() - GRANTED_BY_KUBERNETES - (NOT_IN_NAMESPACED_MODE if sets else set())
    for rules in workload:
        missing = sorted(n for n in wanted | cluster_wide if (n.group, n.resource) != LEASES and n not in rules)
        assert not missing, (f"the chart does not grant {', '.join(map(str, missing))}: add it to "
                             "drafter_operator/permissions.py and regenerate files/rbac-rules.yaml")
        unused = sorted(rules - wanted - cluster_wide - FOR_OWNER_REFERENCES)
        assert not unused, f"granted but never asked for: {', '.join(map(str, unused))}"
    leases = {n for n in wanted if (n.group, n.resource) == LEASES}
    assert leases == lease_role == {Need(*LEASES, verb) for verb in ("get", "create", "update")}


def test_the_start_up_check_asks_for_every_need():
    asked = {Need(a.group, a.resource, a.verb) for a in permissions.required_access([], lease_namespace="ops")}
    missing = sorted(needs() - GRANTED_BY_KUBERNETES - asked)
    assert not missing, f"`drafter-operator run` does not check {', '.join(map(str, missing))}"


def recorded_requests(monkeypatch) -> set[Need]:
    """What the real reconcilers send in simulated scenarios of both families, as the fake apiserver sees it."""
    from drafter_testbed.simulation import apiserver
    from drafter_testbed.simulation.runner import run_scenario

    sent: set[Need] = set()
    serve = apiserver.FakeApiserver.request

    def request(self, method, path, body=None, content_type="application/json", query=None, timeout=None):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith(("drafter_operator.", "drafter_testbed.simulation.apiserver")):
            sent.add(need_of_request(method, path, query))
        return serve(self, method, path, body, content_type, query, timeout)

    monkeypatch.setattr(apiserver.FakeApiserver, "request", request)
    # Serving seed 0 runs its revisions as LeaderWorkerSets (two-node groups), seed 1 as Deployments.
    for family, seeds in (("serving", (0, 1)), ("batch", (0,))):
        for seed in seeds:
            run_scenario(seed, 50, family=family)
    return sent


def test_what_the_reconcilers_send_in_the_simulated_worlds_is_all_read(monkeypatch):
    """The reading against what the code does: a request of a simulated run that the scan did not find
    means the scan has a blind spot."""
    sent = recorded_requests(monkeypatch)
    assert {Need("apps", "deployments", "create"), Need("leaderworkerset.x-k8s.io", "leaderworkersets", "create"),
            Need("batch", "jobs", "create"), Need("", "pods/log", "get")} <= sent  # both families and kinds ran
    unread = sorted(sent - needs())
    assert not unread, f"sent in a simulated run but not found by tests/operator_requests.py: {unread}"


@pytest.mark.parametrize("method, path, query, need", [
    ("GET", "/apis/batch/v1/namespaces/team/jobs/run-1", None, Need("batch", "jobs", "get")),
    ("GET", "/apis/batch/v1/namespaces/team/jobs", {"labelSelector": "a=b"}, Need("batch", "jobs", "list")),
    ("GET", "/api/v1/namespaces/team/pods", {"watch": "true"}, Need("", "pods", "watch")),
    ("GET", "/api/v1/namespaces/team/pods/p/log", None, Need("", "pods/log", "get")),
    ("PATCH", "/apis/drafter.dev/v1alpha1/namespaces/t/drafterservings/k/status", None,
     Need("drafter.dev", "drafterservings/status", "patch")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/l", None, Need(*LEASES, "update")),
    ("DELETE", "/api/v1/namespaces/team/pods", None, Need("", "pods", "deletecollection")),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", None,
     Need("authorization.k8s.io", "selfsubjectaccessreviews", "create")),
])
def test_a_request_maps_to_the_rbac_attributes_the_apiserver_checks(method, path, query, need):
    assert need_of_request(method, path, query) == need
