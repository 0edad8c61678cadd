"""A DrafterBenchmark with spec.candidates, as a pure function: one candidate at a time, then the comparison.

Each candidate serving is measured by a DrafterBenchmark of its own (this one's settings with the candidate
as spec.servingRef; this benchmark its controller owner, so deleting it deletes them), one after another:
run together, the sweeps would share the baseline serving and the nodes' network, and every speedup would
measure the others' load too. A candidate's run that fails fails the comparison with its reason; once all
succeeded, status.comparison holds the speedups side by side and the pick at each load (load_picks.py).
Every candidate is checked up front (it exists, it serves the baseline's target, the same checks a single
run makes), so a missing third candidate fails the comparison before two sweeps were spent. A new spec
generation is a new comparison: the older generation's runs are deleted.
"""

from __future__ import annotations

import pydantic

from drafter_operator import families, load_picks, timestamps
from drafter_operator.engines import traffic_mix
from drafter_operator.api import DrafterServing
from drafter_operator.api.benchmark import DrafterBenchmarkSpec, benchmark_problems
from drafter_operator.constants import API_GROUP_VERSION, BENCHMARK_PLURAL, COMPARISON_LABEL
from drafter_operator.controllers.benchmark.observe import controlled_by, serving_spec
from drafter_operator.controllers.benchmark.outcome import Finish
from drafter_operator.controllers.benchmark.state import BenchmarkState
from drafter_operator.controllers.plan import Plan, Write
from drafter_operator.controllers.swap import Verdict
from drafter_operator.kube import object_path
from drafter_operator.resources.labels import MANAGED_BY
from drafter_operator.resources.names import CUSTOM_RESOURCE_NAME_MAX, child_name


def candidate_run_name(comparison: str, generation: int, index: int) -> str:
    """The DrafterBenchmark of candidate ``index`` (0-based) for this spec generation."""
    return child_name(comparison, f"c{index + 1}-g{generation}", CUSTOM_RESOURCE_NAME_MAX)


def candidate_run(body: dict, index: int) -> dict:
    """Candidate ``index``'s own DrafterBenchmark: this spec as the user wrote it, the candidate as servingRef."""
    meta, spec = body["metadata"], dict(body["spec"])
    candidate = spec.pop("candidates")[index]
    spec.pop("traffic", None)  # the comparison picks for the mix from the runs' results; a run measures its serving
    return {"apiVersion": API_GROUP_VERSION, "kind": "DrafterBenchmark",
            "metadata": {"name": candidate_run_name(meta["name"], meta.get("generation") or 1, index),
                         "namespace": meta["namespace"],
                         "labels": {COMPARISON_LABEL: meta["name"], **MANAGED_BY}},
            "spec": {**spec, "servingRef": {"name": candidate["name"]}}}


def candidate_problems(state: BenchmarkState, spec: DrafterBenchmarkSpec) -> list[str]:
    """What a single run of each candidate would refuse about its references, named by candidate."""
    problems = []
    baseline = serving_spec(state.baseline)
    for ref, body in zip(spec.candidates, state.candidate_servings):
        serving = None
        if body is not None:
            try:
                serving = DrafterServing.model_validate(body).spec
            except pydantic.ValidationError as exc:
                problems.append(f"spec.candidates: DrafterServing {ref.name!r} is invalid: {exc.errors()[0]['msg']}")
                continue
        single = spec.model_copy(update={"candidates": None, "serving_ref": ref})
        problems += [p.replace("spec.servingRef", "spec.candidates", 1)
                     for p in benchmark_problems(single, serving=serving, baseline_serving=baseline)]
    return list(dict.fromkeys(problems))  # a baseline problem is every candidate's: say it once


def stale_runs(state: BenchmarkState, candidates: int) -> list[str]:
    """The candidate runs of older generations (never a DrafterBenchmark that only copied the label)."""
    meta = state.benchmark["metadata"]
    generation = meta.get("generation") or 1
    current = {candidate_run_name(meta["name"], generation, i) for i in range(candidates)}
    return [object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, meta["namespace"], run["metadata"]["name"])
            for run in state.candidate_runs
            if controlled_by(run, meta.get("uid")) and run["metadata"]["name"] not in current
            and not run["metadata"].get("deletionTimestamp")]


def compared(spec: DrafterBenchmarkSpec, runs: list[dict | None]) -> dict:
    """status.comparison: every candidate's run so far and, once all succeeded, the levels and picks."""
    candidates = []
    for ref, run in zip(spec.candidates, runs):
        status = (run or {}).get("status") or {}
        crossover = (status.get("result") or {}).get("crossover") or {}
        candidates.append({key: value for key, value in {
            "serving": ref.name, "benchmark": run["metadata"]["name"] if run else None, "state": status.get("state"),
            "drafter": status.get("drafter"), "breakEven": crossover.get("estimate")}.items() if value is not None})
    comparison: dict = {"candidates": candidates}
    if all(((run or {}).get("status") or {}).get("state") == "Succeeded" for run in runs):
        levels = {ref.name: {level["concurrency"]: level for level in
                             (run["status"].get("result") or {}).get("levels") or []}
                  for ref, run in zip(spec.candidates, runs)}
        measured_speedups = {name: {c: lv["speedup"] for c, lv in measured.items() if lv.get("speedup") is not None}
                             for name, measured in levels.items()}
        for_mix = mix_speedups(spec, runs)
        comparison["basis"] = "trafficMix" if for_mix else "measured"
        picks = load_picks.picks_per_level(for_mix or measured_speedups)
        every_level = sorted({c for measured in levels.values() for c in measured})
        comparison["levels"] = [{**({"pick": picks[c]} if picks.get(c) else {}), "concurrency": c, "speedups": [
            {key: value for key, value in {"serving": name, "speedup": measured.get(c, {}).get("speedup"),
                                           "tokensPerSecond": measured.get(c, {}).get("tokensPerSecond"),
                                           "mixSpeedup": round(for_mix[name][c], 4) if for_mix and c in for_mix[name]
                                           else None}.items()
             if value is not None} for name, measured in levels.items()]} for c in every_level]
    return comparison


def mix_speedups(spec: DrafterBenchmarkSpec, runs: list[dict]) -> dict[str, dict[int, float]] | None:
    """Each candidate's speedup at each level of its sweep predicted for spec.traffic.mix (its drafter's k and
    drafting from the run's status); None without a mix, or when any candidate's sweep cannot predict it (then the
    measured speedups decide, and basis says so)."""
    if spec.traffic is None:
        return None
    predicted = {}
    for ref, run in zip(spec.candidates, runs):
        status = run["status"]
        family = families.family((status.get("drafter") or "").split(":", 1)[0])
        k = status.get("numSpeculativeTokens")
        if family is None or not k:
            return None
        found = traffic_mix.speedups_for_mix(status.get("result") or {}, int(k), family.drafting, spec.traffic.mix)
        if found is None:
            return None
        predicted[ref.name] = found
    return predicted


def decide_comparison(plan: Plan, state: BenchmarkState, spec: DrafterBenchmarkSpec,
                      finish: Finish, fail) -> Plan:
    """Check every candidate; then start the first candidate without a run, wait for a running one, fail with
    a failed one, or, all succeeded, record the comparison."""
    meta = state.benchmark["metadata"]
    plan.deletes += stale_runs(state, len(spec.candidates))
    by_name = {run["metadata"]["name"]: run for run in state.candidate_runs if controlled_by(run, meta.get("uid"))}
    generation = meta.get("generation") or 1
    runs = [by_name.get(candidate_run_name(meta["name"], generation, i)) for i in range(len(spec.candidates))]
    if not any(runs):
        problems = candidate_problems(state, spec)
        if problems:
            message = "; ".join(problems)
            return fail(Verdict("False", "ServingNotFound" if "not found" in message else "InvalidReference", message))
    total = len(spec.candidates)
    for index, (ref, run) in enumerate(zip(spec.candidates, runs)):
        status = (run or {}).get("status") or {}
        if run is None:
            plan.writes.append(Write("create", BENCHMARK_PLURAL, object_path(API_GROUP_VERSION, BENCHMARK_PLURAL, meta["namespace"]),
                                     candidate_run(state.benchmark, index)))
            message = f"measuring candidate {index + 1} of {total}: DrafterServing {ref.name}"
            started = {"startTime": timestamps.format_seconds(state.now)} if index == 0 else {}
            return finish({"state": "Running", **started, "comparison": compared(spec, runs)},
                          Verdict("False", "Running", message), events=[("Normal", "CandidateStarted", message)])
        if status.get("state") == "Failed":
            reason = next((c.get("message") for c in status.get("conditions") or []
                           if c.get("type") == "Failed" and c.get("status") == "True"), None)
            failed = Verdict("False", "CandidateFailed", f"candidate {ref.name}: DrafterBenchmark "
                             f"{run['metadata']['name']} failed: {reason or 'no reason given'}")
            return finish({"state": "Failed", "completionTime": timestamps.format_seconds(state.now),
                           "comparison": compared(spec, runs)}, failed, events=[("Warning", failed.reason, failed.message)])
        if status.get("state") != "Succeeded":
            message = f"measuring candidate {index + 1} of {total}: DrafterServing {ref.name} (DrafterBenchmark " \
                      f"{run['metadata']['name']} is {status.get('state') or 'Pending'})"
            return finish({"state": "Running", "comparison": compared(spec, runs)}, Verdict("False", "Running", message))
    comparison = compared(spec, runs)
    summary = ", ".join(f"{level['concurrency']}: {level['pick']}" for level in comparison["levels"] if "pick" in level)
    basis = ""
    if spec.traffic is not None:
        shares = ", ".join(f"{category} {weight}" for category, weight in spec.traffic.mix.items())
        basis = (f" for the traffic mix {shares}" if comparison.get("basis") == "trafficMix" else
                 f" as measured (a candidate's sweep cannot predict the traffic mix {shares}: it needs "
                 "acceptance for each of its categories)")
    message = f"{total} candidates compared; the pick by streams{basis}: {summary}"
    return finish({"state": "Succeeded", "completionTime": timestamps.format_seconds(state.now),
                   "comparison": comparison}, Verdict("True", "Complete", message),
                  events=[("Normal", "Compared", message)])
