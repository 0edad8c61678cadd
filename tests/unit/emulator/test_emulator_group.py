"""The emulator as a replica that spans nodes (emulator/group.py): the engines' group flags, the leader's meeting
port and readiness, and what a broken group does, with leader and worker processes on loopback."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.engines import group as layout_env
from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import vllm as vllm_engine
from drafter_operator.engines.group import Parallelism
from drafter_testbed.emulator import server
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.group import GroupConfig, GroupRefused, Leader, join, parse_host_port
from drafter_testbed.env_expansion import expand_all
from tests.processes import free_port, wait_until_listening
from tests.support.emulator_processes import group_argv, http_status, start_member, stop

LEADER_ADDRESS = "engine-0.engine.team"


def lws_env(rank: int, nodes: int) -> dict[str, str]:
    return {layout_env.LEADER_ADDRESS_ENV: LEADER_ADDRESS, layout_env.GROUP_SIZE_ENV: str(nodes),
            layout_env.WORKER_INDEX_ENV: str(rank)}


# ---- the group flags, as the operator renders them for a LeaderWorkerSet's pods ----
@pytest.mark.parametrize("tp, dp, nodes", [(2, 1, 2), (8, 1, 4), (4, 2, 2), (2, 4, 4)])
def test_every_vllm_pod_of_a_group_parses_to_its_rank_the_master_and_only_the_leader_serving(tp, dp, nodes):
    layout = Parallelism(tensor=tp, data=dp, nodes=nodes)
    for rank in range(nodes):
        flags = vllm_engine.parallel_flags(layout) + vllm_engine.group_flags(layout, worker=rank > 0)
        argv = expand_all(["vllm", "serve", "/models/m", "--tensor-parallel-size", str(tp), *flags],
                          lws_env(rank, nodes))
        config = parse_command_line(argv)
        assert config.group == GroupConfig(nnodes=nodes, node_rank=rank, leader_host=LEADER_ADDRESS,
                                           leader_port=vllm_engine.GROUP_MASTER_PORT, serves_api=rank == 0)
        assert config.serves_api == (rank == 0) and config.group.is_leader == (rank == 0) and not config.group_problems
        assert not {"--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless"} & set(config.ignored)


@pytest.mark.parametrize("tp, pp, nodes", [(2, 1, 2), (8, 1, 4), (4, 2, 2)])
def test_every_sglang_pod_of_a_group_parses_to_its_rank_the_dist_init_address_and_node_0_serving(tp, pp, nodes):
    layout = Parallelism(tensor=tp, pipeline=pp, nodes=nodes)
    for rank in range(nodes):
        flags = sglang_engine.parallel_flags(layout) + sglang_engine.group_flags(layout, worker=rank > 0)
        argv = expand_all(["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--tp-size", str(tp),
                           *flags], lws_env(rank, nodes))
        config = parse_command_line(argv)
        assert config.group == GroupConfig(nnodes=nodes, node_rank=rank, leader_host=LEADER_ADDRESS,
                                           leader_port=sglang_engine.GROUP_DIST_INIT_PORT, serves_api=rank == 0)
        assert not config.group_problems
        assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(config.ignored)


def test_one_node_has_no_group_and_serves_the_api_as_before():
    for argv in (["vllm", "serve", "m"], ["vllm", "serve", "m", "--nnodes", "1", "--master-port", "1234"],
                 ["python3", "-m", "sglang.launch_server", "--model-path", "m"]):
        config = parse_command_line(argv)
        assert config.group is None and config.serves_api and not config.group_problems


REFUSED = [  # accepted by the engine's parser, refused once it starts (the emulator's "load", status 2)
    (["vllm", "serve", "m", "-tp", "2", "--nnodes", "2", "--node-rank", "2"], "`--node-rank` must be between 0 and 1"),
    (["vllm", "serve", "m", "--tensor-parallel-size", "3", "--nnodes", "2"], "must evenly divide the total world"),
    (["vllm", "serve", "m", "--nnodes", "2", "--tensor-parallel-size", "2", "--data-parallel-backend", "ray"],
     "requires `--data-parallel-backend mp`"),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "3", "--nnodes", "2",
      "--dist-init-addr", "h:1"], "tp_size must be divisible by number of nodes"),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "2", "--dp-size", "2", "--nnodes",
      "2", "--dist-init-addr", "h:1"], "multi-node data-parallel replicas are not supported"),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "2", "--nnodes", "2",
      "--dist-init-addr", "::1:20000"], "IPv6 host in brackets"),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "2", "--nnodes", "2"],
     "without --dist-init-addr"),
    (["vllm", "serve", "m", "--headless"], "--headless on one node"),
]


@pytest.mark.parametrize("argv, message", REFUSED)
def test_group_flags_the_engine_refuses_once_it_starts_are_parsed_then_refused_at_load(argv, message, capsys):
    config = parse_command_line(argv)  # the engine's parser accepts them
    assert any(message in problem for problem in config.group_problems)
    assert server.main(argv) == 2
    assert message in capsys.readouterr().err


@given(st.sampled_from(["engine-0.engine.team", "127.0.0.1", "[::1]", "[fe80::1]", "h"]), st.integers(1, 65535))
def test_a_dist_init_address_is_host_and_port_with_an_ipv6_host_in_brackets(host, port):
    assert parse_host_port(f"{host}:{port}") == (host.strip("[]"), port)
    assert GroupConfig(2, 1, host.strip("[]"), port, False).address == f"{host}:{port}"


@pytest.mark.parametrize("value", ["h", "h:", ":1", "h:0", "h:65536", "h:x", "[::1", "[::1]1", "::1:80"])
def test_addresses_sglang_cannot_parse_are_refused(value):
    with pytest.raises(ValueError):
        parse_host_port(value)


# ---- the leader's admission, in process ----
def test_the_leader_admits_each_worker_rank_once_and_reports_the_first_that_leaves():
    async def scenario():
        port = free_port()
        broken: asyncio.Queue[str] = asyncio.Queue()
        leader = Leader(GroupConfig(3, 0, "127.0.0.1", port, True), broken.put_nowait, lambda line: None)
        await leader.start("127.0.0.1")
        member = lambda rank, nnodes=3: GroupConfig(nnodes, rank, "127.0.0.1", port, False)  # noqa: E731
        refusals = []
        try:
            assert leader.waiting_for == [1, 2] and not leader.complete.is_set()
            _, first = await join(member(1), 5, lambda line: None)
            for other in (member(1), member(2, nnodes=4), member(3), member(0)):
                with pytest.raises(GroupRefused) as refused:
                    await join(other, 5, lambda line: None)
                refusals.append(str(refused.value))
            assert leader.waiting_for == [2] and not leader.complete.is_set()
            _, second = await join(member(2), 5, lambda line: None)
            await asyncio.wait_for(leader.complete.wait(), 10)
            first.close()
            left = await asyncio.wait_for(broken.get(), 10)
            second.close()
        finally:
            await leader.stop()
        return refusals, left

    refusals, left = asyncio.run(scenario())
    assert "rank 1 has already joined" in refusals[0]
    assert "says the group has 4 nodes, the leader 3" in refusals[1]
    assert "node rank 3 is not a worker's of a group of 3" in refusals[2]
    assert "node rank 0 is not a worker's" in refusals[3]
    assert left == "rank 1 left the process group"


# ---- leader and worker processes on loopback ----
def wait_for(condition, proc, what: str, timeout: float = 30.0) -> None:
    """Until ``condition()`` holds; fail naming ``what`` (with ``proc``'s stderr if it exited) if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the process exited ({proc.returncode}) before {what}: {stop(proc)}"
        assert time.monotonic() < deadline, f"not {what} within {timeout:.0f}s"
        time.sleep(0.1)


READINESS = {"vllm": (vllm_engine.HEALTH_PATH, vllm_engine.READINESS_PATH),
             "sglang": (sglang_engine.HEALTH_PATH, sglang_engine.READINESS_PATH, "/ready")}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_leader_is_ready_once_its_worker_joined_and_exits_naming_the_rank_that_leaves(engine):
    api, meeting = free_port(), free_port()
    leader = start_member(group_argv(engine, 0, api, meeting))
    worker = None
    try:
        wait_until_listening(leader, api)
        assert [http_status(api, path) for path in READINESS[engine]] == [503] * len(READINESS[engine])
        state_before = http_status(api, "/emulator/state")
        worker = start_member(group_argv(engine, 1, api, meeting))
        wait_for(lambda: http_status(api, READINESS[engine][-1]) == 200, leader, "ready")
        assert [http_status(api, path) for path in READINESS[engine]] == [200] * len(READINESS[engine])
        # The worker runs the same command line, port included, and stays: it never bound the API's port.
        assert worker.poll() is None and state_before == 200
        worker.kill()
        worker.wait(timeout=10)
        assert leader.wait(timeout=30) == 1
        err = stop(leader)
        assert "rank 1 joined the process group (2 of 2)" in err
        assert "error: rank 1 left the process group" in err
    finally:
        stop(leader)
        if worker is not None:
            stop(worker)


def test_a_worker_whose_leader_goes_away_exits_non_zero():
    api, meeting = free_port(), free_port()
    leader = start_member(group_argv("sglang", 0, api, meeting))
    worker = start_member(group_argv("sglang", 1, api, meeting))
    try:
        wait_until_listening(leader, api)
        wait_for(lambda: http_status(api, sglang_engine.READINESS_PATH) == 200, leader, "ready")
        assert stop(leader) is not None and leader.returncode == 0  # SIGTERM: the leader stops cleanly
        assert worker.wait(timeout=30) == 1
        assert f"error: the leader at 127.0.0.1:{meeting} left the process group (rank 1)" in stop(worker)
    finally:
        stop(leader)
        stop(worker)


def test_a_worker_without_a_leader_retries_for_a_bounded_time_then_exits_with_a_clear_error():
    meeting = free_port()  # nothing listens there
    worker = start_member(group_argv("vllm", 1, free_port(), meeting),
                          DRAFTER_EMULATOR_GROUP_JOIN_SECONDS="0.5")
    try:
        assert worker.wait(timeout=60) == 1
        err = stop(worker)
        assert f"error: rank 1 could not join the process group at 127.0.0.1:{meeting} within 0.5s" in err
    finally:
        stop(worker)


def test_a_worker_stopped_while_it_waits_for_its_leader_exits_cleanly(tmp_path):
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        worker = start_member(group_argv("vllm", 1, free_port(), free_port()), log=log)
    try:
        wait_for(lambda: "node rank 1 of 2 (worker, serves no API)" in log_path.read_text(), worker, "started")
    finally:
        stop(worker)
    assert worker.returncode == 0, log_path.read_text()
