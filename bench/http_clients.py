"""httpx against aiohttp for each HTTP request the operator and `drafter-operator bench` make, on loopback.

The runtime package carried two async HTTP clients (issue 25, item 9). This measures both on the requests
the operator actually sends, shaped as the code sends them, so the one kept is chosen by numbers:

- **metrics scrape** (acceptance/engine_source.py): a fresh client per acceptance sample (the acceptance
  monitor passes none), GET `/metrics` of a running engine emulator (`drafter-operator emulate vllm serve`
  with the seed's drafter), the whole body read, the client closed. 8 replicas at once, as a serving of 8
  pods is sampled, and 1.
- **Prometheus query** (acceptance/prometheus_source.py): a fresh client per query, POST a form with the
  operator's own window query (`window_query`) to a real Prometheus (drafter_testbed/prometheus.py) that scrapes
  that emulator.
- **JSON GET, one kept client** (the shape of kube.py's apiserver calls: many small JSON requests on kept
  connections): GET `/v1/models` of the emulator. urllib3, the transport under kube.py's wrapper (the
  kubernetes library's REST client), is measured beside the two for the same request.
- **64-stream fidelity** (operator/drafter_operator/benchmark_client/stream.py): two waves of 64 streamed `/v1/completions` (64 tokens each,
  `ignore_eos`) against an emulator without speculation; the emulator's own step count for the run
  (`/emulator/state` `batching.steps`, its warm-up request subtracted). A wave that reaches the engine
  together takes `max_tokens` steps; requests that leave the client one by one add under-filled steps.
  Also the spread between the first and last request of a wave to reach the engine (from the client: the
  first streamed byte's time minus time to first token is not observable, so the spread of send times).

Per request: wall milliseconds (median and p95) and the client process's CPU milliseconds (mean), which on
the operator's single event loop is the cost every other serving's watch waits behind.

Usage: python bench/http_clients.py [--requests 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import ssl

import aiohttp
import httpx
import urllib3

from drafter_operator.acceptance import prometheus_query
from drafter_testbed import prometheus

MODEL = "/models/kimi-k2.5"
SEED = ["vllm", "serve", MODEL, "--speculative-config",
        '{"method":"eagle3","model":"/models/kimi-k25-eagle3","num_speculative_tokens":5}']
NO_SPECULATION = ["vllm", "serve", MODEL]
STREAMS, WAVES, STREAM_TOKENS = 64, 2, 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Emulator:
    def __init__(self, argv: list[str]):
        self.port = free_port()
        env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.25",
               "DRAFTER_EMULATOR_SEED": "3", "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen([sys.executable, "-m", "drafter_operator.cli", "emulate", *argv,
                                      "--port", str(self.port)], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the emulator did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")
                time.sleep(0.2)

    def state(self) -> dict:
        with urllib.request.urlopen(self.url + "/emulator/state", timeout=10) as response:
            return json.load(response)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def timed(n: int, one) -> dict:
    """Run `one()` n times one after another: wall ms median/p95, client CPU ms mean."""
    await one()  # warm: imports, first connection
    walls = []
    cpu_started = time.process_time()
    for _ in range(n):
        started = time.perf_counter()
        await one()
        walls.append((time.perf_counter() - started) * 1000)
    cpu = (time.process_time() - cpu_started) * 1000 / n
    walls.sort()
    return {"median_ms": round(statistics.median(walls), 3), "p95_ms": round(walls[int(0.95 * (n - 1))], 3),
            "cpu_ms": round(cpu, 3)}


# ---- the operator's requests, once per library -------------------------------------------------------------

#: One TLS context for every httpx client, as the operator's httpx code shared one (a fresh httpx client
#: otherwise builds and loads its own, tens of ms of CPU, even for plain-HTTP URLs): the comparison is of
#: the libraries as the operator used them, not of that cost.
TLS = ssl.create_default_context()


async def scrape_httpx(urls: list[str]) -> None:
    async with httpx.AsyncClient(timeout=5.0, verify=TLS) as client:
        async def one(url):
            async with client.stream("GET", url) as response:
                body = b"".join([chunk async for chunk in response.aiter_bytes()])
            assert response.status_code == 200 and body
        await asyncio.gather(*(one(u) for u in urls))


async def scrape_aiohttp(urls: list[str]) -> None:
    timeout = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=5.0)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def one(url):
            async with session.get(url) as response:
                body = b"".join([chunk async for chunk in response.content.iter_any()])
            assert response.status == 200 and body
        await asyncio.gather(*(one(u) for u in urls))


async def query_httpx(url: str, form: dict) -> None:
    async with httpx.AsyncClient(timeout=5.0, verify=TLS) as client:
        response = await client.post(url, data=form)
        assert response.status_code == 200 and response.json()["status"] == "success"


async def query_aiohttp(url: str, form: dict) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=2.0, sock_read=5.0)) as session:
        async with session.post(url, data=form) as response:
            assert response.status == 200 and (await response.json())["status"] == "success"


async def json_gets(n: int, url: str) -> dict[str, dict]:
    results = {}
    async with httpx.AsyncClient(timeout=5.0, verify=TLS) as client:
        async def one():
            assert (await client.get(url)).json()["data"]
        results["httpx"] = await timed(n, one)
    async with aiohttp.ClientSession() as session:
        async def one():
            async with session.get(url) as response:
                assert (await response.json())["data"]
        results["aiohttp"] = await timed(n, one)
    pool = urllib3.PoolManager()

    async def one():  # kube.py runs its synchronous client in a worker thread (asyncio.to_thread)
        def get():
            return json.loads(pool.request("GET", url).data)["data"]
        assert await asyncio.to_thread(get)
    results["urllib3 (kube.py's transport)"] = await timed(n, one)
    return results


# ---- 64 streams ---------------------------------------------------------------------------------------------

def stream_body(model: str) -> dict:
    return {"model": model, "prompt": "Explain speculative decoding.", "max_tokens": STREAM_TOKENS,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def spread_of_waves(first_line) -> list[float]:
    """WAVES waves of STREAMS streams sent at once; per wave, the spread between the first and the last
    stream's first line. ``first_line()`` sends one stream and returns when its first line arrives (then reads
    the rest, as a client would)."""
    spreads = []
    for _ in range(WAVES):
        firsts: list[float] = []

        async def one():
            await first_line(lambda: firsts.append(time.perf_counter()))
        await asyncio.gather(*(one() for _ in range(STREAMS)))
        spreads.append(max(firsts) - min(firsts))
    return spreads


async def _read_stream(lines, on_first) -> None:
    first = True
    async for _ in lines:
        if first:
            on_first()
            first = False


async def waves_httpx(url: str, model: str) -> list[float]:
    limits = httpx.Limits(max_connections=2 * STREAMS, max_keepalive_connections=2 * STREAMS)
    async with httpx.AsyncClient(timeout=60.0, limits=limits, verify=TLS) as client:
        async def first_line(on_first):
            async with client.stream("POST", url + "/v1/completions", json=stream_body(model)) as response:
                await _read_stream(response.aiter_lines(), on_first)
        return await spread_of_waves(first_line)


async def waves_aiohttp(url: str, model: str) -> list[float]:
    connector = aiohttp.TCPConnector(limit=2 * STREAMS)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_read=60.0)) as session:
        async def first_line(on_first):
            async with session.post(url + "/v1/completions", json=stream_body(model)) as response:
                await _read_stream(response.content, on_first)
        return await spread_of_waves(first_line)


def fidelity(library: str) -> dict:
    """A fresh emulator per library, so each run's step count is its own."""
    emulator = Emulator(NO_SPECULATION)
    try:
        warm = urllib.request.Request(emulator.url + "/v1/completions", data=json.dumps(
            {**stream_body(MODEL), "stream": False, "max_tokens": 1}).encode(), headers={"Content-Type": "application/json"})
        urllib.request.urlopen(warm, timeout=30).read()
        before = emulator.state()["batching"]["steps"]
        started = time.perf_counter()
        waves = waves_httpx if library == "httpx" else waves_aiohttp
        spreads = asyncio.run(waves(emulator.url, MODEL))
        seconds = time.perf_counter() - started
        steps = emulator.state()["batching"]["steps"] - before
        return {"engine_steps": steps, "ideal_steps": WAVES * STREAM_TOKENS, "wall_s": round(seconds, 2),
                "first_token_spread_s": [round(s, 3) for s in spreads]}
    finally:
        emulator.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per measurement (default 300)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    n = args.requests
    results: dict = {"requests": n, "versions": {"httpx": httpx.__version__, "aiohttp": aiohttp.__version__,
                                                 "urllib3": urllib3.__version__}}
    emulator = Emulator(SEED)
    try:
        metrics = emulator.url + "/metrics"
        results["scrape x1, fresh client"] = {
            "httpx": asyncio.run(timed(n, lambda: scrape_httpx([metrics]))),
            "aiohttp": asyncio.run(timed(n, lambda: scrape_aiohttp([metrics])))}
        results["scrape x8, fresh client"] = {
            "httpx": asyncio.run(timed(n, lambda: scrape_httpx([metrics] * 8))),
            "aiohttp": asyncio.run(timed(n, lambda: scrape_aiohttp([metrics] * 8)))}
        results["JSON GET, kept client"] = asyncio.run(json_gets(n, emulator.url + "/v1/models"))
        with tempfile.TemporaryDirectory() as directory:
            config = prometheus.config([prometheus.static_job("engine", f"127.0.0.1:{emulator.port}")])
            with prometheus.running(config, Path(directory)) as prom:
                deadline = time.monotonic() + 30
                while not prom.query("vllm:spec_decode_num_drafts_total") and time.monotonic() < deadline:
                    time.sleep(0.5)
                form = {"query": prometheus_query.window_query("vllm", (prometheus_query.Matcher("job", "engine"),), 300,
                                                                 replica_label="instance")}
                url = prom.url + "/api/v1/query"
                results["Prometheus query, fresh client"] = {
                    "httpx": asyncio.run(timed(n, lambda: query_httpx(url, form))),
                    "aiohttp": asyncio.run(timed(n, lambda: query_aiohttp(url, form)))}
    finally:
        emulator.stop()
    results["64 streams x 2 waves"] = {library: fidelity(library) for library in ("httpx", "aiohttp")}
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
