"""A training never exports over what a DrafterServing of its namespace loads (controllers/training/output.py
and the training decision): refused before the first stage works and again right before Export."""

from __future__ import annotations

import copy
import posixpath

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterTraining
from drafter_operator.controllers.training.decide import decide
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.controllers.training.output import output_conflicts
from tests.support.trainings import T0, Cluster, creates, training

OUTPUT = "/models/drafters/kimi-k25-eagle3-ft"  # the example's spec.output.path


def serving(name: str = "kimi", claim: str = "models", mount: str | None = None, drafter: str | None = None,
            revisions: tuple[str, ...] = (), target: str = "/models/Kimi-K2.5") -> dict:
    storage = {"modelClaim": claim, **({"mountPath": mount} if mount else {})}
    body = {"metadata": {"name": name, "namespace": "team"},
            "spec": {"target": {"model": target}, "storage": storage,
                     "drafter": {"method": "eagle3", "model": drafter} if drafter else {"method": "none"}}}
    if revisions:
        body["status"] = {"revisions": [{"name": f"r{i}", "drafterSpec": {"method": "eagle3", "model": m}}
                                        for i, m in enumerate(revisions)]}
    return body


def spec():
    return DrafterTraining.model_validate(training()).spec


SEGMENTS = st.sampled_from(["drafters", "kimi-k25-eagle3-ft", "other", "Kimi-K2.5", "..", "."])
PLACES = st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join)


@given(PLACES, st.sampled_from(["/models", "/weights"]), st.sampled_from(["spec", "revision"]),
       st.sampled_from(["models", "other-claim"]))
def test_a_conflict_is_the_same_place_on_the_same_claim_wherever_the_serving_mounts_it(place, mount, where, claim):
    path = f"{mount}/{place}"
    loaded = serving(claim=claim, mount=mount, drafter=path if where == "spec" else "/models/drafters/current",
                     revisions=(path,) if where == "revision" else ())
    # Independent statement: the serving's path normalised, relative to its mount, against the output's place.
    normal = posixpath.normpath(path)
    rel = None if not (normal + "/").startswith(mount + "/") else normal[len(mount) + 1:]
    out = "drafters/kimi-k25-eagle3-ft"
    overlaps = rel is not None and (rel == "" or rel == out or out.startswith(rel + "/") or rel.startswith(out + "/"))
    problems = output_conflicts(spec(), [loaded])
    assert bool(problems) == (claim == "models" and overlaps), (path, problems)
    if problems:
        assert f"spec.output.path {OUTPUT}" in problems[0] and "DrafterServing kimi" in problems[0]
        assert "choose a new spec.output.path" in problems[0]


def test_hub_ids_and_paths_elsewhere_never_conflict():
    assert output_conflicts(spec(), [serving(drafter="org/kimi-k25-eagle3-ft"),
                                     serving(drafter="/opt/baked/kimi-k25-eagle3-ft")]) == []


class WithServings(Cluster):
    """The decision's fake cluster with the namespace's DrafterServings."""

    servings: list[dict] = []

    def decide(self):
        state = TrainingState(training=copy.deepcopy(self.body), jobs=tuple(copy.deepcopy(list(self.jobs.values()))),
                              job_pods=tuple(self.pods()), claim=self.claim, config_maps=frozenset(self.config_maps),
                              now=T0, image="trainer:1", serving=copy.deepcopy(self.serving),
                              benchmarks=tuple(copy.deepcopy(list(self.benchmarks.values()))),
                              progress_log=self.log, engine=tuple(copy.deepcopy(list(self.engine.values()))),
                              servings=tuple(copy.deepcopy(self.servings)))
        return decide(state)


def test_a_run_whose_output_a_serving_loads_fails_before_any_stage_and_stays_failed():
    cluster = WithServings(training(promote=None, data={"dataset": "/models/datasets/chat.jsonl",
                                                        "numSamples": 10, "chatTemplate": "qwen"}))
    cluster.servings = [serving(drafter=OUTPUT)]
    for attempt in range(2):  # the next reconcile reads the failure back: nothing retries until the spec changes
        plan = cluster.decide()
        cluster.apply(plan)
        assert not creates(plan) and cluster.body["status"]["stage"] == "Failed"
        ready = cluster.condition("Ready")
        assert ready["status"] == "False" and (attempt or ready["reason"] == "OutputInUse")
        assert f"spec.output.path {OUTPUT}" in ready["message"] and "choose a new spec.output.path" in ready["message"]


def test_a_serving_that_starts_loading_the_output_during_training_stops_the_run_before_export():
    cluster = WithServings(training(promote=None, data={"dataset": "/models/datasets/chat.jsonl",
                                                        "numSamples": 10, "chatTemplate": "qwen"}))
    cluster.apply(cluster.decide())
    for stage in ("Extract", "Train"):
        assert stage in {j["metadata"]["labels"]["drafter.dev/training-stage"] for j in cluster.jobs.values()}
        cluster.finish(stage)
        if stage == "Train":  # someone points a serving at the output (a rollback keeps it in revisions)
            cluster.servings = [serving(drafter="/models/drafters/current", revisions=(OUTPUT,))]
        cluster.apply(cluster.decide())
    assert "Export" not in {j["metadata"]["labels"]["drafter.dev/training-stage"] for j in cluster.jobs.values()}
    assert cluster.condition("Exported")["reason"] == "OutputInUse"
    assert cluster.body["status"]["stage"] == "Failed"
