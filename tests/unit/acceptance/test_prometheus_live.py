"""The prometheus acceptance source against a REAL Prometheus scraping real emulator processes.

All on loopback: two vLLM and two SGLang emulator subprocesses, and the prometheus binary the local
cluster build makes (started by ``drafter_testbed/prometheus.py``) scraping them every second from a
static config with a ``pod`` label per target, the label Kubernetes service discovery would give.
Skips (saying why) when the binaries are absent: ``drafter-operator cluster build`` builds them.

What is compared: the source's window against the emulators' own counters read from their /metrics
before and after the traffic, through ``engines.metrics.window`` (the ``engine`` source's math). The
traffic happens strictly inside the queried window with idle samples on both sides, so the sampled
increase equals the true delta and the only difference is ``increase()``'s extrapolation to the
window edges: at most ~1.1 scrape interval at each end, a factor in [1, 1 + e] with
e = 2.2 x interval / sampled span. Counters scraped together share that factor (see the fixture's
warm-up for the one exception), so their ratios are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import sglang, vllm
from drafter_operator.acceptance import prometheus_query as pq
from drafter_operator.acceptance import prometheus_source as ps
from drafter_testbed.prometheus import binaries, running
from tests.processes import free_port, listening_process

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = pytest.mark.xdist_group("prometheus-live")

SCRAPE_INTERVAL = 1.0
MODEL = "/models/kimi-k2.5-int4"
SPEC = '{"method":"eagle3","model":"/models/kimi-k2.5-eagle3","num_speculative_tokens":5}'
PARSERS = {"vllm": vllm.parse_spec_decode_metrics, "sglang": sglang.parse_spec_decode_metrics}
REPLICAS = ("replica-a", "replica-b")
#: Per-token acceptance set on each replica at run time (the vLLM profile's default is the seed's bad
#: drafter): replica-b drafts badly.
ACCEPTANCE = {"replica-a": 0.7, "replica-b": 0.2}
TRAFFIC = {"requests": 12, "max_tokens": 96}


def _argv(engine: str, port: int) -> list[str]:
    if engine == "vllm":
        return ["vllm", "serve", MODEL, "--port", str(port), "--speculative-config", SPEC]
    return ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--port", str(port), "--enable-metrics",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "AQ-MedAI/Kimi-K2-Instruct-eagle3",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def scrape_config(targets: dict[tuple[str, str], int]) -> dict:
    """A Prometheus config scraping each (engine, replica) on its loopback port, labelled as the
    kubernetes-pods job labels pods (``namespace``, ``pod``, the mapped pod labels)."""
    return {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL:g}s", "evaluation_interval": "15s"},
        "scrape_configs": [{
            "job_name": engine,
            "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                                "labels": {"namespace": "default", "pod": replica, "drafter_dev_serving": engine,
                                           "drafter_dev_revision": "r1"}}
                               for (eng, replica), port in targets.items() if eng == engine],
        } for engine in ("vllm", "sglang")],
    }


class Lab:
    def __init__(self, ports: dict[tuple[str, str], int], prometheus_url: str):
        self.ports, self.prometheus_url = ports, prometheus_url

    def url(self, engine: str, replica: str) -> str:
        return f"http://127.0.0.1:{self.ports[engine, replica]}"

    def counters(self, engine: str, replica: str) -> m.SpecDecodeCounters:
        r = httpx.get(self.url(engine, replica) + "/metrics", timeout=5)
        r.raise_for_status()
        return PARSERS[engine](r.text)

    def query(self, promql: str) -> list[ps.VectorSample]:
        r = httpx.post(self.prometheus_url + "/api/v1/query", data={"query": promql}, timeout=5)
        return ps.parse_query_response(r.status_code, r.content)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    prometheus, promtool = binaries()
    if not (prometheus.exists() and promtool.exists()):
        pytest.fail(f"no prometheus/promtool in {prometheus.parent}: run `drafter-operator cluster build` (./dev test "
                    "and ./dev check do) to build the pinned toolchain", pytrace=False)
    ports = {(engine, replica): free_port() for engine in ("vllm", "sglang") for replica in REPLICAS}
    with tempfile.TemporaryDirectory(prefix="drafter-prom-") as tmp, contextlib.ExitStack() as stack:
        for i, ((engine, replica), port) in enumerate(ports.items()):
            env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.002",
                   "DRAFTER_EMULATOR_SEED": str(11 + i)}
            stack.enter_context(listening_process([sys.executable, "-m", "drafter_operator.cli", "emulate",
                                                   *_argv(engine, port)], env, port, timeout=60))
        lab = Lab(ports, stack.enter_context(running(scrape_config(ports), Path(tmp) / "prometheus")).url)
        # SGLang creates its counter series on the first finished request, and increase() cannot count
        # a series' first sample (nothing before it): one request each, then every drafts series
        # scraped twice, so the tests' windows open on an idle sample of every counter.
        # The warm-up is also as large as a test's traffic, at the test's acceptance: increase() stops
        # extrapolating a counter at the time it would have been zero (first sample / increase x span),
        # which for a counter small beside its increase shortens its extrapolation alone; comparable
        # counts keep every counter of a target on the same factor, so the tests can ask ratios to be exact.
        for engine, replica in ports:
            r = httpx.post(lab.url(engine, replica) + "/emulator/acceptance", json={"acceptance": ACCEPTANCE[replica]},
                           timeout=5)
            assert r.status_code == 200, r.text
            asyncio.run(_traffic(lab.url(engine, replica), engine, **TRAFFIC))
        for engine in ("vllm", "sglang"):
            _wait_scraped(lab, engine, {replica: lab.counters(engine, replica) for replica in REPLICAS})
        # A test's window opens up to 3 s before its traffic (see the test): from here on it only
        # holds samples taken after the warm-up, and at least two of each series.
        time.sleep(3 * SCRAPE_INTERVAL + 0.2)
        yield lab


async def _traffic(url: str, engine: str, requests: int, max_tokens: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        async def one(i: int) -> None:
            r = await client.post("/v1/completions", json={"model": MODEL, "prompt": f"Request {i}: tell me a story",
                                                           "max_tokens": max_tokens})
            assert r.status_code == 200, r.text
        await asyncio.gather(*(one(i) for i in range(requests)))


def _wait_scraped(lab: Lab, engine: str, after: dict[str, m.SpecDecodeCounters]) -> None:
    """Until Prometheus holds each replica's final drafts count: then idle samples follow the traffic."""
    metric = ps.COUNTERS[engine]["drafts"]
    deadline = time.monotonic() + 120
    while True:
        seen = {s.labels["pod"]: s.value for s in lab.query(f'sum by (pod) ({metric}{{job="{engine}"}})')}
        if all(seen.get(r) == after[r].drafts for r in REPLICAS):
            return
        assert time.monotonic() < deadline, f"prometheus has {seen}, the emulators {[after[r].drafts for r in REPLICAS]}"
        time.sleep(0.2)


def _wait_sampled_after(lab: Lab, engine: str, moment: float) -> None:
    """Until every replica has a sample stamped after ``moment``: from then on the data up to ``moment``
    is final, so queries evaluated at ``moment`` one after another see the same samples. (A scrape is
    stamped when it starts and stored when it ends: one that started just before ``moment`` can land
    between two queries and move ``increase()``'s extrapolation for one replica only.)"""
    metric = ps.COUNTERS[engine]["drafts"]
    deadline = time.monotonic() + 120
    while True:
        stamps = {s.labels["pod"]: s.value for s in lab.query(f'timestamp({metric}{{job="{engine}"}})')}
        if len(stamps) == len(REPLICAS) and min(stamps.values()) > moment:
            return
        assert time.monotonic() < deadline, f"no sample after {moment} from every replica: {stamps}"
        time.sleep(0.2)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_window_is_the_sum_of_the_replicas_deltas(lab: Lab, engine: str):
    # One replica drafts badly (ACCEPTANCE, set by the fixture): the total must be the sum of both,
    # and the per-replica figures show which.
    before = {replica: lab.counters(engine, replica) for replica in REPLICAS}
    started = time.time()
    for replica in REPLICAS:
        asyncio.run(_traffic(lab.url(engine, replica), engine, **TRAFFIC))
    after = {replica: lab.counters(engine, replica) for replica in REPLICAS}
    _wait_scraped(lab, engine, after)
    time.sleep(SCRAPE_INTERVAL * 1.5)  # and one idle sample after it
    end = time.time()
    _wait_sampled_after(lab, engine, end)
    # Whole seconds, starting 2 to 3 intervals before the traffic: an idle sample opens the window.
    window_seconds = math.ceil(end - started + 2 * SCRAPE_INTERVAL)
    matchers = pq.revision_matchers("default", engine, "r1")

    asked = time.perf_counter()
    got = asyncio.run(ps.fetch_acceptance(ps.PrometheusConnection(lab.prometheus_url),
                                          ps.AcceptanceQuery(engine, matchers, window_seconds), end=end))
    call_seconds = time.perf_counter() - asked

    truth = {replica: m.window(before[replica], after[replica]) for replica in REPLICAS}
    extra = 2.2 * SCRAPE_INTERVAL * 1.1 / (window_seconds - 2.2 * SCRAPE_INTERVAL)
    assert set(got.replicas) == set(REPLICAS)
    for replica in REPLICAS:
        mine, true = got.replicas[replica], truth[replica]
        assert true.drafts > 50
        factor = mine.drafts / true.drafts
        assert 1 - 1e-9 <= factor <= 1 + extra, (replica, factor, extra)
        # Counters scraped together are extrapolated alike: every count by the same factor, ratios exact.
        assert mine.generation_tokens == pytest.approx(true.generation_tokens * factor, rel=1e-9)
        assert mine.mean_acceptance_length == pytest.approx(true.mean_acceptance_length, rel=1e-9)
        assert mine.acceptance_rate == pytest.approx(true.acceptance_rate, rel=1e-9)
        assert mine.rate_source == true.rate_source == ("counters" if engine == "vllm" else "derived")
        if engine == "vllm":
            assert mine.draft_tokens == pytest.approx(true.draft_tokens * factor, rel=1e-9)
            assert mine.accepted_tokens == pytest.approx(true.accepted_tokens * factor, rel=1e-9)
    # The total is the sum of the replicas' increases, never a mean of their rates: with each
    # replica's own extrapolation factor f (measured above), exactly sum(f x accepted) / sum(f x drafted).
    total = got.total
    f = {replica: got.replicas[replica].drafts / truth[replica].drafts for replica in REPLICAS}
    assert total.drafts == pytest.approx(sum(w.drafts for w in got.replicas.values()), rel=1e-12)
    assert total.acceptance_rate == pytest.approx(
        sum(f[r] * truth[r].accepted_tokens for r in REPLICAS) / sum(f[r] * truth[r].draft_tokens for r in REPLICAS),
        rel=1e-9)
    assert total.mean_acceptance_length == pytest.approx(
        (engine == "vllm") + sum(f[r] * (truth[r].accepted_tokens if engine == "vllm" else truth[r].generation_tokens)
                                 for r in REPLICAS) / sum(f[r] * truth[r].drafts for r in REPLICAS), rel=1e-9)
    mean_of_rates = sum(w.acceptance_rate for w in got.replicas.values()) / 2
    assert abs(total.acceptance_rate - mean_of_rates) > 0.01  # the replicas' loads differ enough to tell
    assert truth["replica-b"].acceptance_rate < truth["replica-a"].acceptance_rate - 0.2
    assert got.replicas["replica-b"].acceptance_rate < total.acceptance_rate < got.replicas["replica-a"].acceptance_rate
    assert got.replicas_differ()
    if engine == "vllm":
        true_positions = [sum(after[r].accepted_per_position[i] - before[r].accepted_per_position[i] for r in REPLICAS)
                          / sum(w.drafts for w in truth.values()) for i in range(5)]
        assert total.per_position == pytest.approx(true_positions, abs=extra * 1.0 + 1e-9)
    print(f"{engine}: window {window_seconds}s, query round trip {got.latency_seconds * 1000:.1f} ms")
    assert 0 < got.latency_seconds <= call_seconds  # the query's own round trip, inside the call

    # The single-expression forms in docs/monitoring.md agree with the source at the same instant.
    k = None if engine == "vllm" else 3
    rate_q = pq.rate_expression(engine, matchers, window_seconds, k)
    length_q = pq.length_expression(engine, matchers, window_seconds)
    at = {"time": f"{end:.3f}"}
    for promql, expected in ((rate_q, total.acceptance_rate), (length_q, total.mean_acceptance_length)):
        r = httpx.post(lab.prometheus_url + "/api/v1/query", data={"query": promql, **at}, timeout=5)
        (sample,) = ps.parse_query_response(r.status_code, r.content)
        # SGLang's single-expression rate is unclamped (see rate_expression); with these requests it needs no clamp.
        assert sample.value == pytest.approx(expected, rel=1e-9), promql


def test_no_series_and_bad_queries_are_unavailable(lab: Lab):
    with pytest.raises(ps.MetricsUnavailable) as exc:
        asyncio.run(ps.fetch_acceptance(ps.PrometheusConnection(lab.prometheus_url),
                                       ps.AcceptanceQuery("vllm", pq.revision_matchers("default", "nope", "r1"), 60)))
    assert exc.value.reason == "NoSeries" and exc.value.condition_reason == "MetricsUnavailable"
    # A server that is not there.
    with pytest.raises(ps.MetricsUnavailable) as exc:
        asyncio.run(ps.fetch_acceptance(ps.PrometheusConnection(f"http://127.0.0.1:{free_port()}"), ps.AcceptanceQuery("vllm", [], 60)))
    assert exc.value.reason == "Unreachable"
    # A real Prometheus error body (bad_data, HTTP 400) is read as a query error with its message.
    r = httpx.post(lab.prometheus_url + "/api/v1/query", data={"query": "sum(("}, timeout=5)
    with pytest.raises(ps.MetricsUnavailable) as exc:
        ps.parse_query_response(r.status_code, r.content)
    assert exc.value.reason == "QueryError" and "HTTP 400" in str(exc.value) and "bad_data" in str(exc.value)
    # A NaN from the server itself (0/0) is refused, not passed on as a number.
    r = httpx.post(lab.prometheus_url + "/api/v1/query",
                   data={"query": 'label_replace(vector(0) / 0, "drafter_series", "drafts", "", "")'}, timeout=5)
    with pytest.raises(ps.MetricsInvalid) as exc:
        ps.acceptance_from_vector("sglang", ps.parse_query_response(r.status_code, r.content))
    assert exc.value.reason is mv.UnusableReason.NON_FINITE

