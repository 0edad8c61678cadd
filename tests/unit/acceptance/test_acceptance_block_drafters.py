"""SGLang's DFLASH and DSPARK run one step of a k-token block (spec_num_steps = 1, spec_num_draft_tokens = k + 1):
the k an acceptance window derives its rate with, from a scrape (engines/metrics.py) and from Prometheus
(acceptance/prometheus_source.py), is the block's, not the step count."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.acceptance import prometheus_source as ps
from drafter_operator.engines import metrics as m


@pytest.mark.parametrize("steps,window,k", [(1, 8, 7), (1, 2, 1), (3, 4, 3), (5, 8, 5), (1, None, 1), (0, 4, 3), (0, 8, 7),
                                            (0, 0, None), (0, 1, None), (0, None, None), (-1, 4, None),
                                            (None, None, None), (1.5, 8, None)])
def test_sglang_k_from_the_gauges(steps, window, k):
    assert m.sglang_draft_tokens(steps, window) == k


@given(k=st.integers(1, 15), drafts=st.integers(1, 10_000), frac=st.floats(0.0, 1.0))
def test_a_block_drafter_scrape_derives_its_rate_with_the_block(k, drafts, frac):
    accepted = round(frac * drafts * k)
    before = m.SpecDecodeCounters("sglang", True, drafts=0, generation_tokens=0, num_steps_gauge=1.0,
                                  num_draft_tokens_gauge=k + 1.0)
    after = m.SpecDecodeCounters("sglang", True, drafts=drafts, generation_tokens=drafts + accepted,
                                 num_steps_gauge=1.0, num_draft_tokens_gauge=k + 1.0)
    assert after.num_speculative_tokens == k
    w = m.window(before, after)
    assert w.draft_tokens == drafts * k
    assert w.acceptance_rate == pytest.approx(accepted / (drafts * k))
    assert w.mean_acceptance_length == pytest.approx(1 + accepted / drafts)


SEL = (ps.Matcher("namespace", "default"), ps.Matcher("pod", "kimi-.*", "=~"))


def tagged(tag: str, replica: str, value: str) -> tuple[dict, str]:
    return {ps.SERIES_LABEL: tag, "pod": replica}, value


def vec(*samples) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [0, value]} for labels, value in samples]}})


def test_prometheus_reads_the_block_of_a_one_step_drafter():
    samples = ps.parse_query_response(200, vec(
        tagged("drafts", "a", "100"), tagged("generation_tokens", "a", "400"), tagged("num_steps", "a", "1"),
        tagged("num_draft_tokens", "a", "8")))
    total, _ = ps.acceptance_from_vector("sglang", samples, replica_label="pod")
    # k = 8 - 1 = 7: 300 accepted of 700 drafted, not of 100 (k = steps = 1 would clamp the rate to 1)
    assert total.draft_tokens == 700 and total.acceptance_rate == pytest.approx(300 / 700)
    chain = [s for s in samples if s.labels[ps.SERIES_LABEL] != "num_draft_tokens"]
    assert ps.acceptance_from_vector("sglang", chain, replica_label="pod")[0].draft_tokens == 100


def test_the_sglang_query_asks_for_the_verify_window():
    q = ps.window_query("sglang", SEL, 300)
    assert 'max by (pod) (sglang:spec_num_draft_tokens{namespace="default",pod=~"kimi-.*"})' in q
