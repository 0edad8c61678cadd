"""A DrafterBenchmark run's outcome, as pure functions: its Job's end read into status (the bench
container's termination message as `status.result`, checked against spec.gate), the one-line summary
its Completed event and condition carry, and the ConfigMap that holds the full result.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

import pydantic

from drafter_operator import figures, timestamps
from drafter_operator.api import parse_decimal
from drafter_operator.api.benchmark import BenchmarkResult
from drafter_operator.benchmark_client.equivalence import defect_message
from drafter_operator.benchmark_client.result import TERMINATION_MESSAGE_LIMIT
from drafter_operator.controllers.benchmark.state import BenchmarkState
from drafter_operator.controllers.benchmark.observe import job_outcome, own_pods, swapped_during_run, termination_message
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.controllers.swap import Verdict
from drafter_operator.kube import object_path
from drafter_operator.resources import queueing
from drafter_operator.resources.benchmark_job import benchmark_labels, result_config_map_name

#: Sets the plan's status for a new state (decide.finish_status, bound to one plan and state).
Finish = Callable[..., Plan]


def gate_verdict(result: BenchmarkResult, gate, equivalence=None) -> Verdict | None:
    """GatePassed from spec.gate and spec.equivalence: every threshold set must be met and the outputs must show
    no defect; the message names each one missed (the output defect first, with its prompt and token)."""
    if gate is None and equivalence is None:
        return None
    missed = []
    if equivalence is not None:
        outputs = result.equivalence
        if outputs is None:
            missed.append("the output check did not run (spec.equivalence needs spec.baseline.servingRef)")
        elif outputs.defects:
            missed.append(defect_message(outputs))
    diverged = bool(missed)
    checks = () if gate is None else (
        (gate.min_speedup, result.speedup, "speedup", "{:.2f}x"),
        (gate.min_acceptance_rate, result.acceptance_rate, "acceptance rate", "{:.1%}"),
        (gate.min_tokens_per_second, result.tokens_per_second, "tokens per second", "{:.1f}"))
    for threshold, value, what, fmt in checks:
        if threshold is None:
            continue
        limit = parse_decimal(threshold)
        if value is None:
            missed.append(f"{what} was not measured (needed >= {fmt.format(limit)})")
        elif value < limit:
            missed.append(f"{what} {fmt.format(value)} < {fmt.format(limit)}")
    if missed:
        return Verdict("False", "OutputDiverged" if diverged else "BelowGate", "; ".join(missed))
    if gate is None:
        return Verdict("True", "GateMet", f"outputs match the baseline ({_outputs(result)})")
    return Verdict("True", "GateMet", "every spec.gate threshold met" +
                   (f"; outputs match the baseline ({_outputs(result)})" if equivalence is not None else ""))


def _outputs(result: BenchmarkResult) -> str:
    outputs = result.equivalence
    return f"{outputs.identical} of {outputs.prompts} identical, {outputs.near_ties} near-ties" if outputs else ""


def observe_job(state: BenchmarkState, spec, job: dict, status: dict, finish: Finish, now: dt.datetime) -> Plan:
    """The run's Job: still running, failed with its reason, or succeeded with its result (and the full
    result's ConfigMap, or the summary saying why the full result is missing)."""
    name = job["metadata"]["name"]
    pods = own_pods(state, job)
    message, exit_code = next(((m, c) for m, c in map(termination_message, pods) if c is not None), (None, None))
    finished = job_outcome(job)
    if exit_code == 0 and message:
        plan = succeeded(spec, message, finish, now, swapped_during_run(state, status))
        meta = state.benchmark["metadata"]
        if plan.status.get("state") != "Succeeded":
            return plan
        config_map = None
        if state.detail is not None:
            config_map = result_config_map(meta["namespace"], meta["name"], state.detail)
        elif state.detail_problem is not None:  # the summary, saying why the detail is missing
            config_map = result_config_map(meta["namespace"], meta["name"],
                                           {**(plan.status.get("result") or status.get("result") or {}),
                                            "truncated": state.detail_problem})
            plan.events.append(("Warning", "ResultTruncated", state.detail_problem))
        if config_map is not None:
            plan.writes.append(Write("create", "configmaps", object_path("v1", "configmaps", meta["namespace"]), config_map))
            plan.status["resultConfigMap"] = config_map["metadata"]["name"]
        return plan
    waiting = queueing.admission_wait(job, state.workloads)
    if finished is None and waiting is not None:  # Kueue has not admitted it: spec.timeout starts once it does
        return finish({"state": "Running", "jobName": name}, Verdict("False", "Queued", f"Job {name} {waiting}"))
    if finished is None:  # running, or the container ended and the Job controller has not said so yet
        return finish({"state": "Running", "jobName": name}, Verdict("False", "Running", f"Job {name} is running"))
    reason = finished[1]
    text = ((message or "").strip() or finished[2] or f"Job {name} failed ({reason})")[:1000]
    return finish({"state": "Failed", "completionTime": timestamps.format_seconds(now)}, Verdict("False", reason, text),
                  events=[("Warning", reason, text)])


#: A ConfigMap holds at most 1 MiB; the full result of 1,000 prompts is about 200 KB.
MAX_DETAIL_BYTES = 900 * 1024


def result_config_map(namespace: str, benchmark: str, detail: dict) -> dict:
    """The full result beside the compact one in status (pure)."""
    text = json.dumps(detail, indent=1)
    if len(text.encode()) > MAX_DETAIL_BYTES:
        text = json.dumps({**{k: v for k, v in detail.items() if k not in ("prompts", "levels")},
                           "truncated": "prompts and levels dropped: over 900 KiB"}, indent=1)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": result_config_map_name(benchmark), "namespace": namespace, "labels": benchmark_labels(benchmark)},
            "data": {"result.json": text}}


def succeeded(spec, message: str, finish: Finish, now: dt.datetime, swapped: str | None = None) -> Plan:
    """The bench container succeeded: its termination message is the result, checked against spec.gate."""
    try:
        size = len(message.encode())
        if size > TERMINATION_MESSAGE_LIMIT:  # the kubelet keeps no more; a longer one did not come from it
            raise ValueError(f"{size} bytes, over the {TERMINATION_MESSAGE_LIMIT} a termination message holds")
        result = BenchmarkResult.model_validate(json.loads(message))
    except (ValueError, pydantic.ValidationError) as exc:
        text = f"the bench container's termination message is not a result: {exc}"[:1000]
        return finish({"state": "Failed", "completionTime": timestamps.format_seconds(now)},
                      Verdict("False", "InvalidResult", text), events=[("Warning", "InvalidResult", text)])
    gate = gate_verdict(result, spec.gate, spec.equivalence)
    if gate is not None:
        result = result.model_copy(update={"verdict": "Passed" if gate.status == "True" else "Failed",
                                           "verdict_message": gate.message})
    summary = result_summary(result) + (f"; {swapped}" if swapped else "")
    events = [("Normal", "Completed", summary)]
    if gate is not None and gate.status == "False":
        events.append(("Warning", gate.reason, gate.message))
    done = {"state": "Succeeded", "completionTime": timestamps.format_seconds(now), "result": result.to_json(),
            "display": figures.shown({"tokensPerSecond": result.tokens_per_second, "speedup": result.speedup,
                                      "acceptance": result.acceptance_rate})}
    if swapped:
        done.update(revision=None, numSpeculativeTokens=None)  # never taught to a revision it did not measure
    return finish(done, Verdict("True", "Succeeded", summary), gate, events)


def result_summary(result: BenchmarkResult) -> str:
    parts = [f"{figures.throughput(result.tokens_per_second)} tok/s" if result.tokens_per_second is not None
             else "no throughput"]
    if result.speedup is not None:
        parts.append(f"{figures.speedup(result.speedup)} against {result.baseline_tokens_per_second:.1f} tok/s")
    if result.acceptance_rate is not None:
        parts.append(f"acceptance {figures.percent(result.acceptance_rate)}")
    if result.equivalence is not None:
        outputs = result.equivalence
        parts.append(f"outputs {outputs.identical}/{outputs.prompts} identical to the baseline, {outputs.defects} defects")
    if result.levels:
        bracket = result.crossover
        parts.append("slower than the baseline from concurrency " + str(result.crossover_concurrency)
                     if result.crossover_concurrency is not None else
                     f"faster than the baseline at every level up to {max(lv.concurrency for lv in result.levels)}")
        if bracket is not None and bracket.above_concurrency is not None:
            parts.append(f"break-even between {bracket.above_concurrency} and {bracket.below_concurrency} streams "
                         f"(about {bracket.estimate})")
    return ", ".join(parts)
