"""`drafter-operator run --shards 2` on the local cluster: three replicas for two shards. Two lead, one shard each
through its own Lease, the third stands by; each leader follows exactly the servings whose namespace and name hash
to its shard; SIGKILL of one leader hands its shard (and only its) to the standby once its Lease expired, and the
new leader reconciles that shard's servings. The sharding rules: controllers/sharding.py.

As in test_two_operators.py, the operators watch one namespace of their own with their Leases in it.
"""

from __future__ import annotations

import signal
import time

import yaml

from drafter_operator.controllers.leadership import Timings, lease_name
from drafter_operator.controllers.sharding import lease_names, shard_of
from tests.support.e2e_chart import example_serving
from tests.support.operator_candidates import KILL_TAKEOVER_LIMIT, Candidate, unrenewed_seconds, wait

SHARDS = 2


def names_per_shard(namespace: str, each: int) -> dict[int, list[str]]:
    """Serving names, ``each`` of them in every shard (by the operator's own hash)."""
    found: dict[int, list[str]] = {shard: [] for shard in range(SHARDS)}
    i = 0
    while any(len(names) < each for names in found.values()):
        name = f"sharded-{i}"
        if len(found[shard_of(namespace, name, SHARDS)]) < each:
            found[shard_of(namespace, name, SHARDS)].append(name)
        i += 1
    return found


def test_two_shards_split_the_servings_and_a_standby_takes_over_the_shard_of_a_killed_leader(own_namespace, tmp_path,
                                                                                              capsys):
    cluster, namespace = own_namespace
    candidates: list[Candidate] = []
    by_shard = names_per_shard(namespace, 3)
    everything = [name for names in by_shard.values() for name in names]

    def start(name: str) -> Candidate:
        candidates.append(Candidate(cluster, namespace, tmp_path, name, ("--shards", str(SHARDS))))
        return candidates[-1]

    def shard_led(candidate: Candidate) -> int | None:
        return next((shard for shard in range(SHARDS)
                     if candidate.metric("drafter_operator_shard", shard=str(shard), shards=str(SHARDS)) == 1.0), None)

    def followed(candidate: Candidate) -> float | None:
        return candidate.metric("drafter_operator_followed_objects", kind="DrafterServing")

    def reconciled(name: str, generation: int) -> bool:
        status = cluster.get_json("drafterserving", "-n", namespace, name).get("status") or {}
        return any(c["type"] == "Ready" and c.get("observedGeneration") == generation
                   for c in status.get("conditions") or [])

    def lease(shard: int) -> dict:
        return cluster.get_json("lease", "-n", namespace, lease_names(lease_name([namespace]), SHARDS)[shard])["spec"]

    try:
        first, second, third = start("first"), start("second"), start("third")
        wait("two of three to lead a shard", lambda: sum(shard_led(c) is not None for c in candidates) == 2, 90,
             candidates)
        leaders = {shard_led(c): c for c in candidates if shard_led(c) is not None}
        assert sorted(leaders) == [0, 1], leaders  # one shard each, never both in one process
        [standby] = [c for c in candidates if c not in leaders.values()]
        wait("the third to stand by", lambda: standby.metric("drafter_operator_leader") == 0.0, 30, candidates)
        assert standby.healthz() == 200 and shard_led(standby) is None
        for shard, leader in leaders.items():
            assert lease(shard)["holderIdentity"].startswith(f"{leader.name}_{leader.proc.pid}_")

        for name in everything:
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(example_serving(namespace, name)))
        for name in everything:
            wait(f"{name} reconciled", lambda name=name: reconciled(name, 1), 120, candidates)
        # Each leader follows its shard's servings and no other: their counts are the partition's.
        for shard, leader in leaders.items():
            wait(f"shard {shard}'s leader to follow its {len(by_shard[shard])} servings",
                 lambda leader=leader, shard=shard: followed(leader) == len(by_shard[shard]), 30, candidates)
        time.sleep(2)  # a leader acting for the other shard would have started that serving's loop by now
        assert [followed(leaders[shard]) for shard in range(SHARDS)] == [len(by_shard[s]) for s in range(SHARDS)]
        assert not followed(standby)

        # SIGKILL the leader of shard 1: its Lease stays until it expires; the standby takes shard 1, not shard 0.
        killed = time.monotonic()
        last = lease(1)
        leaders[1].signal(signal.SIGKILL)
        leaders[1].proc.wait(10)
        wait("the standby to lead shard 1", lambda: shard_led(standby) == 1, KILL_TAKEOVER_LIMIT, candidates)
        takeover = time.monotonic() - killed
        taken = lease(1)
        assert taken["holderIdentity"].startswith(f"{standby.name}_")
        unrenewed = unrenewed_seconds(last, taken)
        assert unrenewed >= Timings().lease_duration, f"taken over {unrenewed:.1f}s after the last renewal"
        assert lease(0)["holderIdentity"].startswith(f"{leaders[0].name}_")  # shard 0 never changed hands
        wait("the new leader to follow shard 1's servings",
             lambda: followed(standby) == len(by_shard[1]), 60, candidates)
        # A spec change of a shard-1 serving is reconciled by the new leader; shard 0's leader still follows its own.
        changed = by_shard[1][0]
        cluster.kubectl("-n", namespace, "patch", "drafterserving", changed, "--type=merge", "-p",
                        '{"spec":{"replicas":2}}')
        wait(f"{changed}'s change reconciled by the new leader", lambda: reconciled(changed, 2), 90, candidates)
        assert followed(leaders[0]) == len(by_shard[0])
        with capsys.disabled():
            print(f"\nshard 1's leader SIGKILL -> standby leads it: {takeover:.1f}s (Lease unrenewed {unrenewed:.1f}s)")
    finally:
        try:
            cluster.kubectl("-n", namespace, "delete", "drafterservings", "--all", "--wait=false", check=False)
        finally:
            for candidate in candidates:
                candidate.stop()
