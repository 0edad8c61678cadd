"""Load-aware speculation: a batch-size schedule of k from a measured load sweep, and vLLM's reading of one (pure).

vLLM 0.33.0's ``--speculative-config`` takes ``num_speculative_tokens_per_batch_size``: a list of
``(range_start, range_end, num_speculative_tokens)`` with inclusive batch-size ranges. Its validator
(vllm/v1/spec_decode/dynamic/utils.py) wants positive, non-overlapping ranges, the first starting at
1; the scheduler expands them up to ``--max-num-seqs``, clamping each k to num_speculative_tokens and
carrying the last k forward, so an upper bound above any real ``max-num-seqs`` is safe.

The schedule drafts k tokens below the measured break-even and none from it upwards: the break-even
is where the speedup between the last measured level at or above 1.0x and the first below crosses 1.0
(interpolated linearly; ``engines/crossover.py``). ``drafter-operator bench`` refines a sweep until
those two levels are within 10% of each other, so the break-even is measured rather than taken to
be the first level below 1.0x: a 1, 8, 32 sweep alone would keep k up to 31 streams where
speculation already costs a third of the throughput. Without a level at or above 1.0x below the
first one under it, speculation is off from that level. This is the on/off schedule, used when the sweep has
no acceptance to predict each k from (engines/k_bands.py); SGLang runs either as its adaptive speculation
(engines/sglang.py, section 6).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from drafter_operator.engines import crossover as brackets

#: Upper end of the last range: above any --max-num-seqs (vLLM clamps the ranges to it).
MAX_BATCH_SIZE = 65536
#: The speculative-config key vLLM 0.33.0 reads the schedule from.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

Schedule = list[tuple[int, int, int]]


def _level(level: Any) -> tuple[int | None, float | None]:
    if isinstance(level, Mapping):
        return level.get("concurrency"), level.get("speedup")
    return getattr(level, "concurrency", None), getattr(level, "speedup", None)


def crossover(levels: Iterable[Any]) -> int | None:
    """The lowest measured concurrency whose speedup is below 1.0; None when speculation paid at every level.

    ``levels`` are status.result.levels entries (mappings with ``concurrency`` and ``speedup``, or
    objects with those attributes); levels without a speedup (no baseline) are skipped."""
    measured = sorted((c, s) for c, s in map(_level, levels) if c is not None and s is not None and c >= 1)
    return next((c for c, s in measured if s < 1.0), None)


def break_even(levels: Iterable[Any]) -> brackets.Bracket | None:
    """The break-even bracket of status.result.levels entries; None when speculation paid at every level."""
    return brackets.bracket(map(_level, levels))


def off_from(levels: Iterable[Any]) -> int | None:
    """The lowest batch size the schedule drafts nothing at: the first integer at or above the break-even
    (within the bracket: above the last level at or above 1.0x, at most the first below). None when
    speculation paid at every measured level."""
    found = break_even(levels)
    if found is None:
        return None
    if found.above is None or found.estimate is None:
        return found.below
    return min(max(math.ceil(found.estimate), found.above + 1), found.below)


def measured(levels: Iterable[Any] | None) -> bool:
    """True when the sweep has at least one level with a concurrency and a speedup."""
    return any(c is not None and s is not None and c >= 1 for c, s in map(_level, levels or ()))


def schedule_from_levels(levels: Iterable[Any], k: int, max_batch_size: int = MAX_BATCH_SIZE) -> Schedule:
    """``[(start, end, k or 0), ...]`` covering batch sizes 1..max_batch_size: k below the break-even, 0 from it.

    No crossover (speculation paid at every measured level, or nothing measured): k throughout."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
    at = off_from(levels)
    if at is None or at > max_batch_size:
        return [(1, max_batch_size, k)]
    if at <= 1:
        return [(1, max_batch_size, 0)]
    return [(1, at - 1, k), (at, max_batch_size, 0)]


def validate_schedule(raw: object) -> Schedule:
    """A schedule as vLLM 0.33.0 validates and normalises it when its scheduler starts
    (``validate_and_normalize_dynamic_sd_schedule``): the same verdicts and messages (ValueError).

    The emulator refuses what the engine would refuse at start-up; the contract tier holds this to
    vLLM's own function on a corpus of good and bad schedules."""
    if raw is None:
        raise ValueError(f"{SCHEDULE_KEY} is required for dynamic speculative decoding.")
    if not isinstance(raw, list):
        raise ValueError(f"{SCHEDULE_KEY} must be a non-empty list of "
                         "(range_start, range_end, num_speculative_tokens) entries.")
    if not raw:
        raise ValueError(f"{SCHEDULE_KEY} must not be empty.")
    parsed: Schedule = []
    for entry in raw:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(f"Each {SCHEDULE_KEY} entry must be a "
                             "3-item sequence: (range_start, range_end, num_speculative_tokens).")
        start, end, k = (int(value) for value in entry)
        if start <= 0 or end <= 0:
            raise ValueError(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise ValueError(f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
        if k < 0:
            raise ValueError(f"{SCHEDULE_KEY} values must be >= 0.")
        parsed.append((start, end, k))
    parsed.sort(key=lambda entry: entry[0])
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise ValueError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if parsed[0][0] != 1:
        raise ValueError("The first batch-size range must start at 1 so every runtime "
                         "batch size has a defined schedule.")
    return parsed


def k_for_batch(schedule: Iterable[Iterable[int]], batch_size: int, default: int) -> int:
    """k for one batch size the way vLLM 0.33.0 expands a schedule: the range holding it, else the k
    of the last range before it (gaps and the tail carry the previous k), at most ``default``."""
    chosen = None
    for start, end, value in sorted(tuple(entry) for entry in schedule):
        if start > batch_size:
            break
        chosen = value
        if batch_size <= end:
            break
    return default if chosen is None else min(default, chosen)
