"""Benchmark prompts from a serving's capture: the prompts a retraining held out, read from the capture's claim
(mounted read-only) by the benchmark itself, each tagged with its traffic category.

The held-out side is the same split Generate made (capture/dataset.py: a hash of each de-duplicated prompt, so a
prompt lands on the same side in every reading), so these are prompts no drafter trained from this claim has seen.
``captured_before`` pins the set: records captured at or after it are left out, so two benchmarks given the same
bound (a training's Evaluate and its promotion gate) send the same prompts even while the serving keeps capturing
(unless retention deleted an hour's file between them). At most ``per_category`` prompts of each category are
kept, the first captured: a measurement by category sends every prompt of the set once, one at a time.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafter_operator import timestamps
from drafter_operator.constants import CAPTURED_PER_CATEGORY
from drafter_operator.benchmark_client.prompts import Prompt, PromptsError
from drafter_operator.capture.dataset import captured_dataset, read_records

@dataclass(frozen=True)
class CapturedPrompts:
    """Where the capture is mounted and which of its prompts to send."""

    claim: Path
    held_out_fraction: float
    captured_before: dt.datetime | None = None
    per_category: int = CAPTURED_PER_CATEGORY

    def __post_init__(self) -> None:
        if not 0.0 < self.held_out_fraction < 1.0:
            raise PromptsError(f"--held-out-fraction must be above 0 and below 1 (the held-out share of the capture "
                               f"the training used), not {self.held_out_fraction}")
        if self.per_category < 1:
            raise PromptsError(f"--captured-per-category must be at least 1, not {self.per_category}")


def _before(records: Iterable[dict[str, Any]], bound: dt.datetime | None) -> Iterator[dict[str, Any]]:
    """The records captured before ``bound`` (all without one); a record without a readable time is left out
    under a bound, since nothing says it is in the pinned set."""
    for record in records:
        if bound is None:
            yield record
            continue
        moment = timestamps.parse_aware(record.get("time"))
        if moment is not None and moment < bound:
            yield record


def held_out_prompts(records: Iterable[dict[str, Any]], source: CapturedPrompts) -> list[Prompt]:
    """The held-out prompts of these records, each with its category, at most ``per_category`` of each, in
    capture order (pure)."""
    dataset = captured_dataset(_before(records, source.captured_before), source.held_out_fraction)
    kept: Counter = Counter()
    prompts = []
    for entry in dataset.held_out_prompts():
        if kept[entry["category"]] < source.per_category:
            kept[entry["category"]] += 1
            prompts.append(Prompt(entry["text"], entry["category"]))
    return prompts


def load(source: CapturedPrompts) -> list[Prompt]:
    """The held-out prompts on the mounted claim; a clear error when there is none to send."""
    if not source.claim.is_dir():
        raise PromptsError(f"--captured-prompts {source.claim}: not a directory: the capture's claim is not mounted")
    prompts = held_out_prompts(read_records(source.claim), source)
    if not prompts:
        bound = f" captured before {timestamps.format_seconds(source.captured_before)}" \
            if source.captured_before else ""
        raise PromptsError(f"--captured-prompts {source.claim}: no held-out prompt{bound} at held-out fraction "
                           f"{source.held_out_fraction}: let the serving capture for longer, or raise the fraction")
    return prompts
