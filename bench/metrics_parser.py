"""Time and peak memory of the engines' /metrics parser on realistic and hostile bodies.

For each body it prints its size, the parser's answer (counters, or the verdict's reason), the
median parse time over a few repeats (perf_counter, no tracing) and the peak memory the parse
allocates (tracemalloc, a separate run: tracing slows the parse down, so time and memory are never
taken from the same run). The body itself is built before measuring and is not counted.

Bodies:
- a realistic vLLM and SGLang body: the emulator's full exposition (spec-decode counters, request
  counters, gauges and histograms) after some traffic, with the exact metric names of vLLM 0.33.0
  and SGLang 0.5.23;
- a 10 MB body (refused by size before parsing);
- a body at the 4 MiB cap made of distinct generation-token series (the slowest body that is read);
- the vLLM body plus one sample with position="100000000" (the old parser built a 10**8-long tuple);
- the vLLM body plus 10,000 copies of one series (the old parser summed them).

Usage: python bench/metrics_parser.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable

from drafter_testbed.emulator.exporters import SglangExporter, VllmExporter
from drafter_operator.engines import metrics_verdicts as mv
from drafter_operator.engines import sglang, vllm

MODEL = "/models/kimi-k2.5-int4"


def vllm_body() -> str:
    exporter = VllmExporter(MODEL, 5)
    for request in range(50):
        exporter.prefill(prompt_tokens=100 + request, ttft=0.02 + request / 1000, streaming=True)
        for step in range(100):
            accepted = step % 6
            exporter.step(emitted=1 + accepted, drafted=5, accepted=accepted, interval=0.012 + step / 10000)
    return exporter.render().decode()


def sglang_body() -> str:
    exporter = SglangExporter(MODEL, 3, 4)
    for request in range(50):
        exporter.prefill(prompt_tokens=100 + request, ttft=0.02 + request / 1000, streaming=True)
        for step in range(100):
            accepted = step % 4
            exporter.step(emitted=1 + accepted, drafted=3, accepted=accepted, interval=0.012 + step / 10000)
        exporter.finished(prompt_tokens=100 + request, generated=251, verify_steps=100, e2e=1.5,
                          finish_reason="length", streaming=True)
    return exporter.render().decode()


def at_the_cap(cap: int = mv.DEFAULT_MAX_BODY_BYTES) -> str:
    lines, size, engine = [], 0, 0
    while True:
        line = f'vllm:generation_tokens_total{{engine="{engine}",model_name="{MODEL}"}} {engine}.0\n'
        if size + len(line) > cap:
            return "".join(lines)
        lines.append(line)
        size += len(line)
        engine += 1


def cases() -> list[tuple[str, Callable[[str], object], str]]:
    v, s = vllm_body(), sglang_body()
    per_pos = (f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{MODEL}",'
               f'position="%s"}} 1.0\n')
    duplicate = f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{MODEL}"}} 1.0\n'
    return [
        ("realistic vLLM body (emulator, k=5)", vllm.parse_spec_decode_metrics, v),
        ("realistic SGLang body (emulator, 3 steps)", sglang.parse_spec_decode_metrics, s),
        ("10 MB body", vllm.parse_spec_decode_metrics, v * (10_000_000 // len(v) + 1)),
        ("4 MiB body of distinct series (the cap)", vllm.parse_spec_decode_metrics, at_the_cap()),
        ('vLLM body + position="100000000"', vllm.parse_spec_decode_metrics, v + per_pos % "100000000"),
        ("vLLM body + 10,000 duplicated series", vllm.parse_spec_decode_metrics, v + duplicate * 10_000),
    ]


def outcome(parse: Callable[[str], object], body: str) -> str:
    try:
        counters = parse(body)
    except mv.MetricsUnusable as exc:
        return f"verdict {exc.reason}"
    return f"counters (drafts={counters.drafts:g})" if counters.drafts is not None else "counters"


def measure(parse: Callable[[str], object], body: str, repeats: int) -> dict[str, float | str | int]:
    answer = outcome(parse, body)  # also warms up imports and regex caches
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        outcome(parse, body)
        seconds.append(time.perf_counter() - started)
    tracemalloc.start()
    try:
        outcome(parse, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"bytes": len(body.encode()), "answer": answer, "medianMs": 1000 * statistics.median(seconds),
            "maxMs": 1000 * max(seconds), "peakMiB": peak / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed parses per body (median reported)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    results = {}
    print(f"{'body':42} {'size':>10} {'answer':>28} {'median':>10} {'max':>10} {'peak mem':>10}")
    for name, parse, body in cases():
        r = measure(parse, body, args.repeats)
        results[name] = r
        print(f"{name:42} {r['bytes'] / 1024:>8.0f}KiB {r['answer']:>28} {r['medianMs']:>8.2f}ms "
              f"{r['maxMs']:>8.2f}ms {r['peakMiB']:>7.2f}MiB")
    print(f"cap: {mv.DEFAULT_MAX_BODY_BYTES // 2**20} MiB body, {mv.DEFAULT_MAX_POSITIONS} positions; "
          f"peak mem: tracemalloc peak during one parse, the body itself excluded")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
