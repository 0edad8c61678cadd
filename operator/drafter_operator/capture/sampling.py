"""Which requests a capture keeps: a deterministic choice by a hash of the request id, so that every line of one
request (its prompt, its response) is kept or dropped together, by any sidecar, after any restart. A benchmark's
request (the operator's gates, a training's Evaluate, any DrafterBenchmark: benchmark_client/stream.py names each
with BENCHMARK_REQUEST_ID_PREFIX) is never kept, whatever the rate: its prompts are the benchmark's set, not the
serving's traffic, and a retraining must neither train on them nor hold them out as if users had asked them."""

from __future__ import annotations

import hashlib

from drafter_operator.constants import BENCHMARK_REQUEST_ID_PREFIX

#: The hash's first bytes read as an integer: 2**64 buckets, far finer than the API's four decimals of rate.
_BUCKET_BYTES = 8
_BUCKETS = 1 << (8 * _BUCKET_BYTES)


def bucket(request_id: str) -> float:
    """Where a request id falls in [0, 1): SHA-256 of the id, not Python's hash(), which is salted per process."""
    digest = hashlib.sha256(request_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:_BUCKET_BYTES], "big") / _BUCKETS


def kept(request_id: str, rate: float) -> bool:
    """Whether a capture at ``rate`` (0 < rate <= 1) keeps the request ``request_id``: a rate keeps every request
    a lower rate keeps, so raising the rate only adds requests; never a benchmark's request."""
    return bucket(request_id) < rate and not is_benchmark(request_id)


def is_benchmark(request_id: str) -> bool:
    """Whether the request is a benchmark's: its id as the engine logs it, an endpoint's prefix (vLLM's response
    lines: ``chatcmpl-``, ``cmpl-``) stripped by the line parser before it gets here."""
    return request_id.startswith(BENCHMARK_REQUEST_ID_PREFIX)
