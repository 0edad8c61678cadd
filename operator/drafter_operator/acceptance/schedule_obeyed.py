"""Whether the engine drafts as the serving's batch-size schedule says (``ScheduleIgnored``), from the counters (pure).

A load schedule (``spec.drafter.dynamic``) is only a request: vLLM 0.33.0 drops its per-batch-size schedule without
a word when data parallelism is above 1, SGLang 0.5.23 its adaptive speculation under attention DP, and an engine
image older than the flag may ignore it too. The counters tell: a window's drafted tokens per step
(``AcceptanceWindow.drafted_per_step``) against the most the schedule allows at the batch sizes the window saw.

Only the upper bound is judged. The schedule's k never rises with the load (engines/k_bands.py), so the most it
allows in a window is its k at the fewest requests any scrape inside it saw running; a step at any other batch
size of the window drafts that many or fewer. Fewer than the schedule's k is no evidence: n-gram, suffix and DSpark
draft fewer tokens than k by design (``engines.vllm.RATE_NOT_PER_K_DRAFTS``), and a mean over a window whose
load crossed bands sits between their ks. So ``ScheduleIgnored`` is True only when a replica drafted more per
step than the schedule allows anywhere in its window, by more than ``TOLERANCE`` tokens: a batch that dipped
below every scrape's count between two scrapes drafts the next band's k for a while, and half a token of slack
keeps such a window from reading as disobedience unless it drafts well beyond the band.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drafter_operator.engines import dynamic
from drafter_operator.engines.metrics import AcceptanceWindow

CONDITION = "ScheduleIgnored"
IGNORED = "DraftsBeyondSchedule"
OBEYED = "DraftsWithinSchedule"
NO_EVIDENCE = "NotMeasured"
NO_SCHEDULE = "NoSchedule"
#: Draft tokens per step a window may exceed the schedule's k by before it counts as ignored (see the module doc).
TOLERANCE = 0.5


@dataclass(frozen=True)
class ScheduleCheck:
    """``ScheduleIgnored``'s status, reason and message for one sample of the active revision."""

    status: str
    reason: str
    message: str


def allowed(schedule: Iterable[Iterable[int]], k: int, fewest_running: float) -> int:
    """The most draft tokens per step the schedule allows at ``fewest_running`` requests or more (its k there: k never
    rises with the batch size)."""
    return dynamic.k_for_batch(schedule, max(1, int(fewest_running)), k)


def check(schedule: Iterable[Iterable[int]], k: int, windows: Iterable[tuple[str, AcceptanceWindow]]) -> ScheduleCheck:
    """The verdict on each replica's window (pod name, window): True where one drafted beyond what the schedule allows
    at its batch sizes, False where every replica that drafted or ran stayed within, Unknown without evidence."""
    schedule = [tuple(entry) for entry in schedule]
    within: list[str] = []
    for name, window in windows:
        if window.fewest_running is None or window.generation_tokens <= 0:
            continue  # no batch size, or nothing generated: no evidence either way
        most = allowed(schedule, k, window.fewest_running)
        drafted = window.drafted_per_step if window.drafts > 0 else 0.0
        if drafted is None:
            continue
        batch = f"{window.fewest_running:g} running request(s) or more"
        if drafted > most + TOLERANCE:
            return ScheduleCheck("True", IGNORED, (
                f"{name} drafted {drafted:.2f} tokens per step at {batch}, where the schedule allows at most {most}: "
                "the engine does not apply the schedule (vLLM drops it with data parallelism above 1, SGLang its "
                "adaptive speculation under attention DP); serve with data parallelism 1, or set "
                "spec.drafter.dynamic to off and choose numSpeculativeTokens for the load"))
        within.append(f"{name} {drafted:.2f} at {batch} (at most {most})")
    if not within:
        return ScheduleCheck("Unknown", NO_EVIDENCE, "no window yet with drafted tokens and the batch size they ran at")
    return ScheduleCheck("False", OBEYED, "drafted tokens per step within the schedule: " + "; ".join(within[:4]))
