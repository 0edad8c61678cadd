"""spec.retraining in the batch simulation (drafter_testbed/simulation/batch_retraining.py): the world runs the real
RetrainingReconciler and what it starts through the training controller, and the retraining invariants
(batch_invariants.py) see what they promise to see. The random scenarios themselves run in test_simulation.py."""

from __future__ import annotations

import copy

from drafter_operator.constants import RETRAIN_ANNOTATION, RETRAINING_LABEL, RETRAINING_TRIGGER_ANNOTATION

from drafter_testbed.simulation import batch_invariants
from drafter_testbed.simulation.batch import NS, SERVING, SERVINGS, TRAININGS, BatchWorld, generate
from drafter_testbed.simulation.runner import quiet_operator

SEED = 6  # a seed whose scenario has spec.retraining (batch_retraining.draw_retraining)


def _world(**retraining) -> BatchWorld:
    setup, _ = generate(SEED, 50)
    setup = {**setup, "retraining": {**setup["retraining"], **retraining}}
    return BatchWorld(SEED, setup)


def _run(world: BatchWorld, ops: list[dict]) -> list[tuple[str, str]]:
    found = []

    def check() -> None:
        for name, invariant in batch_invariants.INVARIANTS.items():
            found.extend((name, message) for message in invariant(world))
    with quiet_operator():
        for salt, op in enumerate(ops):
            world.apply({**op, "salt": 100 + salt})
            world.run_for(op["dt"], check)
    return found


def _retrainings(world: BatchWorld) -> list[dict]:
    return world.track._retrainings()


def test_requests_and_drift_start_trainings_one_at_a_time_that_run_promote_and_are_trimmed_to_the_history_limit():
    world = _world(historyLimit=1, cooldown="1h", minNewSamples=None, interval=None)
    ops = [{"kind": "retrain", "dt": 120.0}, {"kind": "retrain", "dt": 7200.0},  # the second waits for the first
           {"kind": "drift", "on": True, "dt": 7200.0}, {"kind": "retrain", "dt": 7200.0}]
    found = _run(world, ops)
    assert found == []
    starts = world.track.retraining_starts
    assert len(starts) >= 3, starts
    assert len({request for _, _, request in starts.values() if request}) == \
        sum(1 for _, _, request in starts.values() if request)  # one training per value
    finished = [t for t in _retrainings(world) if (t.get("status") or {}).get("stage") in ("Succeeded", "Failed")]
    assert len(finished) <= 1, [t["metadata"]["name"] for t in finished]  # trimmed to historyLimit
    serving = world.api.store[f"{SERVINGS}/{SERVING}"]
    history = serving["status"]["retraining"]["history"]
    assert {h["name"] for h in history} <= set(starts)
    assert len(serving["status"]["revisions"]) > 1  # a Promote landed: the world rolled out its revision
    for training in _retrainings(world):  # the template as resources/retraining.py renders it
        assert training["spec"]["promote"]["servingRef"]["name"] == SERVING
        assert training["spec"]["output"]["path"].startswith("/models/drafters/kimi-retrained-r")
        assert training["spec"]["baseDrafter"].startswith("/models/drafters/")  # warm-started from what served


def _training(world: BatchWorld, run: int, trigger: str, request: str | None = None) -> dict:
    serving = world.api.store[f"{SERVINGS}/{SERVING}"]
    annotations = {RETRAINING_TRIGGER_ANNOTATION: trigger, **({RETRAIN_ANNOTATION: request} if request else {})}
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining",
            "metadata": {"name": f"{SERVING}-r{run}", "namespace": NS, "labels": {RETRAINING_LABEL: SERVING},
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
                                              "name": SERVING, "uid": serving["metadata"]["uid"],
                                              "controller": True}]},
            "spec": {}}


def test_the_invariants_see_a_second_training_a_repeated_request_an_early_drift_start_and_a_running_one_deleted():
    world = _world(historyLimit=1, cooldown="1h")
    world.operator.up = False  # the writes below are the operator's, made by hand
    api, track = world.api, world.track
    api.put("operator", f"{TRAININGS}/{SERVING}-r1", _training(world, 1, "Requested", "a"))
    world.clock.t += 60
    api.put("operator", f"{TRAININGS}/{SERVING}-r2", _training(world, 2, "DriftDetected"))
    assert track.take("retrains-one-at-a-time") and track.take("retrains-after-cooldown")
    for run in (1, 2):
        body = api.store[f"{TRAININGS}/{SERVING}-r{run}"]
        api.put("operator", f"{TRAININGS}/{SERVING}-r{run}", {**body, "status": {"stage": "Failed"}})
    api.put("operator", f"{TRAININGS}/{SERVING}-r3", _training(world, 3, "Requested", "a"))
    assert track.take("retrains-once-per-request") and not track.take("retrains-one-at-a-time")
    api.remove("operator", f"{TRAININGS}/{SERVING}-r3")  # unfinished
    assert "had not finished" in track.take("retraining-history-bounded")[0]
    api.remove("operator", f"{TRAININGS}/{SERVING}-r2")  # the newest finished one, with none newer kept
    assert "only 0 newer finished" in track.take("retraining-history-bounded")[0]
    serving = api.store[f"{SERVINGS}/{SERVING}"]
    status = copy.deepcopy(serving["status"])
    status["retraining"] = {"history": [{"name": f"{SERVING}-r9"}]}
    api.put("operator", f"{SERVINGS}/{SERVING}", {**serving, "status": status})
    assert track.take("retraining-history-real")
