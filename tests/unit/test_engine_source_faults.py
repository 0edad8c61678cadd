"""The engine source against sick engines: each /metrics fault of the emulator gives the named verdict in
bounded time, a hanging engine does not hold another serving's measurement, and a large body is parsed
without holding the event loop every serving's watch runs on."""

from __future__ import annotations

import asyncio
import http.server
import time

import pytest

from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance.engine_source import EngineSource, Replica
from tests.processes import loopback_http
from tests.unit.test_emulator_server import emulator, vllm_argv

TIMEOUT = 1.0  # the scrape deadline here (the operator's is 5 s)
NAN_BODY = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="/models/kimi-k2.5-int4"} NaN\n'


def replica_of(url: str, name: str = "pod-a") -> Replica:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return Replica(name=name, ip=host, port=int(port))


async def fault(session, **body) -> None:
    async with session.post("/emulator/metrics-fault", json=body) as r:
        assert r.status == 200, await r.text()


@pytest.mark.parametrize("body, reason, words", [
    ({"mode": "hang"}, a.METRICS_UNAVAILABLE, "Timeout: "),
    ({"mode": "slow", "seconds": 3}, a.METRICS_UNAVAILABLE, "Timeout: "),
    # Pieces every 0.5 s: no single read waits a second, so only a deadline on the whole answer ends it.
    ({"mode": "trickle", "seconds": 10}, a.METRICS_UNAVAILABLE, "Timeout: "),
    ({"mode": "status", "status": 500}, a.METRICS_UNAVAILABLE, "HTTPError: "),
    ({"mode": "reset"}, a.METRICS_UNAVAILABLE, "Unreachable: "),
    ({"mode": "garbage"}, a.METRICS_INVALID, "Unparseable: "),
    ({"mode": "garbage", "body": NAN_BODY}, a.METRICS_INVALID, "NonFinite: "),
])
def test_each_fault_gives_its_verdict_within_the_deadline(body, reason, words):
    async def scenario():
        async with emulator(vllm_argv()) as (url, _, s):
            source = EngineSource("vllm", window_seconds=30, num_speculative_tokens=5, timeout_seconds=TIMEOUT)
            healthy = await source.sample([replica_of(url)], at=0)
            await fault(s, **body)
            started = time.monotonic()
            sick = await asyncio.wait_for(source.sample([replica_of(url)], at=10), 3 * TIMEOUT)
            return healthy, sick, time.monotonic() - started

    healthy, sick, took = asyncio.run(scenario())
    assert healthy.problem is None
    assert sick.problem[0] == reason and sick.problem[1].startswith(f"pod-a: {words}"), sick.problem
    assert sick.window is None and took < TIMEOUT + 1.0
    if reason == a.METRICS_UNAVAILABLE and words == "Timeout: ":
        assert f"no complete answer within {TIMEOUT:g} s" in sick.problem[1]


def test_an_answer_late_but_within_the_deadline_is_used():
    async def scenario():
        async with emulator(vllm_argv()) as (url, _, s):
            source = EngineSource("vllm", window_seconds=30, num_speculative_tokens=5, timeout_seconds=TIMEOUT)
            await source.sample([replica_of(url)], at=0)
            await fault(s, mode="slow", seconds=TIMEOUT / 4)
            return await source.sample([replica_of(url)], at=10)

    sample = asyncio.run(scenario())
    assert sample.problem is None and sample.window is not None  # two scrapes: a window (with no drafts)


def test_a_hanging_engine_does_not_hold_another_servings_measurement():
    async def scenario():
        async with emulator(vllm_argv()) as (sick_url, _, sick), emulator(vllm_argv()) as (well_url, _, _):
            await fault(sick, mode="trickle", seconds=10)
            sick_source = EngineSource("vllm", 30, 5, timeout_seconds=TIMEOUT)
            well_source = EngineSource("vllm", 30, 5, timeout_seconds=TIMEOUT)
            sick_task = asyncio.ensure_future(sick_source.sample([replica_of(sick_url, "sick")], at=0))
            well_task = asyncio.ensure_future(well_source.sample([replica_of(well_url, "well")], at=0))
            done, _ = await asyncio.wait({sick_task, well_task}, return_when=asyncio.FIRST_COMPLETED)
            first = done.pop()
            await asyncio.wait_for(sick_task, 3 * TIMEOUT)
            return first is well_task, well_task.result(), sick_task.result()

    well_first, well, sick = asyncio.run(scenario())
    assert well_first and well.problem is None
    assert sick.problem[0] == a.METRICS_UNAVAILABLE and "Timeout" in sick.problem[1]


def body_at_the_cap() -> bytes:
    """Distinct vLLM series up to the 4 MiB cap: the slowest body the parser reads (over a second)."""
    lines, size, engine = [], 0, 0
    while True:
        line = f'vllm:generation_tokens_total{{engine="{engine}",model_name="m"}} {engine}.0\n'.encode()
        if size + len(line) > mv.DEFAULT_MAX_BODY_BYTES:
            return b"".join(lines)
        lines.append(line)
        size += len(line)
        engine += 1


def test_a_large_body_is_parsed_without_holding_the_event_loop():
    body = body_at_the_cap()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    async def scenario(url: str):
        gaps, stop = [], asyncio.Event()

        async def ticker():
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        sample = await EngineSource("vllm", 30, timeout_seconds=30).sample([replica_of(url)], at=0)
        took = time.perf_counter() - started
        stop.set()
        await ticking
        return sample, took, max(gaps)

    with loopback_http(Handler) as url:
        sample, took, longest_gap = asyncio.run(scenario(url))
    # Counters came back (generation tokens only: this "engine" is not speculative).
    assert sample.problem is None and sample.window is None
    # The parse alone holds the GIL for over a second; the loop must still have run every few ms.
    assert took > 0.5 and longest_gap < took / 3, (took, longest_gap)
