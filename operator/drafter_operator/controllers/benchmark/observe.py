"""What a DrafterBenchmark reconcile reads, as pure functions: the serving it measures (Ready, its
Service, the revision and draft tokens per step it runs, every Ready pod's /metrics), and its own Job and
that Job's own pods (their controller owner references: a label is anyone's to copy), with the bench
container's termination message and the full result from its log (read with a bound, MAX_LOG_BYTES).
"""

from __future__ import annotations

import json
import pydantic

from drafter_operator import engines
from drafter_operator.api import DrafterServing
from drafter_operator.api.serving import DrafterSpec
from drafter_operator.controllers import conditions
from drafter_operator.controllers.benchmark.state import BenchmarkState, ObservedServing
from drafter_operator.resources import engine as engine_resources
from drafter_operator.resources.benchmark_job import CONTAINER, job_name
from drafter_operator.constants import GATE_LABEL, K_ANNOTATION, REVISION_LABEL


def serving_ready(serving: dict | None) -> bool:
    """The serving's Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in ((serving or {}).get("status") or {}).get("conditions") or [])


def serving_spec(target: ObservedServing | None):
    """The serving's validated spec; None when there is no serving or its spec is invalid."""
    if target is None or target.serving is None:
        return None
    try:
        return DrafterServing.model_validate(target.serving).spec
    except pydantic.ValidationError:
        return None


def service_url(target: ObservedServing) -> str | None:
    """The serving's Service by its cluster IP and port (a Job on any node reaches it)."""
    return engine_resources.service_url(target.service)


def measured_revision(body: dict, target: ObservedServing | None) -> tuple[str | None, int | None]:
    """The serving revision a run measures and its draft tokens per step (status.revision and
    status.numSpeculativeTokens, and the bench's --num-speculative-tokens): the serving's active
    revision, with k from that revision's record (mid-swap the spec may already describe the next
    one; without a record, the spec's); for a gate, the revision it gates. Another endpoint run measured a URL,
    no revision, whatever its labels say (anyone who may create the run sets them); its k annotation still
    tells the bench how many tokens the endpoint drafts."""
    if target is None:
        meta = body["metadata"]
        labels, k = meta.get("labels") or {}, (meta.get("annotations") or {}).get(K_ANNOTATION, "")
        return labels.get(REVISION_LABEL) if labels.get(GATE_LABEL) else None, int(k) if k.isdigit() else None
    status = (target.serving or {}).get("status") or {}
    active = status.get("activeRevision")
    record = next((r for r in status.get("revisions") or [] if r.get("name") == active), None)
    try:
        engine, drafter = record["engine"], DrafterSpec.model_validate(record["drafterSpec"])
    except (TypeError, KeyError, pydantic.ValidationError):
        spec = serving_spec(target)
        engine, drafter = (spec.engine, spec.drafter) if spec is not None else ("", None)
    return active, engines.draft_tokens_per_step(engine, drafter) if drafter is not None else None


def metrics_urls(target: ObservedServing) -> list[str]:
    """Every Ready pod of the active revision: acceptance is summed over the replicas, not sampled."""
    status = (target.serving or {}).get("status") or {}
    active = status.get("activeRevision")
    spec = serving_spec(target)
    port = engines.engine(spec.engine).DEFAULT_PORT if spec else 8000
    urls = []
    for pod in target.pods:
        meta, pod_status = pod.get("metadata", {}), pod.get("status", {})
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod_status.get("conditions") or [])
        if meta.get("labels", {}).get(REVISION_LABEL) == active and ready and pod_status.get("podIP") \
                and not meta.get("deletionTimestamp"):
            urls.append(f"http://{pod_status['podIP']}:{port}")
    return sorted(urls)


def termination_message(pod: dict | None) -> tuple[str | None, int | None]:
    """The bench container's termination message and exit code, once it terminated."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            terminated = (status.get("state") or {}).get("terminated")
            if terminated:
                return terminated.get("message"), terminated.get("exitCode")
    return None, None


def job_outcome(job: dict) -> tuple[str, str, str] | None:
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


def swapped_during_run(state: BenchmarkState, status: dict) -> str | None:
    """Why the result belongs to no single revision: the serving's active revision changed since the start."""
    started_on = status.get("revision")
    if state.target is None or started_on is None:
        return None
    active, _ = measured_revision(state.benchmark, state.target)
    if active == started_on:
        return None
    return f"the serving moved from revision {started_on} to {active} during the run: the result belongs to neither"
