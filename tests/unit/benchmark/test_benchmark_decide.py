"""The DrafterBenchmark decision (pure): waiting for the serving, the Job it creates, the result it records."""

from __future__ import annotations

import copy
import datetime as dt
import json


from drafter_operator.api.benchmark import BenchmarkResult
from drafter_operator.api.benchmark_gate import Gate
import pydantic
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.pod import ContainerResources, parse_kube_quantity
from drafter_operator.controllers.benchmark.decide import decide
from drafter_operator.controllers.benchmark.state import ObservedServing
from drafter_operator.controllers.benchmark.observe import MAX_LOG_BYTES, parse_detail, result_pod
from drafter_operator.controllers.benchmark.outcome import gate_verdict
from drafter_operator.resources.benchmark_job import DEFAULT_RESOURCES, GPU_NODE_LABEL, benchmark_resources
from tests.support.benchmarks import (FAST, SEED_RESULT, SERVING, T0, benchmark, condition, created_job, created_result, job,
                                      job_pod, serving, state)


def test_a_ready_serving_gets_one_job_preferring_cpu_nodes_with_every_ready_replicas_metrics():
    plan = decide(state(benchmark(), serving()))
    manifest = created_job(plan)
    assert manifest["metadata"]["name"] == "seed-bench-g1" and manifest["spec"]["backoffLimit"] == 0
    assert manifest["spec"]["activeDeadlineSeconds"] == 600
    pod = manifest["spec"]["template"]["spec"]
    # preferred, not required: a cluster of GPU nodes only still runs it, tolerating their taint
    assert pod["affinity"] == {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": GPU_NODE_LABEL, "operator": "DoesNotExist"}]}}]}}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    argv = pod["containers"][0]["command"]
    assert argv[:4] == ["drafter-operator", "bench", "--url", "http://10.0.0.7:8000"]
    metrics = [argv[i + 1] for i, a in enumerate(argv) if a == "--metrics-url"]
    assert metrics == ["http://10.1.0.1:8000", "http://10.1.0.2:8000"]  # active revision, Ready only
    assert argv[argv.index("--num-speculative-tokens") + 1] == "5" and argv[argv.index("--baseline-tps") + 1] == "82.5"
    assert argv[argv.index("--model") + 1] == "/models/Kimi-K2.5"
    assert plan.status["state"] == "Running" and plan.status["drafter"].startswith("eagle3:")
    assert [e[1] for e in plan.events] == ["Started"]


def test_a_missing_serving_fails_at_once_with_the_field_and_the_fix():
    plan = decide(state(benchmark(), ObservedServing(serving=None)))
    assert created_job(plan) is None and plan.status["state"] == "Failed"
    failed = condition(plan, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "ServingNotFound"
    assert "spec.servingRef" in failed["message"] and "not found" in failed["message"]


def test_a_serving_that_is_not_ready_is_waited_for_then_fails_after_the_timeout():
    waiting = decide(state(benchmark(), serving(ready=False)))
    assert created_job(waiting) is None and waiting.status["state"] == "Pending"
    assert condition(waiting, "Complete")["reason"] == "WaitingForServing"
    late = decide(state(benchmark(), serving(ready=False), now=T0 + dt.timedelta(minutes=11)))
    assert late.status["state"] == "Failed" and condition(late, "Failed")["reason"] == "ServingNotReady"
    assert "within spec.timeout 10m" in condition(late, "Failed")["message"]


def test_the_termination_message_becomes_the_result_and_the_gate_is_judged():
    body = benchmark(gate={"minSpeedup": "1.2"})
    body["status"] = {"state": "Running", "observedGeneration": 1, "jobName": "seed-bench-g1"}
    plan = decide(state(body, serving(), jobs=[job("Complete")], job_pods=[job_pod(0, json.dumps(SEED_RESULT))]))
    assert plan.status["state"] == "Succeeded" and plan.status["result"]["tokensPerSecond"] == 54.4
    # the printer columns' text, in the same write as the result
    assert plan.status["display"] == {"tokensPerSecond": "54.4", "speedup": "0.66x", "acceptance": "15.0%"}
    assert condition(plan, "Complete")["status"] == "True" and condition(plan, "Failed")["status"] == "False"
    gate = condition(plan, "GatePassed")
    assert (gate["status"], gate["message"]) == ("False", "speedup 0.66x < 1.20x")
    assert plan.status["result"]["verdict"] == "Failed"
    assert [e[1] for e in plan.events] == ["Completed", "BelowGate"]
    body["status"] = {**body["status"], **plan.status}
    assert not decide(state(body, serving(), jobs=[job("Complete")])).writes_anything()  # final


def test_a_failed_run_reports_the_containers_own_error():
    body = benchmark()
    body["status"] = {"state": "Running", "observedGeneration": 1}
    error = "cannot reach http://10.0.0.7:8000/v1/chat/completions: connection refused"
    plan = decide(state(body, serving(), jobs=[job("Failed", "Job has reached the specified backoff limit")],
                        job_pods=[job_pod(1, error)]))
    assert plan.status["state"] == "Failed"
    assert (condition(plan, "Failed")["reason"], condition(plan, "Failed")["message"]) == ("BackoffLimitExceeded", error)


def test_a_message_that_is_no_result_fails_as_invalid():
    body = benchmark()
    body["status"] = {"state": "Running", "observedGeneration": 1}
    plan = decide(state(body, serving(), jobs=[job()], job_pods=[job_pod(0, "{not json")]))
    assert condition(plan, "Failed")["reason"] == "InvalidResult"


def test_a_spec_change_is_a_new_run_and_the_old_job_goes():
    body = benchmark(generation=2)
    body["status"] = {"state": "Succeeded", "observedGeneration": 1, "result": SEED_RESULT}
    plan = decide(state(body, serving(), jobs=[job("Complete")]))
    assert plan.deletes == ["/apis/batch/v1/namespaces/team/jobs/seed-bench-g1"]
    assert created_job(plan)["metadata"]["name"] == "seed-bench-g2" and plan.status["result"] is None
    assert "display" not in plan.status  # nothing to remove: the old run had no columns' text


def test_a_new_run_clears_the_old_runs_columns_with_its_result():
    body = benchmark(generation=2)
    body["status"] = {"state": "Succeeded", "observedGeneration": 1, "result": SEED_RESULT,
                      "display": {"tokensPerSecond": "54.4", "speedup": "0.66x", "acceptance": "15.0%"}}
    plan = decide(state(body, serving(), jobs=[job("Complete")]))
    assert plan.status["result"] is None and plan.status["display"] is None


def test_gate_thresholds_name_every_figure_missed():
    seed = BenchmarkResult.model_validate(SEED_RESULT)
    verdict = gate_verdict(seed, Gate(min_speedup="1.0", min_acceptance_rate="0.4", min_tokens_per_second="50"))
    assert verdict.status == "False" and verdict.message == "speedup 0.66x < 1.00x; acceptance rate 15.0% < 40.0%"
    assert gate_verdict(seed, Gate(min_tokens_per_second="50")).status == "True"
    assert gate_verdict(seed, None) is None


def test_a_sweep_passes_its_levels_and_its_summary_names_the_crossover():
    import pydantic
    import pytest

    plan = decide(state(benchmark(concurrencyLevels=[1, 4, 8, 32]), serving()))
    argv = created_job(plan)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[argv.index("--concurrency") + 1] == "1,4,8,32"
    with pytest.raises(pydantic.ValidationError, match="alternatives"):
        decide_body = benchmark(concurrency=4, numPrompts=5, concurrencyLevels=[1, 4])
        from drafter_operator.api import DrafterBenchmark
        DrafterBenchmark.model_validate(decide_body)
    body = benchmark(concurrencyLevels=[1, 8, 32])
    body["status"] = {"state": "Running", "observedGeneration": 1}
    swept = {**SEED_RESULT, "crossoverConcurrency": 32,
             "levels": [{"concurrency": c, "tokensPerSecond": t, "speedup": x}
                        for c, t, x in ((1, 140.0, 1.7), (8, 950.0, 1.45), (32, 1500.0, 0.6))]}
    done = decide(state(body, serving(), jobs=[job("Complete")], job_pods=[job_pod(0, json.dumps(swept))]))
    assert done.status["result"]["crossoverConcurrency"] == 32
    assert "slower than the baseline from concurrency 32" in condition(done, "Complete")["message"]
    # a refined sweep: its bracket is in the summary too
    refined = {**swept, "crossoverConcurrency": 16,
               "crossover": {"aboveConcurrency": 15, "belowConcurrency": 16, "estimate": 15.6, "withinTolerance": True}}
    done = decide(state(body, serving(), jobs=[job("Complete")], job_pods=[job_pod(0, json.dumps(refined))]))
    assert done.status["result"]["crossover"]["belowConcurrency"] == 16
    assert "slower than the baseline from concurrency 16, break-even between 15 and 16 streams (about 15.6)" in \
        condition(done, "Complete")["message"]


def test_the_full_result_goes_to_a_configmap_beside_the_compact_one():
    import dataclasses

    body = benchmark()
    body["status"] = {"state": "Running", "observedGeneration": 1}
    full = {**SEED_RESULT, "prompts": [{"index": i, "completionTokens": 512, "seconds": 9.4, "tokensPerSecond": 54.4}
                                       for i in range(5)]}
    plan = decide(dataclasses.replace(state(body, serving(), jobs=[job("Complete")],
                                            job_pods=[job_pod(0, json.dumps(SEED_RESULT))]), detail=full))
    assert created_result(plan)["metadata"]["name"] == "seed-result" and plan.status["resultConfigMap"] == "seed-result"
    assert json.loads(created_result(plan)["data"]["result.json"])["prompts"][4]["index"] == 4
    huge = {**SEED_RESULT, "prompts": [{"index": i, "text": "x" * 1000} for i in range(2000)]}
    from drafter_operator.controllers.benchmark.outcome import MAX_DETAIL_BYTES, result_config_map
    capped = result_config_map("team", "seed", huge)["data"]["result.json"]
    assert len(capped.encode()) < MAX_DETAIL_BYTES and "truncated" in json.loads(capped)


def test_another_benchmarks_result_is_a_baseline_once_it_finished():
    import dataclasses

    body = benchmark(baseline={"benchmarkRef": {"name": "kimi-baseline-run"}})
    missing = decide(dataclasses.replace(state(body, serving()), baseline_benchmark=None))
    assert missing.status["state"] == "Failed" and condition(missing, "Failed")["reason"] == "BaselineNotFound"
    other = {"metadata": {"name": "kimi-baseline-run"}, "status": {"state": "Running"}}
    waiting = decide(dataclasses.replace(state(body, serving()), baseline_benchmark=other))
    assert created_job(waiting) is None and waiting.status["state"] == "Pending"
    assert condition(waiting, "Complete")["reason"] == "WaitingForBaseline"
    other["status"] = {"state": "Succeeded", "result": {"tokensPerSecond": 82.5}}
    run = decide(dataclasses.replace(state(body, serving()), baseline_benchmark=other))
    argv = created_job(run)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[argv.index("--baseline-tps") + 1] == "82.5" and "--baseline-url" not in argv
    itself = decide(state(benchmark(baseline={"benchmarkRef": {"name": "seed"}}), serving()))
    assert condition(itself, "Failed")["reason"] == "InvalidReference"


def serving_on(active: str, k: int | None = 3) -> ObservedServing:
    """The serving with its active revision recorded as it ran (k from that record, not from the spec)."""
    target = serving()
    drafter = {"method": "eagle3", "model": "/models/old-drafter", **({"numSpeculativeTokens": k} if k else {})}
    target.serving["status"].update(activeRevision=active, revisions=[
        {"name": active, "engine": "vllm", "drafterSpec": drafter, "image": "img"}])
    return target


def test_a_run_records_the_revision_it_measures_and_that_revisions_k():
    plan = decide(state(benchmark(), serving_on("r1", k=3)))
    # mid-swap the spec already says k=5; the Service still serves r1, which drafts 3
    assert (plan.status["revision"], plan.status["numSpeculativeTokens"]) == ("r1", 3)
    argv = created_job(plan)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[argv.index("--num-speculative-tokens") + 1] == "3"  # the bench reads r1's k, not the spec's
    done = benchmark()
    done["status"] = {"state": "Running", "observedGeneration": 1, "jobName": "seed-bench-g1", "revision": "r1",
                      "numSpeculativeTokens": 3}
    finished = decide(state(done, serving_on("r1"), jobs=[job("Complete")],
                            job_pods=[job_pod(0, json.dumps(SEED_RESULT))]))
    assert finished.status["state"] == "Succeeded" and "revision" not in finished.status  # unchanged: kept


def test_a_run_that_straddled_a_swap_is_taught_to_no_revision():
    body = benchmark()
    body["status"] = {"state": "Running", "observedGeneration": 1, "jobName": "seed-bench-g1", "revision": "r1",
                      "numSpeculativeTokens": 3}
    plan = decide(state(body, serving_on("r2"), jobs=[job("Complete")], job_pods=[job_pod(0, json.dumps(SEED_RESULT))]))
    assert plan.status["state"] == "Succeeded"
    assert plan.status["revision"] is None and plan.status["numSpeculativeTokens"] is None  # merge patch: removed
    message = condition(plan, "Complete")["message"]
    assert "moved from revision r1 to r2 during the run" in message and "0.66x" in message


def test_a_gate_records_the_revision_it_gates_from_its_label_and_annotation():
    body = benchmark()
    body["spec"] = {"endpoint": "http://10.1.0.9:8000", "numPrompts": 5, "maxTokens": 512,
                    "baseline": {"tokensPerSecond": "82.5"}, "timeout": "10m"}
    body["metadata"]["labels"] = {"drafter.dev/revision": "r9", "drafter.dev/gate": "true"}
    body["metadata"]["annotations"] = {"drafter.dev/num-speculative-tokens": "4"}
    plan = decide(state(body, None))
    assert (plan.status["revision"], plan.status["numSpeculativeTokens"]) == ("r9", 4)
    # Without the gate label an endpoint run measured a URL, not the revision its label names (issue 38 item 4).
    body["metadata"]["labels"] = {"drafter.dev/revision": "r9", "drafter.dev/serving": "kimi"}
    plan = decide(state(body, None))
    assert (plan.status.get("revision"), plan.status["numSpeculativeTokens"]) == (None, 4)


def test_the_benchmark_pod_takes_the_specs_resources_and_pod_policy():
    plan = decide(state(benchmark(resources={"requests": {"cpu": "2", "memory": "1Gi"}},
                                  pod={"serviceAccountName": "bench", "imagePullSecrets": [{"name": "registry"}],
                                       "labels": {"example.com/team": "ml"}}), serving()))
    template = created_job(plan)["spec"]["template"]
    pod = template["spec"]
    # the spec's requests, with limits filled so a namespace demanding limits admits the pod
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "1Gi"},
                                                 "limits": {"cpu": "2", "memory": "1Gi"}}
    assert pod["serviceAccountName"] == "bench" and pod["imagePullSecrets"] == [{"name": "registry"}]
    assert template["metadata"]["labels"]["example.com/team"] == "ml"
    assert template["metadata"]["labels"]["drafter.dev/benchmark"] == "seed"
    assert pod["containers"][0]["securityContext"]["runAsNonRoot"] is True  # the default stays without one
    default = created_job(decide(state(benchmark(), serving())))["spec"]["template"]["spec"]["containers"][0]
    assert default["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


# --- the run's own Job and pod only; a bounded read ------------------------------------------------------------


def running() -> dict:
    body = benchmark()
    body["status"] = {"state": "Running", "observedGeneration": 1, "jobName": "seed-bench-g1"}
    return body


def test_a_pod_that_only_carries_the_labels_is_never_read():
    forged = job_pod(0, json.dumps({**SEED_RESULT, "tokensPerSecond": 9999.0}), job_uid="someone-else", name="seed-bench-g1-fake")
    # the forged pod alone: the run is still running (its Job has not finished), nothing is recorded
    plan = decide(state(running(), serving(), jobs=[job()], job_pods=[forged]))
    assert plan.status.get("state", "Running") == "Running" and "result" not in plan.status
    # beside the real one, in either order: only the real result is recorded
    for pods in ([forged, job_pod(0, json.dumps(SEED_RESULT))], [job_pod(0, json.dumps(SEED_RESULT)), forged]):
        done = decide(state(running(), serving(), jobs=[job("Complete")], job_pods=pods))
        assert done.status["result"]["tokensPerSecond"] == 54.4
        assert result_pod(state(running(), serving(), jobs=[job("Complete")], job_pods=pods))["metadata"]["name"] == "seed-bench-g1-x"


def test_a_job_of_the_runs_name_that_is_not_the_benchmarks_fails_the_run_naming_it():
    foreign = job("Complete", owner_uid="someone-else")
    plan = decide(state(running(), serving(), jobs=[foreign], job_pods=[job_pod(0, json.dumps(SEED_RESULT))]))
    failed = condition(plan, "Failed")
    assert plan.status["state"] == "Failed" and failed["reason"] == "JobNotOwned"
    assert "seed-bench-g1" in failed["message"] and "delete that Job" in failed["message"]
    assert "result" not in plan.status and created_job(plan) is None


def test_an_older_generations_job_is_deleted_only_when_it_is_the_benchmarks():
    body = benchmark(generation=2)
    body["status"] = {"state": "Succeeded", "observedGeneration": 1}
    ours, theirs = job("Complete", name="seed-bench-g1"), job("Complete", name="seed-bench-g0", owner_uid="someone-else")
    plan = decide(state(body, serving(), jobs=[ours, theirs]))
    assert plan.deletes == ["/apis/batch/v1/namespaces/team/jobs/seed-bench-g1"]


def test_a_termination_message_longer_than_kubernetes_keeps_is_refused():
    oversize = json.dumps({**SEED_RESULT, "verdictMessage": "x" * 5000})
    plan = decide(state(running(), serving(), jobs=[job("Complete")], job_pods=[job_pod(0, oversize)]))
    failed = condition(plan, "Failed")
    assert failed["reason"] == "InvalidResult" and "over the 4096" in failed["message"]


def test_the_bench_log_is_parsed_only_within_its_bound():
    """parse_detail takes the log read with limitBytes MAX_LOG_BYTES + 1: a log of the bound is a result, one byte
    more is refused with the fix."""
    body = json.dumps({**SEED_RESULT, "note": ""})
    pad = MAX_LOG_BYTES - len(body.encode())
    exact = body.replace('"note": ""', '"note": "' + "x" * pad + '"')
    assert len(exact.encode()) == MAX_LOG_BYTES and parse_detail(exact)["tokensPerSecond"] == 54.4
    over = parse_detail(exact + " ")  # the one byte over that the bounded read lets through
    assert isinstance(over, str) and "over 4 MiB" in over and "spec.numPrompts x spec.repetitions" in over
    cut = parse_detail(exact[:-1] + "é")  # a multi-byte character at the bound counts in bytes
    assert isinstance(cut, str)


def test_an_oversize_log_keeps_the_summary_in_the_configmap_and_says_why():
    import dataclasses

    problem = parse_detail("{" + " " * MAX_LOG_BYTES)
    plan = decide(dataclasses.replace(state(running(), serving(), jobs=[job("Complete")],
                                            job_pods=[job_pod(0, json.dumps(SEED_RESULT))]), detail_problem=problem))
    assert plan.status["state"] == "Succeeded" and plan.status["resultConfigMap"] == "seed-result"
    kept = json.loads(created_result(plan)["data"]["result.json"])
    assert kept["tokensPerSecond"] == 54.4 and kept["truncated"] == problem
    assert ("Warning", "ResultTruncated", problem) in plan.events
    assert isinstance(parse_detail("[1, 2]"), str) and isinstance(parse_detail("not json"), str)


# --- where the pod runs and what it may use ----------------------------------------------------------------------


def pod_of(**spec) -> dict:
    return created_job(decide(state(benchmark(**spec), serving())))["spec"]["template"]["spec"]


def test_the_node_preference_is_rendered_as_asked_and_never_asks_for_a_gpu():
    required = pod_of(placement={"nodePreference": "RequireCPUNodes"})
    assert required["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": GPU_NODE_LABEL, "operator": "DoesNotExist"}]}]
    assert "tolerations" not in required  # GPU nodes' taints keep it off them too
    anywhere = pod_of(placement={"nodePreference": "Any", "tolerations": [{"key": "dedicated", "value": "bench",
                                                                           "effect": "NoSchedule"}]})
    assert "affinity" not in anywhere
    assert anywhere["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                       {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"}]
    for pod in (pod_of(), required, anywhere):
        container = pod["containers"][0]
        assert not any("gpu" in name for part in container["resources"].values() for name in part)
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]


QUANTITIES = {"cpu": ["50m", "250m", "500m", "1", "2", "3", "16"], "memory": ["64Mi", "256Mi", "512Mi", "1Gi", "2Gi", "8Gi"]}


@FAST
@given(st.data())
def test_the_pod_always_has_cpu_and_memory_requests_and_limits_never_a_limit_below_its_request(data):
    spec: dict = {}
    for part in ("requests", "limits"):
        for name, values in QUANTITIES.items():
            if data.draw(st.booleans()):
                spec.setdefault(part, {})[name] = data.draw(st.sampled_from(values))
    try:
        resources = ContainerResources.model_validate(spec)
    except pydantic.ValidationError:
        return  # a limit below its request: the schema refuses it before the builder sees it
    rendered = benchmark_resources(resources)
    for name in ("cpu", "memory"):
        request, limit = rendered["requests"][name], rendered["limits"][name]
        assert parse_kube_quantity(limit) >= parse_kube_quantity(request)
        for part, value in (("requests", request), ("limits", limit)):
            if name in spec.get(part, {}):
                assert value == spec[part][name]  # what the user set is kept as written
            elif name not in spec.get("requests", {}) and name not in spec.get("limits", {}):
                assert value == DEFAULT_RESOURCES[part][name]


def test_a_gate_benchmark_gets_the_same_defaults():
    from drafter_operator.api import DrafterServing
    from drafter_operator.resources.gate import GatedPod, gate_benchmark

    serving_body = copy.deepcopy(SERVING)
    serving_body["spec"]["swap"] = {"strategy": "BlueGreen", "gate": {"minTokensPerSecond": "50"}}
    gate = gate_benchmark("team", "kimi", DrafterServing.model_validate(serving_body).spec,
                          GatedPod("r2", "10.1.0.9", 8000))
    gate["metadata"].update(uid="g-1", generation=1, creationTimestamp="2026-11-30T12:00:00Z")
    pod = created_job(decide(state(gate, None)))["spec"]["template"]["spec"]
    assert pod["affinity"] == pod_of()["affinity"] and pod["tolerations"] == pod_of()["tolerations"]
    assert pod["containers"][0]["resources"] == DEFAULT_RESOURCES
