"""What one DrafterBenchmark reconcile should do, as a pure function: `decide(BenchmarkState) -> BenchmarkPlan`.

A benchmark is one recorded run: a Job (resources/benchmark_job.py) runs `drafter-operator bench`
against the serving's Service (requests) and each Ready pod of its active revision (/metrics, so
acceptance covers every replica), and its termination message becomes `status.result`. Only the
benchmark's own Job (its controller owner reference is this benchmark's UID) and that Job's own pods
(controller owner: the Job's UID) are read or deleted: a label is anyone's to set in the namespace, so a
pod or Job that merely carries the benchmark's labels is ignored. The full result on the bench's stdout
is read with a bound (MAX_LOG_BYTES) and refused above it. A finished
run is never repeated; a spec change (a new generation) is a new run with a new Job, and the Jobs of
older generations are deleted. While the serving is not Ready the benchmark waits, and fails with the
reason once `spec.timeout` has passed since it was created.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

import pydantic

from drafter_operator import engines
from drafter_operator.api import DrafterBenchmark, DrafterServing, parse_decimal, parse_duration
from drafter_operator.api.benchmark import BenchmarkResult, benchmark_problems
from drafter_operator.api.serving import DrafterSpec
from drafter_operator.benchmark_client.result import TERMINATION_MESSAGE_LIMIT
from drafter_operator.controllers import conditions
from drafter_operator.controllers.revisions import drafter_summary
from drafter_operator.controllers.swap import Verdict
from drafter_operator.kube import object_path
from drafter_operator.resources import engine as engine_resources
from drafter_operator.resources.benchmark_job import (
    CONTAINER,
    PROMPTS_DIR,
    benchmark_job,
    benchmark_labels,
    job_name,
    result_config_map_name,
)
from drafter_operator.resources.gate import DRAFTER_ANNOTATION, ENGINE_ANNOTATION, K_ANNOTATION
from drafter_operator.resources.labels import REVISION_LABEL
from drafter_operator.resources.pod_policy import TenantPolicy

Event = tuple[str, str, str]


@dataclass(frozen=True)
class Target:
    """A DrafterServing as the benchmark needs it: its object, Service and pods."""

    serving: dict | None
    service: dict | None = None
    pods: tuple[dict, ...] = ()


@dataclass(frozen=True)
class BenchmarkState:
    benchmark: dict
    target: Target | None  # spec.servingRef (None with spec.endpoint)
    baseline: Target | None  # spec.baseline.servingRef
    jobs: tuple[dict, ...]  # Jobs labelled with this benchmark, and the current generation's Job by name
    job_pods: tuple[dict, ...]  # pods labelled with this benchmark (only the Job's own are read: own_pods)
    now: dt.datetime
    image: str  # the operator's image, which the Job runs
    detail: dict | None = None  # the full result the bench container printed (its log), once it succeeded
    detail_problem: str | None = None  # why that log is no full result (parse_detail), when it is not
    # spec.baseline.benchmarkRef: the DrafterBenchmark named (None when absent); unset without a benchmarkRef
    baseline_benchmark: dict | None = None
    tenant_policy: TenantPolicy = field(default_factory=TenantPolicy.from_env)  # ServiceAccounts allowed


@dataclass
class BenchmarkPlan:
    create: dict | None = None  # the Job to create
    config_map: dict | None = None  # the full result, when it is first known
    deletes: list[str] = field(default_factory=list)  # Jobs of older generations
    status: dict = field(default_factory=dict)  # only the fields that changed
    events: list[Event] = field(default_factory=list)

    def writes_anything(self) -> bool:
        return bool(self.create or self.config_map or self.deletes or self.status or self.events)


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(serving: dict | None) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in ((serving or {}).get("status") or {}).get("conditions") or [])


def _serving_spec(target: Target | None):
    if target is None or target.serving is None:
        return None
    try:
        return DrafterServing.model_validate(target.serving).spec
    except pydantic.ValidationError:
        return None


def service_url(target: Target) -> str | None:
    """The serving's Service by its cluster IP and port (a Job on any node reaches it)."""
    return engine_resources.service_url(target.service)


def measured_revision(body: dict, target: Target | None) -> tuple[str | None, int | None]:
    """The serving revision a run measures and its draft tokens per step (status.revision and
    status.numSpeculativeTokens, and the bench's --num-speculative-tokens): the serving's active
    revision, with k from that revision's record (mid-swap the spec may already describe the next
    one; without a record, the spec's); for a gate, the revision it gates."""
    if target is None:
        meta = body["metadata"]
        k = (meta.get("annotations") or {}).get(K_ANNOTATION, "")
        return (meta.get("labels") or {}).get(REVISION_LABEL), int(k) if k.isdigit() else None
    status = (target.serving or {}).get("status") or {}
    active = status.get("activeRevision")
    record = next((r for r in status.get("revisions") or [] if r.get("name") == active), None)
    try:
        engine, drafter = record["engine"], DrafterSpec.model_validate(record["drafterSpec"])
    except (TypeError, KeyError, pydantic.ValidationError):
        spec = _serving_spec(target)
        engine, drafter = (spec.engine, spec.drafter) if spec is not None else ("", None)
    return active, engines.draft_tokens_per_step(engine, drafter) if drafter is not None else None


def metrics_urls(target: Target) -> list[str]:
    """Every Ready pod of the active revision: acceptance is summed over the replicas, not sampled."""
    status = (target.serving or {}).get("status") or {}
    active = status.get("activeRevision")
    spec = _serving_spec(target)
    port = engines.engine(spec.engine).DEFAULT_PORT if spec else 8000
    urls = []
    for pod in target.pods:
        meta, pod_status = pod.get("metadata", {}), pod.get("status", {})
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod_status.get("conditions") or [])
        if meta.get("labels", {}).get(REVISION_LABEL) == active and ready and pod_status.get("podIP") \
                and not meta.get("deletionTimestamp"):
            urls.append(f"http://{pod_status['podIP']}:{port}")
    return sorted(urls)


def bench_argv(spec, url: str, engine: str, metrics: list[str], serving_spec, baseline_url: str | None,
               baseline_metrics: list[str], num_speculative_tokens: int | None = None) -> list[str]:
    """The `drafter-operator bench` command line for this run (pure)."""
    argv = ["--url", url, "--engine", engine, "--num-prompts", str(spec.num_prompts),
            "--max-tokens", str(spec.max_tokens), "--concurrency", concurrency_arg(spec),
            "--repetitions", str(spec.repetitions), "--temperature", spec.temperature,
            "--termination-log", "/dev/termination-log"]
    model = spec.model or (serving_spec.target.served_model_name or serving_spec.target.model if serving_spec else None)
    if model:
        argv += ["--model", model]
    for metrics_url in metrics:
        argv += ["--metrics-url", metrics_url]
    if num_speculative_tokens:
        argv += ["--num-speculative-tokens", str(num_speculative_tokens)]
    if baseline_url:
        argv += ["--baseline-url", baseline_url]
        for metrics_url in baseline_metrics:
            argv += ["--baseline-metrics-url", metrics_url]
    elif spec.baseline is not None and spec.baseline.tokens_per_second is not None:
        argv += ["--baseline-tps", spec.baseline.tokens_per_second]
    if spec.prompts is not None and spec.prompts.config_map is not None:
        argv += ["--prompts-file", f"{PROMPTS_DIR}/{spec.prompts.config_map.key}"]
    return argv


def concurrency_arg(spec) -> str:
    """One level, or the sweep's levels in the order given (the client runs them in that order)."""
    return ",".join(map(str, spec.concurrency_levels)) if spec.concurrency_levels else str(spec.concurrency)


def gate_verdict(result: BenchmarkResult, gate) -> Verdict | None:
    """GatePassed from spec.gate: every threshold set must be met; the message names each one missed."""
    if gate is None:
        return None
    missed = []
    checks = ((gate.min_speedup, result.speedup, "speedup", "{:.2f}x"),
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
        return Verdict("False", "BelowGate", "; ".join(missed))
    return Verdict("True", "GateMet", "every spec.gate threshold met")


def termination_message(pod: dict | None) -> tuple[str | None, int | None]:
    """The bench container's termination message and exit code, once it terminated."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            terminated = (status.get("state") or {}).get("terminated")
            if terminated:
                return terminated.get("message"), terminated.get("exitCode")
    return None, None


def _job_finished(job: dict) -> tuple[str, str, str] | None:
    """("Complete" | "Failed", reason, message) from the Job's conditions."""
    cond = conditions.job_finished(job)
    return None if cond is None else (cond["type"], cond.get("reason") or cond["type"], cond.get("message") or "")


def controlled_by(obj: dict, uid: str | None) -> bool:
    """`obj`'s controller owner reference names `uid`: the Job controller sets it on the pods it creates, and
    the operator on the Jobs it creates, where a label is anyone's to copy."""
    return bool(uid) and any(ref.get("controller") and ref.get("uid") == uid
                             for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def own_job(state: BenchmarkState) -> dict | None:
    """The current generation's Job, when it exists (owned or not: decide refuses one it does not own)."""
    meta = state.benchmark["metadata"]
    current = job_name(meta["name"], meta.get("generation") or 1)
    return next((j for j in state.jobs if j["metadata"]["name"] == current), None)


def own_pods(state: BenchmarkState, job: dict | None) -> list[dict]:
    """The pods `job` created, provided the Job is this benchmark's own."""
    if job is None or not controlled_by(job, state.benchmark["metadata"].get("uid")):
        return []
    return [p for p in state.job_pods if controlled_by(p, job["metadata"].get("uid"))]


def result_pod(state: BenchmarkState) -> dict | None:
    """The own Job's pod whose bench container succeeded: the one whose log holds the full result."""
    return next((p for p in own_pods(state, own_job(state)) if termination_message(p)[1] == 0), None)


#: The most of the bench's stdout read back (the log request's limitBytes is one more, to tell "over").
#: 1,000 prompts make about 200 KB; a run of numPrompts x repetitions beyond ~15,000 prompts is over it.
MAX_LOG_BYTES = 4 * 1024 * 1024


def parse_detail(text: str) -> dict | str:
    """The full result from the bench's log (read with limitBytes MAX_LOG_BYTES + 1), or why it is none."""
    if len(text.encode()) > MAX_LOG_BYTES:
        return (f"the bench output is over {MAX_LOG_BYTES // (1024 * 1024)} MiB, so the full result was not read: "
                "status.result holds the summary; lower spec.numPrompts x spec.repetitions for per-prompt detail")
    try:
        detail = json.loads(text)
    except ValueError as exc:
        return f"the bench output is not JSON ({exc}), so the full result was not read: status.result holds the summary"
    if not isinstance(detail, dict):
        return "the bench output is not a JSON object, so the full result was not read: status.result holds the summary"
    return detail


def decide(state: BenchmarkState) -> BenchmarkPlan:
    body = state.benchmark
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation") or 1
    status = body.get("status") or {}
    now = state.now
    plan = BenchmarkPlan()
    current = job_name(name, generation)
    plan.deletes = [object_path("batch/v1", "jobs", namespace, j["metadata"]["name"]) for j in state.jobs
                    if j["metadata"]["name"] != current and not j["metadata"].get("deletionTimestamp")
                    and controlled_by(j, meta.get("uid"))]  # never another's Job that copied the label

    def finish(new: dict, complete: Verdict, gate: Verdict | None = None, events: list[Event] | None = None) -> BenchmarkPlan:
        """Status for `new["state"]`: Complete, Failed (True only when the run failed) and GatePassed."""
        failed = Verdict("True", complete.reason, complete.message) if new["state"] == "Failed" else \
            Verdict("False", "NotFailed", "the run has not failed")
        updates = [("Complete", complete), ("Failed", failed)] + ([("GatePassed", gate)] if gate else [])
        merged = conditions.merge(status.get("conditions"), updates, generation, now)
        desired = {**new, "observedGeneration": generation, "conditions": merged}
        plan.status = {k: v for k, v in desired.items() if status.get(k) != v}
        if "conditions" in plan.status or "state" in plan.status:
            plan.events += events or []
        return plan

    try:
        benchmark = DrafterBenchmark.model_validate(body)
    except pydantic.ValidationError as exc:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return finish({"state": "Failed"}, Verdict("False", "InvalidSpec", message), events=[("Warning", "InvalidSpec", message)])
    spec = benchmark.spec

    # A run of this generation that already finished is final.
    if status.get("observedGeneration") == generation and status.get("state") in ("Succeeded", "Failed"):
        return plan

    job = own_job(state)
    if job is not None and not controlled_by(job, meta.get("uid")):
        message = (f"Job {current} exists and is not this DrafterBenchmark's (no controller owner reference to it): "
                   "its result cannot be trusted; delete that Job, or give the benchmark another name")
        return finish({"state": "Failed", "completionTime": iso(now)}, Verdict("False", "JobNotOwned", message),
                      events=[("Warning", "JobNotOwned", message)])
    if job is not None:
        return _observe_job(state, spec, job, status, finish, now)

    serving_spec, baseline_spec = _serving_spec(state.target), _serving_spec(state.baseline)
    problems = benchmark_problems(spec, serving=serving_spec, baseline_serving=baseline_spec)
    # The Job runs the operator's own image; the ServiceAccount is the tenant's to choose, within the policy.
    refused = state.tenant_policy.problems(namespace, (), ("spec.pod.serviceAccountName",
                                           spec.pod.service_account_name if spec.pod else None))
    if problems or refused:
        message = "; ".join(problems + refused)
        reason = "ServingNotFound" if "not found" in message else "InvalidReference" if problems else "InvalidSpec"
        return finish({"state": "Failed", "completionTime": iso(now)}, Verdict("False", reason, message),
                      events=[("Warning", reason, message)])

    reference = spec.baseline.benchmark_ref if spec.baseline is not None else None
    recorded = _recorded_baseline(reference, state.baseline_benchmark, name)
    if isinstance(recorded, Verdict):
        if recorded.status == "False":
            return finish({"state": "Failed", "completionTime": iso(now)}, recorded,
                          events=[("Warning", recorded.reason, recorded.message)])
        return finish({"state": "Pending"}, Verdict("False", recorded.reason, recorded.message))

    waiting = []
    for label, target in (("spec.servingRef", state.target), ("spec.baseline.servingRef", state.baseline)):
        if target is not None and target.serving is not None and not (_ready(target.serving) and service_url(target)):
            waiting.append(f"{label}: DrafterServing {target.serving['metadata']['name']!r} is not Ready")
    if waiting:
        message = "; ".join(waiting)
        deadline = parse_time(meta["creationTimestamp"]) + dt.timedelta(seconds=parse_duration(spec.timeout))
        if now >= deadline:
            message += f" within spec.timeout {spec.timeout}"
            return finish({"state": "Failed", "completionTime": iso(now)}, Verdict("False", "ServingNotReady", message),
                          events=[("Warning", "ServingNotReady", message)])
        return finish({"state": "Pending"}, Verdict("False", "WaitingForServing", message + ": waiting"))

    if state.target is not None:
        url, engine = service_url(state.target), serving_spec.engine
        metrics = metrics_urls(state.target)
    else:
        url, engine, metrics = str(spec.endpoint).rstrip("/"), _endpoint_engine(body), []
    revision, k = measured_revision(body, state.target)
    baseline_url = service_url(state.baseline) if state.baseline is not None else None
    argv = bench_argv(spec, url, engine, metrics, serving_spec, baseline_url,
                      metrics_urls(state.baseline) if state.baseline is not None else [], k)
    if recorded is not None:
        argv += ["--baseline-tps", f"{recorded:g}"]
    prompts = spec.prompts.config_map if spec.prompts is not None else None
    plan.create = benchmark_job(namespace, name, generation, state.image, argv, int(parse_duration(spec.timeout)),
                                (prompts.name, prompts.key) if prompts is not None else None,
                                resources=spec.resources, policy=spec.pod, placement=spec.placement)
    drafter = drafter_summary(serving_spec) if serving_spec is not None else \
        (meta.get("annotations") or {}).get(DRAFTER_ANNOTATION)
    running = f"Job {current}: {spec.num_prompts} prompts x {spec.max_tokens} tokens, concurrency {concurrency_arg(spec)}"
    return finish({"state": "Running", "jobName": current, "startTime": iso(now), "drafter": drafter, "result": None,
                   "completionTime": None, "revision": revision, "numSpeculativeTokens": k},
                  Verdict("False", "Running", running), events=[("Normal", "Started", running)])


def _recorded_baseline(reference, benchmark: dict | None, own_name: str) -> float | Verdict | None:
    """spec.baseline.benchmarkRef: the other run's tok/s, or a Verdict saying why there is none yet
    (status "Unknown": wait for it; "False": fail)."""
    if reference is None:
        return None
    field = f"spec.baseline.benchmarkRef: DrafterBenchmark {reference.name!r}"
    if reference.name == own_name:
        return Verdict("False", "InvalidReference", f"{field} is this benchmark: name a no-speculation run")
    if benchmark is None:
        return Verdict("False", "BaselineNotFound", f"{field} not found in this namespace: create it or fix the name")
    status = benchmark.get("status") or {}
    if status.get("state") == "Failed":
        return Verdict("False", "BaselineFailed", f"{field} failed: run it again or name another")
    tps = (status.get("result") or {}).get("tokensPerSecond")
    if status.get("state") != "Succeeded":
        return Verdict("Unknown", "WaitingForBaseline", f"{field} has not finished: waiting")
    if not tps:
        return Verdict("False", "BaselineFailed", f"{field} recorded no tokensPerSecond")
    return float(tps)


def _endpoint_engine(body: dict) -> str:
    """An endpoint outside the operator: its engine from the annotation, vLLM when unsaid."""
    return (body["metadata"].get("annotations") or {}).get(ENGINE_ANNOTATION) or "vllm"



def _observe_job(state: BenchmarkState, spec, job: dict, status: dict, finish, now: dt.datetime) -> BenchmarkPlan:
    name = job["metadata"]["name"]
    pods = own_pods(state, job)
    message, exit_code = next(((m, c) for m, c in map(termination_message, pods) if c is not None), (None, None))
    finished = _job_finished(job)
    if exit_code == 0 and message:
        plan = _succeeded(spec, message, finish, now, _swapped_during_run(state, status))
        meta = state.benchmark["metadata"]
        if plan.status.get("state") != "Succeeded":
            return plan
        if state.detail is not None:
            plan.config_map = result_config_map(meta["namespace"], meta["name"], state.detail)
        elif state.detail_problem is not None:  # the summary, saying why the detail is missing
            plan.config_map = result_config_map(meta["namespace"], meta["name"],
                                                {**(plan.status.get("result") or status.get("result") or {}),
                                                 "truncated": state.detail_problem})
            plan.events.append(("Warning", "ResultTruncated", state.detail_problem))
        if plan.config_map is not None:
            plan.status["resultConfigMap"] = plan.config_map["metadata"]["name"]
        return plan
    if finished is None:  # running, or the container ended and the Job controller has not said so yet
        return finish({"state": "Running", "jobName": name}, Verdict("False", "Running", f"Job {name} is running"))
    reason = finished[1]
    text = ((message or "").strip() or finished[2] or f"Job {name} failed ({reason})")[:1000]
    return finish({"state": "Failed", "completionTime": iso(now)}, Verdict("False", reason, text),
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


def _swapped_during_run(state: BenchmarkState, status: dict) -> str | None:
    """Why the result belongs to no single revision: the serving's active revision changed since the start."""
    started_on = status.get("revision")
    if state.target is None or started_on is None:
        return None
    active, _ = measured_revision(state.benchmark, state.target)
    if active == started_on:
        return None
    return f"the serving moved from revision {started_on} to {active} during the run: the result belongs to neither"


def _succeeded(spec, message: str, finish, now: dt.datetime, swapped: str | None = None) -> BenchmarkPlan:
    try:
        size = len(message.encode())
        if size > TERMINATION_MESSAGE_LIMIT:  # the kubelet keeps no more; a longer one did not come from it
            raise ValueError(f"{size} bytes, over the {TERMINATION_MESSAGE_LIMIT} a termination message holds")
        result = BenchmarkResult.model_validate(json.loads(message))
    except (ValueError, pydantic.ValidationError) as exc:
        text = f"the bench container's termination message is not a result: {exc}"[:1000]
        return finish({"state": "Failed", "completionTime": iso(now)}, Verdict("False", "InvalidResult", text),
                      events=[("Warning", "InvalidResult", text)])
    gate = gate_verdict(result, spec.gate)
    if gate is not None:
        result = result.model_copy(update={"verdict": "Passed" if gate.status == "True" else "Failed",
                                           "verdict_message": gate.message})
    summary = _summary(result) + (f"; {swapped}" if swapped else "")
    events = [("Normal", "Completed", summary)]
    if gate is not None and gate.status == "False":
        events.append(("Warning", "BelowGate", gate.message))
    done = {"state": "Succeeded", "completionTime": iso(now), "result": result.to_json()}
    if swapped:
        done.update(revision=None, numSpeculativeTokens=None)  # never taught to a revision it did not measure
    return finish(done, Verdict("True", "Succeeded", summary), gate, events)


def _summary(result: BenchmarkResult) -> str:
    parts = [f"{result.tokens_per_second:.1f} tok/s" if result.tokens_per_second is not None else "no throughput"]
    if result.speedup is not None:
        parts.append(f"{result.speedup:.2f}x against {result.baseline_tokens_per_second:.1f} tok/s")
    if result.acceptance_rate is not None:
        parts.append(f"acceptance {result.acceptance_rate:.1%}")
    if result.levels:
        bracket = result.crossover
        parts.append("slower than the baseline from concurrency " + str(result.crossover_concurrency)
                     if result.crossover_concurrency is not None else
                     f"faster than the baseline at every level up to {max(lv.concurrency for lv in result.levels)}")
        if bracket is not None and bracket.above_concurrency is not None:
            parts.append(f"break-even between {bracket.above_concurrency} and {bracket.below_concurrency} streams "
                         f"(about {bracket.estimate})")
    return ", ".join(parts)
