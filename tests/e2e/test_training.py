"""DrafterTraining end to end on the local cluster: every stage a real Job whose pod runs the real
framework code on the CPU (SpecForge 0.2.0, speculators 0.9.0; the named CPU adapters of
docs/training.md), on a tiny random Llama target the test writes to the model volume.

What is checked: the stages run in order as Jobs and record a condition each; the drafter is written
to spec.output.path and is accepted by vLLM 0.33.0's SpeculativeConfig and our preflight; the
hidden-state claim the operator created is gone after success; Extract and Train across two pods (shares
captured once; one torchrun group through the cluster DNS; a lost pod fails the whole group); an operator
stopped mid-stage resumes without repeating a stage; deleting a training mid-stage leaves no Job, pod, ConfigMap or claim.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

# What the stage containers need on a machine without GPUs or internet (the spec's env).
from drafter_testbed.demo_training import CPU_ENV
from drafter_testbed.code_roots import source_pythonpath
from tests import environments
from tests.e2e.conftest import E2E_GPU_PRODUCT
from tests.support.e2e_kueue import gpu_queue, kueue_running
from tests.support.e2e_serving import apply, seed_serving, wait_ready

pytestmark = pytest.mark.usefixtures("local_cluster_only")

TINY_LAYERS = [1, 2, 3]  # vLLM's ids on the 4-layer tiny target
TINY_DRAFT_VOCAB = 256
CONVERSATIONS = 24
# Each stage starts a python with torch; on two busy cores a run of three or four stages takes minutes.
RUN_TIMEOUT = 900


@pytest.fixture(scope="session")
def training_python(local_cluster_only, pytestconfig) -> str:
    """The training environment (.ci/training-env, cached), recorded for the runner's trainer containers."""
    from drafter_testbed import cluster as local

    python = environments.built(environments.TRAINING, pytestconfig)
    local.use_training_python(python)
    return python


@pytest.fixture
def tiny(cluster, namespace, model_volume, training_python, engine_nodes, operator) -> Path:
    """The tiny target and dataset on the model volume (host side of the claim `models`)."""
    from drafter_testbed import cluster as local

    root = local.Layout().root / "claims" / namespace / model_volume
    env = {**os.environ, "PYTHONPATH": source_pythonpath(), "HF_HUB_OFFLINE": "1"}
    for argv in (["target", str(root / "tiny-target")],
                 ["dataset", str(root / "chats.jsonl"), "--conversations", str(CONVERSATIONS)]):
        subprocess.run([training_python, "-m", "drafter_testbed.tiny_target", *argv], env=env, check=True,
                       capture_output=True, timeout=300)
    (root / "drafters").mkdir(exist_ok=True)  # Export writes only into an existing parent (docs/training.md)
    return root


def hidden_states_volume(cluster, namespace: str, training: str) -> None:
    """A volume pre-bound to the claim the operator will create (the local cluster runs no provisioner)."""
    from drafter_testbed.volumes import volume_for_claim

    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(volume_for_claim(
        namespace, f"{training}-hidden-states", f"/tmp/drafter-e2e/{namespace}-hs")))


#: The local cluster's pods share the host's network namespace, and torchrun's c10d store listens on every
#: address at its port (29400): two groups at once would meet on one store, and the second would lose it when
#: the first ends. On a cluster each pod has its own network namespace, so this is the testbed's limit alone.
ONE_TORCHRUN_GROUP_AT_A_TIME = pytest.mark.cluster_lock("torchrun-rendezvous-port")


def training_manifest(name: str, framework: str, **spec) -> dict:
    body = {
        "apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterTraining", "metadata": {"name": name},
        "spec": {
            "target": {"model": "/models/tiny-target", "tensorParallelSize": 1},
            "framework": framework,
            "storage": {"modelClaim": "models", "mountPath": "/models"},
            "data": {"dataset": "/models/chats.jsonl", "numSamples": CONVERSATIONS, "maxTokens": 256,
                     **({"chatTemplate": "qwen"} if framework == "specforge" else {})},
            "hiddenStates": {"layers": TINY_LAYERS, "storage": {"size": "1Gi"}},
            "train": {"epochs": 1, "learningRate": "1e-4", "batchSize": 1, "maxLength": 512,
                      "draftVocabSize": TINY_DRAFT_VOCAB},
            "output": {"path": f"/models/drafters/{name}"},
            "resources": {"gpus": 1, "requests": {"cpu": "100m", "memory": "256Mi"}},
            # GPU stages (and Generate's engine) on the test's process nodes, where pods really run.
            "placement": {"gpuProduct": E2E_GPU_PRODUCT, "nodeSelector": {"drafter.dev/node-runtime": "process"}},
            "env": CPU_ENV,
            **spec,
        },
    }
    return body


def apply_training(cluster, namespace: str, body: dict) -> None:
    hidden_states_volume(cluster, namespace, body["metadata"]["name"])
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(body))  # YAML would make 1e-4 a number


def training(cluster, namespace: str, name: str) -> dict:
    return cluster.get_json("-n", namespace, "draftertrainings.drafter.dev", name)


def wait_stage(cluster, namespace: str, name: str, stages: tuple[str, ...], timeout: float = RUN_TIMEOUT) -> dict:
    def reached():
        body = training(cluster, namespace, name)
        status = body.get("status") or {}  # none until the operator's first write
        stage = status.get("stage")
        if stage == "Failed" and "Failed" not in stages:
            ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
            raise AssertionError(f"training failed: {ready.get('message')}\n{stage_logs(cluster, namespace, name)}")
        return body if stage in stages else None

    return cluster.wait_for(f"training {name} at {stages}", reached, timeout=timeout, interval=2)


def stage_logs(cluster, namespace: str, name: str) -> str:
    out = cluster.kubectl("-n", namespace, "logs", "-l", f"drafter.dev/training={name}", "--tail=30",
                          "--prefix", check=False)
    return out.stdout[-6000:] if out.returncode == 0 else out.stderr


def labelled(cluster, namespace: str, kind: str, name: str) -> list[str]:
    items = cluster.get_json("-n", namespace, kind, "-l", f"drafter.dev/training={name}")["items"]
    return [i["metadata"]["name"] for i in items]


def conditions(body: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}


def vllm_accepts(training_python: str, target: Path, drafter: Path) -> dict:
    """What vLLM 0.33.0's SpeculativeConfig makes of the drafter (the training contract tier's check)."""
    from tests.support.contract_training import vllm_accepts as check

    return check(training_python, target, drafter)


def sglang_reads(training_python: str, tmp_path: Path, target: Path, drafter: Path) -> dict:
    """What SGLang 0.5.23's own config code makes of the drafter (the preflight contract tier's probe)."""
    from tests.support.contract_preflight import PROBE, Probe

    script = tmp_path / "preflight_probe.py"
    script.write_text(PROBE)
    probe = Probe(training_python, "sglang", script)
    try:
        return probe.ok("config", target=str(target), drafter=str(drafter))
    finally:
        probe.close()


@ONE_TORCHRUN_GROUP_AT_A_TIME
def test_specforge_training_runs_every_stage_as_a_job_trains_across_two_pods_and_resumes_after_an_operator_restart(
        cluster, namespace, tiny, training_python, operator, tmp_path):
    name = "sf"
    # Train across two pods (SpecForge's CLI as the torchrun workers of one gloo group); its capture on one pod.
    apply_training(cluster, namespace, training_manifest(
        name, "specforge", output={"path": "/models/drafters/sf", "format": "hf"},
        resources={"gpus": 1, "nodes": 2, "requests": {"cpu": "100m", "memory": "256Mi"}}))
    started = time.monotonic()
    # The operator stops while Train runs; the Job finishes without it.
    wait_stage(cluster, namespace, name, ("Train",))
    operator.stop()
    try:
        cluster.wait_for("the Train Job to finish without the operator", lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (cluster.get_json("-n", namespace, "job", f"{name}-train-g1").get("status") or {}).get("conditions") or []),
            timeout=RUN_TIMEOUT, interval=2)
    finally:
        operator.start()
    body = wait_stage(cluster, namespace, name, ("Succeeded",))
    elapsed = time.monotonic() - started

    conds = conditions(body)
    for kind in ("Extracted", "Trained", "Exported", "Ready"):
        assert conds[kind]["status"] == "True", conds[kind]
    assert "Generated" not in conds  # a local JSONL needs no Generate stage
    # The run's cost estimate, from the stage runner's rates and the tiny target's shape (training/cost.py).
    estimate = body["status"]["estimate"]
    assert estimate["gpuHours"] > 0 and "samples x maxLength" in estimate["basis"], estimate
    assert datetime.fromisoformat(estimate["finishTime"].replace("Z", "+00:00")).tzinfo is not None
    # One Job per stage, none repeated after the restart.
    jobs = sorted(labelled(cluster, namespace, "jobs", name))
    assert jobs == [f"{name}-export-g1", f"{name}-extract-g1", f"{name}-train-g1"], jobs
    for job in jobs:  # each ran its pods once (none repeated): Train two, as one group
        job_status = cluster.get_json("-n", namespace, "job", job)["status"]
        pods = 2 if job == f"{name}-train-g1" else 1
        assert job_status.get("succeeded") == pods and not job_status.get("failed"), (job, job_status)
    artifacts = {a["stage"]: a for a in body["status"]["artifacts"]}
    assert artifacts["Export"]["path"] == f"/models/drafters/{name}" and artifacts["Export"]["sizeBytes"] > 100_000
    # The drafter is on the model volume and the engines accept it.
    drafter = tiny / "drafters" / name
    # Export staged it beside the output and renamed it into place, recording what it wrote: the digest in the
    # directory is the one in status (where Promote reads it) and matches the files.
    from drafter_operator.training.export import DIGEST_FILE, content_digest

    assert json.loads((drafter / DIGEST_FILE).read_text())["digest"] == artifacts["Export"]["contentDigest"] \
        == content_digest(drafter)
    assert sorted(p.name for p in (tiny / "drafters").iterdir() if p.name.startswith(f".{name}.")) == []
    config = json.loads((drafter / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == TINY_DRAFT_VOCAB
    assert vllm_accepts(training_python, tiny / "tiny-target", drafter)["draft_vocab_size"] == TINY_DRAFT_VOCAB
    # SGLang 0.5.23 reads it as an EAGLE-3 drafter of the target, capturing the layers it was trained on
    # (SGLang adds 1 to SpecForge's ids), and our preflight passes it for SGLang.
    sglang = sglang_reads(training_python, tmp_path, tiny / "tiny-target", drafter)
    assert sglang["draft_vocab_size"] == TINY_DRAFT_VOCAB and sglang["eagle_use_aux"] is True
    assert sglang["layers_to_capture"] == TINY_LAYERS, sglang
    from drafter_operator.preflight import preflight

    verdict = preflight(drafter, tiny / "tiny-target", "sglang", "eagle3")
    assert verdict.ok and verdict.checked, verdict.message
    # The hidden-state claim the operator made is deleted once the run succeeded (no stage uses it). That
    # is the reconcile after the one that recorded Export (the stage pods it deletes carry Export's
    # outcome, so it must be in status first): the "Succeeded" read above may come between the two.
    cluster.wait_for("status.hiddenStates.deleted", lambda: ((training(cluster, namespace, name).get("status") or {})
                                                            .get("hiddenStates") or {}).get("deleted") is True,
                     timeout=60, interval=1)
    claims = lambda: cluster.get_json("-n", namespace, "pvc", "-l", f"drafter.dev/training={name}")["items"]  # noqa: E731
    try:
        cluster.wait_for("the hidden-state claim to go", lambda: not claims(), timeout=120)
    except AssertionError:
        raise AssertionError(f"the claim stays: {[c['metadata'] for c in claims()]}")
    reasons = [e["reason"] for e in cluster.get_json("-n", namespace, "events", "--field-selector",
                                                     f"involvedObject.name={name}")["items"]]
    assert reasons.count("StageStarted") == 3 and "Exported" in reasons, reasons
    print(f"\n[training e2e] specforge: {elapsed:.0f} s for Extract, Train, Export through Jobs")


def test_speculators_training_is_evaluated_against_the_serving_and_promoted_through_its_gate(
        fast_engines, tiny, training_python):
    cluster, namespace, operator = fast_engines
    # The serving the drafter goes into: vLLM with the seed's drafter (15 % acceptance, 0.66x in the
    # emulator), serving the same tiny target.
    serving = seed_serving("tiny", target={"model": "/models/tiny-target", "tensorParallelSize": 1},
                           resources={"gpusPerReplica": 1})
    serving["spec"].pop("acceptance")
    apply(cluster, namespace, serving)
    wait_ready(cluster, namespace, "tiny")
    name = "spec"
    body = training_manifest(name, "speculators", promote={
        "servingRef": {"name": "tiny"}, "gate": {"minAcceptanceRate": "0.3", "numPrompts": 3, "maxTokens": 256}})
    # The answers regenerated by the target itself, served by its own engine pod (the emulator here).
    body["spec"]["data"]["generation"] = {"engine": "vllm"}
    apply_training(cluster, namespace, body)
    started = time.monotonic()
    progress_seen = set()

    def finished():
        body = training(cluster, namespace, name)
        status = body.get("status") or {}
        if (status.get("progress") or {}).get("summary"):
            progress_seen.add((status.get("stage"), status["progress"]["summary"]))
        if status.get("stage") == "Failed":
            raise AssertionError(f"training failed: {conditions(body).get('Ready')}\n{stage_logs(cluster, namespace, name)}")
        return body if status.get("stage") == "Succeeded" else None

    body = cluster.wait_for("the training to be promoted", finished, timeout=RUN_TIMEOUT, interval=2)
    elapsed = time.monotonic() - started
    conds = conditions(body)
    for kind in ("Generated", "Extracted", "Trained", "Exported", "Evaluated", "Promoted"):
        assert conds[kind]["status"] == "True", conds[kind]
    drafter = tiny / "drafters" / name
    config = json.loads((drafter / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["eagle_aux_hidden_state_layer_ids"] == TINY_LAYERS
    assert vllm_accepts(training_python, tiny / "tiny-target", drafter)["method"] == "eagle3"
    # Progress was read from the stage pods while they ran (sample counts during Generate/Extract).
    assert any(stage in ("Generate", "Extract") and "samples" in summary for stage, summary in progress_seen), progress_seen
    assert ("Generate", "waiting for the target's engine to be Ready") in progress_seen or \
        ("Generate", "waiting for the target's engine to start") in progress_seen, progress_seen
    # Every conversation was answered by the target's engine, and the engine is gone with Generate.
    work = tiny.parent / f"{name}-hidden-states"  # the claim's directory on the process runner's host
    regenerated = [json.loads(line) for line in (work / "data" / "regenerated.jsonl").read_text().splitlines()]
    original = {row["id"]: row for row in map(json.loads, (tiny / "chats.jsonl").read_text().splitlines())}
    assert sorted(row["id"] for row in regenerated) == sorted(original)
    answers = [turn["content"] for row in regenerated for turn in row["conversations"] if turn["role"] == "assistant"]
    before = [turn["content"] for row in original.values() for turn in row["conversations"] if turn["role"] == "assistant"]
    assert len(answers) == len(before) and not set(answers) & set(before)  # every answer is the target's own
    assert not cluster.get_json("-n", namespace, "deployments", "-l", "app.kubernetes.io/component=generation-engine")["items"]
    status = body["status"]
    artifacts = {a["stage"]: a for a in status["artifacts"]}
    assert artifacts["Export"]["path"] == "/models/drafters/spec" and artifacts["Export"]["sizeBytes"] > 0
    # Evaluate measured the current drafter; the gate then required the new one to beat it, and it did.
    evaluation = status["evaluation"]
    assert evaluation["tokensPerSecond"] > evaluation["currentTokensPerSecond"]
    served = cluster.get_json("-n", namespace, "drafterserving", "tiny")
    assert served["spec"]["drafter"]["model"] == "/models/drafters/spec"
    assert served["status"]["activeRevision"] == status["promotedRevision"]
    assert served["metadata"]["annotations"]["drafter.dev/promoted-by"] == "spec (generation 1)"
    # The revision is the export's (its content digest), and the gate came with this promotion only:
    # spec.swap is as the user applied it.
    assert served["spec"]["drafter"]["contentDigest"] == artifacts["Export"]["contentDigest"]
    swap = served["spec"].get("swap") or {}
    assert "gate" not in swap and swap.get("strategy", "Recreate") == "Recreate", swap  # the seed's: none set
    promotion = json.loads(served["metadata"]["annotations"]["drafter.dev/promotion"])
    assert promotion["strategy"] == "BlueGreen" and promotion["contentDigest"] == artifacts["Export"]["contentDigest"]
    assert float(promotion["gate"]["minTokensPerSecond"]) == pytest.approx(evaluation["currentTokensPerSecond"], abs=0.01)
    assert served["status"]["promotion"]["revision"] == status["promotedRevision"]
    compatible = next(c for c in served["status"]["conditions"] if c["type"] == "DrafterCompatible")
    assert compatible["status"] == "True", compatible  # the preflight init container checked the new drafter
    print(f"\n[training e2e] speculators: {elapsed:.0f} s for Generate, Extract, Train, Export, Evaluate, Promote; "
          f"current {evaluation['currentTokensPerSecond']:.1f} tok/s -> new {evaluation['tokensPerSecond']:.1f} tok/s")


def stage_pods(cluster, namespace: str, job: str) -> list[dict]:
    """The Job's pods in index order."""
    pods = cluster.get_json("-n", namespace, "pods", "-l", f"job-name={job}")["items"]
    return sorted(pods, key=lambda p: int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]))


@ONE_TORCHRUN_GROUP_AT_A_TIME
def test_an_extract_and_a_train_across_two_pods_capture_each_share_once_and_train_as_one_group(cluster, namespace, tiny):
    name = "dp"
    apply_training(cluster, namespace, training_manifest(
        name, "speculators", resources={"gpus": 1, "nodes": 2, "requests": {"cpu": "100m", "memory": "256Mi"}},
        # kept, and with it the finished stage pods (their logs are read below)
        hiddenStates={"layers": TINY_LAYERS, "storage": {"size": "1Gi", "retain": True}}))
    body = wait_stage(cluster, namespace, name, ("Succeeded",))
    assert conditions(body)["Trained"]["status"] == "True"
    extract = cluster.get_json("-n", namespace, "job", f"{name}-extract-g1")
    assert extract["spec"]["completionMode"] == "Indexed" and extract["spec"]["parallelism"] == 2
    assert extract["status"]["succeeded"] == 2 and extract["status"].get("completedIndexes") == "0,1", extract["status"]
    # Each pod captured its own contiguous share (speculators' split) into the one claim, and recorded it.
    from drafter_testbed import cluster as local

    hidden = local.Layout().root / "claims" / namespace / f"{name}-hidden-states" / "hidden_states"
    manifests = sorted(json.loads(p.read_text())["samples"] for p in (hidden / "shards").glob("shard-*-of-2-*-g1.json"))
    assert manifests == [[0, CONVERSATIONS // 2], [CONVERSATIONS // 2, CONVERSATIONS]], manifests
    assert sorted(int(p.stem[3:]) for p in hidden.glob("hs_*.safetensors")) == list(range(CONVERSATIONS))
    # Status compares each share's bytes with its part of the estimate (what its own files hold).
    sizes = body["status"]["hiddenStates"]["shardSizes"]
    assert [s["index"] for s in sizes] == [0, 1], sizes
    for size in sizes:
        share = range(size["index"] * CONVERSATIONS // 2, (size["index"] + 1) * CONVERSATIONS // 2)
        assert size["bytesWritten"] == sum((hidden / f"hs_{i}.safetensors").stat().st_size for i in share), size
        assert 0 < size["estimatedBytes"], size
    # Train ran on both pods as one data-parallel group: they met at pod 0's name through the headless Service
    # (resolved by the cluster's DNS), and each rank's trainer saw a world of two.
    train = cluster.get_json("-n", namespace, "job", f"{name}-train-g1")
    assert train["spec"]["completionMode"] == "Indexed" and train["status"].get("completedIndexes") == "0,1"
    service = cluster.get_json("-n", namespace, "service", f"{name}-rendezvous")
    assert service["spec"]["clusterIP"] == "None"
    pods = stage_pods(cluster, namespace, f"{name}-train-g1")
    assert [p["spec"]["hostname"] for p in pods] == [f"{name}-train-g1-0", f"{name}-train-g1-1"]
    for pod in pods:
        log = cluster.kubectl("-n", namespace, "logs", pod["metadata"]["name"]).stdout
        assert "dp_size=2" in log, log[-3000:]
    # Train read both shares: the drafter was exported.
    assert (tiny / "drafters" / name / "config.json").is_file()


@ONE_TORCHRUN_GROUP_AT_A_TIME
def test_a_pod_lost_mid_extract_is_replaced_and_only_its_share_runs_again(cluster, namespace, tiny):
    """An Extract share's pod lost (a node gone) runs once more (backoffLimitPerIndex: 1); the other share is
    never captured again and the run goes on with every sample."""
    name = "shard-lost"
    apply_training(cluster, namespace, training_manifest(
        name, "speculators", resources={"gpus": 1, "nodes": 2, "requests": {"cpu": "100m", "memory": "256Mi"}},
        hiddenStates={"layers": TINY_LAYERS, "storage": {"size": "1Gi", "retain": True}}))
    job = f"{name}-extract-g1"

    def share_one_running():
        pods = stage_pods(cluster, namespace, job)
        running = [p for p in pods if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
                   and (p.get("status") or {}).get("phase") == "Running"]
        return running[0] if running else None

    # Lost while it starts (its imports alone take seconds), so it cannot have finished first.
    lost = cluster.wait_for("share 1's pod to run", share_one_running, timeout=RUN_TIMEOUT, interval=0.5)
    cluster.kubectl("-n", namespace, "delete", "pod", lost["metadata"]["name"], "--wait=false")
    body = wait_stage(cluster, namespace, name, ("Train", "Export", "Succeeded"))
    assert conditions(body)["Extracted"]["status"] == "True"
    status = cluster.get_json("-n", namespace, "job", job)["status"]
    # Index 1 failed once (the lost pod) and then succeeded; no index failed for good.
    assert status.get("completedIndexes") == "0,1" and status.get("failed") == 1, status
    assert not status.get("failedIndexes"), status
    pods = stage_pods(cluster, namespace, job)
    indexes = [p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods]
    assert indexes.count("0") == 1 and indexes.count("1") == 1, indexes  # share 0 never ran again
    assert pods[1]["metadata"]["name"] != lost["metadata"]["name"]
    from drafter_testbed import cluster as local

    hidden = local.Layout().root / "claims" / namespace / f"{name}-hidden-states" / "hidden_states"
    assert sorted(int(p.stem[3:]) for p in hidden.glob("hs_*.safetensors")) == list(range(CONVERSATIONS))
    manifests = sorted(json.loads(p.read_text())["samples"] for p in (hidden / "shards").glob("shard-*-of-2-*-g1.json"))
    assert manifests == [[0, CONVERSATIONS // 2], [CONVERSATIONS // 2, CONVERSATIONS]], manifests
    assert body["status"]["hiddenStates"]["shardsDone"] == 2
    # Train's torchrun group may have started: gone before the lock on its port is released.
    cluster.kubectl("-n", namespace, "delete", "draftertrainings.drafter.dev", name, "--wait=true", "--timeout=120s")
    cluster.wait_for("no stage pod of the run left", lambda: not cluster.get_json(
        "-n", namespace, "pods", "-l", f"drafter.dev/training={name}")["items"], timeout=120, interval=1)


@ONE_TORCHRUN_GROUP_AT_A_TIME
def test_a_pod_lost_mid_train_fails_the_whole_group_and_none_trains_on(cluster, namespace, tiny):
    name = "lost"
    apply_training(cluster, namespace, training_manifest(
        name, "speculators", resources={"gpus": 1, "nodes": 2, "requests": {"cpu": "100m", "memory": "256Mi"}},
        # long enough that the group is surely mid-Train when a pod goes
        train={"epochs": 100, "learningRate": "1e-4", "batchSize": 1, "maxLength": 512,
               "draftVocabSize": TINY_DRAFT_VOCAB}))
    wait_stage(cluster, namespace, name, ("Train",))
    job = f"{name}-train-g1"

    def training_together():
        pods = stage_pods(cluster, namespace, job)
        if len(pods) != 2 or any((p.get("status") or {}).get("phase") != "Running" for p in pods):
            return None
        logs = [cluster.kubectl("-n", namespace, "logs", p["metadata"]["name"], check=False).stdout for p in pods]
        return pods if all("dp_size=2" in log for log in logs) else None

    pods = cluster.wait_for("both Train pods to train as one group", training_together, timeout=RUN_TIMEOUT, interval=2)
    cluster.kubectl("-n", namespace, "delete", "pod", pods[1]["metadata"]["name"], "--wait=false")
    body = wait_stage(cluster, namespace, name, ("Failed",))
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert "Train failed" in ready["message"], ready
    assert conditions(body).get("Trained", {}).get("status") != "True"
    # No half-group trains on: the Job failed as a whole and its controller stopped pod 0 too.
    assert any(c["type"] == "Failed" and c["status"] == "True"
               for c in cluster.get_json("-n", namespace, "job", job)["status"].get("conditions") or [])
    cluster.wait_for("no Train pod left running", lambda: all(
        (p.get("status") or {}).get("phase") != "Running" or p["metadata"].get("deletionTimestamp")
        for p in stage_pods(cluster, namespace, job)) or None, timeout=120, interval=2)
    assert not (tiny / "drafters" / name).exists()


def test_a_queued_training_waits_in_kueue_with_its_reason_then_runs_once_the_gpu_is_free(cluster, namespace, tiny,
                                                                                           gpu_queue):
    """A real Kueue whose ClusterQueue holds one GPU: while the first training's Train holds it, the second
    training's Extract waits in the queue and says why in Kueue's words; once the first goes, it is admitted.
    SpecForge on a local JSONL: Extract, a GPU stage, is each run's first, so nothing else has to run first."""
    first, second = "first", "second"
    apply_training(cluster, namespace, training_manifest(
        first, "specforge", queueName="team",
        train={"epochs": 100, "learningRate": "1e-4", "batchSize": 1, "maxLength": 512,
               "draftVocabSize": TINY_DRAFT_VOCAB}))

    def ready_of(name: str) -> tuple[dict, dict]:
        body = training(cluster, namespace, name)
        return body, next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})

    def first_trains():
        body, ready = ready_of(first)
        return body if (body.get("status") or {}).get("stage") == "Train" and ready.get("reason") == "Running" else None

    cluster.wait_for("the first training to be admitted to Train", first_trains, timeout=RUN_TIMEOUT, interval=2)
    # Admitted: Kueue lifts the Job's suspend (the training may say Running from the Workload's admission first).
    job = cluster.wait_for("the admitted Train Job unsuspended", lambda: (j := cluster.get_json(
        "-n", namespace, "job", f"{first}-train-g1")) and not j["spec"].get("suspend") and j, timeout=60)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"
    apply_training(cluster, namespace, training_manifest(second, "specforge", queueName="team"))

    def second_queued():
        body, ready = ready_of(second)
        return ready if ready.get("reason") == "Queued" and (body.get("status") or {}).get("stage") == "Extract" else None

    cluster.wait_for("the second training's Extract to wait in the queue", second_queued,
                     timeout=RUN_TIMEOUT, interval=2)
    # Until Kueue has tried to admit the Workload, the operator can only say "no quota reserved yet" (a CI run
    # read it there); Kueue's own reason follows once its scheduler has looked at the quota.
    ready = cluster.wait_for("Kueue's reason in the second training's status", lambda: (
        r if "insufficient unused quota for nvidia.com/gpu" in (r := second_queued() or {}).get("message", "") else None),
        timeout=RUN_TIMEOUT, interval=2)
    assert ready["message"].startswith("stage Extract waits in queue team: ")
    assert cluster.get_json("-n", namespace, "job", f"{second}-extract-g1")["spec"]["suspend"] is True
    assert not cluster.get_json("-n", namespace, "pods", "-l", f"job-name={second}-extract-g1")["items"]
    cluster.kubectl("-n", namespace, "delete", "draftertrainings.drafter.dev", first, "--wait=true", "--timeout=120s")

    def second_admitted():
        body, ready = ready_of(second)
        extract = cluster.get_json("-n", namespace, "job", f"{second}-extract-g1")
        return body if not extract["spec"].get("suspend") and ready.get("reason") != "Queued" else None

    cluster.wait_for("the second training's Extract to be admitted", second_admitted, timeout=RUN_TIMEOUT, interval=2)
    cluster.wait_for("its pod to run", lambda: cluster.get_json(
        "-n", namespace, "pods", "-l", f"job-name={second}-extract-g1")["items"] or None, timeout=120, interval=2)


def test_a_class_that_cannot_share_the_claim_across_nodes_fails_the_run_at_once_and_leaves_nothing(
        cluster, namespace, operator):
    """The real PV controller names the class's provisioner on the Pending claim; EBS's volumes attach to one node,
    so a run across two nodes could never schedule a pod: it fails naming the fix, its Job and claim gone."""
    name, storage_class = "ebs", f"{namespace}-gp3"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": storage_class},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "Immediate"}))
    try:
        cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(training_manifest(
            name, "speculators", resources={"gpus": 1, "nodes": 2, "requests": {"cpu": "100m", "memory": "256Mi"}},
            hiddenStates={"layers": TINY_LAYERS, "storage": {"size": "1Gi", "storageClassName": storage_class}})))
        body = wait_stage(cluster, namespace, name, ("Failed",), timeout=180)
        ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "StorageNotShared", ready
        assert "ebs.csi.aws.com" in ready["message"] and "storageClassName" in ready["message"], ready
        cluster.wait_for("its Job and claim to go", lambda: not labelled(cluster, namespace, "pvc", name) and not [
            j for j in cluster.get_json("-n", namespace, "jobs", "-l", f"drafter.dev/training={name}")["items"]
            if not (j.get("status") or {}).get("conditions")] or None, timeout=120, interval=2)
    finally:
        cluster.kubectl("delete", "storageclass", storage_class, "--ignore-not-found", check=False)


def test_deleting_a_training_mid_stage_leaves_no_job_pod_config_map_or_claim(cluster, namespace, tiny):
    name = "gone"
    apply_training(cluster, namespace, training_manifest(name, "specforge"))
    wait_stage(cluster, namespace, name, ("Extract",))
    cluster.wait_for("the Extract pod to run", lambda: any(
        (p.get("status") or {}).get("phase") == "Running"
        for p in cluster.get_json("-n", namespace, "pods", "-l", f"drafter.dev/training={name}")["items"]), timeout=120)
    assert labelled(cluster, namespace, "pvc", name) and labelled(cluster, namespace, "configmaps", name)
    cluster.kubectl("-n", namespace, "delete", "draftertrainings.drafter.dev", name, "--wait=true", "--timeout=60s")

    def nothing_left():
        left = {kind: labelled(cluster, namespace, kind, name) for kind in ("jobs", "pods", "configmaps", "pvc")}
        return all(not names for names in left.values()) or None

    cluster.wait_for("every object of the deleted training to go", nothing_left, timeout=120, interval=2)


def chat(ip: str, model: str, question: str) -> None:
    import urllib.request

    body = json.dumps({"model": model, "messages": [{"role": "system", "content": "Answer briefly."},
                                                   {"role": "user", "content": question}], "max_tokens": 8}).encode()
    request = urllib.request.Request(f"http://{ip}:8000/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    assert json.loads(urllib.request.urlopen(request, timeout=60).read())["choices"]


def test_a_retraining_asked_of_a_serving_trains_on_its_distinct_captured_prompts_and_goes_with_it(
        fast_engines, tiny, training_python):
    """The serving's spec.retraining closes the loop from what it was asked: a new drafter.dev/retrain value makes
    it start its own DrafterTraining from the template; that training's Generate pod reads the serving's capture
    (mounted read-only), writes the distinct prompts as train and held-out conversations, and the target answers
    the train set; status.retraining says what started it; deleting the serving deletes the training."""
    from drafter_testbed import cluster as local
    from drafter_testbed.volumes import static_claim
    from tests.support.e2e_serving import service_ip

    cluster, namespace, operator = fast_engines
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        static_claim(namespace, "captured", f"/tmp/drafter-e2e/{namespace}-captured")))
    try:
        template = training_manifest("unused", "specforge")["spec"]
        template["data"] = {"capture": {"claimName": "captured", "heldOutFraction": "0.25"},
                            "generation": {"engine": "vllm"}, "numSamples": 100, "maxTokens": 64, "chatTemplate": "qwen"}
        template["output"] = {"path": "/models/drafters/tiny-retrained"}
        serving = seed_serving("tiny", target={"model": "/models/tiny-target", "tensorParallelSize": 1},
                               resources={"gpusPerReplica": 1}, capture={"sampleRate": "1", "claimName": "captured"},
                               # n-gram speculation until a drafter is trained from its traffic (no base to warm-start)
                               drafter={"method": "ngram", "numSpeculativeTokens": 3},
                               # The interval comes due a minute after creation, but asks for one more prompt
                               # than the test sends: it waits, saying how many the capture sidecar counted.
                               retraining={"template": {"spec": template}, "onDrift": False, "interval": "1m",
                                           "minNewSamples": 16})
        serving["spec"].pop("acceptance")
        cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(serving))  # YAML: 1e-4 a number
        wait_ready(cluster, namespace, "tiny")
        questions = [f"What is {n} times {n}?" for n in range(12)]
        ip = service_ip(cluster, namespace, "tiny")
        for question in questions + questions[:3]:  # three asked twice: trained on once
            chat(ip, "/models/tiny-target", question)
        claim = local.Layout().root / "claims" / namespace / "captured"
        cluster.wait_for("fifteen prompts on the capture's claim", lambda: sum(
            1 for path in claim.glob("*/capture-*.jsonl") for line in path.read_text().splitlines()
            if '"kind": "prompt"' in line) >= 15, timeout=60)

        def waiting_for_samples() -> str | None:
            status = cluster.get_json("-n", namespace, "drafterserving", "tiny").get("status") or {}
            text = (status.get("retraining") or {}).get("waiting") or ""
            return text if "minNewSamples" in text else None
        waiting = cluster.wait_for("the interval to wait for new prompts", waiting_for_samples, timeout=150, interval=2)
        assert waiting.startswith("Interval: 15 prompts captured since ") and waiting.endswith("minNewSamples is 16")
        assert not cluster.get_json("-n", namespace, "draftertrainings")["items"]

        name = "tiny-r1"
        hidden_states_volume(cluster, namespace, name)  # the claim the training will make (no provisioner here)
        # A person asking does not wait for the minimum.
        cluster.kubectl("-n", namespace, "annotate", "drafterserving", "tiny", "drafter.dev/retrain=first")
        body = cluster.wait_for("the serving to start its retraining", lambda: cluster.get_json(
            "-n", namespace, "draftertrainings")["items"], timeout=60)[0]
        assert body["metadata"]["name"] == name
        assert body["spec"]["output"]["path"] == "/models/drafters/tiny-retrained-r1"
        assert body["spec"]["promote"]["servingRef"] == {"name": "tiny"}
        assert body["metadata"]["ownerReferences"][0]["kind"] == "DrafterServing"
        cluster.wait_for("Generate to finish", lambda: conditions(training(cluster, namespace, name)).get(
            "Generated", {}).get("status") == "True" or (training(cluster, namespace, name).get("status") or {}).get(
            "stage") == "Failed", timeout=RUN_TIMEOUT, interval=2)
        body = training(cluster, namespace, name)
        assert conditions(body)["Generated"]["status"] == "True", (conditions(body), stage_logs(cluster, namespace, name))
        data = tiny.parent / f"{name}-hidden-states" / "data"
        rows = {kind: [json.loads(line) for line in (data / f"captured-{kind}.jsonl").read_text().splitlines()]
                for kind in ("train", "held-out")}
        asked = {turns["conversations"][1]["content"] for kind in rows for turns in rows[kind]}
        assert asked == set(questions) and sum(len(r) for r in rows.values()) == 12  # distinct prompts, each once
        assert rows["held-out"] and rows["train"]
        regenerated = [json.loads(line) for line in (data / "regenerated.jsonl").read_text().splitlines()]
        assert sorted(r["id"] for r in regenerated) == sorted(r["id"] for r in rows["train"])
        assert all(r["conversations"][-1]["role"] == "assistant" and r["conversations"][-1]["content"]
                   for r in regenerated)
        retraining = cluster.get_json("-n", namespace, "drafterserving", "tiny")["status"]["retraining"]
        assert retraining["runs"] == 1 and retraining["request"] == "first"
        assert retraining["history"][0]["name"] == name and retraining["history"][0]["trigger"] == "Requested"

        # What the training's Evaluate and gate send: the held-out prompts, read by a benchmark pod from the capture
        # itself (mounted read-only) with the same split, each with its category, captured before a bound.
        from tests.support.e2e_benchmark import benchmark, finished
        held_out_bench = benchmark("held-out", "tiny", numPrompts=2, maxTokens=16, acceptanceByCategory=True,
                                   prompts={"capture": {"claimName": "captured", "heldOutFraction": "0.25",
                                                        "capturedBefore": "2099-01-01T00:00:00Z"}})
        cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(held_out_bench))
        status = finished(cluster, namespace, "held-out")
        assert status["state"] == "Succeeded", status
        by_category = status["result"]["acceptanceByCategory"]
        assert [(c["category"], c["prompts"]) for c in by_category] == [("chat", len(rows["held-out"]))]
        job = cluster.get_json("-n", namespace, "jobs", "-l", "drafter.dev/benchmark=held-out")["items"][0]
        volumes = job["spec"]["template"]["spec"]["volumes"]
        assert {"name": "prompts-claim", "persistentVolumeClaim": {"claimName": "captured", "readOnly": True}} in volumes

        cluster.kubectl("-n", namespace, "delete", "drafterserving", "tiny", "--wait=false")
        cluster.wait_for("the retraining deleted with its serving", lambda: not cluster.get_json(
            "-n", namespace, "draftertrainings")["items"], timeout=120)
    finally:
        cluster.kubectl("delete", "pv", f"{namespace}-captured", "--wait=false", check=False)
