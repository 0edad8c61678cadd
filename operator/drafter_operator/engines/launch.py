"""What an engine makes of spec.target.extraArgs beyond the flags the operator owns: its parallelism, its role in
a disaggregated deployment, its page size and sleep mode. Each engine module's ``launch_facts`` reads them from its
own flags; known-bad rows match on them (controllers/serving/known_bad.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchFacts:
    """What the engine makes of spec.target.extraArgs (the operator owns the rest of the command line)."""

    data_parallel: int = 1
    expert_parallel: int = 1  # the expert-parallel group's size (1: none)
    pipeline_parallel: int = 1
    roles: frozenset[str] = frozenset()  # prefill and/or decode; empty without disaggregation
    page_size: int | None = None  # None: the engine picks it
    sleep_mode: bool = False
