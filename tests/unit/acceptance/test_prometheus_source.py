"""The prometheus acceptance source without Prometheus: query building, answer parsing, HTTP failures (from
an HTTP server on loopback that answers as the test says). The same code against a real Prometheus:
test_prometheus_live.py."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from aiohttp import web

from drafter_operator.engines import metrics as m
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.monitoring import http_fetch
from drafter_operator.acceptance import prometheus_query as pq
from drafter_operator.acceptance import prometheus_source as ps
from tests.processes import free_port

SEL = (ps.Matcher("namespace", "default"), ps.Matcher("pod", "kimi-.*", "=~"))


def vec(*items: tuple[dict[str, str], str]) -> bytes:
    """An /api/v1/query answer as Prometheus writes it (values are strings)."""
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1700000000.0, value]} for labels, value in items]}}).encode()


def tagged(tag: str, pod: str, value: str, **extra: str) -> tuple[dict[str, str], str]:
    return {ps.SERIES_LABEL: tag, "pod": pod, **extra}, value


# ------------------------------------------------------------------------------------------ queries

def test_vllm_window_query_sums_increases_by_replica_for_every_counter():
    q = ps.window_query("vllm", SEL, 300)
    parts = q.split("\n  or ")
    assert parts[0] == ('label_replace(sum by (pod) (increase(vllm:spec_decode_num_drafts_total'
                        '{namespace="default",pod=~"kimi-.*"}[300s])), "drafter_series", "drafts", "", "")')
    assert [p.split('"drafter_series", "')[1].split('"')[0] for p in parts] == [
        "drafts", "draft_tokens", "accepted_tokens", "generation_tokens", "accepted_per_position"]
    assert "sum by (position) (increase(vllm:spec_decode_num_accepted_tokens_per_pos_total" in parts[-1]
    assert "rate(" not in q and "avg" not in q  # sums of increases, never an average of rates


def test_sglang_window_query_and_replica_label():
    q = ps.window_query("sglang", SEL, 60, replica_label="instance")
    assert "sum by (instance) (increase(sglang:spec_verify_calls_total{" in q
    assert "sum by (instance) (increase(sglang:generation_tokens_total{" in q
    assert 'max by (instance) (sglang:spec_num_steps{namespace="default",pod=~"kimi-.*"})' in q
    assert "[60s]" in q and "vllm:" not in q


def test_single_expressions_follow_the_engines_definitions():
    assert pq.rate_expression("vllm", SEL[:1], 300) == (
        'sum(increase(vllm:spec_decode_num_accepted_tokens_total{namespace="default"}[300s]))\n'
        '  / sum(increase(vllm:spec_decode_num_draft_tokens_total{namespace="default"}[300s]))')
    assert pq.length_expression("vllm", SEL[:1], 300).startswith(
        '1 + sum(increase(vllm:spec_decode_num_accepted_tokens_total{namespace="default"}[300s]))\n'
        '  / sum(increase(vllm:spec_decode_num_drafts_total{')
    assert pq.length_expression("sglang", (), 300) == (
        "sum(increase(sglang:generation_tokens_total{}[300s]))\n  / sum(increase(sglang:spec_verify_calls_total{}[300s]))")
    assert pq.rate_expression("sglang", (), 300, 3).endswith("- 1) / 3")
    with pytest.raises(ValueError, match="needs k"):
        pq.rate_expression("sglang", (), 300)


def test_selector_values_are_escaped_and_names_checked():
    # A label value is data: quotes, backslashes and newlines cannot end the string or inject PromQL.
    assert str(ps.Matcher("pod", 'a"} or up{x="\\\n')) == 'pod="a\\"} or up{x=\\"\\\\\\n"'
    for bad in ("drafter.dev/serving", "1pod", "__name__", ""):
        with pytest.raises(ValueError):
            ps.Matcher(bad, "x")
    with pytest.raises(ValueError):
        ps.Matcher("pod", "x", "==")  # type: ignore[arg-type]
    for window in (0, 0.5, 1.5, math.inf, math.nan):
        with pytest.raises(ValueError):
            ps.window_query("vllm", SEL, window)
    with pytest.raises(ValueError):
        ps.window_query("tgi", SEL, 60)
    with pytest.raises(ValueError):
        ps.window_query("vllm", SEL, 60, replica_label="pod name")


def test_revision_matchers_use_the_names_kubernetes_sd_gives_pod_labels():
    assert pq.sanitize_label("drafter.dev/serving") == "drafter_dev_serving"
    assert [str(x) for x in pq.revision_matchers("ns", "kimi", "7f3a")] == [
        'namespace="ns"', 'drafter_dev_serving="kimi"', 'drafter_dev_revision="7f3a"']


# ------------------------------------------------------------------------------------------ parsing

def test_vllm_total_sums_replicas_not_rates():
    samples = ps.parse_query_response(200, vec(
        tagged("drafts", "a", "100"), tagged("draft_tokens", "a", "500"), tagged("accepted_tokens", "a", "400"),
        tagged("generation_tokens", "a", "500"),
        tagged("drafts", "b", "300"), tagged("draft_tokens", "b", "1500"), tagged("accepted_tokens", "b", "300"),
        tagged("generation_tokens", "b", "600"),
        ({ps.SERIES_LABEL: "accepted_per_position", "position": "0"}, "320"),
        ({ps.SERIES_LABEL: "accepted_per_position", "position": "1"}, "160")))
    total, replicas = ps.acceptance_from_vector("vllm", samples)
    assert replicas["a"].acceptance_rate == 0.8 and replicas["b"].acceptance_rate == 0.2
    assert replicas["a"].mean_acceptance_length == 5.0 and replicas["b"].mean_acceptance_length == 2.0
    # (400 + 300) / (500 + 1500) = 0.35, not the mean of the rates (0.5).
    assert total.acceptance_rate == pytest.approx(0.35)
    assert total.mean_acceptance_length == pytest.approx(1 + 700 / 400)
    assert (total.drafts, total.draft_tokens, total.accepted_tokens, total.generation_tokens) == (400, 2000, 700, 1100)
    assert total.per_position == (0.8, 0.4) and total.rate_source == "counters"
    # The same numbers through the engine source's math: identical definitions.
    before = m.SpecDecodeCounters("vllm", True, 0, 0, 0, generation_tokens=0)
    after = m.SpecDecodeCounters("vllm", True, 400, 2000, 700, generation_tokens=1100)
    w = m.window(before, after)
    assert (w.acceptance_rate, w.mean_acceptance_length) == (total.acceptance_rate, total.mean_acceptance_length)


def test_sglang_length_and_derived_rate_match_engines_window():
    samples = ps.parse_query_response(200, vec(
        tagged("drafts", "a", "100"), tagged("generation_tokens", "a", "300"), tagged("num_steps", "a", "3"),
        tagged("accept_rate_gauge", "a", "0.9"),
        tagged("drafts", "b", "100"), tagged("generation_tokens", "b", "150"), tagged("num_steps", "b", "3")))
    total, replicas = ps.acceptance_from_vector("sglang", samples)
    assert replicas["a"].mean_acceptance_length == 3.0 and replicas["b"].mean_acceptance_length == 1.5
    before = m.SpecDecodeCounters("sglang", True, drafts=0, generation_tokens=0)
    after = m.SpecDecodeCounters("sglang", True, drafts=200, generation_tokens=450)
    w = m.window(before, after, num_speculative_tokens=3)
    assert total.mean_acceptance_length == w.mean_acceptance_length == 2.25
    assert total.acceptance_rate == w.acceptance_rate and total.draft_tokens == w.draft_tokens == 600
    assert (total.rate_source, total.estimated) == ("derived", True)
    # An explicit k wins over the scraped gauge.
    total4, _ = ps.acceptance_from_vector("sglang", samples, num_speculative_tokens=4)
    assert total4.draft_tokens == 800
    # Without k anywhere, the rate gauge is the (flagged) fallback, as in engines.metrics.window.
    no_k = [s for s in samples if s.labels[ps.SERIES_LABEL] != "num_steps"]
    total_g, replicas_g = ps.acceptance_from_vector("sglang", no_k)
    assert (total_g.acceptance_rate, total_g.rate_source) == (0.9, "gauge")
    assert replicas_g["b"].acceptance_rate is None and replicas_g["b"].rate_source == "none"


def test_a_window_without_drafts_is_data_not_an_error():
    samples = ps.parse_query_response(200, vec(tagged("drafts", "a", "0"), tagged("draft_tokens", "a", "0"),
                                               tagged("accepted_tokens", "a", "0")))
    total, _ = ps.acceptance_from_vector("vllm", samples)
    assert not total.has_data and total.acceptance_rate is None and total.rate_source == "none"


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_non_finite_values_are_invalid(value):
    samples = ps.parse_query_response(200, vec(tagged("drafts", "a", "10"), tagged("draft_tokens", "a", value),
                                               tagged("accepted_tokens", "a", "1")))
    with pytest.raises(ps.MetricsInvalid) as exc:
        ps.acceptance_from_vector("vllm", samples)
    assert exc.value.reason is mv.UnusableReason.NON_FINITE
    assert exc.value.condition_reason == "MetricsInvalid" and isinstance(exc.value, mv.MetricsUnusable)


@pytest.mark.parametrize(("samples", "reason"), [
    ([tagged("drafts", "a", "10"), tagged("draft_tokens", "a", "50"), tagged("accepted_tokens", "a", "51")],
     mv.UnusableReason.ACCEPTED_EXCEEDS_DRAFTED),
    ([tagged("drafts", "a", "-1"), tagged("draft_tokens", "a", "50"), tagged("accepted_tokens", "a", "5")],
     mv.UnusableReason.NEGATIVE_COUNTER),
    ([tagged("drafts", "a", "10"), tagged("draft_tokens", "a", "50")], mv.UnusableReason.MISSING_SERIES),
    ([tagged("drafts", "a", "10"), tagged("draft_tokens", "a", "50"), tagged("accepted_tokens", "a", "5"),
      ({ps.SERIES_LABEL: "accepted_per_position", "position": "x"}, "1")], mv.UnusableReason.BAD_POSITION),
    ([tagged("drafts", "a", "10"), tagged("draft_tokens", "a", "50"), tagged("accepted_tokens", "a", "5"),
      ({ps.SERIES_LABEL: "accepted_per_position", "position": "0"}, "11")], mv.UnusableReason.ACCEPTED_EXCEEDS_DRAFTED),
])
def test_inconsistent_answers_are_invalid(samples, reason):
    with pytest.raises(ps.MetricsInvalid) as exc:
        ps.acceptance_from_vector("vllm", ps.parse_query_response(200, vec(*samples)))
    assert exc.value.reason is reason


def test_rounding_from_extrapolation_is_not_accepted_exceeds_drafted():
    # Equal counts extrapolated by the same factor can differ in the last bit.
    samples = ps.parse_query_response(200, vec(tagged("drafts", "a", "10"), tagged("draft_tokens", "a", "50.00000000000001"),
                                               tagged("accepted_tokens", "a", "50.00000000000002")))
    total, _ = ps.acceptance_from_vector("vllm", samples)
    assert total.acceptance_rate == 1.0


def test_empty_result_is_unavailable_with_the_reason():
    for samples in ([], [tagged("num_steps", "a", "3")]):
        with pytest.raises(ps.MetricsUnavailable) as exc:
            ps.acceptance_from_vector("sglang", ps.parse_query_response(200, vec(*samples)))
        assert exc.value.reason == "NoSeries" and exc.value.condition_reason == "MetricsUnavailable"


@pytest.mark.parametrize(("status", "body", "error", "reason"), [
    (400, b'{"status":"error","errorType":"bad_data","error":"parse error at char 5"}', ps.MetricsUnavailable,
     "QueryError"),
    (503, b'{"status":"error","errorType":"timeout","error":"query timed out"}', ps.MetricsUnavailable, "QueryError"),
    (502, b"<html>Bad Gateway</html>", ps.MetricsUnavailable, "HTTPError"),
    (200, b"<html>login</html>", ps.MetricsInvalid, mv.UnusableReason.UNPARSEABLE),
    (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}', ps.MetricsInvalid,
     mv.UnusableReason.UNPARSEABLE),
    (200, b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}',
     ps.MetricsInvalid, mv.UnusableReason.UNPARSEABLE),
])
def test_http_and_format_errors(status, body, error, reason):
    with pytest.raises(error) as exc:
        ps.parse_query_response(status, body)
    assert exc.value.reason == reason


# ------------------------------------------------------------------------------------------ the HTTP call

async def serve(handler) -> tuple[web.AppRunner, str]:
    """`handler` (an aiohttp request handler) answering every POST on a loopback port; (runner, base URL)."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/"


def fetch(handler, url: str | None = None, **kwargs):
    """fetch_acceptance against `handler` served on loopback (or `url`, where nothing is served)."""
    async def go():
        runner = None
        if url is None:
            runner, base = await serve(handler)
        try:
            return await ps.fetch_acceptance(ps.PrometheusConnection(url or base, **kwargs),
                                             ps.AcceptanceQuery("vllm", SEL, 300), end=1700000000.0)
        finally:
            if runner is not None:
                await runner.cleanup()
    return asyncio.run(go())


def test_fetch_posts_one_query_at_the_window_end():
    seen = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.method, request.path, dict(await request.post())))
        return web.Response(body=vec(tagged("drafts", "a", "10"), tagged("draft_tokens", "a", "50"),
                                     tagged("accepted_tokens", "a", "20")))

    got = fetch(handler)
    ((method, path, form),) = seen
    assert method == "POST" and path == "/api/v1/query"
    assert form["time"] == "1700000000.000"
    assert form["query"] == ps.window_query("vllm", SEL, 300)
    assert got.total.acceptance_rate == 0.4 and got.end == 1700000000.0 and set(got.replicas) == {"a"}


def test_fetch_refuses_an_oversized_answer_without_reading_it_all():
    big = b'{"status":"success","data":{"resultType":"vector","result":[' + b" " * 5000 + b"]}}"

    async def whole(request):
        return web.Response(body=big)
    with pytest.raises(ps.MetricsInvalid) as exc:
        fetch(whole, max_response_bytes=1000)
    assert exc.value.reason is mv.UnusableReason.TOO_LARGE

    # A chunked answer with no Content-Length is cut off while streaming.
    async def chunks(request):
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(10):
            await response.write(b" " * 500)
        await response.write_eof()
        return response
    with pytest.raises(ps.MetricsInvalid) as exc:
        fetch(chunks, max_response_bytes=1000)
    assert exc.value.reason is mv.UnusableReason.TOO_LARGE


def test_fetch_turns_transport_failures_into_unavailable():
    # Refused: nothing listens on the port.
    nowhere = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(ps.MetricsUnavailable) as exc:
        fetch(None, url=nowhere)
    assert exc.value.reason == "Unreachable" and nowhere.rstrip("/") in str(exc.value)

    async def slow(request):
        await asyncio.sleep(5)
        return web.Response(body=b"{}")
    with pytest.raises(ps.MetricsUnavailable) as exc:
        fetch(slow, timeout=http_fetch.Timeout(read=0.3, connect=0.3), shown_as="prometheus endpoint 'slow'")
    assert exc.value.reason == "Timeout" and "prometheus endpoint 'slow'" in str(exc.value)

    async def oops(request):
        return web.Response(status=500, body=b"oops")
    with pytest.raises(ps.MetricsUnavailable) as exc:
        fetch(oops)
    assert exc.value.reason == "HTTPError"


def test_replicas_differ_only_beyond_the_tolerance():
    def window(rate):
        return m.AcceptanceWindow("vllm", 10, 50, rate * 50, 0, rate, 1 + rate * 5, "counters")

    same = ps.PrometheusWindow(total=window(0.5), replicas={"a": window(0.52), "b": window(0.48)})
    apart = ps.PrometheusWindow(total=window(0.5), replicas={"a": window(0.7), "b": window(0.3)})
    assert not same.replicas_differ() and apart.replicas_differ()
