"""What the fake apiserver answers to a read is what a client decodes from the wire: the stored objects as json would
carry them (apiserver._copy copies them with marshal, faster; these check the two agree), each a copy of its own,
and a list holds its collection's objects in the store's order (the apiserver keeps them by collection)."""

from __future__ import annotations

import json

from drafter_testbed.simulation import batch, operations
from drafter_testbed.simulation.apiserver import parse
from drafter_testbed.simulation.runner import quiet_operator
from drafter_testbed.simulation.world import World


def _shared(obj, seen: set[int] | None = None) -> bool:
    """Does a dict or list appear twice in ``obj``?"""
    seen = set() if seen is None else seen
    if isinstance(obj, (dict, list)):
        if id(obj) in seen:
            return True
        seen.add(id(obj))
        return any(_shared(v, seen) for v in (obj.values() if isinstance(obj, dict) else obj))
    return False


def _reads_agree(api) -> None:
    api.on_request = api.racing = None  # no time passes, nothing else writes, no fault while these read
    api.faults.crash_in, api.faults.fail_rate = None, 0.0
    collections = {parse(key).collection for key in api.store}
    assert collections
    for collection in collections:
        stored = [o for k, o in api.store.items() if k.startswith(collection + "/")]
        listed = api.list(collection)
        assert listed == json.loads(json.dumps(stored))
        assert json.dumps(listed) == json.dumps(stored)  # the same types and order, key by key
        assert not _shared(listed)
        assert all(a is not b for a, b in zip(listed, stored))
        for obj in stored:
            read = api.get(f"{collection}/{obj['metadata']['name']}")
            assert json.dumps(read) == json.dumps(obj) and read is not obj and not _shared(read)


def test_a_batch_world_with_retraining_reads_back_what_it_stores():
    setup, ops = batch.generate(6, 50)  # spec.retraining
    world = batch.BatchWorld(6, setup)
    serving = world.api.store[f"{batch.SERVINGS}/{batch.SERVING}"]
    assert _shared(serving)  # its spec's drafter is its first revision's, one dict: a read has two
    _reads_agree(world.api)
    world.api.on_request, world.api.racing = world.interleave, world.kueue_races
    with quiet_operator():
        for op in ops[:12]:
            world.apply(op)
            world.run_for(op["dt"], lambda: None)
    _reads_agree(world.api)


def test_a_serving_world_reads_back_what_it_stores():
    setup, ops = operations.generate(7, 50)
    world = World(7, setup)
    with quiet_operator():
        for op in ops[:8]:
            world.apply(op)
            world.run_for(op["dt"], lambda: None)
    _reads_agree(world.api)
