"""A replica's parallel layout, and the environment a replica that spans nodes reads its place in the group from.

A replica that spans several nodes is a group of pods, one per node (a LeaderWorkerSet group): the leader (worker
index 0) serves the HTTP API, the workers join its process group. Every pod gets the same command line except for
what marks a worker (each engine module's ``render_command``); where a rank differs by node, the command line
holds a ``$(NAME)`` reference to the variables below, which the kubelet expands in a container's command and args
from that container's environment. LeaderWorkerSet v0.9.0 sets them in every container of the group
(pkg/utils/pod/pod_utils.go AddLWSVariables; the names in api/leaderworkerset/v1/leaderworkerset_types.go).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The leader pod's DNS name (``<set>-<group>.<subdomain>.<namespace>``): where the workers find the process group.
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
#: The pods of the group (the replica's nodes).
GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
#: This pod's index in the group: 0 for the leader, 1.. for the workers; the engines' node rank.
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"


def env_reference(name: str) -> str:
    """``$(NAME)``: what the kubelet replaces with the variable's value in a container's command and args."""
    return f"$({name})"


#: The leader's address and this pod's node rank as a command line holds them.
LEADER_ADDRESS = env_reference(LEADER_ADDRESS_ENV)
NODE_RANK = env_reference(WORKER_INDEX_ENV)


@dataclass(frozen=True)
class Parallelism:
    """How one replica's model instance is laid over its GPUs: tensor x pipeline x data ranks (each rank a GPU),
    experts sharded or not, over ``nodes`` nodes of ``world_size / nodes`` GPUs each."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: bool = False
    nodes: int = 1

    @classmethod
    def of(cls, spec) -> Parallelism:
        """A DrafterServingSpec's layout (an unset size is 1)."""
        target = spec.target
        return cls(tensor=target.tensor_parallel_size, pipeline=target.pipeline_parallel_size or 1,
                   data=target.data_parallel_size or 1, expert=bool(target.expert_parallel),
                   nodes=spec.resources.nodes_per_replica or 1)

    @property
    def world_size(self) -> int:
        """GPUs the model instance runs on: tensor x pipeline x data."""
        return self.tensor * self.pipeline * self.data

    @property
    def gpus_per_node(self) -> int:
        """GPUs each of the replica's pods uses (the world size is a multiple of the nodes: the API's rule)."""
        return self.world_size // self.nodes

    @property
    def spans_nodes(self) -> bool:
        return self.nodes > 1

    @property
    def data_ranks_per_node(self) -> int:
        """Data-parallel ranks on one node: a node's GPUs over one rank's (tensor x pipeline), at least 1 (a rank
        wider than a node spans several)."""
        return max(self.gpus_per_node // (self.tensor * self.pipeline), 1)
