"""The simulated LeaderWorkerSet controller (testbed/drafter_testbed/simulation/groups.py) under the real operator: a
serving whose replica spans two nodes runs its revisions as sets of whole-node groups, a lost pod re-creates its
group, a swap replaces one set with another, and the scenarios draw such servings."""

from __future__ import annotations

from drafter_operator.constants import REVISION_LABEL, SERVING_LABEL
from drafter_operator.resources.group import SET_LABEL, WORKER_INDEX_LABEL

from drafter_testbed.simulation.cluster import fate_of, ready
from drafter_testbed.simulation.groups import GROUP_INDEX_LABEL
from drafter_testbed.simulation.operations import GROUP_SCENARIOS, generate
from drafter_testbed.simulation.world import World

CONFIG = {"engine": "vllm", "drafter": 0, "image": 0, "replicas": 1, "env": 0, "strategy": "BlueGreen", "gate": None,
          "acceptance": None, "onDegraded": "Alert", "startup": "45m", "nodesPerReplica": 2, "layout": "pipeline"}
PODS = "/api/v1/namespaces/team/pods/"


def healthy_world(nodes: int = 4, **config) -> World:
    """A two-node serving whose revisions (this one, and drafter 1's) all start: a seed where their fates are kind."""
    config = {**CONFIG, **config}
    for seed in range(200):
        world = World(seed, {"name": "kimi", "nodes": nodes, "config": config})
        revisions = [world.desired_revision()]
        world.config["drafter"] = 1
        revisions.append(world.desired_revision())
        world.config["drafter"] = config["drafter"]
        fates = [fate_of(seed, r) for r in revisions]
        if not any(f.broken or f.never_ready or f.startup > 1200 for f in fates):
            return world
    raise AssertionError("no seed of 200 starts both revisions")


def sets(world: World) -> dict[str, dict]:
    return {k: o for k, o in world.api.store.items() if "/leaderworkersets/" in k}


def pods(world: World) -> dict[str, dict]:
    return {k: o for k, o in world.api.store.items() if k.startswith(PODS)}


def run(world: World, seconds: float) -> None:
    world.run_for(seconds, lambda: None)


def test_a_two_node_serving_runs_a_set_of_groups_whose_leaders_alone_serve():
    world = healthy_world()
    world.apply({"kind": "create", "salt": 0, "dt": 0})
    run(world, 3600)
    (lws,) = sets(world).values()
    assert not any("/deployments/" in k for k in world.api.store)
    assert lws["status"]["readyReplicas"] == 1 and lws["status"]["observedGeneration"] == lws["metadata"]["generation"]
    group = sorted(pods(world).values(), key=lambda p: p["metadata"]["name"])
    leader, worker = group
    name = lws["metadata"]["name"]
    assert (leader["metadata"]["name"], worker["metadata"]["name"]) == (f"{name}-0", f"{name}-0-1")
    assert leader["spec"]["nodeName"] != worker["spec"]["nodeName"]  # one whole node each
    assert [p["metadata"]["labels"][WORKER_INDEX_LABEL] for p in group] == ["0", "1"]
    assert all(p["metadata"]["labels"][SET_LABEL] == name and p["metadata"]["labels"][GROUP_INDEX_LABEL] == "0"
               for p in group)
    assert SERVING_LABEL in leader["metadata"]["labels"] and SERVING_LABEL not in worker["metadata"]["labels"]
    assert world.traffic.endpoints == {PODS + leader["metadata"]["name"]}  # the Service selects the leader only
    assert (world.serving()["status"].get("activeRevision")) == leader["metadata"]["labels"][REVISION_LABEL]


def test_a_leader_waits_for_its_workers_and_a_group_without_room_for_one_never_serves():
    world = healthy_world(nodes=1)
    world.apply({"kind": "create", "salt": 0, "dt": 0})
    run(world, 1800)
    leader = next(p for p in pods(world).values() if p["metadata"]["labels"][WORKER_INDEX_LABEL] == "0")
    worker = next(p for p in pods(world).values() if p["metadata"]["labels"][WORKER_INDEX_LABEL] == "1")
    assert leader["spec"].get("nodeName") and not worker["spec"].get("nodeName")  # one node: the worker waits
    assert not ready(leader) and not world.traffic.endpoints
    (lws,) = sets(world).values()
    assert lws["status"]["readyReplicas"] == 0


def test_a_lost_worker_recreates_its_whole_group_and_the_serving_is_ready_again():
    world = healthy_world()
    world.apply({"kind": "create", "salt": 0, "dt": 0})
    run(world, 3600)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(world).values()}
    (worker,) = [k for k, p in pods(world).items() if p["metadata"]["labels"][WORKER_INDEX_LABEL] == "1"]
    world.cluster.delete_pod(worker, "deleted-by-hand")
    run(world, 30)
    assert world.track.take("no-cut-streams") == []
    assert {c.cause for c in world.traffic.cuts} <= {"deleted-by-hand"}  # the leader went with its worker's cause
    run(world, 3600)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(world).values()}
    assert after.keys() == before.keys() and not set(after.values()) & set(before.values())  # same names, new pods
    assert world.traffic.endpoints and next(iter(sets(world).values()))["status"]["readyReplicas"] == 1
    ready_condition = next(c for c in world.serving()["status"]["conditions"] if c["type"] == "Ready")
    assert ready_condition["status"] == "True"


def test_a_bluegreen_swap_between_two_sets_deletes_the_old_set_and_serves_throughout():
    world = healthy_world()
    world.apply({"kind": "create", "salt": 0, "dt": 0})
    run(world, 3600)
    (old,) = sets(world)
    outages = len(world.traffic.outages)
    world.apply({"kind": "set", "field": "drafter", "value": 1, "salt": 1, "dt": 0})
    run(world, 7200)
    (new,) = sets(world)
    assert new != old and len(world.traffic.outages) == outages
    assert world.selected_revision() == world.desired_revision()
    assert all(p["metadata"]["labels"][SET_LABEL] == new.rsplit("/", 1)[1] for p in pods(world).values())


def test_an_engine_that_exits_every_time_fails_its_group_revision_instead_of_restarting_for_ever():
    """LWS re-creates a group whose engine restarted, so the revision's pods are always new: the operator fails it on
    the exit it sees, and the states end (guarantee 6)."""
    config = {**CONFIG, "strategy": "Recreate"}
    for seed in range(400):
        world = World(seed, {"name": "kimi", "nodes": 4, "config": config})
        if fate_of(seed, world.desired_revision()).broken:
            break
    world.apply({"kind": "create", "salt": 0, "dt": 0})
    run(world, 1800)
    revision = world.desired_revision()
    (record,) = [r for r in world.serving()["status"]["revisions"] if r["name"] == revision]
    assert record.get("good") is False and "engine exited" in (record.get("failedReason") or "")


def test_one_scenario_in_four_draws_a_two_node_serving_on_twice_the_nodes_and_every_other_draw_stays(monkeypatch):
    from drafter_testbed.simulation import operations
    drawn = {seed: generate(seed, 50) for seed in range(200)}
    groups = [seed for seed, (setup, _) in drawn.items() if setup["config"].get("nodesPerReplica", 1) == 2]
    assert 200 / GROUP_SCENARIOS * 0.6 < len(groups) < 200 / GROUP_SCENARIOS * 1.4
    monkeypatch.setattr(operations, "draw_groups", lambda seed, setup: None)
    for seed, (setup, ops) in drawn.items():  # without the group draw: the same scenario, on one node a replica
        plain, plain_ops = generate(seed, 50)
        assert ops == plain_ops and setup["name"] == plain["name"]
        if seed in groups:
            assert setup["nodes"] == 2 * plain["nodes"] and setup["config"] == {**plain["config"],
                                                                               "nodesPerReplica": 2,
                                                                               "layout": setup["config"]["layout"]}
        else:
            assert setup == plain


def test_a_set_deleted_by_hand_and_made_again_waits_for_its_old_pods_before_it_reuses_their_names():
    world = healthy_world()
    world.apply({"kind": "create", "salt": 0, "dt": 0})
    run(world, 3600)
    (key,) = sets(world)
    old = {p["metadata"]["uid"] for p in pods(world).values()}
    world.api.remove("user", key)  # the operator makes it again; the garbage collector stops the old pods
    run(world, 3600)
    lws = world.api.store[key]
    new = pods(world)
    assert new and not old & {p["metadata"]["uid"] for p in new.values()}
    assert all(p["metadata"]["creationTimestamp"] >= lws["metadata"]["creationTimestamp"] for p in new.values())
    assert world.traffic.endpoints and lws["status"]["readyReplicas"] == 1
