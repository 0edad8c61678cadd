"""spec.capture in the pods a serving runs: the engine's own request logging into the spool, the capture sidecar
(the operator's image) with the claim, and a change of capture rolled into the running revision in place."""

from __future__ import annotations

import dataclasses
import json

import yaml

from drafter_operator import engines
from drafter_operator.capture.spool import SPOOL_DIRECTORY
from drafter_operator.constants import FILE_ANNOTATION_PREFIX
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.api import DrafterServingSpec
from drafter_operator.controllers.serving.decide import decide
from drafter_operator.resources import capture
from drafter_operator.resources.workloads import GROUP
from tests.support.servings import REPO, World, seed_body

CAPTURE = {"sampleRate": "0.05", "claimName": "captured", "responses": True}


def created(plan, plural: str) -> list[dict]:
    return [w.body for w in plan.writes if w.verb == "create" and w.plural == plural]


def pod_template(body: dict) -> dict:
    world = World(body)
    (deployment,) = created(world.decide(), "deployments")
    return deployment["spec"]["template"]


def volumes(pod: dict) -> dict[str, dict]:
    return {v["name"]: v for v in pod["volumes"]}


def test_a_vllm_serving_with_capture_logs_its_requests_into_the_spool_and_runs_the_sidecar():
    template = pod_template(seed_body(capture=CAPTURE))
    pod = template["spec"]
    engine = pod["containers"][0]
    assert engine["command"][-3:] == ["--enable-log-requests", "--enable-log-outputs", "--no-enable-log-deltas"]
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert env["VLLM_LOGGING_CONFIG_PATH"] == engines.vllm.CAPTURE_LOGGING_CONFIG_PATH
    assert env["VLLM_REQUEST_BODY_LOG_LEVEL"] == "INFO"
    # The logging configuration rides in the template and is projected where the variable points.
    carried = template["metadata"]["annotations"][FILE_ANNOTATION_PREFIX + "vllm-logging.json"]
    assert json.loads(carried) == engines.vllm.capture_logging_config()
    mounts = {m["name"]: m for m in engine["volumeMounts"]}
    assert mounts["capture-files"]["mountPath"] == "/etc/drafter/capture" and mounts["capture-files"]["readOnly"]
    assert mounts[capture.SPOOL_VOLUME]["mountPath"] == SPOOL_DIRECTORY
    assert capture.CLAIM_VOLUME not in mounts  # the engine never sees the claim
    assert volumes(pod)[capture.SPOOL_VOLUME]["emptyDir"] == {"sizeLimit": capture.SPOOL_SIZE_LIMIT}
    assert volumes(pod)[capture.CLAIM_VOLUME]["persistentVolumeClaim"] == {"claimName": "captured"}
    sidecar = next(c for c in pod["initContainers"] if c["name"] == capture.CAPTURE_CONTAINER)
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == World(seed_body()).state().operator_image
    assert sidecar["command"] == ["drafter-operator", "capture", "--spool", SPOOL_DIRECTORY,
                                  "--claim", capture.CLAIM_MOUNT, "--engine", "vllm", "--sample-rate", "0.05",
                                  "--responses", "--retention", "168h", "--max-size", "10Gi",
                                  "--samples-port", str(capture.SAMPLES_PORT)]
    assert sidecar["ports"] == [{"name": "samples", "containerPort": capture.SAMPLES_PORT, "protocol": "TCP"}]
    assert {m["name"]: m.get("readOnly", False) for m in sidecar["volumeMounts"]} == {
        capture.SPOOL_VOLUME: False, capture.CLAIM_VOLUME: False}
    assert sidecar["securityContext"] == engine["securityContext"]


def test_the_sidecars_command_parses_with_the_cli_it_runs():
    from drafter_operator.cli import build_parser

    spec = DrafterServingSpec.model_validate({**seed_body(capture=CAPTURE)["spec"]})
    args = build_parser().parse_args(capture.capture_argv(spec.engine, spec.capture)[1:])
    assert (args.engine, args.sample_rate, args.responses, args.retention) == ("vllm", 0.05, True, 168 * 3600)


def test_an_sglang_serving_with_capture_gets_sglangs_flags_and_no_files():
    body = seed_body()
    body["spec"] = yaml.safe_load((REPO / "examples" / "serving-sglang-kimi-k25-eagle3.yaml").read_text())["spec"]
    body["spec"]["capture"] = {"sampleRate": "1", "claimName": "captured"}
    pod = pod_template(body)["spec"]
    engine = pod["containers"][0]
    flags = engines.sglang.capture_flags(DrafterServingSpec.model_validate(body["spec"]).capture)
    assert engine["command"][-len(flags):] == flags and "--log-requests-target" in flags
    assert "capture-files" not in volumes(pod)
    assert capture.SPOOL_VOLUME in {m["name"] for m in engine["volumeMounts"]}


def test_without_capture_the_pod_has_no_spool_no_claim_and_no_sidecar():
    pod = pod_template(seed_body())["spec"]
    assert not {capture.SPOOL_VOLUME, capture.CLAIM_VOLUME, "capture-files"} & set(volumes(pod))
    assert capture.CAPTURE_CONTAINER not in {c["name"] for c in pod.get("initContainers", [])}
    assert "--enable-log-requests" not in pod["containers"][0]["command"]


def test_capture_names_no_new_revision_and_a_change_rolls_the_running_pods_in_place():
    plain = DrafterServingSpec.model_validate(seed_body()["spec"])
    captured = DrafterServingSpec.model_validate(seed_body(capture=CAPTURE)["spec"])
    assert revision_hash(plain, "img") == revision_hash(captured, "img")
    world = World(seed_body())
    world.converge()
    (name,) = world.deployments
    world.body["spec"]["capture"] = CAPTURE
    world.body["metadata"]["generation"] += 1
    plan = world.decide()
    assert not created(plan, "deployments")
    (patch,) = [w for w in plan.writes if w.plural == "deployments" and w.verb == "patch"]
    assert patch.path.endswith(f"/{name}")
    names = [c["name"] for c in patch.body["spec"]["template"]["spec"]["initContainers"]]
    assert capture.CAPTURE_CONTAINER in names
    world.apply(plan)
    world.settle()
    # Turned off again: the sidecar, the spool and the flags leave the template.
    world.body["spec"].pop("capture")
    world.body["metadata"]["generation"] += 1
    world.apply(world.decide())
    pod = world.deployments[name]["spec"]["template"]["spec"]
    assert capture.CAPTURE_CONTAINER not in {c["name"] for c in pod.get("initContainers") or []}
    assert capture.SPOOL_VOLUME not in volumes(pod)
    assert "--enable-log-requests" not in pod["containers"][0]["command"]


def test_a_group_runs_the_sidecar_on_its_leader_only_and_logs_on_every_pod():
    body = seed_body(capture=CAPTURE)
    body["spec"]["target"].update(tensorParallelSize=8, dataParallelSize=2, expertParallel=True)
    body["spec"]["resources"] = {"gpusPerReplica": 8, "nodesPerReplica": 2}
    (lws,) = created(World(body).decide(), GROUP.plural)
    template = lws["spec"]["leaderWorkerTemplate"]
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    assert capture.CAPTURE_CONTAINER in {c["name"] for c in leader["spec"]["initContainers"]}
    assert "initContainers" not in worker["spec"]
    assert capture.CLAIM_VOLUME in volumes(leader["spec"]) and capture.CLAIM_VOLUME not in volumes(worker["spec"])
    assert "--enable-log-requests" in worker["spec"]["containers"][0]["command"]
    for side in (leader, worker):  # vLLM reads its logging file on every pod the variable names it in
        assert FILE_ANNOTATION_PREFIX + "vllm-logging.json" in side["metadata"]["annotations"]


def test_a_redaction_runs_the_users_container_before_the_sidecar_sharing_one_directory_and_never_the_claim():
    from drafter_operator.capture.redaction import WRAPPER_SCRIPT
    from drafter_operator.cli import build_parser

    redaction = {"image": "registry.example/redact:2", "command": ["python3", "/redact.py", "--strict"]}
    pod = pod_template(seed_body(capture={**CAPTURE, "redaction": redaction}))["spec"]
    names = [c["name"] for c in pod["initContainers"]]
    # Native sidecars stop in reverse order: the redaction outlives the capture sidecar's final drain.
    assert names.index(capture.REDACTION_CONTAINER) < names.index(capture.CAPTURE_CONTAINER)
    redact = next(c for c in pod["initContainers"] if c["name"] == capture.REDACTION_CONTAINER)
    assert redact["image"] == "registry.example/redact:2" and redact["restartPolicy"] == "Always"
    assert redact["command"] == ["sh", "-c", WRAPPER_SCRIPT, "redact", capture.REDACTION_DIRECTORY,
                                 "python3", "/redact.py", "--strict"]
    assert [m["name"] for m in redact["volumeMounts"]] == [capture.REDACTION_VOLUME]
    assert volumes(pod)[capture.REDACTION_VOLUME]["emptyDir"] == {"sizeLimit": capture.REDACTION_SIZE_LIMIT}
    sidecar = next(c for c in pod["initContainers"] if c["name"] == capture.CAPTURE_CONTAINER)
    assert {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}[capture.REDACTION_VOLUME] \
        == capture.REDACTION_DIRECTORY
    # What the sidecar is told parses as the operator's own command line does.
    args = build_parser().parse_args(sidecar["command"][1:])
    assert args.redaction_dir == capture.REDACTION_DIRECTORY
    assert capture.REDACTION_VOLUME not in {m["name"] for m in pod["containers"][0]["volumeMounts"]}


def test_without_a_redaction_no_container_nor_directory_is_added():
    pod = pod_template(seed_body(capture=CAPTURE))["spec"]
    assert capture.REDACTION_CONTAINER not in [c["name"] for c in pod["initContainers"]]
    assert capture.REDACTION_VOLUME not in volumes(pod)
    sidecar = next(c for c in pod["initContainers"] if c["name"] == capture.CAPTURE_CONTAINER)
    assert "--redaction-dir" not in sidecar["command"]


def test_a_redaction_image_the_administrator_does_not_allow_is_refused_naming_the_field():
    from drafter_operator.resources.pod_policy import TenantPolicy

    body = seed_body(capture={**CAPTURE, "redaction": {"image": "docker.io/someone/redact:1", "command": ["cat"]}})
    body_without = seed_body(capture=CAPTURE)
    state = World(body_without).state()
    engine_image = body["spec"].get("image") or state.default_images[body["spec"]["engine"]]
    allowed = dataclasses.replace(state, tenant_policy=TenantPolicy(image_prefixes=(engine_image,)))
    assert created(decide(allowed), "deployments")  # the engine's image alone passes without a redaction
    plan = decide(dataclasses.replace(allowed, serving=body))
    assert not created(plan, "deployments")
    assert "spec.capture.redaction.image" in json.dumps(plan.status)
