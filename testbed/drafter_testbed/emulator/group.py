"""An engine replica that spans several nodes, emulated: one process per node, meeting over TCP as the engines do.

The engines' group flags (what engines/vllm.py and engines/sglang.py render for a LeaderWorkerSet's pods):

- vLLM: ``--nnodes N --node-rank R --master-addr HOST --master-port PORT`` (torch.distributed's rendezvous, vLLM's
  defaults 1, 0, 127.0.0.1, 29501); a pod that runs ``--headless`` serves no API (vLLM's ``run_headless``);
- SGLang: ``--nnodes N --node-rank R --dist-init-addr HOST:PORT``; node rank 0 alone serves the API (its other
  ranks never start the tokenizer or the HTTP server).

How the emulator plays it: the leader (node rank 0) listens on the meeting port on its own address (the pod's IP,
as the API does) and counts the ranks that join; until every other rank has joined it is a loading engine (its
health and readiness answer 503), then it is ready. A worker (node rank above 0) connects to the meeting address,
says its rank, and keeps the connection open: the group lives as long as every connection does. When a worker's
connection ends the leader exits non-zero naming the rank, as a torch.distributed collective takes the engine down
when a rank dies; when the leader's ends the worker exits non-zero too. A worker that cannot reach its leader
retries for a bounded time (``DRAFTER_EMULATOR_GROUP_JOIN_SECONDS``), then exits with the address it tried.

The wire protocol is the emulator's own (one line each way, then silence): ``JOIN <rank> <nnodes>`` and ``OK`` or
``REFUSED <why>``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Exit status of a group member whose group broke (a rank or the leader left, or the leader was never reached).
GROUP_BROKEN_STATUS = 1
#: How often a worker tries its leader again while it cannot reach it (the leader's name may not resolve yet, or it
#: may not listen yet: LWS starts the workers with their leader, and a pod's DNS name is published once it runs).
RETRY_SECONDS = 0.25
#: How long a handshake line may take once connected.
HANDSHAKE_SECONDS = 10.0


class GroupRefused(Exception):
    """The leader refused this rank, or the leader was not reached in time; the message says which."""


@dataclass(frozen=True)
class GroupConfig:
    """Where this process sits in its replica's group, from the engine's flags."""

    nnodes: int
    node_rank: int
    #: Where the group meets: vLLM's --master-addr/--master-port, SGLang's --dist-init-addr.
    leader_host: str
    leader_port: int
    #: Whether this process serves the OpenAI API (vLLM: not --headless; SGLang: node rank 0).
    serves_api: bool

    @property
    def is_leader(self) -> bool:
        return self.node_rank == 0

    @property
    def address(self) -> str:
        host = f"[{self.leader_host}]" if ":" in self.leader_host else self.leader_host
        return f"{host}:{self.leader_port}"

    def as_dict(self) -> dict[str, Any]:
        return {"nnodes": self.nnodes, "nodeRank": self.node_rank, "leaderAddress": self.address,
                "servesApi": self.serves_api}


def parse_host_port(value: str) -> tuple[str, int]:
    """SGLang's ``NetworkAddress.parse`` of --dist-init-addr: ``host:port``, an IPv6 host in brackets."""
    if value.startswith("["):
        close = value.find("]")
        if close == -1 or not value[close + 1:].startswith(":"):
            raise ValueError(f"expected [IPv6]:port, got {value!r}")
        host, port = value[1:close], value[close + 2:]
    else:
        host, sep, port = value.rpartition(":")
        if not sep or not host or ":" in host:
            raise ValueError(f"expected host:port (an IPv6 host in brackets), got {value!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected a port in 1-65535, got {port!r} in {value!r}")
    return host, int(port)


class Leader:
    """Node rank 0's side: accepts every other rank once, tells when all have joined, and reports the first that
    leaves (``on_broken`` gets the message)."""

    def __init__(self, group: GroupConfig, on_broken: Callable[[str], None], log: Callable[[str], None]) -> None:
        self.group = group
        self.on_broken = on_broken
        self.log = log
        self.joined: set[int] = set()
        self.complete = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._closing = False

    @property
    def waiting_for(self) -> list[int]:
        return [rank for rank in range(1, self.group.nnodes) if rank not in self.joined]

    async def start(self, host: str) -> None:
        self._server = await asyncio.start_server(self._accept, host=host, port=self.group.leader_port)
        if not self.waiting_for:
            self.complete.set()

    async def stop(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), HANDSHAKE_SECONDS)
        except (asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        rank = self._admit(line.decode(errors="replace").split())
        if isinstance(rank, str):
            writer.write(f"REFUSED {rank}\n".encode())
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()
            return
        self.joined.add(rank)
        self._connections.add(writer)
        writer.write(b"OK\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        self.log(f"rank {rank} joined the process group ({len(self.joined) + 1} of {self.group.nnodes})")
        if not self.waiting_for:
            self.complete.set()
        # The connection carries nothing more: its end is the rank's end.
        with contextlib.suppress(ConnectionError):
            while await reader.read(4096):
                pass
        self._connections.discard(writer)
        writer.close()
        if not self._closing:
            self.on_broken(f"rank {rank} left the process group")

    def _admit(self, words: list[str]) -> int | str:
        """The joining rank, or why it is refused."""
        if len(words) != 3 or words[0] != "JOIN" or not words[1].isdigit() or not words[2].isdigit():
            return f"expected 'JOIN <rank> <nnodes>', got {' '.join(words)!r}"
        rank, nnodes = int(words[1]), int(words[2])
        if nnodes != self.group.nnodes:
            return f"rank {rank} says the group has {nnodes} nodes, the leader {self.group.nnodes}"
        if not 0 < rank < nnodes:
            return f"node rank {rank} is not a worker's of a group of {nnodes} (1 to {nnodes - 1})"
        if rank in self.joined:
            return f"rank {rank} has already joined the process group"
        return rank


async def join(group: GroupConfig, deadline_seconds: float, log: Callable[[str], None],
               clock: Callable[[], float] | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A worker's join: connect to the leader (again every RETRY_SECONDS until ``deadline_seconds`` have passed)
    and be admitted; returns the open connection. Raises :class:`GroupRefused`."""
    loop = asyncio.get_running_loop()
    clock = clock or loop.time
    deadline = clock() + deadline_seconds
    last_error = "never tried"
    while True:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(group.leader_host, group.leader_port), HANDSHAKE_SECONDS)
        except (OSError, asyncio.TimeoutError) as exc:
            last_error = str(exc) or type(exc).__name__
        else:
            writer.write(f"JOIN {group.node_rank} {group.nnodes}\n".encode())
            try:
                await writer.drain()
                answer = (await asyncio.wait_for(reader.readline(), HANDSHAKE_SECONDS)).decode(errors="replace")
            except (OSError, asyncio.TimeoutError) as exc:
                writer.close()
                last_error = str(exc) or type(exc).__name__
            else:
                if answer.strip() == "OK":
                    log(f"rank {group.node_rank} joined the process group at {group.address}")
                    return reader, writer
                writer.close()
                if answer.startswith("REFUSED "):
                    raise GroupRefused(f"the leader at {group.address} refused rank {group.node_rank}: "
                                       f"{answer.removeprefix('REFUSED ').strip()}")
                last_error = f"unexpected answer {answer.strip()!r}"
        if clock() >= deadline:
            raise GroupRefused(f"rank {group.node_rank} could not join the process group at {group.address} within "
                               f"{deadline_seconds:g}s: {last_error}")
        await asyncio.sleep(RETRY_SECONDS)


async def stay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, group: GroupConfig) -> str:
    """Hold a worker's connection until the leader's end goes; returns the message saying so."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(4096):
            pass
    writer.close()
    return f"the leader at {group.address} left the process group (rank {group.node_rank})"
