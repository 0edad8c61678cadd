"""How a measured figure reads to a person: a speedup as "1.68x", a rate as "15.0%", a throughput as "41.2".

One home, so that `kubectl get`'s columns (status.display, which the operator writes beside the numbers: a
printer column cannot format a number) and `kubectl drafter get` say a figure the same way.
"""

from __future__ import annotations


def speedup(value: float) -> str:
    """A speedup against the baseline, two decimals and an "x": 1.6793 reads "1.68x"."""
    return f"{value:.2f}x"


def percent(rate: float) -> str:
    """A rate between 0 and 1 as a percentage with one decimal: 0.15 reads "15.0%"."""
    return f"{rate:.1%}"


def throughput(tokens_per_second: float) -> str:
    """Tokens per second with one decimal: 41.23456 reads "41.2"."""
    return f"{tokens_per_second:.1f}"


# status.display's keys and how each figure reads.
FORMATS = {"speedup": speedup, "acceptance": percent, "tokensPerSecond": throughput}


def shown(figures: dict[str, float | None]) -> dict | None:
    """status.display (pure): ``figures`` (keys of FORMATS) as the printer columns show them, every key given
    present (null where the figure is unknown, so that a JSON merge patch removes one that went away); None when
    no figure is known, so that an object without figures carries no block and its status writes stay as they were."""
    block = {key: None if value is None else FORMATS[key](value) for key, value in figures.items()}
    return block if any(v is not None for v in block.values()) else None
