"""Run a scenario, check every invariant after every event, and shrink a failing one.

`run_scenario(seed, operations)` draws the scenario from the seed (operations.generate) or replays
a given op list; `shrink(seed, invariant)` delta-debugs the op list down to a shorter one that still
breaks that invariant (ops keep their salt, so each one's own randomness is unchanged).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from drafter_testbed.simulation import batch, batch_invariants, invariants, operations, world as serving_world
from drafter_testbed.simulation.operations import describe

#: The scenario families: what draws a scenario, the world it runs in, the invariants checked.
FAMILIES = {"serving": (operations.generate, serving_world.World, invariants.INVARIANTS),
            "batch": (batch.generate, batch.BatchWorld, batch_invariants.INVARIANTS)}


@dataclass
class Violation:
    invariant: str
    step: int  # the index (in the op list run) of the operation during whose run it showed
    t: float
    message: str


@dataclass
class Outcome:
    seed: int
    setup: dict
    ops: list[dict]
    violations: list[Violation] = field(default_factory=list)  # the first of each invariant
    events: int = 0
    reconciles: int = 0
    simulated: float = 0.0

    @property
    def failed(self) -> set[str]:
        return {v.invariant for v in self.violations}

    def first(self, invariant: str | None = None) -> Violation | None:
        return next((v for v in self.violations if invariant is None or v.invariant == invariant), None)


class _Stop(Exception):
    pass


@contextmanager
def quiet_operator():
    """The operator logs every write; a run does thousands."""
    logger = logging.getLogger("drafter")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_scenario(seed: int, operations: int = 50, ops: list[dict] | None = None, setup: dict | None = None,
                 stop_on: str | None = None, invariants: dict | None = None, days: float = 1.0,
                 family: str = "serving", **world_options) -> Outcome:
    """Run one scenario. `stop_on`: stop at the first violation of this invariant ('*': of any);
    `family`: "serving" (DrafterServing) or "batch" (DrafterTraining and DrafterBenchmark)."""
    generate, World, checked = FAMILIES[family]
    drawn_setup, drawn_ops = generate(seed, operations, days)
    setup = setup or drawn_setup
    ops = drawn_ops if ops is None else ops
    invariants = invariants or checked
    world = World(seed, setup, **world_options)
    outcome = Outcome(seed, setup, ops)
    seen: set[str] = set()
    step = 0

    def check() -> None:
        for name, fn in invariants.items():
            found = fn(world)
            if found and name not in seen:
                seen.add(name)
                outcome.violations.append(Violation(name, step, world.clock.t, found[0]))
                if stop_on in ("*", name):
                    raise _Stop

    with quiet_operator():
        try:
            for step, op in enumerate(ops):
                world.apply(op)
                world.run_for(op["dt"], check)
        except _Stop:
            pass
    outcome.events, outcome.reconciles, outcome.simulated = world.events, world.operator.reconciles, world.clock.t
    return outcome


def shrink(seed: int, invariant: str, operations: int = 50, ops: list[dict] | None = None,
           budget_seconds: float = 60.0, **options) -> list[dict]:
    """A shorter op list (ddmin) on which `invariant` still fails; the original when none is found."""
    _, drawn = FAMILIES[options.get("family", "serving")][0](seed, operations, options.get("days", 1.0))
    ops = list(drawn if ops is None else ops)
    deadline = time.monotonic() + budget_seconds

    def fails(candidate: list[dict]) -> bool:
        return invariant in run_scenario(seed, operations, ops=candidate, stop_on=invariant, **options).failed

    # The operations after the failure never matter: cut there first.
    first = run_scenario(seed, operations, ops=ops, stop_on=invariant, **options).first(invariant)
    if first is None:
        return ops
    ops = ops[:first.step + 1]
    n = 2
    while len(ops) >= 2 and time.monotonic() < deadline:
        chunk = max(1, len(ops) // n)
        reduced = False
        for i in range(0, len(ops), chunk):
            if time.monotonic() >= deadline:
                break
            candidate = ops[:i] + ops[i + chunk:]
            if candidate and fails(candidate):
                ops, n, reduced = candidate, max(n - 1, 2), True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(ops), n * 2)
    # Shorter waits where they do not matter: each op's dt halved while the failure stays.
    for i in range(len(ops)):
        if time.monotonic() >= deadline:
            break
        while ops[i]["dt"] > 10:
            candidate = ops[:i] + [{**ops[i], "dt": round(ops[i]["dt"] / 2, 1)}] + ops[i + 1:]
            if not fails(candidate):
                break
            ops = candidate
    return ops


def reproduction(seed: int, invariant: str, ops: list[dict], message: str, operations: int = 50,
                 family: str = "serving") -> str:
    lines = [f"invariant {invariant} broken, seed {seed}: {message}",
             f"shortest op list found ({len(ops)} ops):"]
    lines += [f"  {describe(op)}" for op in ops]
    lines.append(f"replay: {_python()} bench/simulate.py --family {family} --seed {seed} --operations {operations} --replay")
    return "\n".join(lines)


def _python() -> str:
    return "python"
