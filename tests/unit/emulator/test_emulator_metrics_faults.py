"""The emulator's /metrics faults, switched at run time: what a client sees in each mode, and that the
rest of the engine keeps serving."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from drafter_testbed.emulator.metrics_faults import JUNK, MetricsFault
from tests.support.emulator_server import emulator, run, vllm_argv


async def set_fault(session: aiohttp.ClientSession, **fault) -> tuple[int, dict]:
    async with session.post("/emulator/metrics-fault", json=fault) as r:
        return r.status, await r.json()


async def completion(session: aiohttp.ClientSession) -> int:
    async with session.post("/v1/completions", json={"prompt": "x", "max_tokens": 8}) as r:
        return (await r.json())["usage"]["completion_tokens"]


def test_each_mode_as_a_client_sees_it_while_generation_goes_on():
    async def scenario():
        async with emulator(vllm_argv()) as (url, _, s):
            out = {}
            healthy = await (await s.get("/metrics")).read()
            assert (await set_fault(s, mode="status", status=503))[0] == 200
            async with s.get("/metrics") as r:
                out["status"] = (r.status, await r.text())
            await set_fault(s, mode="garbage")
            async with s.get("/metrics") as r:
                out["garbage"] = (r.status, r.headers["Content-Type"], await r.read())
            await set_fault(s, mode="garbage", body="vllm:spec_decode_num_drafts_total NaN\n")
            out["garbage text"] = await (await s.get("/metrics")).text()
            await set_fault(s, mode="slow", seconds=0.3)
            started = time.monotonic()
            out["slow"] = (await (await s.get("/metrics")).read(), time.monotonic() - started)
            await set_fault(s, mode="trickle", seconds=2)
            started = time.monotonic()
            async with s.get("/metrics") as r:
                body_whole_with_the_headers = r.content.at_eof()  # status and headers come at once
                out["trickle"] = (body_whole_with_the_headers, await r.read(), time.monotonic() - started)
            await set_fault(s, mode="reset")
            with pytest.raises(aiohttp.ClientError):
                async with aiohttp.ClientSession(base_url=url) as fresh:
                    await (await fresh.get("/metrics")).read()
            await set_fault(s, mode="hang")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(s.get("/metrics"), 0.5)
            out["completion while hanging"] = await completion(s)
            # A request hanging when the fault is lifted gets the real body.
            waiting = asyncio.ensure_future(s.get("/metrics"))
            await asyncio.sleep(0.2)
            status, state = await set_fault(s, mode="none")
            out["lifted"] = await (await asyncio.wait_for(waiting, 60)).read()
            out["state"] = state["metricsFault"]
            return healthy, out

    healthy, out = run(scenario())
    assert out["status"] == (503, "503 emulated /metrics failure\n")
    assert out["garbage"] == (200, CONTENT_TYPE_LATEST, JUNK)
    assert out["garbage text"] == "vllm:spec_decode_num_drafts_total NaN\n"
    body, took = out["slow"]
    assert body.startswith(b"# HELP") and b"vllm:spec_decode_num_drafts_total" in body and took >= 0.3
    body_whole_with_the_headers, body, took = out["trickle"]
    assert not body_whole_with_the_headers and took >= 1.9 and b"vllm:spec_decode_num_drafts_total" in body
    assert out["completion while hanging"] == 8
    assert b"vllm:spec_decode_num_drafts_total" in out["lifted"] and healthy.startswith(b"# HELP")
    assert out["state"] == {"mode": "none"}


@pytest.mark.parametrize("doc, field", [
    ({"mode": "flaky"}, "mode"), ("hang", "mode"), ({"mode": "slow"}, "seconds"),
    ({"mode": "slow", "seconds": -1}, "seconds"), ({"mode": "trickle", "seconds": float("inf")}, "seconds"),
    ({"mode": "status", "status": 200}, "status"), ({"mode": "status", "status": True}, "status"),
    ({"mode": "garbage", "body": 3}, "body"), ({"mode": "hang", "seconds": 3}, "seconds"),
])
def test_a_bad_fault_is_refused_naming_the_field(doc, field):
    with pytest.raises(ValueError) as info:
        MetricsFault.from_json(doc)
    assert str(info.value).startswith(f"{field}:")


def test_the_control_endpoint_answers_400_to_a_bad_fault_and_keeps_the_old_one():
    async def scenario():
        async with emulator(vllm_argv()) as (_, _, s):
            await set_fault(s, mode="status")
            async with s.post("/emulator/metrics-fault", json={"mode": "slow", "seconds": "5"}) as r:
                refused = (r.status, (await r.json())["error"]["message"])
            state = await (await s.get("/emulator/state")).json()
            return refused, state["metricsFault"]

    (status, message), fault = run(scenario())
    assert status == 400 and message.startswith("seconds:")
    assert fault == {"mode": "status", "status": 500}
