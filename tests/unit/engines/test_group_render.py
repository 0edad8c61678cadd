"""The engine command lines of a replica's pods: one node as before, and the leader and workers of a replica that
spans nodes (engines/group.py, each engine's parallel_flags and group_flags). The real parsers read the same lines
in tests/contract/test_group_command_contract.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator.api import DrafterServingSpec
from drafter_operator.engines import group, sglang, vllm
from drafter_operator.engines.command_line import parse
from tests.support.kubernetes_env import expand

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DRAFTER = {"vllm": {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 3},
           "sglang": {"method": "eagle3", "model": "/models/d", "numSteps": 3}}
MODULES = {"vllm": vllm, "sglang": sglang}
ENTRY = {"vllm": 2, "sglang": 3}


def spec(engine: str, *, tp=8, pp=None, dp=None, ep=None, nodes=None, gpus=8, drafter=None) -> DrafterServingSpec:
    target = {"model": "/models/t", "tensorParallelSize": tp,
              **({"pipelineParallelSize": pp} if pp else {}), **({"dataParallelSize": dp} if dp else {}),
              **({"expertParallel": ep} if ep is not None else {})}
    return DrafterServingSpec.model_validate({
        "engine": engine, "target": target, "drafter": drafter or DRAFTER[engine],
        "resources": {"gpusPerReplica": gpus, **({"nodesPerReplica": nodes} if nodes else {})}})


def environment(rank: int, nodes: int) -> dict[str, str]:
    return {group.LEADER_ADDRESS_ENV: "serving-0.serving.ns", group.GROUP_SIZE_ENV: str(nodes),
            group.WORKER_INDEX_ENV: str(rank)}


def parsed(engine: str, argv: list[str]):
    return parse(engine, argv[ENTRY[engine]:], with_defaults=True)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_one_node_renders_no_group_flags_and_has_no_workers(engine):
    argv = MODULES[engine].render_command(spec(engine))
    assert not any(a.startswith("$(") or "$(" in a for a in argv)
    assert "--nnodes" not in argv and "--headless" not in argv
    with pytest.raises(ValueError, match="no workers"):
        MODULES[engine].render_command(spec(engine), worker=True)


def test_the_group_environment_is_lws_v0_9_0s():
    assert (group.LEADER_ADDRESS_ENV, group.GROUP_SIZE_ENV, group.WORKER_INDEX_ENV) == (
        "LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")
    assert group.LEADER_ADDRESS == "$(LWS_LEADER_ADDRESS)" and group.NODE_RANK == "$(LWS_WORKER_INDEX)"


layouts = st.sampled_from([
    # (tp, pp, dp, nodes) with 8 GPUs a node
    (8, 2, 1, 2), (16, 1, 1, 2), (8, 1, 2, 2), (4, 1, 4, 2), (8, 1, 4, 4), (16, 1, 2, 4), (8, 2, 2, 4), (4, 2, 2, 2),
])


@FAST
@given(layout=layouts, ep=st.booleans(), rank=st.integers(0, 3))
def test_vllm_every_pod_of_a_group_parses_to_its_place(layout, ep, rank):
    tp, pp, dp, nodes = layout
    rank %= nodes
    serving = spec("vllm", tp=tp, pp=pp, dp=dp, ep=ep, nodes=nodes)
    argv = expand(vllm.render_command(serving, worker=rank > 0), environment(rank, nodes))
    values = parsed("vllm", argv)
    assert (values["tensor_parallel_size"], values["pipeline_parallel_size"], values["data_parallel_size"]) == (
        tp, pp, dp)
    assert (values["nnodes"], values["node_rank"], values["master_addr"]) == (nodes, rank, "serving-0.serving.ns")
    assert values["master_port"] == vllm.GROUP_MASTER_PORT
    assert values["headless"] == (rank > 0) and values["enable_expert_parallel"] == ep
    if dp > 1:
        assert values["data_parallel_address"] == "serving-0.serving.ns"
        assert values["data_parallel_rpc_port"] == vllm.GROUP_DATA_PARALLEL_RPC_PORT
        # vLLM 0.33.0 infers the same: a node's GPUs over one rank's, at least one
        assert values["data_parallel_size_local"] == max(8 // (tp * pp), 1)
        assert values["data_parallel_start_rank"] is None  # inferred from the node rank
    # the drafter is the same on every pod
    leader = expand(vllm.render_command(serving), environment(0, nodes))
    assert values["speculative_config"] == parsed("vllm", leader)["speculative_config"]


def sglang_drafter(pp: int, dp: int) -> dict:
    """A drafter SGLang 0.5.23 runs with the layout: EAGLE across pipeline stages, none with stages and attention
    DP together (the API's rules)."""
    if pp > 1:
        return {"method": "none"} if dp > 1 else {"method": "eagle", "model": "/models/d", "numSteps": 3}
    return DRAFTER["sglang"]


@FAST
@given(layout=layouts, ep=st.booleans(), rank=st.integers(0, 3))
def test_sglang_every_pod_of_a_group_parses_to_its_place(layout, ep, rank):
    tp, pp, dp, nodes = layout
    rank %= nodes
    serving = spec("sglang", tp=tp, pp=pp, dp=dp, ep=ep, nodes=nodes, drafter=sglang_drafter(pp, dp))
    worker = expand(sglang.render_command(serving, worker=rank > 0), environment(rank, nodes))
    values = parsed("sglang", worker)
    # attention data parallelism: the tensor-parallel group is every rank's GPUs, attention split dp ways
    assert (values["tp_size"], values["pp_size"], values["attn_dp_size"]) == (tp * dp, pp, dp)
    assert values["ep_size"] == (tp * dp if ep else 1)
    assert (values["nnodes"], values["node_rank"]) == (nodes, rank)
    assert values["dist_init_addr"] == f"serving-0.serving.ns:{sglang.GROUP_DIST_INIT_PORT}"
    # SGLang's node rank alone tells the leader: every pod runs the same line, drafter flags included
    leader = expand(sglang.render_command(serving), environment(rank, nodes))
    assert leader == worker


def test_sglang_single_node_keeps_its_tensor_parallel_size():
    argv = sglang.render_command(spec("sglang", tp=4))
    assert argv[argv.index("--tp-size") + 1] == "4" and "--attn-dp-size" not in argv
    argv = sglang.render_command(spec("sglang", tp=4, dp=2))
    assert argv[argv.index("--tp-size") + 1] == "8" and argv[argv.index("--attn-dp-size") + 1] == "2"


def test_the_layout_reads_unset_sizes_as_one():
    layout = group.Parallelism.of(spec("vllm"))
    assert (layout.tensor, layout.pipeline, layout.data, layout.expert, layout.nodes) == (8, 1, 1, False, 1)
    assert not layout.spans_nodes and layout.world_size == 8 and layout.gpus_per_node == 8
    wide = group.Parallelism(tensor=16, data=2, nodes=4)
    assert (wide.world_size, wide.gpus_per_node, wide.data_ranks_per_node) == (32, 8, 1)
