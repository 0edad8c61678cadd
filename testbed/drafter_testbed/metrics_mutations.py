"""Engine /metrics bodies as a sick engine (or a broken proxy in front of it) mangles them, and a run of
them through the acceptance monitor's parse and decide path.

Shared by the fuzz benchmark (bench/metrics_fuzz.py, 10,000 bodies) and its hypothesis smoke test
(tests/unit/acceptance/test_metrics_fuzz.py). Test-side only, hence in drafter-testbed, never in the operator.

The true bodies are the emulator's exporters (``drafter_testbed/emulator/exporters.py``: vLLM 0.33.0's and SGLang
0.5.23's metric families, held to the engines' own collectors by tests/contract) driven by a healthy
drafter: per-token acceptance 0.89, an acceptance rate of about 71% at k = 5 (vLLM) and 80% at k = 3
(SGLang), far above the 40% threshold the monitor watches for. Nothing a mutation does can make that
drafter bad, so every ``Degraded=True`` the monitor reaches on such a run is a false one.
"""

from __future__ import annotations

import math
import random
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from drafter_testbed.emulator.exporters import SglangExporter, VllmExporter
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.acceptance import verdict as a
from drafter_operator.acceptance.engine_source import EngineSource, Replica

MODEL = "/models/kimi-k2.5"
PER_TOKEN_ACCEPTANCE = 0.89
K = {"vllm": 5, "sglang": 3}
#: The monitor's settings for the run: scrapes every 15 s, a 60 s window, 30 s below before Degraded.
INTERVAL_SECONDS = 15.0
THRESHOLDS = a.Thresholds(min_rate=0.4, min_length=None, min_draft_tokens=50, window_seconds=60, for_seconds=30)
REPLICA = Replica(name="engine-0", ip="127.0.0.1", port=8000)


_CREATED = re.compile(rb"^(\S+_created(?:\{[^\n]*\})?) \S+$", re.MULTILINE)
_THROUGHPUT = re.compile(rb"^(sglang:gen_throughput(?:\{[^\n]*\})?) \S+$", re.MULTILINE)


class HealthyEngine:
    """One engine's exporter, advanced by a healthy drafter's verification steps between scrapes."""

    def __init__(self, engine: str, rng: random.Random) -> None:
        self.engine, self.rng, self.k = engine, rng, K[engine]
        self.exporter = VllmExporter(MODEL, self.k) if engine == "vllm" else SglangExporter(MODEL, self.k, self.k + 1)
        self.bodies: list[bytes] = []  # every true body so far, oldest first

    def _accepted(self) -> int:
        accepted = 0
        while accepted < self.k and self.rng.random() < PER_TOKEN_ACCEPTANCE:
            accepted += 1
        return accepted

    def advance(self, requests: int) -> None:
        """``requests`` requests of 10 to 60 verification steps each (SGLang counts them as they finish)."""
        for _ in range(requests):
            self.exporter.prefill(prompt_tokens=self.rng.randint(20, 400), ttft=0.05, streaming=True)
            steps, generated = self.rng.randint(10, 60), 1
            for _ in range(steps):
                accepted = self._accepted()
                self.exporter.step(emitted=1 + accepted, drafted=self.k, accepted=accepted, interval=0.012)
                generated += 1 + accepted
            self.exporter.finished(prompt_tokens=100, generated=generated, verify_steps=steps, e2e=1.0,
                                   finish_reason="length", streaming=True)

    def body(self) -> bytes:
        # The clock's values (series creation times, SGLang's throughput gauge) pinned: a run is then the
        # same bodies for the same seed, whatever the time.
        body = _THROUGHPUT.sub(rb"\1 100.0", _CREATED.sub(rb"\1 1.7959416327e+09", self.exporter.render()))
        self.bodies.append(body)
        return body


# --------------------------------------------------------------------------------------------------
# Mutations: (true body, random source, the engine's earlier true bodies) -> the body served

_SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})? (\S+)$", re.MULTILINE)
_SPEC = re.compile(rb"spec_decode|spec_verify|generation_tokens|spec_num_steps|spec_accept")


def _samples(body: bytes, spec_only: bool = True) -> list[re.Match]:
    found = [s for s in _SAMPLE.finditer(body) if not spec_only or _SPEC.search(s.group(1))]
    return found or list(_SAMPLE.finditer(body))


def _with_value(body: bytes, rng: random.Random, value: Callable[[float], bytes]) -> bytes:
    samples = _samples(body)
    if not samples:
        return body
    s = rng.choice(samples)
    try:
        old = float(s.group(3))
    except ValueError:
        old = 0.0
    if not math.isfinite(old) or abs(old) > 2.0**63:
        old = 0.0  # an earlier mutation's value: start from a plain number
    return body[:s.start(3)] + value(old) + body[s.end(3):]


def _families(body: bytes) -> list[bytes]:
    return sorted({s.group(1).removesuffix(b"_total").removesuffix(b"_created") for s in _SAMPLE.finditer(body)})


def _drop_family(body: bytes, rng: random.Random, _: list[bytes]) -> bytes:
    family = rng.choice([f for f in _families(body) if _SPEC.search(f)] or _families(body) or [b"x"])
    return b"\n".join(line for line in body.split(b"\n") if family not in line)


def _duplicate(body: bytes, rng: random.Random, _: list[bytes]) -> bytes:
    samples = _samples(body)
    if not samples:
        return body + body
    s = rng.choice(samples)
    return body[:s.end()] + b"\n" + s.group(0) + body[s.end():]


def _backwards(body: bytes, rng: random.Random, _: list[bytes]) -> bytes:
    return _with_value(body, rng, lambda old: repr(float(int(old * rng.random()))).encode())


def _replay(body: bytes, rng: random.Random, earlier: list[bytes]) -> bytes:
    """An older body again: every counter went back together, as after a restart (or a stale cache)."""
    return rng.choice(earlier[:-1]) if len(earlier) > 1 else body


def _wrong_type(body: bytes, rng: random.Random, _: list[bytes]) -> bytes:
    types = list(re.finditer(rb"^# TYPE (\S+) (\S+)$", body, re.MULTILINE))
    if not types:
        return body
    t = rng.choice(types)
    kind = rng.choice([b"gauge", b"histogram", b"summary", b"untyped", b"info", b"stateset", b"bogus", b""])
    return body[:t.start(2)] + kind + body[t.end(2):]


def _label_garbage(body: bytes, rng: random.Random, _: list[bytes]) -> bytes:
    samples = [s for s in _samples(body) if s.group(2)]
    if not samples:
        return body
    s = rng.choice(samples)
    junk = rng.choice([
        b'{model_name="' + bytes(rng.randrange(32, 127) for _ in range(rng.randint(0, 300))).replace(b'"', b"'")
        + b'"}',
        b'{position="' + rng.choice([b"-1", b"abc", b"01", b"1e3", b"999999999999", b"", b"64", b"5"]) + b'"}',
        s.group(2)[:-1] + b',extra="\xe2\x98\x83 \\n \\" \\\\"}',
        s.group(2)[:-1],  # no closing brace
        s.group(2).replace(b'"', b"", 1),
        b'{engine="0",engine="1"}',
        b"{" + b",".join(b'l%d="%d"' % (i, i) for i in range(rng.randint(1, 200))) + b"}",
        s.group(2).replace(b"model_name", b"model name", 1),
    ])
    return body[:s.start(2)] + junk + body[s.end(2):]


def _junk(length: int, rng: random.Random) -> bytes:
    return rng.randbytes(length)


def _many_series(body: bytes, rng: random.Random, _: list[bytes]) -> bytes:
    """Up to ~256 KiB of extra series of a family the parser reads (a data-parallel server's ranks)."""
    name = rng.choice([b"vllm:generation_tokens_total", b"sglang:generation_tokens_total",
                       b"vllm:spec_decode_num_drafts_total"])
    lines = b"".join(b'%s{engine="%d",model_name="other"} %d.0\n' % (name, i, i) for i in range(rng.randint(10, 4000)))
    return body + lines


MUTATIONS: dict[str, Callable[[bytes, random.Random, list[bytes]], bytes]] = {
    "truncated": lambda b, r, _: b[:r.randrange(len(b) + 1)],
    "truncated at a line": lambda b, r, _: b"\n".join(b.split(b"\n")[:r.randrange(b.count(b"\n") + 1)]),
    "empty": lambda b, r, _: b"",
    "duplicated series": _duplicate,
    "NaN": lambda b, r, _: _with_value(b, r, lambda old: r.choice([b"NaN", b"nan"])),
    "Inf": lambda b, r, _: _with_value(b, r, lambda old: r.choice([b"+Inf", b"-Inf", b"inf"])),
    "negative": lambda b, r, _: _with_value(b, r, lambda old: b"-%d.0" % r.randint(1, 10**6)),
    "huge value": lambda b, r, _: _with_value(b, r, lambda old: r.choice(
        [b"1e300", b"1.7976931348623157e+308", b"%d.0" % 2**60, b"%d.0" % (2**53 + 2), b"9" * 400])),
    "fraction": lambda b, r, _: _with_value(b, r, lambda old: repr(old + r.random()).encode()),
    "scaled value": lambda b, r, _: _with_value(b, r, lambda old: repr(float(int(old * r.uniform(1.01, 1e6)))).encode()),
    "value text": lambda b, r, _: _with_value(b, r, lambda old: r.choice([b"abc", b"0x10", b"1_000", b"\xff\xfe", b""])),
    "counter backwards": _backwards,
    "older body replayed": _replay,
    "missing family": _drop_family,
    "wrong type": _wrong_type,
    "label garbage": _label_garbage,
    "binary junk": lambda b, r, _: _junk(r.randint(1, 65536), r),
    "junk inserted": lambda b, r, _: (lambda i: b[:i] + _junk(r.randint(1, 64), r) + b[i:])(r.randrange(len(b) + 1)),
    "huge body": lambda b, r, _: b * (mv.DEFAULT_MAX_BODY_BYTES // max(len(b), 1) + 1),
    "many series": _many_series,
    "CRLF line ends": lambda b, r, _: b.replace(b"\n", b"\r\n"),
    "HTML error page": lambda b, r, _: b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n",
    "JSON error": lambda b, r, _: b'{"object":"error","message":"Internal Server Error","code":500}',
    "families reordered": lambda b, r, _: b"".join(r.sample(p := re.split(rb"(?=^# HELP )", b, flags=re.M), len(p))),
}


# --------------------------------------------------------------------------------------------------
# A run through the monitor


@dataclass
class Step:
    mutations: tuple[str, ...]  # what was done to this scrape's body (empty: the true body)
    parsed: str  # "counters", or the parser's verdict reason
    condition: tuple[str, str]  # Degraded (status, reason) after this sample
    seconds: float  # CPU time of parse + sample + verdict (this thread's; wall time on a shared machine is noise)
    error: str | None = None  # an exception that escaped (a bug): its traceback


@dataclass
class Run:
    engine: str
    steps: list[Step] = field(default_factory=list)


def mutate(body: bytes, rng: random.Random, earlier: list[bytes], names: tuple[str, ...]) -> bytes:
    for name in names:
        body = MUTATIONS[name](body, rng, earlier)
    return body


def run_sequence(engine: str, seed: int, plan: list[tuple[str, ...]]) -> Run:
    """One engine scraped ``len(plan)`` times at ``INTERVAL_SECONDS``; before scrape i its true body gets
    the mutations ``plan[i]`` (none: served as is). Each body goes through the operator's own path:
    the engine's parser, ``EngineSource.sample_from`` (history, window, combination), then ``evaluate``."""
    rng = random.Random(seed)
    healthy = HealthyEngine(engine, rng)
    source = EngineSource(engine, THRESHOLDS.window_seconds, K[engine])
    verdict: a.AcceptanceVerdict | None = None
    run = Run(engine)
    for i, names in enumerate(plan):
        healthy.advance(rng.randint(1, 8))
        body = mutate(healthy.body(), rng, healthy.bodies, names)
        started = time.thread_time()
        error, parsed = None, "error"
        try:
            try:  # the engine's parser itself (EngineSource.parse would turn a parser bug into a verdict)
                result = source.engine.parse_spec_decode_metrics(body)
            except mv.MetricsUnusable as exc:
                result = exc
            parsed = str(result.reason) if isinstance(result, mv.MetricsUnusable) else "counters"
            sample = source.sample_from([(REPLICA, result)], at=i * INTERVAL_SECONDS)
            verdict = a.evaluate(verdict, sample, THRESHOLDS)
        except Exception:  # noqa: BLE001 - counted and reported: any exception here is a bug
            error = traceback.format_exc()
        seconds = time.thread_time() - started
        condition = (verdict.status, verdict.reason) if verdict else ("Unknown", a.INSUFFICIENT_DATA)
        run.steps.append(Step(tuple(names), parsed, condition, seconds, error))
    return run


def random_plan(rng: random.Random, length: int, mutation_rate: float,
                names: tuple[str, ...] = tuple(MUTATIONS)) -> list[tuple[str, ...]]:
    """Which mutations each scrape gets. Half the sequences have independent faults: a scrape is
    mutated with probability ``mutation_rate``, by one to three mutations. The other half have a
    persistent fault, as a broken exporter or proxy keeps mangling every body the same way: one
    mutation on a run of 3 to 10 consecutive scrapes (``mutation_rate`` of the sequence at most)."""
    if rng.random() < 0.5:
        return [tuple(rng.choice(names) for _ in range(rng.choice((1, 1, 1, 2, 3))))
                if rng.random() < mutation_rate else () for _ in range(length)]
    plan: list[tuple[str, ...]] = [() for _ in range(length)]
    budget = int(length * mutation_rate)
    while budget >= 3:
        run = rng.randint(3, min(10, budget))
        start = rng.randrange(max(length - run, 0) + 1)
        name = rng.choice(names)
        for i in range(start, min(start + run, length)):
            plan[i] = (name,)
        budget -= run
    return plan


def false_degraded(run: Run) -> list[int]:
    """Scrapes after which the healthy drafter's serving was Degraded=True (every one is false)."""
    return [i for i, step in enumerate(run.steps) if step.condition[0] == "True"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
