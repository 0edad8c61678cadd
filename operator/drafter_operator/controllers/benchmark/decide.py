"""What one DrafterBenchmark reconcile should do, as a pure function: `decide(BenchmarkState) -> Plan`.

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
import functools

import pydantic

from drafter_operator import engines, timestamps
from drafter_operator.api import DrafterBenchmark, parse_duration
from drafter_operator.api.benchmark import benchmark_problems
from drafter_operator.controllers import conditions
from drafter_operator.controllers.benchmark.comparison import decide_comparison
from drafter_operator.controllers.benchmark.observe import (
    controlled_by,
    measured_revision,
    metrics_urls,
    own_job,
    serving_ready,
    serving_spec,
    service_url,
)
from drafter_operator.controllers.benchmark.outcome import Finish, observe_job
from drafter_operator.controllers.benchmark.state import BenchmarkState
from drafter_operator.controllers.conditions import Event
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.resources.labels import drafter_summary
from drafter_operator.controllers.swap import Verdict
from drafter_operator.kube import object_path
from drafter_operator.resources import queueing
from drafter_operator.resources.benchmark_job import (
    INLINE_PROMPTS_FILE,
    PROMPTS_CLAIM_DIR,
    PROMPTS_DIR,
    BenchPod,
    benchmark_job,
    claim_prompts_file,
    job_name,
)
from drafter_operator.constants import DETERMINISTIC_ANNOTATION, DRAFTER_ANNOTATION, ENGINE_ANNOTATION

def decide(state: BenchmarkState) -> Plan:
    """Validate; a finished run stays final; read the run's Job once it exists; else check the references,
    the recorded baseline and the servings' readiness, then start the run."""
    plan = Plan(deletes=stale_jobs(state))
    finish = functools.partial(finish_status, plan, state)
    spec, invalid = validated_spec(state.benchmark)
    if invalid is not None:
        return finish({"state": "Failed"}, Verdict("False", "InvalidSpec", invalid),
                      events=[("Warning", "InvalidSpec", invalid)])
    if run_finished(state):  # a run of this generation that already finished is final
        return plan
    if spec.candidates is not None:
        return decide_comparison(plan, state, spec, finish, functools.partial(_failed, finish, state.now))
    job = own_job(state)
    if job is not None and not controlled_by(job, state.benchmark["metadata"].get("uid")):
        return _failed(finish, state.now, foreign_job(job))
    if job is not None:
        return observe_job(state, spec, job, state.benchmark.get("status") or {}, finish, state.now)
    refused = reference_problems(state, spec)
    if refused is not None:
        return _failed(finish, state.now, refused)
    reference = spec.baseline.benchmark_ref if spec.baseline is not None else None
    recorded = _recorded_baseline(reference, state.baseline_benchmark, state.benchmark["metadata"]["name"])
    if isinstance(recorded, Verdict):
        if recorded.status == "False":
            return _failed(finish, state.now, recorded)
        return finish({"state": "Pending"}, Verdict("False", recorded.reason, recorded.message))
    waiting = serving_wait(state, spec)
    if waiting is not None and waiting.reason == "ServingNotReady":
        return _failed(finish, state.now, waiting)
    if waiting is not None:
        return finish({"state": "Pending"}, waiting)
    return start_run(plan, state, spec, recorded, finish)


def stale_jobs(state: BenchmarkState) -> list[str]:
    """Older generations' Jobs of this benchmark: deleted (never another's Job that copied the label)."""
    meta = state.benchmark["metadata"]
    current = job_name(meta["name"], meta.get("generation") or 1)
    return [object_path("batch/v1", "jobs", meta["namespace"], j["metadata"]["name"]) for j in state.jobs
            if j["metadata"]["name"] != current and not j["metadata"].get("deletionTimestamp")
            and controlled_by(j, meta.get("uid"))]


def finish_status(plan: Plan, state: BenchmarkState, new: dict, complete: Verdict,
                  gate: Verdict | None = None, events: list[Event] | None = None) -> Plan:
    """Status for `new["state"]`: Complete, Failed (True only when the run failed) and GatePassed; only the
    fields that changed go into the plan, and ``events`` only with a change of state or conditions."""
    meta, status = state.benchmark["metadata"], state.benchmark.get("status") or {}
    generation = meta.get("generation") or 1
    failed = Verdict("True", complete.reason, complete.message) if new["state"] == "Failed" else \
        Verdict("False", "NotFailed", "the run has not failed")
    updates = [("Complete", complete), ("Failed", failed)] + ([("GatePassed", gate)] if gate else [])
    merged = conditions.merge(status.get("conditions"), updates, generation, state.now)
    desired = {**new, "observedGeneration": generation, "conditions": merged}
    plan.status = {k: v for k, v in desired.items() if status.get(k) != v}
    if "conditions" in plan.status or "state" in plan.status:
        plan.events += events or []
    return plan


def _failed(finish: Finish, now: dt.datetime, why: Verdict) -> Plan:
    """The run fails before it started: a Warning with the verdict's reason."""
    return finish({"state": "Failed", "completionTime": timestamps.format_seconds(now)}, why,
                  events=[("Warning", why.reason, why.message)])


def validated_spec(body: dict):
    """(the spec, None), or (None, what the API refuses)."""
    try:
        return DrafterBenchmark.model_validate(body).spec, None
    except pydantic.ValidationError as exc:
        return None, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def run_finished(state: BenchmarkState) -> bool:
    """This generation's run already succeeded or failed."""
    status = state.benchmark.get("status") or {}
    return status.get("observedGeneration") == (state.benchmark["metadata"].get("generation") or 1) \
        and status.get("state") in ("Succeeded", "Failed")


def foreign_job(job: dict) -> Verdict:
    """Why a Job of the run's name that this benchmark does not control fails the run."""
    return Verdict("False", "JobNotOwned",
                   f"Job {job['metadata']['name']} exists and is not this DrafterBenchmark's (no controller owner "
                   "reference to it): its result cannot be trusted; delete that Job, or give the benchmark another name")


def reference_problems(state: BenchmarkState, spec) -> Verdict | None:
    """What the references and the tenancy policy refuse: servings missing or unfit, a ServiceAccount not
    allowed (the Job runs the operator's own image; the ServiceAccount is the tenant's, within the policy)."""
    problems = benchmark_problems(spec, serving=serving_spec(state.target), baseline_serving=serving_spec(state.baseline))
    refused = state.tenant_policy.problems(state.benchmark["metadata"]["namespace"], (), (
        "spec.pod.serviceAccountName", spec.pod.service_account_name if spec.pod else None))
    if not (problems or refused):
        return None
    message = "; ".join(problems + refused)
    reason = "ServingNotFound" if "not found" in message else "InvalidReference" if problems else "InvalidSpec"
    return Verdict("False", reason, message)


def serving_wait(state: BenchmarkState, spec) -> Verdict | None:
    """Why the run cannot start yet (a serving not Ready: WaitingForServing), or why it never will
    (ServingNotReady once spec.timeout has passed since the benchmark was created); None: go."""
    waiting = []
    for label, target in (("spec.servingRef", state.target), ("spec.baseline.servingRef", state.baseline)):
        if target is not None and target.serving is not None and not (serving_ready(target.serving) and service_url(target)):
            waiting.append(f"{label}: DrafterServing {target.serving['metadata']['name']!r} is not Ready")
    if not waiting:
        return None
    message = "; ".join(waiting)
    deadline = timestamps.parse(state.benchmark["metadata"]["creationTimestamp"]) + \
        dt.timedelta(seconds=parse_duration(spec.timeout))
    if state.now >= deadline:
        return Verdict("False", "ServingNotReady", f"{message} within spec.timeout {spec.timeout}")
    return Verdict("False", "WaitingForServing", message + ": waiting")


def start_run(plan: Plan, state: BenchmarkState, spec, recorded: float | None,
              finish: Finish) -> Plan:
    """Create the run's Job (the bench command against the serving or the endpoint) and say it started."""
    body, now = state.benchmark, state.now
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation") or 1
    current, target_spec = job_name(name, generation), serving_spec(state.target)
    if state.target is not None:
        url, engine, metrics = service_url(state.target), target_spec.engine, metrics_urls(state.target)
    else:
        url, engine, metrics = str(spec.endpoint).rstrip("/"), _endpoint_engine(body), []
    revision, k = measured_revision(body, state.target)
    baseline_url = service_url(state.baseline) if state.baseline is not None else None
    baseline_spec = serving_spec(state.baseline)
    deterministic = baseline_spec is not None and engines.deterministic_mode(baseline_spec) and \
        _deterministic(body, target_spec)
    argv = bench_argv(spec, url, engine, metrics, target_spec, baseline_url,
                      metrics_urls(state.baseline) if state.baseline is not None else [], k, deterministic)
    if recorded is not None:
        argv += ["--baseline-tps", f"{recorded:g}"]
    prompts = spec.prompts.config_map if spec.prompts is not None else None
    claim = prompts_claim(spec.prompts)
    job = queueing.queued(
        benchmark_job(namespace, name, generation,
                      BenchPod(state.image, argv, (prompts.name, prompts.key) if prompts is not None else None,
                               inline_prompts=spec.prompts.as_file() if spec.prompts is not None else None,
                               resources=spec.resources, policy=spec.pod, placement=spec.placement,
                               prompts_claim=claim),
                      int(parse_duration(spec.timeout))),
        spec.queue_name)
    plan.writes.append(Write("create", "jobs", object_path("batch/v1", "jobs", namespace), job))
    drafter = drafter_summary(target_spec) if target_spec is not None else \
        (meta.get("annotations") or {}).get(DRAFTER_ANNOTATION)
    running = f"Job {current}: {spec.num_prompts} prompts x {spec.max_tokens} tokens, concurrency {concurrency_arg(spec)}"
    return finish({"state": "Running", "jobName": current, "startTime": timestamps.format_seconds(now),
                   "drafter": drafter, "result": None, "display": None, "completionTime": None, "revision": revision,
                   "numSpeculativeTokens": k},
                  Verdict("False", "Running", running), events=[("Normal", "Started", running)])


def prompts_claim(prompts) -> str | None:
    """The claim the benchmark pod mounts read-only for its prompts: a prompts file's or a capture's."""
    if prompts is None:
        return None
    source = prompts.persistent_volume_claim or prompts.capture
    return source.claim_name if source is not None else None


def bench_argv(spec, url: str, engine: str, metrics: list[str], serving_spec, baseline_url: str | None,
               baseline_metrics: list[str], num_speculative_tokens: int | None = None,
               deterministic: bool = False) -> list[str]:
    """The `drafter-operator bench` command line for this run (pure). ``deterministic``: both sides run their
    engine's deterministic mode, so the output check counts every divergence."""
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
    elif spec.prompts is not None and spec.prompts.persistent_volume_claim is not None:  # the claim, mounted read-only
        argv += ["--prompts-file", claim_prompts_file(spec.prompts.persistent_volume_claim.path)]
    elif spec.prompts is not None and spec.prompts.capture is not None:  # the capture's claim, mounted read-only
        captured = spec.prompts.capture
        argv += ["--captured-prompts", PROMPTS_CLAIM_DIR, "--held-out-fraction", captured.held_out_fraction,
                 "--captured-per-category", str(captured.per_category)]
        if captured.captured_before:
            argv += ["--captured-before", captured.captured_before]
    elif spec.prompts is not None:  # inline or categorized: the pod template carries them (benchmark_job)
        argv += ["--prompts-file", INLINE_PROMPTS_FILE]
    if spec.prompt_length_buckets:
        argv += ["--prompt-length-buckets", ",".join(map(str, spec.prompt_length_buckets))]
    if spec.acceptance_by_category:
        argv.append("--acceptance-by-category")
    if spec.equivalence is not None and baseline_url:
        argv += ["--equivalence-prompts", str(spec.equivalence.num_prompts),
                 "--equivalence-tokens", str(spec.equivalence.max_tokens),
                 "--equivalence-margin", spec.equivalence.min_margin]
        if deterministic:
            argv.append("--deterministic")
    return argv


def _deterministic(body: dict, target_spec) -> bool:
    """Whether the measured side runs its engine's deterministic mode: from its serving's spec, or for a gate's
    endpoint from the annotation the gate was made with."""
    if target_spec is not None:
        return engines.deterministic_mode(target_spec)
    return (body["metadata"].get("annotations") or {}).get(DETERMINISTIC_ANNOTATION) == "true"


def concurrency_arg(spec) -> str:
    """One level, or the sweep's levels in the order given (the client runs them in that order)."""
    return ",".join(map(str, spec.concurrency_levels)) if spec.concurrency_levels else str(spec.concurrency)


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
    """An endpoint outside the operator: its engine from the annotation, engines.DEFAULT_ENGINE (vLLM) when unsaid."""
    return (body["metadata"].get("annotations") or {}).get(ENGINE_ANNOTATION) or engines.DEFAULT_ENGINE
