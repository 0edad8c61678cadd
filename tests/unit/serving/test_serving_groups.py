"""A serving whose replica spans several nodes (spec.resources.nodesPerReplica): each revision is a LeaderWorkerSet,
not a Deployment, and every serving promise the World plays (rollout, swap, delete by kind, the Service on the
leaders) holds for it. The cluster is `World` (tests/support/servings.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from drafter_operator.api import DrafterServing
from drafter_operator.constants import REVISION_LABEL, SERVING_LABEL
from drafter_operator.controllers.serving.decide import decide
from drafter_operator.resources import group
from drafter_operator.resources.workloads import GROUP, kind_of
from tests.support.servings import World, seed_body


def two_node_body(**changes) -> dict:
    """The seed on two 8-GPU nodes: tensor parallel 8, data parallel 2 with expert parallelism (16 GPUs a replica)."""
    body = seed_body(**changes)
    body["spec"]["target"].update(tensorParallelSize=8, dataParallelSize=2, expertParallel=True)
    body["spec"]["resources"] = {"gpusPerReplica": 8, "nodesPerReplica": 2}
    return body


def created(plan, plural: str) -> list[dict]:
    return [w.body for w in plan.writes if w.verb == "create" and w.plural == plural]


def test_a_replica_over_two_nodes_is_a_leader_worker_set_of_groups_of_two():
    world = World(two_node_body())
    plan = world.decide()
    assert not created(plan, "deployments")
    (lws,) = created(plan, GROUP.plural)
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["replicas"] == 1 and lws["metadata"]["ownerReferences"][0]["kind"] == "DrafterServing"
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    # The Service and the operator's pod index select the leaders: the workers serve no API.
    assert leader["metadata"]["labels"][SERVING_LABEL] == "kimi"
    assert SERVING_LABEL not in worker["metadata"]["labels"]
    assert worker["metadata"]["labels"][REVISION_LABEL] == leader["metadata"]["labels"][REVISION_LABEL]
    lead, work = leader["spec"]["containers"][0], worker["spec"]["containers"][0]
    assert "readinessProbe" in lead and "ports" in lead
    assert not {"readinessProbe", "startupProbe", "livenessProbe", "ports"} & set(work)
    # One command line but the worker's mark; the node rank and the leader come from LWS's environment.
    assert lead["command"][lead["command"].index("--nnodes") + 1] == "2"
    assert lead["command"][lead["command"].index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert "--headless" in work["command"] and "--headless" not in lead["command"]
    assert [a for a in work["command"] if a != "--headless"] == lead["command"]
    # Each pod has its node's 8 GPUs.
    assert work["resources"]["limits"]["nvidia.com/gpu"] == lead["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_the_group_serves_once_its_groups_are_ready_and_a_swap_deletes_the_old_set_by_kind():
    world = World(two_node_body())
    world.converge()
    assert world.condition("Ready")["status"] == "True"
    first = world.body["status"]["activeRevision"]
    assert world.service["spec"]["selector"][REVISION_LABEL] == first
    (old,) = world.deployments.values()
    assert kind_of(old) is GROUP
    world.body["spec"]["drafter"]["numSpeculativeTokens"] = 3
    world.body["metadata"]["generation"] += 1
    deleted: list[str] = []
    for _ in range(12):
        plan = world.decide()
        deleted += plan.deletes
        if not plan.writes_anything():
            break
        world.apply(plan)
        world.settle()
        world.now += dt.timedelta(seconds=20)
    second = world.body["status"]["activeRevision"]
    assert second != first and world.condition("Ready")["status"] == "True"
    assert deleted == [f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/team/leaderworkersets/{old['metadata']['name']}"]
    (now,) = world.deployments.values()
    assert kind_of(now) is GROUP and now["metadata"]["labels"][REVISION_LABEL] == second


def test_the_node_count_names_a_revision_of_its_own_and_a_one_node_revision_keeps_its_name():
    from drafter_operator.controllers.serving.revisions import revision_hash
    one = DrafterServing.model_validate(seed_body()).spec
    two = DrafterServing.model_validate(two_node_body()).spec
    assert revision_hash(one, "img") == revision_hash(DrafterServing.model_validate(seed_body()).spec, "img")
    assert revision_hash(two, "img") != revision_hash(one, "img")


@pytest.mark.parametrize("serving", ["kimi", "k" * 52])
def test_a_sets_name_leaves_its_stateful_sets_and_pods_room(serving):
    """LWS names each group's workers' StatefulSet <set>-<group>, whose pods carry controller-revision-hash
    <statefulset>-<hash of 10>: a label value of at most 63."""
    name = group.group_name(serving, "0123456789")
    assert len(f"{name}-{group.MAX_GROUPS - 1}") + 1 + 10 <= 63
    assert len(f"{name}-{group.MAX_GROUPS - 1}-15") <= 63  # a worker pod's name, a hostname


def test_a_fresh_read_lists_leader_worker_sets_only_for_a_serving_that_spans_nodes():
    from drafter_operator.controllers.serving.fresh import spans_nodes
    assert spans_nodes(two_node_body()) and not spans_nodes(seed_body())
    assert not spans_nodes({"spec": {"resources": {"nodesPerReplica": "2"}}})  # a refused spec read leniently


def test_a_group_that_served_and_lost_a_pod_is_said_to_restart_as_a_whole_while_a_new_one_is_said_to_start():
    world = World(two_node_body())
    plan = world.decide()
    world.apply(plan)
    starting = world.condition("Ready")
    assert (starting["status"], starting["reason"]) == ("False", "EngineStarting")  # never served: it starts
    world.settle()
    world.converge()
    ready = world.condition("Ready")
    (lws,) = world.deployments.values()
    assert ready["status"] == "True" and "1/1 groups of 2 pods Ready" in ready["message"]
    # A worker lost: LeaderWorkerSet takes the group down, and its leader is not Ready until the group is back.
    lws["status"] = {"readyReplicas": 0, "observedGeneration": lws["metadata"]["generation"]}
    plan = world.decide()
    world.apply(plan)
    restarting = world.condition("Ready")
    assert (restarting["status"], restarting["reason"]) == ("False", "GroupRestarting")
    assert f"group 0 (leader {lws['metadata']['name']}-0)" in restarting["message"]
    assert "RecreateGroupOnPodRestart" in restarting["message"]
    assert [e[:2] for e in plan.events if e[1] == "GroupRestarting"] == [("Warning", "GroupRestarting")]
    # Traffic stays where it was, and nothing new starts: a restart is not a failure.
    assert not [w for w in plan.writes if w.verb == "create"] and not plan.deletes
    world.settle()
    world.converge()
    assert world.condition("Ready")["status"] == "True"


def crashed_pod(revision: str, created: str) -> dict:
    """A pod whose engine exited before it was ever Ready, restarted once by the kubelet."""
    return {"metadata": {"name": "p", "creationTimestamp": created,
                         "labels": {REVISION_LABEL: revision, SERVING_LABEL: "kimi"}},
            "spec": {"nodeName": "node-0"},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True",
                                                           "lastTransitionTime": created}],
                       "containerStatuses": [{"name": "engine", "ready": False, "started": False, "restartCount": 1,
                                              "lastState": {"terminated": {"exitCode": 1, "message": "bad flag"}}}]}}


@pytest.mark.parametrize("kind", ["Deployment", GROUP.kind])
def test_a_groups_engine_exit_is_final_a_deployments_waits_for_its_restarts(kind: str):
    """LWS re-creates a group on its engine's first restart, whose new pods count restarts from zero and start the
    startup clock again: waiting for spec.startup.engineRestarts or the timeout would wait for ever on a group that
    crashes every time. A Deployment's pod keeps its count, so its exit waits for the restarts."""
    from drafter_operator.controllers.serving.observe import observed_from
    created_at = "2026-11-29T12:00:00Z"
    workload = {"kind": kind, "metadata": {"name": "kimi-r1", "creationTimestamp": created_at, "generation": 1,
                                           "labels": {REVISION_LABEL: "r1", SERVING_LABEL: "kimi"}},
                "spec": {"replicas": 1}, "status": {"observedGeneration": 1, "readyReplicas": 0}}
    observation = observed_from([workload], [crashed_pod("r1", created_at)], None).revisions["r1"]
    assert observation.exited and "code 1" in observation.exited and observation.exit_restarts == 1
    assert observation.exit_final is (kind == GROUP.kind)
