"""Which drafter to serve at each load, from sweeps of the candidates against one baseline (pure).

Each candidate's sweep gives its speedup at some concurrency levels. At a level every candidate measured,
the pick is the one with the highest speedup, and no speculation where none is faster than its baseline:
under load verification multiplies the tokens each step computes, so the pick can change with the
streams. A level only some measured (a sweep's refinement around its own break-even) gets no pick:
comparing there would favour whoever happened to measure it. Used by DrafterBenchmark spec.candidates
(status.comparison) and by ``kubectl drafter compare``.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The pick where no candidate beats the baseline (a space: never the name of a candidate).
NO_SPECULATION = "no speculation"


def picks_per_level(speedups: Mapping[str, Mapping[int, float]]) -> dict[int, str | None]:
    """candidate -> {streams: speedup}, to every level any candidate measured (ascending) -> the candidate with
    the highest speedup, NO_SPECULATION where none is above 1.0, None where not every candidate measured it.
    A tie goes to the candidate named first."""
    levels = sorted({level for measured in speedups.values() for level in measured})
    picks: dict[int, str | None] = {}
    for level in levels:
        if any(level not in measured for measured in speedups.values()):
            picks[level] = None
            continue
        best, name = max(((measured[level], name) for name, measured in speedups.items()), key=lambda pair: pair[0])
        picks[level] = name if best > 1.0 else NO_SPECULATION
    return picks
