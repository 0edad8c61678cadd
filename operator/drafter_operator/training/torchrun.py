"""torchrun command lines (pure): one node, or several meeting at a c10d rendezvous.

On one node ``torchrun --standalone`` starts its own rendezvous on loopback. Across nodes every pod of the
Train Indexed Job runs the same command: ``--nnodes N`` agents meet at the c10d rendezvous ``--rdzv-endpoint``
(pod 0's name through the stage's headless Service, resources/training.py), which the agent whose host that
name resolves to serves; the others connect to it. ``--rdzv-id`` keeps two runs that reach the same endpoint
apart. ``--max-restarts 0``: a lost pod fails its peers' workers and the stage with them (docs/training.md,
"Train across nodes"), because neither framework resumes a group that lost a rank mid-step. The whole group
starts again instead, from the last checkpoint written (training/checkpoints.py): the operator starts the stage
again when a pod was disrupted (a drained node, an eviction, a preemption), Kueue when it readmits a Job it
preempted.
"""

from __future__ import annotations

from dataclasses import dataclass

#: torchrun's own default port for the c10d rendezvous (torch.distributed.elastic.rendezvous.c10d_rendezvous_backend).
RENDEZVOUS_PORT = 29400


@dataclass(frozen=True)
class Rendezvous:
    """Where Train's pods across nodes meet: ``endpoint`` (host:port) and the run's id."""

    endpoint: str
    run_id: str


def launch(python: str, processes_per_node: int, nodes: int, rendezvous: Rendezvous | None) -> tuple[str, ...]:
    """``python -m torch.distributed.run`` and its flags, up to the script or ``-m module`` it starts."""
    head = (python, "-m", "torch.distributed.run")
    if nodes == 1:
        return (*head, "--standalone", "--nproc_per_node", str(processes_per_node))
    if rendezvous is None:
        raise ValueError(f"Train spans {nodes} pods (spec.resources.nodes) but no rendezvous endpoint was given: the "
                         "operator passes run-stage --rendezvous-endpoint and --rendezvous-id to every stage Job")
    return (*head, "--nnodes", str(nodes), "--nproc_per_node", str(processes_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous.endpoint, "--rdzv-id", rendezvous.run_id,
            "--max-restarts", "0")
