"""Contract tier: the command lines of a replica's pods, leader and workers of a replica that spans nodes, read by
the real vLLM 0.33.0 and SGLang 0.5.23 parsers (vLLM's post-parse validation included).

Each supported shape is rendered from a DrafterServingSpec, the group's environment expanded as the kubelet expands
``$(NAME)`` in a container's command (LeaderWorkerSet sets LWS_LEADER_ADDRESS, LWS_GROUP_SIZE and LWS_WORKER_INDEX),
and the parsed values must be the layout the spec asks for: the sizes, the nodes, this pod's node rank, where the
group meets, the workers' --headless, and the same drafter on every pod.
"""

from __future__ import annotations

import pytest

from drafter_operator.api import DrafterServingSpec
from drafter_operator.engines import group, sglang, vllm
from tests.support.kubernetes_env import expand

# The modules using the session-scoped `parsers` (a vLLM and an SGLang parser process, about 100 s to start under
# CI load) share one worker, so one worker starts them rather than both (tests/contract/conftest.py).
pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("engine-parsers")]

LEADER = "drafter-kimi-0.drafter-kimi.inference"
GPUS_PER_NODE = 8

#: (id, tensor, pipeline, data, expert, nodes, drafter, extraArgs) per engine: the shapes the API takes.
VLLM_SHAPES = [
    ("pp-across-2-nodes-mtp", 8, 2, 1, False, 2, {"method": "mtp", "numSpeculativeTokens": 3}, []),
    ("tp16-across-2-nodes-eagle3", 16, 1, 1, False, 2,
     {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 3}, []),
    ("dp2-ep-across-2-nodes-mtp", 8, 1, 2, True, 2, {"method": "mtp", "numSpeculativeTokens": 1}, []),
    ("dp8-tp2-ep-across-2-nodes-eagle3", 2, 1, 8, True, 2,
     {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 5}, []),
    ("dp4-across-4-nodes-ngram", 8, 1, 4, False, 4, {"method": "ngram", "numSpeculativeTokens": 3}, []),
    ("tp16-dp2-across-4-nodes-dspark", 16, 1, 2, True, 4, {"method": "dspark", "numSpeculativeTokens": 5}, []),
    ("pp2-dp2-across-4-nodes-none", 8, 2, 2, False, 4, {"method": "none"}, []),
    ("one-node-dp2-mtp", 4, 1, 2, True, 1, {"method": "mtp", "numSpeculativeTokens": 2}, []),
    ("one-node-pp2-eagle3", 4, 2, 1, False, 1, {"method": "eagle3", "model": "/models/d", "numSpeculativeTokens": 3},
     []),
]
SGLANG_SHAPES = [
    ("pp-across-2-nodes-eagle", 8, 2, 1, False, 2, {"method": "eagle", "model": "/models/d", "numSteps": 3}, []),
    ("tp16-across-2-nodes-eagle3", 16, 1, 1, False, 2, {"method": "eagle3", "model": "/models/d", "numSteps": 3}, []),
    ("attn-dp2-ep-across-2-nodes-mtp", 8, 1, 2, True, 2, {"method": "mtp", "numSteps": 3}, []),
    ("attn-dp4-across-2-nodes-dflash", 4, 1, 4, False, 2, {"method": "dflash", "model": "/models/d",
                                                            "numSpeculativeTokens": 7}, ["--enable-dp-lm-head"]),
    ("attn-dp8-tp4-across-4-nodes-eagle3", 4, 1, 8, True, 4,
     {"method": "eagle3", "model": "/models/d", "numSteps": 2}, []),
    ("one-node-attn-dp2-mtp", 4, 1, 2, False, 1, {"method": "mtp", "numSteps": 2}, []),
]


def spec(engine: str, shape: tuple) -> DrafterServingSpec:
    _, tp, pp, dp, ep, nodes, drafter, extra = shape
    target = {"model": "/models/t", "tensorParallelSize": tp, "pipelineParallelSize": pp, "dataParallelSize": dp,
              "expertParallel": ep, **({"extraArgs": extra} if extra else {})}
    return DrafterServingSpec.model_validate({
        "engine": engine, "target": target, "drafter": drafter,
        "resources": {"gpusPerReplica": GPUS_PER_NODE if nodes > 1 else tp * pp * dp, "nodesPerReplica": nodes}})


def pods(module, serving: DrafterServingSpec) -> list[tuple[int, list[str]]]:
    """(node rank, argv as the container receives it) for the leader and each worker."""
    nodes = serving.resources.nodes_per_replica
    return [(rank, expand(module.render_command(serving, worker=rank > 0),
                          {group.LEADER_ADDRESS_ENV: LEADER, group.GROUP_SIZE_ENV: str(nodes),
                           group.WORKER_INDEX_ENV: str(rank)}))
            for rank in range(nodes)]


def parsed(parsers, engine: str, argvs: list[list[str]]) -> list[dict]:
    results = parsers[engine].check([{"id": str(i), "argv": argv} for i, argv in enumerate(argvs)])
    for argv, result in zip(argvs, results):
        assert result["status"] == "ok", (argv, result)
    return [result["args"] for result in results]


@pytest.mark.parametrize("shape", VLLM_SHAPES, ids=[s[0] for s in VLLM_SHAPES])
def test_vllm_parses_every_pod_of_the_group_to_its_place(parsers, shape):
    _, tp, pp, dp, ep, nodes, _, _ = shape
    ranks = pods(vllm, spec("vllm", shape))
    for (rank, _), args in zip(ranks, parsed(parsers, "vllm", [argv for _, argv in ranks])):
        assert (args["tensor_parallel_size"], args["pipeline_parallel_size"], args["data_parallel_size"]) == (tp, pp, dp)
        assert bool(args["enable_expert_parallel"]) == ep
        assert (args["nnodes"], args["node_rank"]) == (nodes, rank)
        assert bool(args["headless"]) == (rank > 0)
        if nodes > 1:
            assert (args["master_addr"], args["master_port"]) == (LEADER, vllm.GROUP_MASTER_PORT)
        if nodes > 1 and dp > 1:
            assert (args["data_parallel_address"], args["data_parallel_rpc_port"]) == (
                LEADER, vllm.GROUP_DATA_PARALLEL_RPC_PORT)
            # what vLLM 0.33.0 infers from the node rank (EngineArgs.create_engine_config), given explicitly
            assert args["data_parallel_size_local"] == max(GPUS_PER_NODE // (tp * pp), 1)
            assert args["data_parallel_start_rank"] is None and args["data_parallel_rank"] is None
    configs = {str(args["speculative_config"]) for args in parsed(parsers, "vllm", [argv for _, argv in ranks])}
    assert len(configs) == 1  # the drafter is the same on every pod


@pytest.mark.parametrize("shape", SGLANG_SHAPES, ids=[s[0] for s in SGLANG_SHAPES])
def test_sglang_parses_every_pod_of_the_group_to_its_place(parsers, shape):
    _, tp, pp, dp, ep, nodes, _, _ = shape
    ranks = pods(sglang, spec("sglang", shape))
    results = parsed(parsers, "sglang", [argv for _, argv in ranks])
    for (rank, _), args in zip(ranks, results):
        # attention data parallelism: the tensor-parallel group is every rank's GPUs, attention split dp ways
        assert (args["tp_size"], args["pp_size"], args["attn_dp_size"], args["dp_size"]) == (tp * dp, pp, dp, 1)
        assert args["ep_size"] == (tp * dp if ep else 1)
        assert (args["nnodes"], args["node_rank"]) == (nodes, rank)
        assert args["dist_init_addr"] == (f"{LEADER}:{sglang.GROUP_DIST_INIT_PORT}" if nodes > 1 else None)
        assert (args["tp_size"] * args["pp_size"]) % args["nnodes"] == 0  # SGLang's check_server_args
    speculative = {tuple((k, str(v)) for k, v in sorted(args.items()) if k.startswith("speculative_"))
                   for args in results}
    assert len(speculative) == 1  # the drafter is the same on every pod


@pytest.mark.parametrize("engine, module", [("vllm", vllm), ("sglang", sglang)])
def test_a_replica_on_one_node_keeps_its_command_line_free_of_group_flags(parsers, engine, module):
    serving = spec(engine, (VLLM_SHAPES if engine == "vllm" else SGLANG_SHAPES)[-1])
    argv = module.render_command(serving)
    assert expand(argv, {}) == argv  # nothing for the kubelet to expand
    (args,) = parsed(parsers, engine, [argv])
    assert (args["nnodes"], args["node_rank"]) == (1, 0)
