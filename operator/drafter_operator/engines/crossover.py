"""Where speculation stops paying, measured: the bracket of a load sweep and the next level that narrows it (pure).

A sweep such as 1, 8, 32 streams says only that the break-even lies somewhere between 8 and 32; the
first level below 1.0x (32) overstates it, and a schedule that keeps speculating up to there costs
throughput at every load in between. So the sweep refines: it measures a level inside the bracket,
which replaces one of its ends, until the ends are within :data:`TOLERANCE` of the break-even's streams.

The bracket is two adjacent measured levels: ``below``, the lowest concurrency whose speedup is below
1.0, and ``above``, the highest measured concurrency under it (its speedup is 1.0 or more, since
``below`` is the first one under 1.0). With a curve that dips below 1.0 and comes back (noise, or a
real bump) the first dip is the break-even: speculation is off from there, which is what the schedule
needs. A sweep that is below 1.0 already at its lowest level halves that level until one pays (or
one stream does not). Otherwise the next level is the break-even the two ends' speedups interpolate
to linearly, kept within the middle half of the bracket, so every measurement takes at least a quarter
off the bracket's width and a refinement takes O(log width) levels whatever the curve's shape; a
level never repeats, since it lies strictly between two adjacent measured ones (or below the lowest).

:func:`next_level` is what ``drafter-operator bench`` calls after each level (``benchmark_client/run.py``); the
schedule (``engines/dynamic.py``) reads the same bracket from the levels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: The bracket is narrow enough when its width is at most this fraction of its lower end's streams
#: (or one stream: integer levels cannot be closer).
TOLERANCE = 0.10


@dataclass(frozen=True)
class Bracket:
    """The break-even between two adjacent measured levels."""

    #: Highest measured concurrency below ``below`` (speedup >= 1.0); None when ``below`` is the lowest level.
    above: int | None
    #: Lowest measured concurrency whose speedup is below 1.0.
    below: int
    #: Streams where the speedup crosses 1.0, interpolated linearly between the two ends; None without ``above``.
    estimate: float | None

    @property
    def narrow(self) -> bool:
        """True when no level between the ends is worth measuring: within TOLERANCE (or adjacent integers).

        Without ``above``, only when ``below`` is 1: speculation does not pay even for one stream."""
        if self.above is None:
            return self.below == 1
        return self.below - self.above <= max(1.0, TOLERANCE * self.above)


def speedups(levels: Iterable[tuple[int | None, float | None]]) -> dict[int, float]:
    """``{concurrency: speedup}`` of the levels that have a speedup (a level without a baseline says nothing).

    A concurrency measured twice counts with its lower figure (``drafter-operator bench`` never repeats
    a level; a sweep given by hand may): once measured slower, a load is not taken to pay."""
    found: dict[int, float] = {}
    for c, s in levels:
        if c is not None and s is not None and c >= 1 and math.isfinite(s):
            found[c] = min(s, found.get(c, s))
    return found


def bracket(levels: Iterable[tuple[int, float | None]]) -> Bracket | None:
    """The bracket of ``(concurrency, speedup)`` levels, in any order; None when no speedup is below 1.0."""
    measured = sorted(speedups(levels).items())
    first_below = next((i for i, (_, s) in enumerate(measured) if s < 1.0), None)
    if first_below is None:
        return None
    below, s_below = measured[first_below]
    if first_below == 0:
        return Bracket(above=None, below=below, estimate=None)
    above, s_above = measured[first_below - 1]
    # s_above >= 1.0 > s_below, so the denominator is positive and the estimate lies in [above, below).
    estimate = above + (below - above) * (s_above - 1.0) / (s_above - s_below)
    return Bracket(above=above, below=below, estimate=estimate)


def next_level(levels: Iterable[tuple[int, float | None]]) -> int | None:
    """The concurrency to measure next to narrow the bracket, or None when the sweep is done.

    Done: no level below 1.0, the bracket is already narrow, or 1 stream is below 1.0. A sweep whose
    lowest level is already below 1.0 halves it until a level pays (the lower end of the bracket) or
    1 stream does not."""
    found = bracket(levels)
    if found is None or found.narrow:
        return None
    if found.above is None or found.estimate is None:
        return found.below // 2  # below >= 2 here (narrow otherwise); lower than every measured level
    width = found.below - found.above
    # The interpolated point, kept in the middle half: a curve far from linear (a knee) cannot make
    # the refinement creep one stream at a time from one end.
    low, high = found.above + width / 4, found.below - width / 4
    point = round(min(max(found.estimate, low), high))
    # Strictly inside: width >= 2 here (a narrow bracket returned above), so this interval is not empty.
    return min(max(point, found.above + 1), found.below - 1)
