"""Prometheus metrics of the emulated engines, with the engines' exact names, types, labels and help.

Each exporter owns a private ``CollectorRegistry`` (several emulators may share a process in tests)
and is driven by the same events: a request starts, its prefill emits the first token, each
verification step emits tokens, the request finishes or is aborted.

- vLLM (``vllm/v1/metrics/loggers.py``, ``vllm/v1/spec_decode/metrics.py``): token counters move on
  every step; the spec-decode counters exist only when speculation is configured, pre-created at zero
  with one ``position`` series per draft position; labels ``model_name`` and ``engine="0"``;
  ``request_success`` carries ``finished_reason``, pre-created for every ``FinishReason`` of
  ``vllm/v1/engine/__init__.py`` (stop, length, abort, error, repetition).
- SGLang (``sglang/srt/observability/metrics_collector.py``): scheduler gauges with labels
  ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank``, refreshed every ``DECODE_LOG_INTERVAL``
  decode steps over that interval (like ``--decode-log-interval 40``); tokenizer counters
  (``model_name, engine_type`` [+ ``is_streaming``]) move when a request finishes, verify calls
  included, so delta(generation tokens) / delta(verify calls) is the windowed acceptance length.
  ``spec_accept_rate`` is SGLang's ``metrics_reporter.py`` ratio: accepted drafts over verify calls x
  (``--speculative-num-draft-tokens`` - 1), or x ``--speculative-num-steps`` when the draft-token
  count is unset. With ``--speculative-eagle-topk`` 1 the two agree (draft tokens = steps + 1); with a
  wider tree SGLang counts every tree node as proposed, so the rate is lower than per-step acceptance.
  The denominator is nominal for every algorithm: DFLASH divides by its block - 1, DSPARK by gamma even
  when its confidence head verified fewer, NGRAM by its 11 tree nodes. Every decode step under
  speculation is a verify step (``spec_num_forward_ct``), whether or not the drafter found anything.
  DSpark's two gauges are registered for every algorithm (``metrics_collector.py:523-534``):
  ``spec_cap_length``, the mean verify window including the bonus slot when the confidence head
  schedules a cap (``metrics_reporter.py:979-983``; 0 otherwise), and ``spec_block_accept_length``,
  which SGLang fills only in its ``cap-accept`` ragged verify mode (not modelled: always 0).

Names, types, label names and bucket bounds are checked against the engines' own collector classes
by tests/contract/test_emulator_metrics_contract.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from drafter_operator.engines import sglang as sg
from drafter_operator.engines import vllm as vl

#: KV-cache capacity the usage gauges are computed against (tokens of running requests / capacity).
KV_CAPACITY_TOKENS = 500_000
#: DSpark's gauges (sglang/srt/observability/metrics_collector.py:523-534). The operator reads neither,
#: so their names live here rather than with the names it reads in engines/sglang.py.
SGLANG_SPEC_CAP_LENGTH = "sglang:spec_cap_length"
SGLANG_SPEC_BLOCK_ACCEPT_LENGTH = "sglang:spec_block_accept_length"
#: SGLang's default --decode-log-interval: scheduler gauges refresh every this many decode steps.
DECODE_LOG_INTERVAL = 40

#: vLLM 0.33.0's FinishReason values, in its order; every one is pre-created at zero.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                     7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                    10.0, 20.0, 40.0, 80.0)
VLLM_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                      0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
SGLANG_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
                      1200, 1800, 2400)


class Exporter:
    """The events every engine exporter handles; ``render()`` is the ``/metrics`` body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def set_load(self, running: int, kv_tokens: int) -> None: ...

    def prefill(self, prompt_tokens: int, ttft: float, streaming: bool) -> None: ...

    def step(self, emitted: int, drafted: int, accepted: int, interval: float) -> None: ...

    def finished(self, *, prompt_tokens: int, generated: int, verify_steps: int, e2e: float,
                 finish_reason: str, streaming: bool) -> None: ...

    def aborted(self) -> None: ...


class VllmExporter(Exporter):
    def __init__(self, model_name: str, num_speculative_tokens: int) -> None:
        super().__init__()
        reg = self.registry
        names = [vl.LABEL_MODEL_NAME, vl.LABEL_ENGINE]
        values = (model_name, "0")
        self.k = num_speculative_tokens
        if self.k > 0:
            self.drafts = Counter(vl.SPEC_DECODE_NUM_DRAFTS, "Number of spec decoding drafts.",
                                  names, registry=reg).labels(*values)
            self.draft_tokens = Counter(vl.SPEC_DECODE_NUM_DRAFT_TOKENS, "Number of draft tokens.",
                                        names, registry=reg).labels(*values)
            self.accepted_tokens = Counter(vl.SPEC_DECODE_NUM_ACCEPTED_TOKENS, "Number of accepted tokens.",
                                           names, registry=reg).labels(*values)
            per_pos = Counter(vl.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS, "Accepted tokens per draft position.",
                              [*names, vl.LABEL_POSITION], registry=reg)
            self.per_position = [per_pos.labels(*values, str(i)) for i in range(self.k)]
        self.running = Gauge(vl.NUM_REQUESTS_RUNNING, "Number of requests in model execution batches.",
                             names, registry=reg).labels(*values)
        self.waiting = Gauge(vl.NUM_REQUESTS_WAITING, "Number of requests waiting to be processed.",
                             names, registry=reg).labels(*values)
        self.kv_usage = Gauge(vl.KV_CACHE_USAGE_PERC, "KV-cache usage. 1 means 100 percent usage.",
                              names, registry=reg).labels(*values)
        self.prompt_tokens = Counter(vl.PROMPT_TOKENS, "Number of prefill tokens processed.",
                                     names, registry=reg).labels(*values)
        self.generation_tokens = Counter(vl.GENERATION_TOKENS, "Number of generation tokens processed.",
                                         names, registry=reg).labels(*values)
        success = Counter(vl.REQUEST_SUCCESS, "Count of successfully processed requests.",
                          [*names, vl.LABEL_FINISHED_REASON], registry=reg)
        self.success = {reason: success.labels(*values, reason) for reason in FINISH_REASONS}
        self.ttft = Histogram(vl.TIME_TO_FIRST_TOKEN_SECONDS, "Histogram of time to first token in seconds.",
                              names, registry=reg, buckets=VLLM_TTFT_BUCKETS).labels(*values)
        self.itl = Histogram(vl.INTER_TOKEN_LATENCY_SECONDS, "Histogram of inter-token latency in seconds.",
                             names, registry=reg, buckets=VLLM_ITL_BUCKETS).labels(*values)
        self.e2e = Histogram(vl.E2E_REQUEST_LATENCY_SECONDS, "Histogram of e2e request latency in seconds.",
                             names, registry=reg, buckets=VLLM_E2E_BUCKETS).labels(*values)

    def set_load(self, running: int, kv_tokens: int) -> None:
        self.running.set(running)
        self.kv_usage.set(min(kv_tokens / KV_CAPACITY_TOKENS, 1.0))

    def prefill(self, prompt_tokens: int, ttft: float, streaming: bool) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(1)
        self.ttft.observe(ttft)

    def step(self, emitted: int, drafted: int, accepted: int, interval: float) -> None:
        self.generation_tokens.inc(emitted)
        self.itl.observe(interval)
        if drafted:
            self.drafts.inc()
            self.draft_tokens.inc(drafted)
            self.accepted_tokens.inc(accepted)
            for position in range(accepted):
                self.per_position[position].inc()

    def finished(self, *, prompt_tokens: int, generated: int, verify_steps: int, e2e: float,
                 finish_reason: str, streaming: bool) -> None:
        self.success[finish_reason].inc()
        self.e2e.observe(e2e)

    def aborted(self) -> None:
        self.success["abort"].inc()


class SglangExporter(Exporter):
    def __init__(self, model_name: str, num_steps: int, num_draft_tokens: int, *, capped: bool = False,
                 active_steps: Callable[[], int] | None = None) -> None:
        """``capped``: DSpark's confidence head schedules a verify window per step (``spec_cap_length``);
        ``active_steps``: the steps adaptive speculation has active now (None: static steps)."""
        super().__init__()
        reg = self.registry
        sched = {sg.LABEL_MODEL_NAME: model_name, sg.LABEL_ENGINE_TYPE: sg.ENGINE_TYPE_UNIFIED,
                 sg.LABEL_TP_RANK: "0", sg.LABEL_PP_RANK: "0", sg.LABEL_MOE_EP_RANK: "0"}
        tok = {sg.LABEL_MODEL_NAME: model_name, sg.LABEL_ENGINE_TYPE: sg.ENGINE_TYPE_UNIFIED}
        self._tok = tok

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, list(sched), registry=reg).labels(**sched)

        self.k = num_steps
        # SGLang's draft_per_round: the tree's draft tokens minus the root, else the chain's steps.
        self.draft_per_round = num_draft_tokens - 1 if num_draft_tokens else num_steps
        self.spec_accept_length = gauge(
            sg.SPEC_ACCEPT_LENGTH,
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).")
        self.spec_accept_rate = gauge(
            sg.SPEC_ACCEPT_RATE, "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).")
        self.spec_cap_length = gauge(
            SGLANG_SPEC_CAP_LENGTH, "Mean DSpark confidence-scheduled verify window per verify step, incl the "
            "bonus slot (0 when no cap is scheduled).")
        self.spec_block_accept_length = gauge(
            SGLANG_SPEC_BLOCK_ACCEPT_LENGTH, "Mean uncapped full-block accept length per verify step (accept + "
            "cap-trimmed drafts; exact only in DSpark cap-accept mode).")
        self.capped = capped
        self._active_steps = active_steps
        self.spec_num_steps = gauge(sg.SPEC_NUM_STEPS, "Currently active speculative_num_steps.")
        self.spec_num_draft_tokens = gauge(
            sg.SPEC_NUM_DRAFT_TOKENS,
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).")
        self.num_running_reqs = gauge(sg.NUM_RUNNING_REQS, "The number of running requests.")
        self.num_queue_reqs = gauge(sg.NUM_QUEUE_REQS, "The number of requests in the waiting queue.")
        self.gen_throughput = gauge(sg.GEN_THROUGHPUT, "The generation throughput (token/s).")
        self.token_usage = gauge(sg.TOKEN_USAGE, "The token usage.")
        self.cache_hit_rate = gauge(sg.CACHE_HIT_RATE, "The prefix cache hit rate.")
        self.spec_num_steps.set(num_steps)
        # Each gauge as SGLang snapshots it, independently (metrics_reporter.py 518-541): NGRAM may run 0 steps
        # with a window of draft tokens; without speculation the engine passes 0 for both.
        self.spec_num_draft_tokens.set(num_draft_tokens)

        streaming = [*tok, sg.LABEL_IS_STREAMING]
        self.prompt_tokens = Counter(sg.PROMPT_TOKENS, "Number of prefill tokens processed.", streaming, registry=reg)
        self.generation_tokens = Counter(sg.GENERATION_TOKENS, "Number of generation tokens processed.",
                                         streaming, registry=reg)
        # Series appear on the first increment, as in SGLang (only when spec_verify_ct > 0).
        self.spec_verify_calls = Counter(sg.SPEC_VERIFY_CALLS, "Number of speculative decoding verification calls.",
                                         list(tok), registry=reg)
        self.num_requests = Counter(sg.NUM_REQUESTS, "Number of requests processed.", streaming, registry=reg)
        self.num_aborted = Counter(sg.NUM_ABORTED_REQUESTS, "Number of requests aborted.", list(tok), registry=reg)
        self.ttft = Histogram(sg.TIME_TO_FIRST_TOKEN_SECONDS, "Histogram of time to first token in seconds.",
                              streaming, registry=reg, buckets=SGLANG_TTFT_BUCKETS)
        self.itl = Histogram(sg.INTER_TOKEN_LATENCY_SECONDS, "Histogram of inter-token latency in seconds.",
                             list(tok), registry=reg, buckets=SGLANG_ITL_BUCKETS).labels(**tok)
        self.e2e = Histogram(sg.E2E_REQUEST_LATENCY_SECONDS, "Histogram of End-to-end request latency in seconds",
                             streaming, registry=reg, buckets=SGLANG_E2E_BUCKETS)

        # The current logging interval, and lifetime sums for /server_info.
        self._interval_steps = 0
        self._interval_step_tokens = 0
        self._interval_accepted = 0
        self._interval_cap_tokens = 0
        self._interval_tokens = 0
        self._interval_start = time.monotonic()
        self.cum_verify_steps = 0
        self.cum_step_tokens = 0
        self.last_gen_throughput = 0.0

    @property
    def avg_spec_accept_length(self) -> float:
        """Lifetime tokens per verification step (``internal_states[0].avg_spec_accept_length``)."""
        return self.cum_step_tokens / self.cum_verify_steps if self.cum_verify_steps else 0.0

    def _streaming(self, streaming: bool) -> dict[str, str]:
        return {**self._tok, sg.LABEL_IS_STREAMING: "true" if streaming else "false"}

    def set_load(self, running: int, kv_tokens: int) -> None:
        self.num_running_reqs.set(running)
        self.token_usage.set(min(kv_tokens / KV_CAPACITY_TOKENS, 1.0))

    def prefill(self, prompt_tokens: int, ttft: float, streaming: bool) -> None:
        self.ttft.labels(**self._streaming(streaming)).observe(ttft)
        self._interval_tokens += 1

    def step(self, emitted: int, drafted: int, accepted: int, interval: float) -> None:
        # SGLang observes the interval once per new token, at interval / tokens.
        for _ in range(emitted):
            self.itl.observe(interval / emitted)
        self._interval_steps += 1
        self._interval_tokens += emitted
        if self.k:  # a verify forward even when nothing was drafted (no match, a block capped to none)
            self._interval_step_tokens += 1 + accepted
            self._interval_accepted += accepted
            self._interval_cap_tokens += 1 + drafted
            self.cum_verify_steps += 1
            self.cum_step_tokens += 1 + accepted
        if self._interval_steps >= DECODE_LOG_INTERVAL:
            self._log_interval()

    def _log_interval(self) -> None:
        now = time.monotonic()
        elapsed = now - self._interval_start
        self.last_gen_throughput = self._interval_tokens / elapsed if elapsed > 0 else 0.0
        self.gen_throughput.set(self.last_gen_throughput)
        if self.k:
            self.spec_accept_length.set(self._interval_step_tokens / self._interval_steps)
            proposed = self._interval_steps * self.draft_per_round
            self.spec_accept_rate.set(self._interval_accepted / proposed if proposed > 0 else 0.0)
            self.spec_cap_length.set(self._interval_cap_tokens / self._interval_steps if self.capped else 0.0)
            if self._active_steps is not None:
                # SGLang snapshots the worker's active steps at each decode log (a chain: steps + 1 draft tokens);
                # spec_accept_rate above keeps dividing by the start-up draft tokens, as SGLang's does.
                steps = self._active_steps()
                self.spec_num_steps.set(steps)
                self.spec_num_draft_tokens.set(steps + 1)
        self._interval_steps = self._interval_step_tokens = self._interval_accepted = self._interval_tokens = 0
        self._interval_cap_tokens = 0
        self._interval_start = now

    def finished(self, *, prompt_tokens: int, generated: int, verify_steps: int, e2e: float,
                 finish_reason: str, streaming: bool) -> None:
        labels = self._streaming(streaming)
        self.prompt_tokens.labels(**labels).inc(prompt_tokens)
        self.generation_tokens.labels(**labels).inc(generated)
        if verify_steps > 0:
            self.spec_verify_calls.labels(**self._tok).inc(verify_steps)
        self.num_requests.labels(**labels).inc()
        self.e2e.labels(**labels).observe(e2e)

    def aborted(self) -> None:
        self.num_aborted.labels(**self._tok).inc()
