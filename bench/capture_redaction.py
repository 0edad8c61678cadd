"""What spec.capture.redaction and spec.retraining.minNewSamples cost the capture sidecar.

1. Redaction: batches of kept records go through the real wrapper (`redaction.WRAPPER_SCRIPT` under sh, as the
   redaction container runs it) around a real command, `sed` masking e-mail addresses; per batch size, the wall time
   of `redaction.redact` (write the batch, the wrapper's next look, the command, the answer read and checked) and
   the records per second it gives. The wrapper looks for batches every second, so a batch waits half a second on
   average before the command starts: that is the floor, and the sidecar polls every 5 s anyway.
2. The count: `samples.PromptTally.count_since` over a claim of --records prompt records in hour files of two pods,
   cold (every file read) and warm (nothing appended since: only the listing), and after 1,000 more records.

Usage: python bench/capture_redaction.py [--batches 1,100,1000] [--records 100000] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from drafter_operator.capture.redaction import WRAPPER_SCRIPT, Redaction, redact
from drafter_operator.capture.retention import hour_file
from drafter_operator.capture.samples import PromptTally
from drafter_operator.timestamps import format_seconds

MASK_EMAILS = ["sed", "-e", r"s/[A-Za-z0-9._%+-]*@[A-Za-z0-9.-]*\.[a-z]*/<email>/g"]
PROMPT = ("Please answer the customer at jane.doe@example.com about invoice 4411: " + "lorem ipsum dolor sit amet " * 36)[:1024]
T0 = dt.datetime(2026, 12, 7, 0, 0, tzinfo=dt.timezone.utc)


def record(n: int, at: dt.datetime) -> dict:
    return {"engine": "vllm", "requestId": f"req-{n}", "kind": "prompt", "time": format_seconds(at),
            "content": {"messages": [{"role": "user", "content": PROMPT}]}}


def bench_redaction(sizes: list[int], repeats: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        wrapper = subprocess.Popen(["sh", "-c", WRAPPER_SCRIPT, "redact", str(directory), *MASK_EMAILS])
        try:
            redaction = Redaction(directory, timeout_s=60)
            redact(redaction, [record(0, T0)])  # the wrapper is up
            for size in sizes:
                batch = [record(n, T0) for n in range(size)]
                seconds = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    kept = redact(redaction, batch)
                    seconds.append(time.perf_counter() - started)
                    assert len(kept) == size and "<email>" in kept[0]["content"]["messages"][0]["content"]
                median = statistics.median(seconds)
                rows.append({"records": size, "median_s": round(median, 3), "max_s": round(max(seconds), 3),
                             "records_per_s": round(size / median, 1)})
        finally:
            wrapper.terminate()
            wrapper.wait(10)
    return rows


def bench_count(records: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        claim = Path(tmp)
        per_hour = 5000
        for pod in ("kimi-a-0", "kimi-a-1"):
            (claim / pod).mkdir()
        for n in range(0, records, per_hour):
            at = T0 + dt.timedelta(hours=n // per_hour // 2)
            pod = ("kimi-a-0", "kimi-a-1")[(n // per_hour) % 2]
            with open(claim / pod / hour_file(at.timestamp()), "a") as out:
                out.write("".join(json.dumps(record(i, at)) + "\n" for i in range(n, min(n + per_hour, records))))
        size = sum(p.stat().st_size for p in claim.rglob("*.jsonl"))
        tally = PromptTally(claim)
        started = time.perf_counter()
        cold = tally.count_since(T0)
        cold_s = time.perf_counter() - started
        started = time.perf_counter()
        warm = tally.count_since(T0)
        warm_s = time.perf_counter() - started
        last = max(claim.rglob("*.jsonl"))
        with open(last, "a") as out:
            out.write("".join(json.dumps(record(i, T0)) + "\n" for i in range(1000)))
        started = time.perf_counter()
        grown = tally.count_since(T0)
        grown_s = time.perf_counter() - started
        assert cold == warm == records and grown == records + 1000
        return {"records": records, "claim_mb": round(size / 1e6, 1), "files": len(list(claim.rglob("*.jsonl"))),
                "cold_s": round(cold_s, 3), "warm_s": round(warm_s, 4), "after_1000_more_s": round(grown_s, 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,100,1000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--json")
    args = parser.parse_args()
    redaction = bench_redaction([int(s) for s in args.batches.split(",")], args.repeats)
    for row in redaction:
        print(f"redaction, {row['records']:>5} records of 1 KiB: median {row['median_s']:.3f} s (max {row['max_s']:.3f} s), "
              f"{row['records_per_s']:,.0f} records/s")
    count = bench_count(args.records)
    print(f"count of {count['records']:,} prompts ({count['claim_mb']} MB in {count['files']} hour files): cold "
          f"{count['cold_s']:.3f} s, warm {count['warm_s'] * 1000:.1f} ms, after 1,000 more "
          f"{count['after_1000_more_s'] * 1000:.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"redaction": redaction, "count": count}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
