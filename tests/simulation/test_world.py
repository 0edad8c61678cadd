"""The simulated world itself: the fake apiserver, the garbage collector, refused names, cut streams,
determinism. The simulation is only as trustworthy as these."""

from __future__ import annotations

import pytest

from drafter_operator.kube import ApiError

from drafter_testbed.simulation.cluster import NS
from drafter_testbed.simulation.runner import run_scenario
from drafter_testbed.simulation.world import World

SETUP = {"name": "kimi", "nodes": 2, "config": {"engine": "vllm", "drafter": 0, "image": 0, "replicas": 1, "env": 0,
                                                "strategy": "BlueGreen", "gate": None, "acceptance": None,
                                                "onDegraded": "Alert", "startup": "45m"}}
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
SERVICES = f"/api/v1/namespaces/{NS}/services"


def world() -> World:
    return World(7, SETUP)


def deployment(name: str, owner: dict | None = None) -> dict:
    meta = {"name": name, "labels": {"app": name}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": []}}}}


def test_create_twice_is_none_through_the_real_kube_create_and_a_stale_patch_conflicts():
    w = world()
    created = w.api.create(DEPLOYMENTS, deployment("a"))
    assert created["metadata"]["uid"] and created["metadata"]["generation"] == 1
    assert w.api.create(DEPLOYMENTS, deployment("a")) is None  # 409 AlreadyExists, swallowed by Kube.create
    stale = created["metadata"]["resourceVersion"]
    patched = w.api.patch(f"{DEPLOYMENTS}/a", {"spec": {"replicas": 2}})
    assert patched["metadata"]["generation"] == 2 and int(patched["metadata"]["resourceVersion"]) > int(stale)
    with pytest.raises(ApiError) as conflict:
        w.api.patch(f"{DEPLOYMENTS}/a", {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 3}})
    assert conflict.value.status == 409
    assert w.api.patch(f"{DEPLOYMENTS}/a", {"metadata": {"labels": {"x": "y"}}})["metadata"]["generation"] == 2
    assert w.api.delete(f"{DEPLOYMENTS}/a") is True and w.api.delete(f"{DEPLOYMENTS}/a") is False  # 404


def test_status_goes_through_the_status_subresource_only():
    w = world()
    w.api.create(DEPLOYMENTS, deployment("a"))
    w.api.patch(f"{DEPLOYMENTS}/a", {"status": {"readyReplicas": 9}})
    assert "readyReplicas" not in (w.api.get(f"{DEPLOYMENTS}/a").get("status") or {})
    w.api.patch(f"{DEPLOYMENTS}/a/status", {"status": {"readyReplicas": 9}, "spec": {"replicas": 5}})
    got = w.api.get(f"{DEPLOYMENTS}/a")
    assert got["status"]["readyReplicas"] == 9 and got["spec"]["replicas"] == 0


def test_the_garbage_collector_removes_children_of_a_deleted_owner():
    w = world()
    owner = w.api.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "owner"}, "spec": {}})
    w.api.create(DEPLOYMENTS, deployment("child", owner))
    w.api.delete(f"{SERVICES}/owner")
    assert w.api.get(f"{DEPLOYMENTS}/child") is not None  # not at once
    w.run_for(120, lambda: None)
    assert w.api.get(f"{DEPLOYMENTS}/child") is None


def test_finalizers_hold_a_deleted_object_until_they_are_removed():
    w = world()
    body = deployment("held")
    body["metadata"]["finalizers"] = ["example.com/wait"]
    w.api.create(DEPLOYMENTS, body)
    w.api.delete(f"{DEPLOYMENTS}/held")
    assert w.api.get(f"{DEPLOYMENTS}/held")["metadata"]["deletionTimestamp"]
    w.api.patch(f"{DEPLOYMENTS}/held", {"metadata": {"finalizers": None}})
    assert w.api.get(f"{DEPLOYMENTS}/held") is None


def test_a_name_the_real_apiserver_refuses_is_refused_not_swallowed():
    w = world()
    with pytest.raises(ApiError) as refused:
        w.api.create(f"/apis/drafter.dev/v1alpha1/namespaces/{NS}/drafterbenchmarks",
                     {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterBenchmark",
                      "metadata": {"name": "x" * 53}, "spec": {}})
    assert refused.value.status == 422 and "metadata.name" in str(refused.value)
    with pytest.raises(ApiError):
        w.api.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s" * 64}, "spec": {}})
    assert w.track.take("names-fit")  # the invariant saw the operator-side refusal


def test_admission_refusals_and_api_faults_come_from_the_request_layer():
    w = world()
    w.api.faults.admission["no"] = lambda method, plural, path, body: (403, "denied by policy") \
        if plural == "deployments" else None
    with pytest.raises(ApiError) as refused:
        w.api.create(DEPLOYMENTS, deployment("a"))
    assert refused.value.status == 403 and "denied by policy" in str(refused.value)
    w.api.faults.admission.clear()
    w.api.faults.fail_rate = 1.0
    with pytest.raises(ApiError) as failed:
        w.api.create(DEPLOYMENTS, deployment("a"))
    assert failed.value.status in (500, 504)


def test_a_bluegreen_swap_serves_throughout_and_a_pod_deleted_while_serving_cuts_its_streams():
    w = world()
    w.apply({"kind": "create", "salt": 0, "dt": 0})
    w.run_for(7200, lambda: None)
    assert w.traffic.endpoints and w.track.ever_ready
    outages = len(w.traffic.outages)
    w.apply({"kind": "set", "field": "drafter", "value": 1, "salt": 1, "dt": 0})
    w.run_for(7200, lambda: None)
    assert len(w.traffic.outages) == outages  # BlueGreen: no gap in service
    (pod,) = w.traffic.endpoints
    w.cluster.delete_pod(pod, "test")
    assert [c.cause for c in w.traffic.cuts][-1:] == ["test"]


def test_a_stream_stays_on_its_pod_when_the_selector_moves():
    w = world()
    w.apply({"kind": "create", "salt": 0, "dt": 0})
    w.run_for(7200, lambda: None)
    (pod,) = w.traffic.endpoints
    service = w.service()
    w.api.put("test", f"{SERVICES}/kimi", {**service, "spec": {**service["spec"], "selector": {"app": "none"}}})
    assert not w.traffic.endpoints
    w.clock.t += 30  # within the stream's length: still in flight on the pod it started on
    w.cluster.delete_pod(pod, "test")
    assert w.traffic.cuts and w.traffic.cuts[-1].cause == "test"


def test_a_scenario_replays_exactly():
    first, second = run_scenario(3, 20), run_scenario(3, 20)
    assert (first.events, first.reconciles, [(v.invariant, v.t) for v in first.violations]) == \
        (second.events, second.reconciles, [(v.invariant, v.t) for v in second.violations])


def test_the_childrens_watches_select_the_managed_by_label_and_a_relabelled_child_leaves_the_view():
    w = world()
    labelled = deployment("ours")
    labelled["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "drafter-operator"})
    w.api.put("user", f"{DEPLOYMENTS}/ours", labelled)
    w.api.put("user", f"{DEPLOYMENTS}/hand-made", deployment("hand-made"))
    w.run_for(5, lambda: None)
    view = w.operator.view("deployments")
    assert f"{DEPLOYMENTS}/ours" in view and f"{DEPLOYMENTS}/hand-made" not in view
    stripped = w.api.store[f"{DEPLOYMENTS}/ours"]
    w.api.put("user", f"{DEPLOYMENTS}/ours", {**stripped, "metadata": {**stripped["metadata"], "labels": {"app": "ours"}}})
    w.run_for(5, lambda: None)
    assert f"{DEPLOYMENTS}/ours" not in w.operator.view("deployments")  # the selected watch says DELETED


def test_a_relist_after_a_stalled_watch_keeps_what_was_deleted_during_the_gap_and_other_kinds_run_on():
    w = world()
    body = deployment("gone")
    body["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "drafter-operator"})
    w.api.put("user", f"{DEPLOYMENTS}/gone", body)
    w.run_for(5, lambda: None)
    w.apply({"kind": "watch_lag", "watch": "deployments", "stall": True, "lag": 1.0, "for": 600.0, "salt": 1, "dt": 0})
    w.api.remove("user", f"{DEPLOYMENTS}/gone")
    w.api.put("user", f"{SERVICES}/kimi-x", {"apiVersion": "v1", "kind": "Service", "spec": {},
                                            "metadata": {"name": "kimi-x", "labels": {
                                                "app.kubernetes.io/managed-by": "drafter-operator"}}})
    w.run_for(60, lambda: None)
    assert f"{SERVICES}/kimi-x" in w.operator.view("services")  # another kind's watch is not stalled
    assert f"{DEPLOYMENTS}/gone" in w.operator.view("deployments")
    w.run_for(600, lambda: None)  # the stall ends: kopf re-lists, and the deleted Deployment is a ghost
    assert f"{DEPLOYMENTS}/gone" in w.operator.view("deployments") and f"{DEPLOYMENTS}/gone" not in w.api.store
    assert w.operator.streams["deployments"].ghosts_made == 1
    w.operator.crash(1.0)
    w.run_for(5, lambda: None)  # a restarted operator lists afresh: no ghost
    assert f"{DEPLOYMENTS}/gone" not in w.operator.view("deployments")


def test_engines_report_streams_in_flight_until_they_end_and_unknown_for_an_ip_no_pod_has():
    w = world()
    w.apply({"kind": "create", "salt": 0, "dt": 0})
    w.run_for(7200, lambda: None)
    (pod,) = w.traffic.endpoints
    ip = w.api.store[pod]["status"]["podIP"]
    assert w.traffic.in_flight_at([ip]) == 1 and w.traffic.in_flight_at([]) == 0
    w.traffic.stream_seconds = 240.0
    service = w.service()
    w.api.put("test", f"{SERVICES}/kimi", {**service, "spec": {**service["spec"], "selector": {"app": "none"}}})
    w.clock.t += 200
    assert w.traffic.in_flight_at([ip]) == 1  # a long stream still runs on the pod traffic left
    w.clock.t += 60
    assert w.traffic.in_flight_at([ip]) == 0
    assert w.traffic.in_flight_at([ip, "10.99.99.99"]) is None  # a ghost's IP answers nothing
    w.traffic.unreadable = True
    assert w.traffic.in_flight_at([ip]) is None


def test_the_loop_waits_for_its_own_writes_then_decides_from_the_apiserver_past_the_catch_up():
    w = world()
    w.apply({"kind": "watch_lag", "watch": "deployments", "stall": False, "lag": 60.0, "for": 3600.0, "salt": 1, "dt": 0})
    w.apply({"kind": "create", "salt": 0, "dt": 0})
    behind = []
    w.run_for(2, lambda: None)
    original = w.operator.wakeups.take_behind
    w.operator.wakeups.take_behind = lambda key: behind.append(original(key)) or behind[-1]
    w.run_for(30, lambda: None)
    assert True in behind  # the Deployment it created did not come back within catch_up: the next decision reads fresh
