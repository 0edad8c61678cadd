"""status.display (pure, in the DrafterServing decision): the SPEEDUP and ACCEPTANCE columns' text, written in
the same status write as the figures it shows, and never on its own."""

from __future__ import annotations

import datetime as dt

from drafter_operator.api.serving import DrafterServing
from drafter_operator.controllers.serving.status import columns_shown
from tests.support.servings import seed_body, World
from tests.support.serving_acceptance import gated_swap, look, measured


def test_the_columns_text_lands_with_the_figures_and_a_steady_serving_writes_nothing():
    world = World(seed_body())
    world.converge()
    assert "display" not in world.body["status"]  # nothing measured: no block, and no write for it
    healthy = look(world, measured(world, rate=0.7))
    assert healthy.status["display"] == {"speedup": None, "acceptance": "70.0%"}
    assert world.body["status"]["display"] == {"acceptance": "70.0%"}  # as the apiserver stores the merge patch
    world.now += dt.timedelta(seconds=15)
    assert not look(world, measured(world, rate=0.701)).writes_anything()  # same column text: no write
    world.now += dt.timedelta(minutes=2)
    moved = look(world, measured(world, rate=0.55))  # visibly moved: acceptance and its text in one write
    assert moved.status["acceptance"]["rate"] == 0.55 and moved.status["display"]["acceptance"] == "55.0%"


def test_the_speedup_column_follows_the_gate_that_promoted_the_revision():
    world = World(seed_body(swap={"strategy": "BlueGreen", "gate": {"minSpeedup": "1.2",
                                                                    "baseline": {"tokensPerSecond": "82.5"}}}))
    world.converge()
    gated_swap(world, {"tokensPerSecond": 120.0, "speedup": 1.6793, "acceptanceLength": 3.1})
    assert world.body["status"]["lastBenchmark"]["speedup"] == 1.6793
    assert world.body["status"]["display"]["speedup"] == "1.68x"
    assert not world.decide().writes_anything()
    DrafterServing.model_validate(world.body)  # the block is part of the status model (the CRD's schema)


def test_columns_shown_reads_the_blocks_as_this_decision_writes_them():
    assert columns_shown({"speedup": 1.2}, {"rate": 0.25, "revision": "r"}) == {"speedup": "1.20x", "acceptance": "25.0%"}
    # a null rate in the acceptance merge patch is a rate that goes: so does its text
    assert columns_shown({"speedup": 1.2}, {"rate": None, "atPromotion": {}}) == {"speedup": "1.20x", "acceptance": None}
    assert columns_shown(None, None) is None
