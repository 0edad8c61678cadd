"""The acceptance a traffic mix sees, from acceptance measured per traffic category (pure).

A serving's traffic is a mix of categories (``traffic_categories.py``), each with its own acceptance
(``status.result.acceptanceByCategory`` of a DrafterBenchmark). What the schedule's arithmetic needs
(``k_bands``: the tokens a step yields, from the per-position acceptance) is the mix's acceptance per
verification step. A mix is given as each category's share of the generated tokens, and a category whose
steps yield more tokens needs fewer steps for its share: category ``c`` with share ``w_c`` and acceptance
length ``E_c`` takes ``w_c / E_c`` of the steps. So the mix's per-position acceptance is the categories'
per-position acceptance weighted by their steps (drafts),

    p_i = sum_c (w_c / E_c) p_c,i / sum_c (w_c / E_c),

and its acceptance length ``1 + sum_i p_i`` is the token-weighted harmonic mean of the ``E_c``: weighting the
acceptance by tokens instead would overstate a mix, since the categories that accept most also take the
fewest steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES, unknown_category_message
from drafter_operator.engines import k_bands


def _shares(mix: Mapping[str, float]) -> dict[str, float]:
    """The mix's weights normalised to sum to one (weights of 0 left out)."""
    for category, weight in mix.items():
        if category not in TRAFFIC_CATEGORIES:
            raise ValueError(unknown_category_message(category, "traffic mix"))
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"traffic mix: the weight of {category} must be a number >= 0, not {weight!r}")
    total = sum(mix.values())
    if total <= 0:
        raise ValueError("traffic mix: the weights must sum to more than 0, e.g. {code: 0.6, chat: 0.4}")
    return {category: weight / total for category, weight in mix.items() if weight > 0}


def mixed_per_position(per_category: Mapping[str, Sequence[float]], mix: Mapping[str, float]) -> tuple[float, ...]:
    """The mix's per-position acceptance (accepted at position i per verification step, position 0 first) from
    each category's, weighted by the steps the category takes for its share of the generated tokens.

    Every category of the mix needs per-position acceptance of the same length (the same k)."""
    shares = _shares(mix)
    missing = [category for category in shares if category not in per_category]
    if missing:
        raise ValueError(f"traffic mix: no acceptance measured for {', '.join(missing)}: run a DrafterBenchmark "
                         "with spec.acceptanceByCategory over prompts of those categories, or drop them from the mix")
    lengths = {len(per_category[category]) for category in shares}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"traffic mix: the categories' per-position acceptance must cover the same positions, "
                         f"got lengths {sorted(lengths)}")
    steps = {category: share / (1.0 + sum(per_category[category])) for category, share in shares.items()}
    total = sum(steps.values())
    positions = lengths.pop()
    return tuple(sum(steps[c] * per_category[c][i] for c in steps) / total for i in range(positions))


def mixed_length(lengths: Mapping[str, float], mix: Mapping[str, float]) -> float:
    """The mix's mean acceptance length from each category's (tokens per verification step): their harmonic
    mean weighted by the mix's token shares."""
    shares = _shares(mix)
    missing = [category for category in shares if category not in lengths]
    if missing:
        raise ValueError(f"traffic mix: no acceptance length measured for {', '.join(missing)}")
    if any(not lengths[category] >= 1.0 for category in shares):
        raise ValueError("traffic mix: an acceptance length is at least 1 (the target's own token)")
    return 1.0 / sum(share / lengths[category] for category, share in shares.items())


def acceptance_for_mix(category_results: Sequence[Mapping], mix: Mapping[str, float], k: int) -> tuple[float, ...] | None:
    """The mix's per-position acceptance at ``k`` drafts from a DrafterBenchmark's status.result.acceptanceByCategory
    (each row read as ``k_bands.acceptance_of`` reads a result: per-position counters, else from the mean
    length); None when a category of the mix has neither."""
    per_category = {}
    for row in category_results:
        acceptance = k_bands.acceptance_of(dict(row), k)
        if acceptance is not None:
            per_category[row["category"]] = acceptance[:k]
    if any(category not in per_category for category in _shares(mix)):
        return None
    return mixed_per_position(per_category, mix)


def speedups_for_mix(result: Mapping, k: int, mode: str, mix: Mapping[str, float]) -> dict[int, float] | None:
    """A load sweep's speedup at each of its levels (concurrency -> speedup over none), predicted for ``mix``: the
    step costs fitted to the sweep at the acceptance its prompts ran (``k_bands``), the tokens each step yields at
    the mix's (:func:`acceptance_for_mix`). None when the sweep lacks a baseline, its acceptance, or a category of
    the mix."""
    levels = k_bands.levels_of(dict(result), k)
    measured = k_bands.acceptance_of(dict(result), k)
    mixed = acceptance_for_mix(result.get("acceptanceByCategory") or [], mix, k) if k else None
    if not levels or measured is None or mixed is None:
        return None
    model = k_bands.predicting(k_bands.step_model(levels, measured[:k], mode), mixed)
    return {level.concurrency: model.tokens_per_second(k, level.concurrency) / model.tokens_per_second(0, level.concurrency)
            for level in levels}
