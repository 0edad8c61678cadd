"""Model behaviour: parsing helpers, examples, kopf bodies, statuses and the operator-side checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from drafter_operator.api import (
    DrafterBenchmark,
    DrafterServing,
    DrafterServingSpec,
    DrafterTraining,
    benchmark_problems,
    condition,
    format_duration,
    owned_flag,
    parse_duration,
    parse_object,
    serving_problems,
    training_problems,
)
from drafter_operator.api.benchmark import DrafterBenchmarkSpec
from drafter_operator.api.common import path_on_mount
from drafter_operator.api.serving import (
    capacity_problems,
    extra_args_repeat_problems,
    extra_args_shape_problems,
    image_engine_problems,
    label_key_problem,
    node_selector_problems,
)
from drafter_operator.images import image_repository
from drafter_operator.api.training import DrafterTrainingSpec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _examples() -> dict[str, object]:
    out = {}
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            obj = parse_object(doc)
            out[obj.name] = obj
    return out


# --- durations ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("45m", 2700), ("30s", 30), ("1h30m", 5400), ("250ms", 0.25), ("2h", 7200), ("0s", 0), ("1h1m1s", 3661),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "45", "45 m", "1.5h", "-5m", "2d", "m", "45M", "1h 30m", "123456s"])
def test_parse_duration_refuses_what_the_crd_refuses(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.integers(0, 99999 * 60))
def test_format_duration_round_trips(seconds):
    text = format_duration(seconds)
    assert parse_duration(text) == seconds


# --- examples ----------------------------------------------------------------------------------------


def test_examples_exist_for_every_kind_and_validate():
    objs = _examples()
    kinds = sorted(type(o).__name__ for o in objs.values())
    assert kinds == ["DrafterBenchmark", "DrafterServing", "DrafterServing", "DrafterServing", "DrafterServing",
                     "DrafterServing", "DrafterServing", "DrafterTraining", "DrafterTraining", "DrafterTraining",
                     "DrafterTraining"]


def test_the_two_node_example_is_one_replica_over_two_whole_nodes_as_a_leader_worker_set():
    """What the example's comments promise, from the builders the operator uses."""
    from drafter_operator.engines import vllm
    from drafter_operator.resources.engine import EnginePod
    from drafter_operator.resources.group import engine_group

    serving = _examples()["deepseek-v3-2-nodes"]
    spec = serving.spec
    assert spec.target.tensor_parallel_size * spec.target.data_parallel_size == 16
    leader, worker = vllm.render_command(spec), vllm.render_command(spec, worker=True)
    assert leader[leader.index("--nnodes") + 1] == "2" and "--headless" in worker
    lws = engine_group(serving, "0123456789", 1, EnginePod({"containers": [{"name": "engine", "command": leader}]}),
                       worker)
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2


def test_the_32_gpu_training_example_runs_across_four_queued_nodes_on_a_shared_claim():
    """What the example's comments promise, from the builders the operator uses."""
    from drafter_operator.resources import training_job
    from drafter_operator.resources.training import hidden_states_claim
    from drafter_operator.training import RenderOptions, TrainingPaths, render
    from drafter_operator.training.cost import run_cost
    from tests.support.target_configs import KIMI

    spec = _examples()["kimi-k25-eagle3-32gpu"].spec
    jobs = {stage: training_job.stage_job("team", "kimi-k25-eagle3-32gpu", spec, training_job.StageRun(stage, 1), training_job.StageCommand("trainer:1"))
            for stage in ("Generate", "Extract", "Train", "Export")}
    for job in jobs.values():  # every stage waits in the queue, admitted whole
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-team" and job["spec"]["suspend"] is True
    for stage in ("Extract", "Train"):
        assert (jobs[stage]["spec"]["completionMode"], jobs[stage]["spec"]["parallelism"]) == ("Indexed", 4)
        (container,) = jobs[stage]["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert jobs["Train"]["spec"]["template"]["spec"]["subdomain"] == training_job.rendezvous_service_name(
        "kimi-k25-eagle3-32gpu")
    claim = hidden_states_claim("team", "kimi-k25-eagle3-32gpu", spec)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and claim["spec"]["storageClassName"] == "shared-lustre"
    # Train: one torchrun group of 4 pods x 8 ranks at pod 0's name.
    meet = training_job.rendezvous("kimi-k25-eagle3-32gpu", 1, 4)
    stages = render(spec, TrainingPaths(), RenderOptions(generation_endpoint="http://engine:8000/v1",
                                                                 target_config=KIMI, rendezvous=meet))
    (train,) = [s for s in stages if s.name == "Train"]
    argv = " ".join(train.commands[-1].argv)
    assert "--nnodes 4 --nproc_per_node 8 --rdzv-backend c10d" in argv and f"--rdzv-endpoint {meet.endpoint}" in argv
    # The estimate the status will carry, at the H200 rates (docs/training.md compares it with the published run).
    cost = run_cost(spec, KIMI)
    assert cost.tokens == 100_000 * 4096 and 200 < cost.gpu_hours < 2000, cost


def test_the_dflash_training_example_promotes_into_a_serving_that_can_serve_it():
    from drafter_operator.controllers.training.promotion import serving_problems

    examples = _examples()
    training = examples["kimi-k25-dflash"].spec
    assert training.method == "dflash" and training.framework == "speculators"
    serving = examples[training.promote.serving_ref.name]
    assert serving.spec.engine == "vllm"
    assert serving_problems(training, serving.to_json()) == []


def test_the_hub_and_air_gapped_examples_say_how_they_get_their_models():
    from drafter_operator.resources.engine import hub_models, operator_environment, runs_offline

    sglang = _examples()["kimi-k25-sglang-eagle3"].spec
    assert sglang.env_from[0].secret_ref.name == "hf-token" and sglang.storage.cache_claim == "hf-cache"
    assert not runs_offline(sglang) and {"name": "HF_HOME", "value": "/var/cache/huggingface"} in operator_environment(sglang)
    airgapped = _examples()["kimi-k25-airgapped"].spec
    assert hub_models(airgapped) == [] and runs_offline(airgapped) and airgapped.storage.offline is True
    assert airgapped.pod.image_pull_secrets[0].name == "internal-registry" and airgapped.pod.runtime_class_name == "nvidia"


def test_seed_example_matches_the_issue():
    seed = _examples()["kimi-k25-vllm-eagle3"].spec
    assert (seed.engine, seed.target.tensor_parallel_size, seed.target.max_model_len) == ("vllm", 8, 32768)
    assert seed.target.gpu_memory_utilization == "0.95"
    assert (seed.target.tool_call_parser, seed.target.reasoning_parser) == ("kimi_k2", "kimi_k2")
    assert (seed.drafter.method, seed.drafter.num_speculative_tokens) == ("eagle3", 5)
    sglang = _examples()["kimi-k25-sglang-eagle3"].spec
    assert sglang.drafter.model == "AQ-MedAI/Kimi-K2-Instruct-eagle3"
    assert (sglang.drafter.num_steps, sglang.drafter.eagle_topk, sglang.drafter.num_draft_tokens) == (3, 1, 4)
    assert _examples()["kimi-k25-baseline"].spec.drafter.method == "none"
    bench = _examples()["kimi-k25-vllm-eagle3-5x512"].spec
    assert (bench.num_prompts, bench.max_tokens, bench.baseline.serving_ref.name) == (5, 512, "kimi-k25-baseline")
    train = _examples()["kimi-k25-eagle3-ft"].spec
    assert (train.data.num_samples, train.hidden_states.layers, train.train.epochs) == (10000, [2, 30, 58], 5)
    assert train.base_drafter == "AQ-MedAI/Kimi-K2-Instruct-eagle3"


def test_examples_pass_the_operator_checks_together():
    objs = _examples()
    servings = {name: o.spec for name, o in objs.items() if isinstance(o, DrafterServing)}
    for name, obj in objs.items():
        if isinstance(obj, DrafterServing):
            assert serving_problems(obj.spec, gpus_per_node=8) == [], name
        elif isinstance(obj, DrafterBenchmark):
            assert benchmark_problems(obj.spec, serving=servings[obj.spec.serving_ref.name],
                                      baseline_serving=servings[obj.spec.baseline.serving_ref.name]) == []
        elif isinstance(obj, DrafterTraining):
            promoted = servings[obj.spec.promote.serving_ref.name] if obj.spec.promote else None
            assert training_problems(obj.spec, serving=promoted, num_target_layers=61) == [], name
        # the references between the examples resolve
    assert {"kimi-k25-baseline", "kimi-k25-vllm-eagle3", "kimi-k25-sglang-eagle3"} <= set(servings)


# --- parsing objects as the operator gets them -----------------------------------------------------------


def test_kopf_body_with_full_metadata_and_status_parses():
    body = {
        "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
        "metadata": {"name": "kimi", "namespace": "llm", "uid": "1234", "generation": 3, "resourceVersion": "77",
                     "managedFields": [{"manager": "kubectl"}], "annotations": {"kopf.zalando.org/last-handled-configuration": "{}"}},
        "spec": {"engine": "sglang", "target": {"model": "moonshotai/Kimi-K2.5"}, "drafter": {"method": "none"}},
        "status": {"observedGeneration": 3, "kopf": {"progress": {}},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Serving", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                   "acceptance": {"rate": 0.15, "meanLength": 1.75, "draftTokens": 7530, "futureField": 1}},
    }
    obj = DrafterServing.model_validate(body)
    assert (obj.name, obj.namespace, obj.spec.resources.gpus_per_replica) == ("kimi", "llm", 8)
    assert condition(obj.status.conditions, "Ready").status == "True"
    assert condition(obj.status.conditions, "Degraded") is None
    assert obj.status.acceptance.rate == 0.15


def test_spec_refuses_unknown_fields_by_name():
    with pytest.raises(ValidationError) as info:
        DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "m/x"}, "drafter": {"method": "none", "k": 5}})
    assert info.value.errors()[0]["loc"] == ("drafter", "k")


def test_snake_case_names_are_accepted_and_json_is_camel_case():
    spec = DrafterServingSpec(engine="vllm", target={"model": "m/x", "tensor_parallel_size": 4},
                              drafter={"method": "ngram", "num_speculative_tokens": 3}, acceptance={"min_acceptance_rate": "0.3", "for_": "1m"})
    data = spec.to_json()
    assert data["target"]["tensorParallelSize"] == 4
    assert data["drafter"]["numSpeculativeTokens"] == 3
    assert data["acceptance"]["for"] == "1m"
    assert "maxModelLen" not in data["target"]  # unset optional fields are left out


def test_parse_object_dispatches_on_kind():
    with pytest.raises(KeyError):
        parse_object({"kind": "Deployment"})


# --- operator-side checks --------------------------------------------------------------------------------


def _serving(**over) -> DrafterServingSpec:
    spec = {"engine": "vllm", "target": {"model": "/models/Kimi-K2.5"},
            "drafter": {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 5}}
    spec.update(over)
    return DrafterServingSpec.model_validate(spec)


@pytest.mark.parametrize("args, fragment", [
    (["8", "--max-num-seqs"], "extraArgs[0] '8' is not a flag"),
    (["--max-num-seqs 8"], "split it into two items"),
    (["--max-num-seqs", "8", "--max-num-seqs=4"], "repeats --max-num-seqs"),
    (["--max-running-requests", "8"], "--max-running-requests is a sglang flag, not a vllm one"),
])
def test_serving_problems_on_extra_args(args, fragment):
    problems = serving_problems(_serving(target={"model": "/models/Kimi-K2.5", "extraArgs": args}))
    assert any(fragment in p for p in problems), problems


def test_serving_problems_image_node_selector_and_capacity():
    assert serving_problems(_serving(image="lmsysorg/sglang:v0.5.23")) == [
        "spec.image 'lmsysorg/sglang:v0.5.23' looks like a sglang image but spec.engine is vllm: fix one of them"]
    assert serving_problems(_serving(image="vllm/vllm-openai:v0.33.0")) == []
    bad_key = serving_problems(_serving(placement={"nodeSelector": {"a/b/c": "x", "-bad": "y", "ok.example.com/fine": "z"}}))
    assert len(bad_key) == 2 and all("spec.placement.nodeSelector key" in p for p in bad_key)
    big = _serving(resources={"gpusPerReplica": 16}, target={"model": "/models/K", "tensorParallelSize": 16})
    assert serving_problems(big) == []
    assert "exceeds the 8 GPUs of one node" in serving_problems(big, gpus_per_node=8)[0]


def _extra_args_list_problems_in_one_loop(args: list[str]) -> list[str]:
    """The shape and repeat checks as one loop over the list (how serving_problems read before its steps were
    named): an independent statement of the order serving_problems reports them in."""
    problems, seen = [], {}
    for index, arg in enumerate(args):
        if index == 0 and not arg.startswith("-"):
            problems.append(f"extraArgs[{index}] not a flag")
        if arg.startswith("--") and " " in arg.split("=")[0]:
            problems.append(f"extraArgs[{index}] flag and value")
            continue
        if not arg.startswith("--"):
            continue
        flag = arg.split("=")[0]
        if flag in seen:
            problems.append(f"extraArgs[{index}] repeats")
        seen.setdefault(flag, index)
    return problems


@given(st.lists(st.sampled_from(["8", "--a", "--a=1", "--b", "--a 1", "-x", "--b 2", "value"]), max_size=8))
def test_extra_args_steps_report_in_list_order(args):
    merged = sorted(extra_args_shape_problems(args) + extra_args_repeat_problems(args), key=lambda item: item[0])
    kinds = {"is not a flag": "not a flag", "holds a flag and its value": "flag and value", "repeats": "repeats"}
    said = [f"extraArgs[{index}] " + next(v for k, v in kinds.items() if k in message) for index, message in merged]
    assert said == _extra_args_list_problems_in_one_loop(args)
    # serving_problems reports them first, in that order (the engine's own verdict follows).
    problems = serving_problems(_serving(target={"model": "/models/Kimi-K2.5", "extraArgs": args}))
    assert problems[:len(merged)] == [message for _, message in merged]


def test_extra_args_steps():
    assert extra_args_shape_problems(["--max-num-seqs", "8"]) == []
    assert [i for i, _ in extra_args_shape_problems(["8", "--a 1", "--b"])] == [0, 1]
    assert "'--a'" in extra_args_shape_problems(["--a secret"])[0][1] and "secret" not in extra_args_shape_problems(["--a secret"])[0][1]
    assert extra_args_repeat_problems(["--a", "1", "--a=2", "--a 3"]) == [
        (2, "spec.target.extraArgs[2] repeats --a (first at extraArgs[0]): keep one")]


def test_image_node_selector_and_capacity_steps():
    assert image_engine_problems("vllm", None) == [] and image_engine_problems("vllm", "vllm/vllm-openai:v1") == []
    assert "looks like a vllm image but spec.engine is sglang" in image_engine_problems("sglang", "vllm/vllm-openai:v1")[0]
    assert image_engine_problems("sglang", "example.com/sglang-vllm-bridge:1") == []  # names both: no guess
    assert node_selector_problems(None) == [] and node_selector_problems({"nvidia.com/gpu.product": "x"}) == []
    assert ["'a/b/c'" in p for p in node_selector_problems({"a/b/c": "x", "ok": "y"})] == [True]
    assert capacity_problems(16, None) == [] and capacity_problems(8, 8) == []
    assert "gpusPerReplica 16 exceeds the 8 GPUs of one node" in capacity_problems(16, 8)[0]


@pytest.mark.parametrize("path, mount, on", [
    (None, "/models", True), ("org/name", "/models", True), ("/models/K", "/models", True),
    ("/models", "/models", False), ("/modelsX/K", "/models", False), ("/data/K", "/models", False),
])
def test_path_on_mount(path, mount, on):
    assert path_on_mount(path, mount) is on


def test_image_repository_and_label_keys():
    assert image_repository("registry:5000/vllm/vllm-openai:v1@sha256:abc") == "vllm/vllm-openai"
    assert image_repository("sglang") == "sglang"
    assert label_key_problem("nvidia.com/gpu.product") is None
    assert label_key_problem("node-role") is None
    assert label_key_problem("UPPER.example.com/x") is not None
    assert label_key_problem("x" * 64) is not None


def test_owned_flags():
    assert owned_flag("--port") and owned_flag("--port=8000") and owned_flag("--speculative-eagle-topk")
    assert owned_flag("-tp") and owned_flag("-sc")
    assert not owned_flag("--portal") and not owned_flag("--max-num-seqs") and not owned_flag("8000")


def test_benchmark_problems_need_the_referenced_servings():
    spec = DrafterBenchmarkSpec.model_validate({"servingRef": {"name": "fast"}, "baseline": {"servingRef": {"name": "base"}},
                                               "maxTokens": 4096, "gate": {"minAcceptanceRate": "0.5", "minSpeedup": "1.1"}})
    missing = benchmark_problems(spec)
    assert len(missing) == 2 and "'fast' not found" in missing[0] and "'base' not found" in missing[1]
    fast = _serving(target={"model": "/models/K", "maxModelLen": 4096}, drafter={"method": "none"})
    base = _serving(target={"model": "/models/Other"}, drafter={"method": "ngram", "numSpeculativeTokens": 3})
    problems = benchmark_problems(spec, serving=fast, baseline_serving=base)
    assert [p.split(":")[0] for p in problems] == ["spec.baseline.servingRef"] * 2 + ["spec.maxTokens 4096 does not fit the serving's target.maxModelLen 4096", "spec.gate.minAcceptanceRate"]
    assert "must have drafter.method none" in problems[0] and "same target model" in problems[1]


def test_training_problems():
    spec = DrafterTrainingSpec.model_validate({
        "target": {"model": "/models/K"}, "storage": {"modelClaim": "models"},
        "data": {"dataset": "sharegpt/x", "numSamples": 10, "maxTokens": 4096, "chatTemplate": "qwen"},
        "hiddenStates": {"layers": [2, 30, 61], "storage": {"size": "1Ti"}},
        "output": {"path": "/models/drafters/new"}, "promote": {"servingRef": {"name": "kimi"}},
    })
    problems = training_problems(spec, num_target_layers=61)
    assert "'kimi' not found" in problems[0]
    assert "spec.hiddenStates.layers [61] lie outside the target's 61 layers" in problems[1]
    assert "spec.data.maxTokens 4096 is not below spec.train.maxLength 2048" in problems[2]
    other = _serving(target={"model": "/models/Other"})
    assert "a drafter only fits the target it was trained for" in training_problems(spec, serving=other)[0]
