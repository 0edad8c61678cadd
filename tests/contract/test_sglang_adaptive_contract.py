"""The emulator's adaptive speculation (testbed/drafter_testbed/emulator/sglang_adaptive.py) against SGLang 0.5.23's
own code, run in the engine environment by sglang_adaptive_harness.py:

- the controller: SGLang's ``AdaptiveSpeculativeParams`` and ours fed the same hypothesis-drawn configs and
  sequences of (accepted drafts per request, batch size) activate the same steps before every verify, switch to
  the same steps after it, and keep every tier's steps and moving average equal (floats bit for bit);
- the configs SGLang refuses, ours refuses with SGLang's exception and message, and those it reads give the
  same candidate steps;
- when SGLang drops ``--speculative-adaptive``: the emulator's parse of a corpus of command lines says the same
  reason as ``adaptive_unsupported_reason`` on SGLang's ServerArgs, and keeps adaptive exactly where SGLang does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drafter_testbed.emulator import cmdline, sglang_adaptive

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = pytest.mark.xdist_group("sglang-adaptive-contract")

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 600.0  # importing SGLang on a loaded 2-core machine; a limit, not a measurement


class Harness:
    def __init__(self, python: str) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(HERE)}
        self.proc = subprocess.Popen([python, str(HERE / "sglang_adaptive_harness.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def ask(self, request: dict):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the SGLang harness exited ({self.proc.poll()})"
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def sglang(engine_python):
    harness = Harness(engine_python)
    try:
        yield harness
    finally:
        harness.close()


# ------------------------------------------------------------------------------------------ the controller

def ours(config: dict | None, initial_steps: int, events: list) -> dict:
    """What test SGLang's harness answers, from our controller."""
    try:
        parsed = sglang_adaptive.parse_config(config) if config is not None else sglang_adaptive.read_config(None)
    except sglang_adaptive.AdaptiveConfigRefused as exc:
        return {"refused": [exc.kind, str(exc)]}
    steps = sglang_adaptive.AdaptiveSteps(parsed, initial_steps)
    trace = []
    for accepted, batch_size in events:
        activated = steps.steps_for_batch(batch_size)
        switched = steps.on_verify(accepted, batch_size)
        trace.append({"activated": activated, "switched": switched,
                      "slots": {str(bs): [slot.steps, slot.average] for bs, slot in steps.slots.items()}})
    return {"candidate_steps": list(parsed.candidate_steps), "trace": trace}


_numbers = {"ema_alpha": st.floats(0.0, 1.0), "update_interval": st.integers(1, 6),
            "warmup_batches": st.integers(0, 12), "down_hysteresis": st.floats(-1.5, 1.0),
            "up_hysteresis": st.floats(-1.0, 1.5), "ceiling_coeff": st.one_of(st.just(0), st.floats(0.0, 3.0))}
_candidates = st.lists(st.integers(0, 8), min_size=1, max_size=5)
_tier = st.fixed_dictionaries({"candidate_steps": _candidates}, optional=_numbers)
_configs = st.one_of(
    st.none(),  # SGLang's default tiers
    st.builds(lambda tiers, defaults: {**defaults, **{str(bs): tier for bs, tier in tiers.items()}},
              st.dictionaries(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), _tier, min_size=1, max_size=4),
              st.fixed_dictionaries({}, optional=_numbers)))


@st.composite
def runs(draw):
    config = draw(_configs)
    steps = (sglang_adaptive.read_config(None) if config is None
             else sglang_adaptive.parse_config(config)).candidate_steps
    initial = draw(st.one_of(st.sampled_from(steps), st.integers(0, 8)))
    # accepted drafts per request at most the largest candidate; batches that stay in a tier for a while, so the
    # warm-ups and update intervals pass and the steps move
    top = max(steps)
    event = st.integers(1, 80).flatmap(lambda bs: st.tuples(
        st.lists(st.integers(0, top), min_size=min(bs, 6), max_size=min(bs, 6)), st.just(bs)))
    events = draw(st.lists(st.tuples(event, st.integers(1, 12)), min_size=1, max_size=12))
    return config, initial, [[list(accepted), bs] for (accepted, bs), repeat in events for _ in range(repeat)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(runs())
# a ceiling that must not block a rise, then holds a fall; a tier that starts at 0 and probes
@example(({"1": {"candidate_steps": [1, 3, 5, 7], "ceiling_coeff": 0.5, "warmup_batches": 2, "update_interval": 1}},
          3, [[[7], 1]] * 12 + [[[2], 1]] * 12))
@example(({"1": {"candidate_steps": [0, 2, 4]}, "4": {"candidate_steps": [0, 1]}}, 0,
          [[[0, 0, 0, 0], 4]] * 20 + [[[2], 1]] * 30))
def test_the_controller_moves_as_sglangs(sglang, run):
    config, initial, events = run
    theirs = sglang.ask({"run": {"config": config, "initial_steps": initial, "events": events}})
    assert ours(config, initial, events) == theirs


def test_the_default_tiers_do_switch(sglang):
    """The comparison above is not vacuous: SGLang's default tiers move steps up, down, to 0 and back."""
    events = [[[7], 1]] * 40 + [[[0] * 8, 8]] * 40 + [[[1] * 8, 8]] * 40
    theirs = sglang.ask({"run": {"config": None, "initial_steps": 3, "events": events}})
    assert ours(None, 3, events) == theirs
    switches = [step["switched"] for step in theirs["trace"] if step["switched"] is not None]
    assert 7 in switches and 0 in switches and 1 in switches, switches


REFUSED_OR_NOT = [
    {}, {"ema_alpha": 0.5}, {"1": {}}, {"1": {"candidate_steps": []}}, {"1": {"candidate_steps": [-1, 2]}},
    {"1": {"candidate_steps": [1.0]}}, {"1": {"candidate_steps": "1,3"}}, {"1": {"candidate_steps": [None]}},
    {"1": [1, 3]}, [], "tiers", {"1": {"candidate_steps": [True, 3]}}, {"01": {"candidate_steps": [2]}},
    {"x": {"candidate_steps": [-1]}, "4": {"candidate_steps": [0, 2]}}, {"-1": {"candidate_steps": [1]}},
    {"8": {"candidate_steps": [3, 1, 1]}, "candidate_steps": [9]},
]


@pytest.mark.parametrize("config", REFUSED_OR_NOT, ids=[json.dumps(c) for c in REFUSED_OR_NOT])
def test_configs_are_refused_as_sglang_refuses_them(sglang, config):
    theirs = sglang.ask({"run": {"config": config, "initial_steps": 1, "events": [[[1], 1]]}})
    assert ours(config, 1, [[[1], 1]]) == theirs


def test_the_corpus_has_refusals_and_acceptances(sglang):
    answers = [sglang.ask({"run": {"config": c, "initial_steps": 1, "events": []}}) for c in REFUSED_OR_NOT]
    assert sum("refused" in a for a in answers) >= 10 and sum("trace" in a for a in answers) >= 4


# ---------------------------------------------------------------------------------- when SGLang drops it

P = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/target", "--speculative-adaptive"]
D = ["--speculative-draft-model-path", "/models/draft"]
REASON_CORPUS = [
    [*P, "--speculative-algorithm", "EAGLE", *D],
    [*P, "--speculative-algorithm", "eagle3", *D],
    [*P, "--speculative-algorithm", "NEXTN"],
    [*P, "--speculative-algorithm", "nextn", "--speculative-eagle-topk", "1"],
    [*P, "--speculative-algorithm", "EAGLE3", *D, "--speculative-eagle-topk", "4"],
    [*P, "--speculative-algorithm", "EAGLE", *D, "--attn-dp-size", "2"],
    [*P, "--speculative-algorithm", "EAGLE", *D, "--dp-size", "2", "--enable-dp-attention"],
    [*P, "--speculative-algorithm", "EAGLE", *D, "--dp-size", "2"],
    [*P, "--speculative-algorithm", "EAGLE", *D, "--enable-dp-attention"],
    [*P, "--speculative-algorithm", "EAGLE", *D, "--enable-multi-layer-eagle"],
    [*P, "--speculative-algorithm", "EAGLE3", *D, "--enable-two-batch-overlap"],
    [*P, "--speculative-algorithm", "EAGLE3", *D, "--enable-pdmux"],
    [*P, "--speculative-algorithm", "EAGLE3", *D, "--enable-pdmux", "--speculative-eagle-topk", "2"],
    [*P, "--speculative-algorithm", "EAGLE3", *D, "--attn-dp-size", "4", "--enable-two-batch-overlap"],
    [*P, "--speculative-algorithm", "STANDALONE", *D],
    [*P, "--speculative-algorithm", "NGRAM"],
    [*P, "--speculative-algorithm", "EAGLE3", *D, "--speculative-num-steps", "5", "--tp-size", "8"],
]


def test_the_emulator_drops_adaptive_where_sglang_does(sglang):
    theirs = sglang.ask({"reason": REASON_CORPUS})
    for argv, answer in zip(REASON_CORPUS, theirs, strict=True):
        assert set(answer) == {"reason"}, (argv, answer)
        spec = cmdline.parse_engine_command_line(argv).speculation
        assert spec.adaptive_dropped == answer["reason"], argv
        assert (spec.adaptive is not None) == (answer["reason"] is None), argv
    kept = sum(answer["reason"] is None for answer in theirs)
    assert 4 <= kept < len(theirs) - 8
