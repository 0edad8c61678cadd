"""`drafter-operator bench` against real engine-emulator processes on loopback.

The emulator times tokens with the model of docs/emulator-model.md: the seed's vLLM drafter (k = 5,
per-token acceptance 0.432) accepts 15.0 % of its draft tokens and runs at 0.66x of the 82.5 tok/s of
no speculation, at one stream. DRAFTER_EMULATOR_TIME_SCALE makes it 4x faster; ratios are unchanged.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from drafter_operator.api.benchmark import BenchmarkResult
from drafter_operator.benchmark_client.run import WARMUP_TOKENS, Options, LevelWork, level_schedule, run, run_level
from drafter_operator.benchmark_client.stream import Endpoint, event, stream_session
from drafter_operator.engines import speedup
from tests.processes import free_port, loopback_http
from tests.support.bench_client import MODEL, NO_SPECULATION, _env, emulator

SEED_DRAFTER = ["vllm", "serve", MODEL, "--speculative-config",
                '{"method":"eagle3","model":"/models/kimi-k25-eagle3","num_speculative_tokens":5}']
SEED_SPEEDUP, SEED_ACCEPTANCE = 0.66, 0.150
MAX_TOKENS = 512  # the seed's: enough verification steps that acceptance is within ~1% of its mean


@pytest.fixture(scope="module")
def seed():
    with emulator(SEED_DRAFTER) as url:
        yield url


@pytest.fixture(scope="module")
def baseline():
    with emulator(NO_SPECULATION) as url:
        yield url


@contextmanager
def fake_metrics(body: bytes):
    """A /metrics that answers 200 with ``body`` (e.g. not Prometheus text)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with loopback_http(Handler) as url:
        yield url


def state(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/emulator/state", timeout=10) as resp:
        return json.load(resp)


def totals(url: str) -> dict:
    return state(url)["totals"]


def bench(**kwargs) -> BenchmarkResult:
    return asyncio.run(run(Options(**{"max_tokens": MAX_TOKENS, "num_speculative_tokens": 5, **kwargs})))


@pytest.mark.timing  # a speedup measured on the wall clock
def test_seed_drafter_against_no_speculation_reproduces_the_emulators_truth(seed, baseline):
    truth = next(s["speedup"] for s in state(seed)["batching"]["byStreams"] if s["streams"] == 1)
    assert truth == pytest.approx(SEED_SPEEDUP, abs=0.005)
    before = totals(seed)
    result = bench(url=seed, baseline_url=baseline)
    after = totals(seed)
    assert result.total_tokens == 5 * MAX_TOKENS  # ignore_eos: every prompt gives max_tokens
    assert all(p.completion_tokens == MAX_TOKENS for p in result.prompts)
    assert result.speedup == pytest.approx(truth, rel=0.05)
    # Closer still against the truth for the acceptance this run drew: E / (1 + k c) (docs/emulator-model.md).
    assert result.speedup == pytest.approx(result.acceptance_length / (1 + 5 * speedup.DEFAULT_DRAFT_COST), rel=0.02)
    assert result.acceptance_rate == pytest.approx(SEED_ACCEPTANCE, abs=0.02)
    # The counters' deltas are the measured requests': all the engine drafted but the warm-up request
    # (sent before the first scrape, at most k draft tokens for each of its WARMUP_TOKENS).
    assert 0 < after["draftTokens"] - before["draftTokens"] - result.draft_tokens <= 5 * WARMUP_TOKENS
    assert 0 <= after["acceptedTokens"] - before["acceptedTokens"] - result.accepted_tokens <= 5 * WARMUP_TOKENS
    assert len(result.per_position_acceptance) == 5
    assert result.per_position_acceptance == sorted(result.per_position_acceptance, reverse=True)
    assert 1.5 < result.acceptance_length < 2.0
    assert result.acceptance_unavailable is None
    assert result.crossover_concurrency == 1  # this drafter never pays
    assert result.ttft_seconds > 0 and result.itl_seconds > 0


def test_a_broken_metrics_endpoint_gives_acceptance_unavailable_not_a_crash(seed):
    with fake_metrics(b"<html>not prometheus</html>{") as garbage:
        result = bench(url=seed, metrics_urls=(garbage,), num_prompts=1, max_tokens=32)
    assert result.total_tokens == 32 and result.tokens_per_second > 0
    assert result.acceptance_unavailable.startswith("Unparseable: ") or \
        result.acceptance_unavailable.startswith("NotEngineMetrics: ") or \
        result.acceptance_unavailable.startswith("Empty: ")
    assert garbage in result.acceptance_unavailable
    assert result.acceptance_rate is None and result.draft_tokens is None


def test_an_unreachable_metrics_endpoint_gives_acceptance_unavailable(seed):
    gone = f"http://127.0.0.1:{free_port()}"
    result = bench(url=seed, metrics_urls=(seed, gone), num_prompts=1, max_tokens=32)
    assert result.acceptance_unavailable.startswith(f"MetricsUnavailable: GET {gone}/metrics: ")
    assert result.acceptance_rate is None


def test_no_speculation_is_not_reported_as_unavailable(baseline):
    result = bench(url=baseline, num_prompts=1, max_tokens=32, baseline_tps=82.5)
    assert result.acceptance_unavailable is None and result.acceptance_rate is None
    assert result.speedup == pytest.approx(result.tokens_per_second / 82.5, rel=1e-3)


def test_pods_are_summed_and_an_idle_pod_adds_nothing(seed):
    with emulator(SEED_DRAFTER) as idle:
        before = totals(seed)
        result = bench(url=seed, metrics_urls=(seed, idle + "/metrics"), num_prompts=1, max_tokens=64)
        after = totals(seed)
        assert totals(idle)["draftTokens"] == 0
    # Everything the target drafted, less its warm-up request (sent before the first scrape, and
    # drafting at most k tokens for each of its WARMUP_TOKENS): nothing from the idle pod.
    warmup = after["draftTokens"] - before["draftTokens"] - result.draft_tokens
    assert 0 < warmup <= 5 * WARMUP_TOKENS


def test_chat_and_completions_both_work(seed):
    chat = bench(url=seed, num_prompts=1, max_tokens=16)
    raw = bench(url=seed, num_prompts=1, max_tokens=16, completions=True)
    assert chat.total_tokens == raw.total_tokens == 16
    # The chat template wraps the prompt: more prompt tokens than the raw text.
    assert chat.prompts[0].prompt_tokens > raw.prompts[0].prompt_tokens > 0


def test_a_load_sweep_reports_levels(seed, baseline):
    result = bench(url=seed, baseline_url=baseline, num_prompts=3, max_tokens=32, concurrency=(1, 2))
    assert [lv.concurrency for lv in result.levels] == [1, 2]
    assert result.levels[1].total_tokens == 4 * 32  # 3 prompts padded to two whole waves of 2
    assert all(lv.speedup is not None for lv in result.levels)
    assert {p.concurrency for p in result.prompts} == {1, 2}


def test_waves_are_whole():
    assert level_schedule(5, 1, 1) == [[0], [1], [2], [3], [4]]
    assert level_schedule(5, 1, 4) == [[0, 1, 2, 3], [4, 0, 1, 2]]
    assert level_schedule(2, 2, 4) == [[0, 1, 0, 1]]


class WaveBarrier(BaseHTTPRequestHandler):
    """A chat endpoint that holds every request until its whole wave is open, then streams a short answer.

    Requests are counted in arrival order; the i-th waits until ``wave`` requests of its wave have arrived
    (or ``HANG_GUARD`` seconds pass: the test reports that as a wave that never arrived together). The
    answer carries a Content-Length, so HTTP/1.1 keeps the connection alive for the next wave.
    """

    protocol_version = "HTTP/1.1"
    wave = 64
    HANG_GUARD = 60.0
    lock = threading.Condition()
    arrivals = 0
    released_by_timeout = 0
    connections: set[int] = set()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        cls = type(self)
        with cls.lock:
            cls.connections.add(self.client_address[1])
            cls.arrivals += 1
            wave_full = (cls.arrivals - 1) // cls.wave * cls.wave + cls.wave
            cls.lock.notify_all()
            # once one request gave up, the rest answer at once: a serial client fails in one guard, not 64
            if not cls.lock.wait_for(lambda: cls.arrivals >= wave_full or cls.released_by_timeout,
                                     timeout=cls.HANG_GUARD):
                cls.released_by_timeout += 1
                cls.lock.notify_all()
        chunks = [{"choices": [{"delta": {"content": "token "}}]},
                  {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}]
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_wave_reaches_the_engine_together():
    # 64 streams a wave, two waves: the second reuses the first's kept-alive connections, where httpx's
    # pool handed one idle connection to many requests and let them leave one by one. Requests arriving
    # apart make the engine take extra, under-filled steps, so the server here answers no request of a
    # wave until the whole wave is open: a client that sends them one after another is held to the guard.
    waves, streams = 2, 64
    handler = type("Barrier", (WaveBarrier,), {"wave": streams, "lock": threading.Condition(), "connections": set()})
    with loopback_http(handler, backlog=2 * streams) as url:
        async def level():
            async with stream_session(streams, timeout=300) as session:
                endpoint = Endpoint("target", url, MODEL, max_tokens=1)
                return await run_level(session, endpoint, None,
                                       LevelWork([f"prompt {i}" for i in range(streams)], waves, streams),
                                       baseline_tps=1.0)
        measured = asyncio.run(level())
    assert len(measured.streams) == waves * streams and handler.arrivals == waves * streams
    assert handler.released_by_timeout == 0, f"{handler.released_by_timeout} requests waited for a wave that never filled"
    assert len(handler.connections) == streams, "the second wave opened new connections instead of reusing the first's"


def test_stream_events_are_read_from_the_raw_lines():
    assert event(b'data: {"choices": [{"text": "a"}]}\n') == {"choices": [{"text": "a"}]}
    assert event(b'data:{"usage": {"completion_tokens": 3}}') == {"usage": {"completion_tokens": 3}}
    assert event(b"data: [DONE]\n") is None
    assert event(b"\n") is None and event(b": keep-alive\n") is None and event(b"data: \n") is None
    with pytest.raises(json.JSONDecodeError):
        event(b"data: {not json\n")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drafter_operator.cli", "bench", *args], env=_env(),
                          capture_output=True, text=True, timeout=120)


def test_the_command_writes_a_termination_message_the_controller_can_read(seed, tmp_path):
    log = tmp_path / "termination-log"
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(["Explain speculative decoding.", "Write a haiku about GPUs."]))
    done = _cli("--url", seed, "--engine", "vllm", "--num-prompts", "2", "--max-tokens", "24", "--concurrency", "1,2",
                "--prompts-file", str(prompts), "--baseline-tps", "82.5", "--num-speculative-tokens", "5",
                "--termination-log", str(log), "--timeout", "30", "--temperature", "0")
    assert done.returncode == 0, done.stderr
    stdout = BenchmarkResult.model_validate(json.loads(done.stdout))  # the full result, not a table (no TTY)
    message = log.read_text()
    assert len(message.encode()) <= 4096
    result = BenchmarkResult.model_validate(json.loads(message))
    assert result.total_tokens == stdout.total_tokens == 48 and result.concurrency == 1
    assert [lv.concurrency for lv in result.levels] == [1, 2]
    assert result.acceptance_rate is not None


def test_a_failure_is_one_line_naming_what_failed_and_exit_1(tmp_path):
    log = tmp_path / "termination-log"
    dead = f"http://127.0.0.1:{free_port()}"
    done = _cli("--url", dead, "--termination-log", str(log))
    assert done.returncode == 1
    line = log.read_text()
    assert "\n" not in line and f"GET {dead}/v1/models" in line
    assert json.loads(done.stdout)["error"] == line
    done = _cli("--url", dead, "--model", MODEL, "--termination-log", str(log))
    assert done.returncode == 1 and f"POST {dead}/v1/chat/completions" in log.read_text()


@pytest.mark.timing  # a speedup measured on the wall clock
def test_a_sweep_refines_its_break_even_bracket_with_measured_levels(seed, baseline):
    # The seed's drafter is 0.66x at any load, far from 1.0 whatever the machine's noise: slower already at
    # 4 streams, the sweep halves its lowest level until one stream (speculation never pays), no more.
    result = bench(url=seed, baseline_url=baseline, num_prompts=2, max_tokens=32, concurrency=(4, 8))
    assert [lv.concurrency for lv in result.levels] == [4, 8, 2, 1]
    assert all(lv.speedup < 1.0 for lv in result.levels)
    assert result.crossover_concurrency == 1
    assert result.crossover.to_json() == {"belowConcurrency": 1, "withinTolerance": True}
    # a budget of one level: the bracket says it is not narrow yet; none: the given levels only
    budget = bench(url=seed, baseline_url=baseline, num_prompts=2, max_tokens=32, concurrency=(4, 8), refine=1)
    assert [lv.concurrency for lv in budget.levels] == [4, 8, 2]
    assert budget.crossover.within_tolerance is False
    given = bench(url=seed, baseline_url=baseline, num_prompts=2, max_tokens=32, concurrency=(4, 8), refine=0)
    assert [lv.concurrency for lv in given.levels] == [4, 8]
