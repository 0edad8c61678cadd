"""Contract tier: our /metrics parser reads what vLLM 0.33.0's own spec-decode collector exposes.

A child process in the engine environment (DRAFTER_ENGINE_PYTHON, built by .ci/engine-contract-env;
skipped without it) drives ``vllm.v1.spec_decode.metrics.SpecDecodingProm`` with
``SpecDecodingStats`` exactly as vLLM's engine does, renders the registry with
``prometheus_client.generate_latest`` twice (before and after more drafts), and reports what it fed
in. The parser and the window must read back exactly those counts, with no verdict.

SGLang 0.5.23's collector (``sglang/srt/observability/metrics_collector.py``) cannot be imported in
that environment (its import chain needs torchvision, which the environment does not install), so
SGLang's exposition is checked against the emulator's in the unit tier only.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import vllm

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = [pytest.mark.xdist_group("metrics-contract"), pytest.mark.contract]

K = 5
# Accepted tokens per draft, per engine core, for the two rounds (before / after the second scrape).
ROUNDS = {"0": ([0, 5, 3, 1, 2], [5, 5, 0]), "1": ([1, 1], [4, 0, 0, 2])}

RENDER = r"""
import json, sys
from types import SimpleNamespace
import prometheus_client
from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

k, rounds = int(sys.argv[1]), json.loads(sys.argv[2])
engines = sorted(rounds)
# vLLM's PrometheusStatLogger labels spec-decode counters with model_name and engine (loggers.py).
prom = SpecDecodingProm(SimpleNamespace(num_speculative_tokens=k), ["model_name", "engine"],
                        {int(e): ["served", e] for e in engines})
bodies = []
for round_index in range(2):
    for e in engines:
        stats = SpecDecodingStats.new(k)
        for accepted in rounds[e][round_index]:
            stats.observe_draft(num_draft_tokens=k, num_accepted_tokens=accepted)
        prom.observe(stats, engine_idx=int(e))
    bodies.append(prometheus_client.generate_latest().decode())
print(json.dumps(bodies))
"""


@pytest.fixture(scope="module")
def expositions(engine_python) -> list[str]:
    proc = subprocess.run([engine_python, "-c", RENDER, str(K), json.dumps(ROUNDS)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def expected(round_count: int) -> tuple[int, int, int, list[int]]:
    """(drafts, draft tokens, accepted, accepted per position) after ``round_count`` rounds, summed over cores."""
    drafts = [a for rounds in ROUNDS.values() for r in rounds[:round_count] for a in r]
    per_pos = [sum(1 for a in drafts if a > i) for i in range(K)]  # accepting i+1 tokens covers positions 0..i
    return len(drafts), K * len(drafts), sum(drafts), per_pos


def test_vllm_spec_decode_exposition_parses_to_what_was_observed(expositions):
    for round_count, body in enumerate(expositions, start=1):
        c = vllm.parse_spec_decode_metrics(body, model_name="served")
        drafts, draft_tokens, accepted, per_pos = expected(round_count)
        assert c.speculative
        assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (drafts, draft_tokens, accepted)
        assert list(c.accepted_per_position) == per_pos


def test_vllm_window_between_two_real_expositions(expositions):
    before, after = (vllm.parse_spec_decode_metrics(body, model_name="served") for body in expositions)
    w = m.window(before, after)
    d1, t1, a1, p1 = expected(1)
    d2, t2, a2, p2 = expected(2)
    assert not w.reset and (w.drafts, w.draft_tokens, w.accepted_tokens) == (d2 - d1, t2 - t1, a2 - a1)
    assert w.acceptance_rate == pytest.approx((a2 - a1) / (t2 - t1))
    assert list(w.per_position) == pytest.approx([(y - x) / (d2 - d1) for x, y in zip(p1, p2)])
    # the later exposition first, as after an engine restart: counted from zero, not a verdict
    assert m.window(after, before).reset


def test_a_real_exposition_for_another_model_is_a_verdict(expositions):
    with pytest.raises(mv.MetricsUnusable) as info:
        vllm.parse_spec_decode_metrics(expositions[0], model_name="other")
    assert info.value.reason == mv.UnusableReason.NOT_ENGINE_METRICS
