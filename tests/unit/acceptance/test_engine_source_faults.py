"""The engine source against sick engines: each /metrics fault of the emulator gives the named verdict in
bounded time, a hanging engine does not hold another serving's measurement, and a large body is parsed
without holding the event loop every serving's watch runs on."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time

import pytest

from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance.engine_source import EngineSource, Replica
from tests.processes import loopback_http
from tests.support.emulator_server import emulator, vllm_argv

TIMEOUT = 1.0  # the scrape deadline here (the operator's is 5 s)
#: How long a test waits for a sample before it calls the source stuck: a guard against hanging, never a
#: measure (each fault below outlasts TIMEOUT, so only the deadline can turn it into its verdict).
STUCK = 60.0
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
            sick = await asyncio.wait_for(source.sample([replica_of(url)], at=10), STUCK)
            return healthy, sick

    healthy, sick = asyncio.run(scenario())
    assert healthy.problem is None
    # A slow or trickling answer that was waited out would have come back whole: only the deadline makes
    # it a Timeout.
    assert sick.problem[0] == reason and sick.problem[1].startswith(f"pod-a: {words}"), sick.problem
    assert sick.window is None
    if reason == a.METRICS_UNAVAILABLE and words == "Timeout: ":
        assert f"no complete answer within {TIMEOUT:g} s" in sick.problem[1]


def test_an_answer_late_but_within_the_deadline_is_used():
    # A deadline far beyond the delay: a loaded machine must not turn "late" into "too late".
    async def scenario():
        async with emulator(vllm_argv()) as (url, _, s):
            source = EngineSource("vllm", window_seconds=30, num_speculative_tokens=5, timeout_seconds=STUCK / 2)
            await source.sample([replica_of(url)], at=0)
            await fault(s, mode="slow", seconds=TIMEOUT)
            return await source.sample([replica_of(url)], at=10)

    sample = asyncio.run(scenario())
    assert sample.problem is None and sample.window is not None  # two scrapes: a window (with no drafts)


def test_a_hanging_engine_does_not_hold_another_servings_measurement():
    async def scenario():
        async with emulator(vllm_argv()) as (sick_url, _, sick), emulator(vllm_argv()) as (well_url, _, _):
            # The sick engine trickles its answer and its deadline is long: the well serving must be
            # measured while the sick one is still being waited for, whatever the machine's load.
            await fault(sick, mode="trickle", seconds=10 * STUCK)
            sick_source = EngineSource("vllm", 30, 5, timeout_seconds=STUCK)
            well_source = EngineSource("vllm", 30, 5, timeout_seconds=STUCK)
            sick_task = asyncio.ensure_future(sick_source.sample([replica_of(sick_url, "sick")], at=0))
            well_task = asyncio.ensure_future(well_source.sample([replica_of(well_url, "well")], at=0))
            done, _ = await asyncio.wait({sick_task, well_task}, return_when=asyncio.FIRST_COMPLETED)
            sick_still_waited_for = not sick_task.done()
            sick_task.cancel()
            return done == {well_task}, sick_still_waited_for, well_task.result()

    well_first, sick_still_waited_for, well = asyncio.run(scenario())
    assert well_first and sick_still_waited_for and well.problem is None


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


def serving(body: bytes) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    return Handler


def test_bodies_are_parsed_on_the_parser_threads_never_on_the_loop(monkeypatch):
    threads = []
    parse = EngineSource.parse

    def recording(self, body):
        threads.append(threading.current_thread().name)
        return parse(self, body)

    monkeypatch.setattr(EngineSource, "parse", recording)

    async def scenario(url: str):
        loop_thread = threading.current_thread().name
        return loop_thread, await EngineSource("vllm", 30, timeout_seconds=STUCK).sample([replica_of(url)], at=0)

    with loopback_http(serving(b'vllm:generation_tokens_total{engine="0",model_name="m"} 3.0\n')) as url:
        loop_thread, sample = asyncio.run(scenario(url))
    assert sample.problem is None
    assert len(threads) == 1 and threads[0] != loop_thread and threads[0].startswith("metrics-parse"), threads


@pytest.mark.timing
def test_a_large_body_is_parsed_without_holding_the_event_loop():
    body = body_at_the_cap()
    Handler = serving(body)

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
