"""A DrafterTraining whose spec the operator refuses, as a pure function: what an SRE paged at night wants.

A spec is refused when the API models reject it, when the administrator's `tenancy` settings refuse its images
or ServiceAccount (set mid-run, or tightened since it started), or when an upgraded operator refuses a stored
spec. Nothing of it may go on: the run cannot reach Export under a spec nobody may run, and what it holds costs
GPUs. So the refusal stops what runs, and keeps what it has:

* the unfinished stage Jobs (of any generation) and Generate's engine are deleted: no GPU stays held for it;
* the hidden-state claim and the record of the stages done (their conditions, status.completedStages and
  artifacts) stay, and so do the finished Jobs, so a corrected spec resumes after the last stage done (a
  stage whose inputs it kept is carried over: training/inputs.py), and an allow-list loosened again resumes
  the same generation; a Train started again resumes from its last checkpoint (training/checkpoints.py);
* `status.stage` is Failed and `Ready` is False with reason InvalidSpec, naming the field, the fix and where
  the run will resume; a Warning Event says it once.
"""

from __future__ import annotations

from drafter_operator.controllers import conditions
from drafter_operator.controllers.swap import Verdict
from drafter_operator.controllers.training.generate import idle_engine_deletes
from drafter_operator.controllers.training.observe import left_by_earlier
from drafter_operator.controllers.training.stages import JOB_STAGES, STAGE_CONDITIONS
from drafter_operator.controllers.plan import Plan
from drafter_operator.controllers.training.status import set_stage_status
from drafter_operator.kube import object_path

#: What a refused run's Ready condition adds to the refusal.
KEPT = "the stages done and the hidden-state claim are kept"
#: A refused run's Ready reason.
REFUSED = "InvalidSpec"


def resumes_once_allowed(status: dict) -> bool:
    """Stopped by its refused spec before it ended, so it goes on by itself once the spec is allowed again. A run
    that had ended before the refusal (every stage's condition True, or one False: the stage that failed it) is
    refused too, at its resync, but nothing of it runs again."""
    found = {c.get("type"): c for c in status.get("conditions") or []}
    ready = found.get("Ready") or {}
    if ready.get("status") != "False" or ready.get("reason") != REFUSED:
        return False
    stages = [found.get(condition) or {} for condition in STAGE_CONDITIONS.values()]
    run_stages = [c for c in stages if c]
    return not any(c.get("status") == "False" for c in run_stages) and \
        not (run_stages and all(c.get("status") == "True" for c in run_stages))


def stop_jobs(plan: Plan, jobs, namespace: str) -> Plan:
    """Delete the unfinished ``jobs`` not already being deleted, each only as read: one that finished since (a
    lagging Job list) is kept, since its completion is the record that its stage is done, and the next decision
    sees it."""
    for job in jobs:
        if conditions.job_finished(job) is not None or job["metadata"].get("deletionTimestamp"):
            continue
        path = object_path("batch/v1", "jobs", namespace, job["metadata"]["name"])
        plan.deletes.append(path)
        if job["metadata"].get("resourceVersion"):
            plan.delete_if_unchanged[path] = job["metadata"]["resourceVersion"]
    return plan


def resumes_after(status: dict) -> str:
    """Where a corrected spec resumes, in words: after the last stage done, or from the start."""
    done = [c.get("stage") for c in status.get("completedStages") or [] if c.get("stage") in JOB_STAGES]
    return f"a corrected spec resumes after {done[-1]}" if done else "a corrected spec starts from the first stage"


def refused_plan(state, invalid: str):
    """The plan of a refused spec: stop what runs, keep the record, say why and how to go on."""
    meta = state.training["metadata"]
    namespace = meta["namespace"]
    status = state.training.get("status") or {}
    # Every generation's stage Jobs of this training (none an earlier same-named training left).
    ours = [j for j in state.jobs if not left_by_earlier(j, meta.get("uid"))]
    plan = stop_jobs(Plan(deletes=idle_engine_deletes(state.engine, namespace, None)), ours, namespace)
    message = f"{invalid}; {KEPT}: {resumes_after(status)}"
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    if ready.get("reason") != REFUSED or ready.get("message") != message:
        plan.events.append(("Warning", REFUSED, message))
    return set_stage_status(plan, state, "Failed", [("Ready", Verdict("False", REFUSED, message))],
                   {"jobName": None, "progress": None})
