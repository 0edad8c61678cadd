"""spec.drafter.dynamic on SGLang: the load schedule rendered as SGLang 0.5.23's adaptive speculation (tiers of candidate
steps in a config file the pod template carries), and what would make SGLang drop it said before it is served."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterServing, DrafterServingSpec
from drafter_operator.constants import FILE_ANNOTATION_PREFIX
from drafter_operator.engines import dynamic, sglang
from drafter_operator.resources.engine import EngineHttp, engine_deployment, engine_pod_spec
from drafter_testbed import launch

SCHEDULE = [(1, 6, 4), (7, 12, 2), (13, 24, 1), (25, 65536, 0)]


def spec(extra_args=(), **drafter) -> DrafterServingSpec:
    return DrafterServingSpec.model_validate({
        "engine": "sglang", "target": {"model": "/models/t", "extraArgs": list(extra_args)},
        "drafter": {"method": "eagle3", "model": "/models/d", "numSteps": 4, "dynamic": "fromBenchmark", **drafter}})


def test_the_schedule_becomes_tiers_keyed_by_their_first_batch_size():
    assert sglang.adaptive_config(SCHEDULE) == {
        "1": {"candidate_steps": [1, 2, 3, 4]}, "7": {"candidate_steps": [1, 2]},
        "13": {"candidate_steps": [1]}, "25": {"candidate_steps": [0]}}
    assert sglang.adaptive_start_steps(SCHEDULE) == 4


@given(st.lists(st.integers(0, 16), min_size=1, max_size=8).map(lambda ks: sorted(ks, reverse=True)))
def test_any_falling_schedule_starts_from_a_candidate_and_routes_each_batch_to_its_band(ks):
    starts = [1 + 4 * i for i in range(len(ks))]
    schedule = [(start, (starts[i + 1] - 1) if i + 1 < len(ks) else 65536, k) for i, (start, k) in
                enumerate(zip(starts, ks))]
    config = sglang.adaptive_config(schedule)
    candidates = sorted({step for tier in config.values() for step in tier["candidate_steps"]})
    assert sglang.adaptive_start_steps(schedule) in candidates  # SGLang refuses a start outside them
    tiers = sorted(int(key) for key in config)
    for batch in range(1, starts[-1] + 8):
        tier = max(t for t in tiers if t <= batch)  # SGLang's routing: the largest key not above the batch
        assert max(config[str(tier)]["candidate_steps"]) == dynamic.k_for_batch(schedule, batch, max(ks))


def test_the_command_turns_adaptive_on_and_lets_sglang_set_the_draft_tokens():
    argv = sglang.render_command(spec(numDraftTokens=5), schedule=SCHEDULE)
    assert argv[argv.index("--speculative-adaptive-config") + 1] == sglang.ADAPTIVE_CONFIG_PATH
    assert "--speculative-adaptive" in argv and "--speculative-num-draft-tokens" not in argv
    assert argv[argv.index("--speculative-num-steps") + 1] == "4"
    # without a schedule: the static steps as before
    static = sglang.render_command(spec(numDraftTokens=5))
    assert "--speculative-adaptive" not in static and static[static.index("--speculative-num-draft-tokens") + 1] == "5"


def test_the_config_file_rides_in_the_pod_template_and_is_projected_where_the_engine_reads_it():
    files = sglang.schedule_files(SCHEDULE)
    assert json.loads(files[sglang.ADAPTIVE_CONFIG_PATH]) == sglang.adaptive_config(SCHEDULE)
    serving = DrafterServing.model_validate({"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
                                             "metadata": {"name": "kimi", "namespace": "team"},
                                             "spec": spec().model_dump(by_alias=True, exclude_none=True)})
    argv = sglang.render_command(serving.spec, schedule=SCHEDULE)
    pod_spec = engine_pod_spec(serving, "img", argv, EngineHttp(30000, "/health", "/health"), "op", files)
    deployment = engine_deployment(serving, "r1", 1, pod_spec, files=files)
    template = deployment["spec"]["template"]
    volume = next(v for v in pod_spec["volumes"] if "projected" in v)
    item = volume["projected"]["sources"][0]["downwardAPI"]["items"][0]
    key = FILE_ANNOTATION_PREFIX + "adaptive.json"
    assert item == {"path": "adaptive.json", "fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}
    assert template["metadata"]["annotations"][key] == files[sglang.ADAPTIVE_CONFIG_PATH]
    mount = next(m for m in pod_spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert mount["mountPath"] == "/etc/drafter/speculation" and mount["readOnly"]
    # A vLLM schedule needs no file: nothing is added.
    assert engine_deployment(serving, "r1", 1, pod_spec)["spec"]["template"]["metadata"].get("annotations") is None


def test_the_local_runner_hands_the_emulator_the_file_and_keeps_the_model_path(tmp_path):
    files = sglang.schedule_files(SCHEDULE)
    serving = DrafterServing.model_validate({"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
                                             "metadata": {"name": "kimi", "namespace": "team"},
                                             "spec": {**spec().model_dump(by_alias=True, exclude_none=True),
                                                      "storage": {"modelClaim": "models"}}})
    argv = sglang.render_command(serving.spec, schedule=SCHEDULE)
    pod_spec = engine_pod_spec(serving, "img", argv, EngineHttp(30000, "/health", "/health"), "op", files)
    pod = {"metadata": {"name": "p", "namespace": "team"}, "spec": pod_spec}
    paths = launch.volume_host_paths(pod, tmp_path / "pod", tmp_path / "shared")
    planned = launch.plan(pod, pod_spec["containers"][0], "10.0.0.1", tmp_path / "pod", 6443,
                          lambda *_: None, volume_paths=paths)
    config = planned.argv[planned.argv.index("--speculative-adaptive-config") + 1]
    assert config == str(paths["engine-files"] / "adaptive.json")
    assert planned.argv[planned.argv.index("--model-path") + 1] == "/models/t"


@pytest.mark.parametrize(("extra_args", "reason"), [
    (["--enable-two-batch-overlap"], "enable_two_batch_overlap=True is not supported"),
    (["--attn-dp-size", "2"], "attention DP is not supported"),
    (["--enable-multi-layer-eagle"], "enable_multi_layer_eagle=True is not supported"),
    (["--enable-pdmux"], "enable_pdmux=True is not supported"),
])
def test_what_makes_sglang_drop_adaptive_is_a_problem_of_the_spec(extra_args, reason):
    assert reason in sglang.adaptive_dropped(spec(extra_args))
    problems = sglang.spec_problems(spec(extra_args))
    assert any(reason in p and "spec.drafter.dynamic" in p and "remove" in p for p in problems), problems


def test_a_plain_eagle_spec_keeps_adaptive_and_mtp_runs_as_eagle():
    assert sglang.adaptive_dropped(spec()) is None and sglang.spec_problems(spec()) == []
    assert sglang.adaptive_dropped(spec(method="mtp", model=None)) is None
    assert "only topk=1" in sglang.adaptive_unsupported_reason(
        algorithm="EAGLE3", eagle_topk=4, attention_dp_size=1, multi_layer_eagle=False, two_batch_overlap=False,
        pdmux=False)


def test_the_emulator_serves_the_rendered_command_with_the_tiers_it_carries(tmp_path):
    from drafter_testbed.emulator.cmdline import parse_engine_command_line

    path = tmp_path / "adaptive.json"
    path.write_text(sglang.schedule_files(SCHEDULE)[sglang.ADAPTIVE_CONFIG_PATH])
    argv = [str(path) if a == sglang.ADAPTIVE_CONFIG_PATH else a
            for a in sglang.render_command(spec(), schedule=SCHEDULE)]
    speculation = parse_engine_command_line(argv).speculation
    assert speculation.adaptive_dropped is None and speculation.num_steps == 4
    assert [(batch, rule.candidate_steps) for batch, rule in speculation.adaptive.tiers] == [
        (1, (1, 2, 3, 4)), (7, (1, 2)), (13, (1,)), (25, (0,))]
    # with two-batch overlap SGLang drops it, and so does the emulator, for the reason the operator gives
    dropped = parse_engine_command_line([*argv[:3], "--enable-two-batch-overlap", *argv[3:]]).speculation
    assert dropped.adaptive is None
    assert dropped.adaptive_dropped == sglang.adaptive_dropped(spec(["--enable-two-batch-overlap"]))
