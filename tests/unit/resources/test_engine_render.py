"""Golden command lines (as the engines document them) and the pure builders of a revision's Deployment and Service."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator import engines
from drafter_operator.api import DrafterServing, DrafterServingSpec
from drafter_operator.controllers.serving import drafter_compatible
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.resources.labels import drafter_summary
from drafter_operator.api.serving import StorageSpec
from drafter_operator.resources.engine import (
    GPU_TOLERATION,
    EngineHttp,
    engine_deployment,
    engine_pod_spec,
    hub_models,
    operator_environment,
    runs_offline,
    serving_service,
    startup_failure_threshold,
)
from tests.support.engine_pods import EXAMPLES, OPERATOR_IMAGE, example, with_spec


def spec(engine: str, drafter: dict, **target) -> DrafterServingSpec:
    return DrafterServingSpec.model_validate({"engine": engine, "target": {"model": "/models/Kimi-K2.5", **target},
                                              "drafter": drafter})


def test_seed_vllm_command_matches_engines_md():
    argv = engines.vllm.render_command(example("serving-vllm-kimi-k25-eagle3.yaml").spec)
    assert argv == [
        "vllm", "serve", "/models/Kimi-K2.5", "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "8", "--max-model-len", "32768", "--gpu-memory-utilization", "0.95",
        "--trust-remote-code", "--tool-call-parser", "kimi_k2", "--enable-auto-tool-choice",
        "--reasoning-parser", "kimi_k2",
        "--speculative-config", '{"method":"eagle3","model":"/models/drafters/kimi-k25-eagle3","num_speculative_tokens":5}',
    ]


def test_sglang_public_drafter_command_matches_engines_md():
    argv = engines.sglang.render_command(example("serving-sglang-kimi-k25-eagle3.yaml").spec)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    joined = " ".join(argv)
    for fragment in ("--model-path /models/Kimi-K2.5", "--tp-size 8", "--trust-remote-code", "--enable-metrics",
                     "--speculative-algorithm EAGLE3", "--speculative-draft-model-path AQ-MedAI/Kimi-K2-Instruct-eagle3",
                     "--speculative-num-steps 3", "--speculative-eagle-topk 1", "--speculative-num-draft-tokens 4",
                     "--port 30000"):
        assert fragment in joined


def test_baseline_renders_no_speculation_flags():
    argv = engines.vllm.render_command(example("serving-baseline.yaml").spec)
    assert not any(a.startswith("--speculative") for a in argv)
    sgl = engines.sglang.render_command(spec("sglang", {"method": "none"}))
    assert not any(a.startswith("--speculative") for a in sgl) and "--enable-metrics" in sgl


@pytest.mark.parametrize("method,model,vllm_method,sglang_algorithm", [
    ("eagle3", "/models/d", "eagle3", "EAGLE3"),
    ("eagle", "/models/d", "eagle", "EAGLE"),
    ("draftModel", "/models/small", "draft_model", "STANDALONE"),
    ("ngram", None, "ngram", "NGRAM"),
    ("mtp", None, "mtp", "NEXTN"),
])
def test_every_method_on_both_engines(method, model, vllm_method, sglang_algorithm):
    drafter = {"method": method, **({"model": model} if model else {})}
    vllm_argv = engines.vllm.render_command(spec("vllm", {**drafter, "numSpeculativeTokens": 4}))
    config = json.loads(vllm_argv[vllm_argv.index("--speculative-config") + 1])
    assert config == {"method": vllm_method, **({"model": model} if model else {}), "num_speculative_tokens": 4}
    sglang_argv = engines.sglang.render_command(spec("sglang", {**drafter, "numSteps": 3}))
    assert sglang_argv[sglang_argv.index("--speculative-algorithm") + 1] == sglang_algorithm
    assert ("--speculative-draft-model-path" in sglang_argv) == bool(model)


def test_extra_args_come_verbatim_before_every_owned_flag():
    # argparse keeps the last value of a flag: owned flags after extraArgs win even if a spelling slipped by.
    vllm_argv = engines.vllm.render_command(spec("vllm", {"method": "none"}, extraArgs=["--max-num-seqs", "8"]))
    assert vllm_argv[:5] == ["vllm", "serve", "/models/Kimi-K2.5", "--max-num-seqs", "8"]
    assert vllm_argv.index("--port") > vllm_argv.index("--max-num-seqs")
    sglang_argv = engines.sglang.render_command(spec("sglang", {"method": "none"}, extraArgs=["--max-running-requests", "8"]))
    assert sglang_argv[3:5] == ["--max-running-requests", "8"]
    assert sglang_argv.index("--model-path") > 4 and sglang_argv.index("--enable-metrics") > 4


def test_served_model_name_is_rendered_on_both_engines():
    for engine in ("vllm", "sglang"):
        argv = engines.engine(engine).render_command(spec(engine, {"method": "none"}, servedModelName="kimi-k2.5"))
        assert argv[argv.index("--served-model-name") + 1] == "kimi-k2.5"


def test_unknown_engine_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown engine 'trtllm'"):
        engines.engine("trtllm")


def test_revision_hash_ignores_replicas_placement_and_startup_but_not_the_drafter():
    base = example("serving-vllm-kimi-k25-eagle3.yaml").spec
    image = "vllm/vllm-openai:v0.33.0"
    same = base.model_copy(update={"replicas": 3, "startup": base.startup.model_copy(update={"timeout": "1h"})})
    assert revision_hash(same, image) == revision_hash(base, image)
    other = base.model_copy(update={"drafter": base.drafter.model_copy(update={"num_speculative_tokens": 4})})
    assert revision_hash(other, image) != revision_hash(base, image)
    assert revision_hash(base, "vllm/vllm-openai:v0.34.0") != revision_hash(base, image)
    assert len(revision_hash(base, image)) == 10


@settings(max_examples=50)
@given(st.integers(1, 16), st.sampled_from(["/models/a", "/models/b"]))
def test_revision_hash_is_stable_and_distinct(k, drafter_model):
    one = spec("vllm", {"method": "eagle3", "model": drafter_model, "numSpeculativeTokens": k})
    again = DrafterServingSpec.model_validate(json.loads(one.model_dump_json(by_alias=True)))
    assert revision_hash(one, "img") == revision_hash(again, "img")
    assert drafter_summary(one) == f"eagle3:{drafter_model} k={k}"


def test_engine_pod_spec_has_gpus_shm_model_volume_probes_and_tolerations():
    serving = example("serving-vllm-kimi-k25-eagle3.yaml")
    pod = engine_pod_spec(serving, "vllm/vllm-openai:v0.33.0", ["vllm", "serve", "m"], EngineHttp(8000, "/health", "/health"), OPERATOR_IMAGE)
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B200"}
    assert GPU_TOLERATION in pod["tolerations"]
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["startupProbe"]["failureThreshold"] == 270  # 45 minutes at one probe per 10 s
    assert container["readinessProbe"]["httpGet"]["port"] == "http"


def test_sglang_readiness_uses_health_generate():
    serving = example("serving-sglang-kimi-k25-eagle3.yaml")
    engine = engines.engine("sglang")
    pod = engine_pod_spec(serving, "img", ["x"], EngineHttp(engine.DEFAULT_PORT, engine.HEALTH_PATH, engine.READINESS_PATH), OPERATOR_IMAGE)
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health_generate"
    assert pod["containers"][0]["ports"][0]["containerPort"] == 30000


@pytest.mark.parametrize("timeout,expected", [("1m", 6), ("45m", 270), ("90s", 9), ("2h", 720)])
def test_startup_failure_threshold(timeout, expected):
    local = DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/models/Kimi-K2.5"},
                                               "drafter": {"method": "none"}, "startup": {"timeout": timeout}})
    assert startup_failure_threshold(local) == expected
    # a hub id may have to be downloaded first: spec.startup.downloadTimeout (default 1h) on top
    hub = local.model_copy(update={"target": local.target.model_copy(update={"model": "moonshotai/Kimi-K2.5"})})
    assert startup_failure_threshold(hub) == expected + 360
    offline = hub.model_copy(update={"storage": StorageSpec(cache_claim="hf", offline=True)})
    assert startup_failure_threshold(offline) == expected  # offline: nothing is downloaded


def test_the_operator_owns_hub_offline_and_cache_variables():
    on_volume = example("serving-vllm-kimi-k25-eagle3.yaml").spec  # every model a path on the model claim
    assert runs_offline(on_volume) and hub_models(on_volume) == []
    assert operator_environment(on_volume) == [{"name": "HF_HUB_OFFLINE", "value": "1"}]
    hub = example("serving-sglang-kimi-k25-eagle3.yaml").spec  # the public drafter is a hub id
    assert hub_models(hub) == ["AQ-MedAI/Kimi-K2-Instruct-eagle3"] and not runs_offline(hub)
    cached = hub.model_copy(update={"storage": hub.storage.model_copy(update={"cache_claim": "hf-cache"})})
    assert operator_environment(cached) == [{"name": "HF_HUB_OFFLINE", "value": "0"},
                                            {"name": "HF_HOME", "value": "/var/cache/huggingface"}]
    pod = engine_pod_spec(DrafterServing(metadata={"name": "k", "namespace": "n"}, spec=cached), "img", ["x"],
                          EngineHttp(30000, "/health", "/health_generate"), OPERATOR_IMAGE)
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}} in pod["volumes"]
    assert {"name": "hf-cache", "mountPath": "/var/cache/huggingface"} in pod["containers"][0]["volumeMounts"]


def test_offline_with_a_hub_id_needs_a_cache_and_the_cache_stays_off_the_model_volume():
    base = {"engine": "sglang", "target": {"model": "/models/Kimi-K2.5"},
            "drafter": {"method": "eagle3", "model": "AQ-MedAI/Kimi-K2-Instruct-eagle3"}}
    with pytest.raises(ValueError, match="spec.storage.offline is true but a model is a hub id"):
        DrafterServingSpec.model_validate({**base, "storage": {"modelClaim": "models", "offline": True}})
    DrafterServingSpec.model_validate({**base, "storage": {"modelClaim": "models", "offline": True, "cacheClaim": "hf"}})
    with pytest.raises(ValueError, match="cachePath and spec.storage.mountPath overlap"):
        DrafterServingSpec.model_validate({**base, "storage": {"cacheClaim": "hf", "cachePath": "/models/cache"}})


def test_deployment_and_service_select_one_revision():
    serving = example("serving-vllm-kimi-k25-eagle3.yaml")
    serving.metadata["namespace"] = "ml"
    deployment = engine_deployment(serving, "abc1234567", 2, {"containers": []})
    assert deployment["metadata"]["name"] == "kimi-k25-vllm-eagle3-abc1234567"
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}  # never a GPU beyond the spec
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"drafter.dev/serving": "kimi-k25-vllm-eagle3", "drafter.dev/revision": "abc1234567"}
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    service = serving_service(serving, "abc1234567", 8000)
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_seed_combination_is_known_bad_and_the_sglang_one_is_not():
    seed = example("serving-vllm-kimi-k25-eagle3.yaml").spec
    matches = drafter_compatible.matching_known_bad(seed, "vllm/vllm-openai:v0.33.0")
    assert [m.id for m in matches] == ["vllm-eagle3-deepseek-mla"]
    assert "15%" in matches[0].reason
    assert drafter_compatible.matching_known_bad(example("serving-sglang-kimi-k25-eagle3.yaml").spec, "lmsysorg/sglang:v0.5.23") == []
    assert drafter_compatible.matching_known_bad(example("serving-baseline.yaml").spec, "vllm/vllm-openai:v0.33.0") == []
    # The architecture from a preflight wins over the name heuristics.
    assert drafter_compatible.matching_known_bad(seed, "img", architecture="LlamaForCausalLM") == []


@pytest.mark.parametrize("version,bounds,inside", [
    ((0, 33, 0), ">=0.10,<0.40", True), ((0, 40, 1), ">=0.10,<0.40", False), (None, "<0.1", True),
    ((1, 0), "", True), ((0, 9), ">=0.10", False),
])
def test_version_ranges(version, bounds, inside):
    assert drafter_compatible.version_in_range(version, bounds) is inside


def test_image_version_parsing():
    assert drafter_compatible.image_version("vllm/vllm-openai:v0.33.0") == (0, 33, 0)
    assert drafter_compatible.image_version("lmsysorg/sglang:v0.5.23-cu130") == (0, 5, 23)
    assert drafter_compatible.image_version("vllm/vllm-openai:latest") is None
    assert drafter_compatible.image_version("registry:5000/vllm") is None


POLICY_SPEC = {
    "env": [{"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "HF_HUB_OFFLINE", "value": "0"},  # the operator's: dropped, its own value wins
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}}],
    "envFrom": [{"secretRef": {"name": "hub-token"}}, {"configMapRef": {"name": "engine-tuning"}, "prefix": "X_"}],
    "resources": {"gpusPerReplica": 8, "requests": {"cpu": "32", "memory": "512Gi"}, "limits": {"memory": "1Ti"}},
    "placement": {"gpuProduct": "NVIDIA-B200",
                  "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                      {"topologyKey": "kubernetes.io/hostname",
                       "labelSelector": {"matchLabels": {"drafter.dev/serving": "kimi"}}}]}},
                  "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                 "whenUnsatisfiable": "ScheduleAnyway"}]},
    "pod": {"labels": {"example.com/team": "inference"}, "annotations": {"example.com/owner": "ml-platform"},
            "serviceAccountName": "engines", "imagePullSecrets": [{"name": "registry"}],
            "priorityClassName": "serving-critical", "runtimeClassName": "nvidia",
            "securityContext": {"fsGroup": 1000},
            "containerSecurityContext": {"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}}},
}


def policy_serving(**changes) -> DrafterServing:
    body = yaml.safe_load((EXAMPLES / "serving-vllm-kimi-k25-eagle3.yaml").read_text())
    body["spec"].update(copy.deepcopy(POLICY_SPEC), **changes)
    body["metadata"] = {"name": "kimi", "namespace": "team"}
    return DrafterServing.model_validate(body)


def test_pod_policy_env_and_resources_render_into_the_pod_template():
    serving = policy_serving()
    pod = engine_pod_spec(serving, "img", ["vllm", "serve"], EngineHttp(8000, "/health", "/health"), OPERATOR_IMAGE)
    (container,) = pod["containers"]
    assert container["env"] == [{"name": "NCCL_DEBUG", "value": "WARN"},
                                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}},
                                {"name": "HF_HUB_OFFLINE", "value": "1"}]  # every model is on the model claim
    assert container["envFrom"] == POLICY_SPEC["envFrom"]
    assert container["resources"] == {"requests": {"cpu": "32", "memory": "512Gi", "nvidia.com/gpu": "8"},
                                      "limits": {"memory": "1Ti", "nvidia.com/gpu": "8"}}
    assert container["securityContext"] == POLICY_SPEC["pod"]["containerSecurityContext"]
    for field in ("serviceAccountName", "imagePullSecrets", "priorityClassName", "runtimeClassName", "securityContext"):
        assert pod[field] == POLICY_SPEC["pod"][field], field
    assert pod["affinity"] == POLICY_SPEC["placement"]["affinity"]
    assert pod["topologySpreadConstraints"] == POLICY_SPEC["placement"]["topologySpreadConstraints"]
    template = engine_deployment(serving, "r1", 1, pod)["spec"]["template"]
    assert template["metadata"]["labels"]["example.com/team"] == "inference"
    assert template["metadata"]["labels"]["drafter.dev/revision"] == "r1"  # the operator's labels stay
    assert template["metadata"]["annotations"] == {"example.com/owner": "ml-platform"}


def test_without_a_policy_the_engine_runs_where_the_upstream_images_run():
    pod = engine_pod_spec(example("serving-vllm-kimi-k25-eagle3.yaml"), "img", ["x"], EngineHttp(8000, "/health", "/health"), OPERATOR_IMAGE)
    (container,) = pod["containers"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}
    assert "runAsNonRoot" not in str(container["securityContext"])  # vLLM's and SGLang's images run as root
    assert "envFrom" not in container and "serviceAccountName" not in pod and "affinity" not in pod
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}


def test_pod_policy_changes_keep_the_revision():
    plain = example("serving-vllm-kimi-k25-eagle3.yaml")
    assert revision_hash(policy_serving().spec, "img") == revision_hash(plain.spec, "img")


def test_a_hub_token_is_never_rendered_as_a_value():
    token = "hf_aVeryRealLookingToken123"
    serving = policy_serving()
    rendered = json.dumps([engine_pod_spec(serving, "img", ["vllm", "serve"], EngineHttp(8000, "/health", "/health"), OPERATOR_IMAGE),
                           serving.model_dump(mode="json", by_alias=True)])
    assert token not in rendered and "secretKeyRef" in rendered  # the reference travels, never the value
    with pytest.raises(ValueError, match="must not hold a hub token"):
        policy_serving(env=[{"name": "HF_TOKEN", "value": token}])


# ---------------------------------------------------------------------------------------------------
# The drafter preflight init container


def test_engine_pods_that_load_a_drafter_from_the_volume_get_the_preflight_first():
    serving = example("serving-vllm-kimi-k25-eagle3.yaml")
    pod = engine_pod_spec(serving, "vllm/vllm-openai:v0.33.0", ["vllm", "serve"], EngineHttp(8000, "/health", "/health"),
                          OPERATOR_IMAGE)
    (init,) = pod["initContainers"]
    assert init == {
        "name": "preflight", "image": OPERATOR_IMAGE,
        "command": ["drafter-operator", "preflight", "--target", "/models/Kimi-K2.5", "--engine", "vllm",
                    "--method", "eagle3", "--drafter", "/models/drafters/kimi-k25-eagle3", "--vllm-model-runner", "v2",
                    "--skip-missing", "--termination-message", "/dev/termination-log"],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "securityContext": {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in pod["volumes"]
    # The CLI it runs accepts exactly these arguments.
    from drafter_operator import cli as top_cli

    args = top_cli.build_parser().parse_args(init["command"][1:])
    assert (args.skip_missing, args.termination_message, args.method) == (True, "/dev/termination-log", "eagle3")


def test_the_preflight_follows_the_engine_method_runner_and_mount_path():
    serving = with_spec(example("serving-vllm-kimi-k25-eagle3.yaml"), storage__mountPath="/weights",
                        target__model="/weights/Kimi-K2.5", drafter__model="/weights/d", drafter__method="eagle",
                        env=[{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}])
    (init,) = engine_pod_spec(serving, "img", ["x"], EngineHttp(8000, "/h", "/h"), OPERATOR_IMAGE)["initContainers"]
    command = init["command"]
    assert command[command.index("--method") + 1] == "eagle" and command[command.index("--drafter") + 1] == "/weights/d"
    assert command[command.index("--vllm-model-runner") + 1] == "v1"  # where vLLM v1 reads the layer ids
    assert init["volumeMounts"] == [{"name": "models", "mountPath": "/weights", "readOnly": True}]
    sglang = example("serving-sglang-kimi-k25-eagle3.yaml")
    on_volume = with_spec(sglang, drafter__model="/models/drafters/kimi-eagle3")
    (init,) = engine_pod_spec(on_volume, "img", ["x"], EngineHttp(30000, "/h", "/h"), OPERATOR_IMAGE)["initContainers"]
    assert "--vllm-model-runner" not in init["command"] and "sglang" in init["command"]
    # mtp: the target's own head is checked; no drafter directory is needed.
    mtp = with_spec(example("serving-vllm-kimi-k25-eagle3.yaml"), drafter={"method": "mtp", "numSpeculativeTokens": 1})
    (init,) = engine_pod_spec(mtp, "img", ["x"], EngineHttp(8000, "/h", "/h"), OPERATOR_IMAGE)["initContainers"]
    assert "--drafter" not in init["command"] and init["command"][init["command"].index("--method") + 1] == "mtp"


@pytest.mark.parametrize("changes,why", [
    ({"drafter": {"method": "none"}, "acceptance": None}, "no drafter"),
    ({"drafter": {"method": "ngram", "numSpeculativeTokens": 3}}, "no checkpoint"),
    ({"drafter": {"method": "draftModel", "model": "/models/small", "numSpeculativeTokens": 3}}, "no rules"),
    ({"drafter__model": "org/kimi-eagle3"}, "a hub drafter"),
    ({"target__model": "moonshotai/Kimi-K2.5"}, "a hub target"),
    ({"storage": {"shmSize": "64Gi"}}, "no model claim"),
])
def test_no_preflight_where_there_is_nothing_on_the_volume_to_check(changes, why):
    serving = with_spec(example("serving-vllm-kimi-k25-eagle3.yaml"), **changes)
    pod = engine_pod_spec(serving, "img", ["x"], EngineHttp(8000, "/h", "/h"), OPERATOR_IMAGE)
    assert "initContainers" not in pod, why
