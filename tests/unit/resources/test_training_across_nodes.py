"""Train across spec.resources.nodes pods (pure): torchrun's command line, the Indexed Job, its Service and names."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api.kind import NAME_MAX_LENGTH
from drafter_operator.resources.names import JOB_NAME_MAX
from drafter_operator.resources.training_job import (StageCommand, StageRun, rendezvous, rendezvous_args, rendezvous_service, stage_job,
                                                     stage_job_name)
from drafter_operator.training import TrainingPaths, render
from drafter_operator.training.torchrun import RENDEZVOUS_PORT, Rendezvous, launch
from tests.support.training_families import OPTIONS, with_nodes

MEET = Rendezvous("kimi-train-g1-0.kimi-rendezvous:29400", "kimi-train-g1")


def test_one_node_keeps_torchruns_own_loopback_rendezvous():
    assert launch("python", 8, 1, None) == ("python", "-m", "torch.distributed.run", "--standalone",
                                            "--nproc_per_node", "8")


def test_across_nodes_every_agent_meets_at_the_endpoint_and_a_lost_one_is_never_restarted_alone():
    argv = launch("python", 8, 4, MEET)
    flag = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1, 2)}
    assert flag == {"--nnodes": "4", "--nproc_per_node": "8", "--rdzv-backend": "c10d",
                    "--rdzv-endpoint": MEET.endpoint, "--rdzv-id": MEET.run_id, "--max-restarts": "0"}
    assert "--standalone" not in argv


def test_across_nodes_without_a_rendezvous_the_render_refuses_and_names_the_fix():
    with pytest.raises(ValueError, match="--rendezvous-endpoint"):
        launch("python", 8, 2, None)


@pytest.mark.parametrize("cpu", [False, True])
def test_speculators_trains_under_torchrun_across_nodes(cpu):
    options = dataclasses.replace(OPTIONS, cpu=cpu, rendezvous=MEET)
    train = next(s for s in render(with_nodes(2), TrainingPaths(), options) if s.name == "Train")
    argv = train.commands[-1].argv
    assert argv[1:3] == ("-m", "torch.distributed.run") and argv[argv.index("--nnodes") + 1] == "2"
    # GPUs: every GPU of each pod; the CPU: one gloo process per pod, the adapter itself the script torchrun runs.
    assert argv[argv.index("--nproc_per_node") + 1] == ("1" if cpu else "8")
    script = argv[argv.index("--max-restarts") + 2:]
    assert script[:2] == (("/opt/drafter-training/adapters/cpu_trainer.py", "train") if cpu
                          else ("-m", "speculators.train"))
    one = next(s for s in render(with_nodes(1), TrainingPaths(), dataclasses.replace(OPTIONS, cpu=cpu))
               if s.name == "Train")
    # the trainer's own flags are the same on one node and across nodes
    assert script[2:] == one.commands[-1].argv[len(one.commands[-1].argv) - len(script[2:]):]


def test_train_across_nodes_is_one_group_that_fails_as_a_whole():
    job = stage_job("team", "kimi", with_nodes(3), StageRun("Train", 1), StageCommand("trainer:1"))
    assert {k: job["spec"][k] for k in ("completionMode", "completions", "parallelism", "backoffLimit")} == \
        {"completionMode": "Indexed", "completions": 3, "parallelism": 3, "backoffLimit": 0}
    assert "backoffLimitPerIndex" not in job["spec"]  # a retried rank alone would join no group
    assert job["spec"]["template"]["spec"]["subdomain"] == "kimi-rendezvous"
    single = stage_job("team", "kimi", with_nodes(1), StageRun("Train", 1), StageCommand("trainer:1"))
    assert "subdomain" not in single["spec"]["template"]["spec"] and "completionMode" not in single["spec"]


def test_the_rendezvous_service_is_headless_resolves_pods_before_ready_and_selects_only_train():
    service = rendezvous_service("team", "kimi")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["port"] == RENDEZVOUS_PORT
    labels = stage_job("team", "kimi", with_nodes(2), StageRun("Train", 1), StageCommand("trainer:1"))["spec"]["template"]["metadata"]["labels"]
    extract = stage_job("team", "kimi", with_nodes(2), StageRun("Extract", 1), StageCommand("trainer:1"))["spec"]["template"]["metadata"]["labels"]
    selector = service["spec"]["selector"].items()
    assert all(labels.get(k) == v for k, v in selector) and not all(extract.get(k) == v for k, v in selector)


def test_only_runs_across_nodes_pass_the_rendezvous():
    assert rendezvous_args("kimi", with_nodes(1), 1) == ()
    assert rendezvous_args("kimi", with_nodes(2), 3) == ("--rendezvous-endpoint",
                                                         "kimi-train-g3-0.kimi-rendezvous:29400",
                                                         "--rendezvous-id", "kimi-train-g3")


names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=0, max_size=NAME_MAX_LENGTH - 1).map(
    lambda tail: ("k" + tail).rstrip("-") or "k")


@given(names, st.integers(1, 10**6), st.sampled_from(["Extract", "Train"]), st.integers(2, 64))
def test_an_indexed_stages_pod_hostnames_stay_dns_labels_whatever_the_names(training, generation, stage, nodes):
    job = stage_job_name(training, stage, generation, nodes)
    assert len(f"{job}-{nodes - 1}") <= JOB_NAME_MAX  # the Job controller names pod i's host <job>-i
    host = rendezvous(training, generation, nodes).endpoint.split(":")[0]
    assert all(0 < len(label) <= 63 for label in host.split("."))


@given(names, st.integers(1, 10**6), st.sampled_from(["Generate", "Extract", "Train", "Export"]))
def test_a_single_node_stage_keeps_the_name_every_release_gave_it(training, generation, stage):
    assert stage_job_name(training, stage, generation) == stage_job_name(training, stage, generation, 1)
    name = f"{training}-{stage.lower()}-g{generation}"
    if len(name) <= JOB_NAME_MAX:
        assert stage_job_name(training, stage, generation) == name


@pytest.mark.parametrize("cpu", [False, True])
def test_specforge_trains_as_torchrun_workers_across_nodes_with_its_topology_naming_the_group(cpu):
    spec = with_nodes(2, framework="specforge", data={**with_nodes(1).data.to_json(), "chatTemplate": "qwen"})
    options = dataclasses.replace(OPTIONS, cpu=cpu, rendezvous=MEET, chat_template="qwen")
    train = next(s for s in render(spec, TrainingPaths(), options) if s.name == "Train")
    argv = train.commands[-1].argv
    assert argv[1:3] == ("-m", "torch.distributed.run") and argv[argv.index("--rdzv-endpoint") + 1] == MEET.endpoint
    entry = argv[argv.index("--max-restarts") + 2:]
    assert entry[:2] == (("/opt/drafter-training/adapters/eager_loss.py", "train") if cpu else ("-m", "specforge.cli"))
    config = next(f for f in train.files if f.name.endswith(".yaml")).content
    assert config["deployment"]["trainer"] == {"nnodes": 2, "nproc_per_node": 1 if cpu else 8,
                                               "master_addr": "kimi-train-g1-0.kimi-rendezvous", "master_port": 29400}
    one = next(s for s in render(spec.model_copy(update={"resources": with_nodes(1).resources}), TrainingPaths(),
                                 dataclasses.replace(options, rendezvous=None)) if s.name == "Train")
    assert "torch.distributed.run" not in one.commands[-1].argv  # one node: SpecForge launches its own ranks
