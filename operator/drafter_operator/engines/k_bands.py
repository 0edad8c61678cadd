"""k per load band, predicted from one load sweep at the serving's k (pure).

A sweep at k = K against the no-speculation baseline says, at each measured concurrency B, how long one
engine step takes without speculation and with K drafts; the per-position acceptance counters say how many
tokens a step yields for any k up to K. Together they predict the throughput of every k from 0 to K at each
load, so the schedule can draft fewer tokens where verifying K would cost more than it yields, rather than
switching from K straight to nothing at the break-even.

The step model, from what the sweep measured:

- ``verify(n)``: the target's step time when it computes ``n`` tokens. The baseline measures it directly,
  since without speculation ``B`` streams compute ``B`` tokens a step: ``verify(B) = 1000 B / X0(B)`` ms.
  Between measured levels it follows the extension of the neighbouring segments (a roofline: flat, then
  growing with its tokens, lies below the chord); below the lowest level it is flat; above the highest it
  is a roofline whose knee the speculative levels fit.
- ``draft(B)``: one draft forward at ``B`` streams, a roofline too: a floor cost up to a knee in streams,
  then growing with them; cost and knee fitted to the speculative levels (least squares on the log of the
  step time). A sequential drafter (EAGLE, EAGLE-3, MTP, a draft model) runs one forward per drafted token,
  a block drafter (DFlash, DSpark) one for the block, prompt lookup (n-gram, suffix) none.
- ``E(k) = 1 + the first k per-position acceptances`` (accepted at position i / drafts: the counters count
  position i only when every earlier one was accepted).

so ``X(k, B) = 1000 B E(k) / (verify(B (k + 1)) + forwards(k) draft(B))``, and k = 0 is the baseline itself.

A sweep at one k cannot by itself tell a verify step that grows with its tokens above the baseline's highest
level from a draft forward that grows with its streams. One assumption settles it: the drafter, the smaller
model on the same GPUs, turns compute-bound at no fewer streams than the target does at tokens. A block
drafter's forward over a shorter block costs no more than over K tokens, so its predictions for a smaller k
are conservative.

Measuring the chosen schedule and fitting again with those levels added (:func:`refine`) corrects the
prediction where the measurement at the k the schedule ran disagrees with it.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from drafter_operator.engines import speedup

#: How a family drafts (families.Family.drafting): one forward per drafted token, one per block, or a lookup.
CHAIN, BLOCK, LOOKUP = "chain", "block", "lookup"
DRAFT_MODES = (CHAIN, BLOCK, LOOKUP)

#: A k must beat the next smaller one by this share of throughput to be chosen: a prediction within noise
#: of a cheaper k does not pay for the extra verification it risks.
MIN_GAIN = 0.01
#: A schedule whose own sweep lands within this share of the predicted speedup at every level is kept as it is:
#: a new schedule is a new engine process (a model reload), worth it only where the prediction was off.
REFINE_TOLERANCE = 0.05


def draft_forwards(mode: str, k: int) -> int:
    """Draft forwards one step of ``k`` drafted tokens runs, by the family's draft mode."""
    if mode not in DRAFT_MODES:
        raise ValueError(f"draft mode must be one of {', '.join(DRAFT_MODES)}, got {mode!r}")
    if k <= 0 or mode == LOOKUP:
        return 0
    return k if mode == CHAIN else 1


def mean_length(acceptance: Sequence[float], k: int) -> float:
    """E(k): tokens one step yields per stream with k drafts (1 + the first k per-position acceptances).

    Positions beyond those measured count as accepted as often as the last measured one: a sweep's
    counters cover positions up to its own k, which bounds the k this module predicts for."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k and not acceptance:
        raise ValueError("per-position acceptance is empty: the sweep's counters measured no drafts")
    return 1.0 + sum(acceptance[min(i, len(acceptance) - 1)] for i in range(k))


@dataclass(frozen=True)
class Level:
    """One measured level: ``tokens_per_second`` at ``concurrency`` streams with ``k`` drafts per step, and
    the baseline's throughput at the same concurrency."""

    concurrency: int
    k: int
    tokens_per_second: float
    baseline_tokens_per_second: float

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.k < 0:
            raise ValueError(f"a level needs concurrency >= 1 and k >= 0, got {self.concurrency}, {self.k}")
        for name in ("tokens_per_second", "baseline_tokens_per_second"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _interpolate(points: Sequence[tuple[float, float]], x: float, extend_slope: bool) -> float:
    """Piecewise-linear through sorted ``points``; flat below the first, and above the last either flat or
    along the last segment's slope (never below the last value)."""
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        if not extend_slope or len(points) < 2:
            return points[-1][1]
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (x - x1)
    i = bisect.bisect_right(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


#: Knees (tokens for the target's verify step, streams for a draft forward) the fit tries: 1 to 4096, 2^(1/4) apart.
_KNEES = tuple(2 ** (j / 4) for j in range(0, 49))
#: A measured baseline step this much above its floor has left it (the roofline's knee lies below).
_ABOVE_FLOOR = 1.05


def _target_knee(verify: Sequence[tuple[float, float]], verify_knee: float | None) -> float:
    """Tokens at which the target's step leaves its floor: from the measured baseline where it rises there
    (a roofline through the first risen level), else the fitted knee above it (infinite: never)."""
    floor = verify[0][1]
    risen = [tokens * floor / ms for tokens, ms in verify if ms > _ABOVE_FLOOR * floor]
    if risen:
        return min(risen)
    return math.inf if verify_knee is None else verify_knee


@dataclass(frozen=True)
class StepModel:
    """The step costs a sweep measured.

    ``verify_points``: the baseline's step (ms) by tokens computed, measured. Above them the step grows in
    proportion to its tokens from ``verify_knee`` tokens on (a roofline: flat while bound by reading weights,
    then compute-bound); None keeps it flat. ``draft_floor_ms``: one draft forward while it is memory-bound,
    growing in proportion to the streams from ``draft_knee`` on (None: never)."""

    verify_points: tuple[tuple[float, float], ...]
    verify_knee: float | None
    draft_floor_ms: float
    draft_knee: float | None
    acceptance: tuple[float, ...]
    mode: str
    max_k: int

    def verify_ms(self, tokens: float) -> float:
        points = self.verify_points
        top, top_ms = points[-1]
        if tokens >= top:
            if self.verify_knee is None:
                return top_ms
            return top_ms * max(1.0, tokens / self.verify_knee) / max(1.0, top / self.verify_knee)
        if tokens <= points[0][0]:
            return points[0][1]
        # Between two measured levels a step that is flat and then grows with its tokens (a roofline) lies
        # below the chord: on the extension of the segment to its left or of the one to its right,
        # whichever is higher. The chord would charge a knee between two sparse levels to every token count
        # between them, and overstate what verifying a few more tokens costs.
        i = bisect.bisect_right([x for x, _ in points], tokens) - 1
        (x0, y0), (x1, y1) = points[i], points[i + 1]
        chord = y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
        left = y0 + self._slope(i - 1) * (tokens - x0)
        right = y1 - self._slope(i + 1) * (x1 - tokens)
        return min(chord, max(left, right))

    def _slope(self, segment: int) -> float:
        """The verify step's slope on measured segment ``segment`` (points segment to segment + 1); before the
        first, flat; after the last, the slope just above the top (proportional once past the knee)."""
        points = self.verify_points
        if segment < 0:
            return 0.0
        if segment >= len(points) - 1:
            top, top_ms = points[-1]
            if self.verify_knee is None or top < self.verify_knee:
                return 0.0
            return top_ms / top
        (x0, y0), (x1, y1) = points[segment], points[segment + 1]
        return (y1 - y0) / (x1 - x0)

    def draft_ms(self, streams: float) -> float:
        if self.draft_knee is None:
            return self.draft_floor_ms
        return self.draft_floor_ms * max(1.0, streams / self.draft_knee)

    def step_ms(self, k: int, streams: float) -> float:
        return self.verify_ms(streams * (k + 1)) + draft_forwards(self.mode, k) * self.draft_ms(streams)

    def tokens_per_second(self, k: int, streams: float) -> float:
        """Predicted aggregate throughput of ``streams`` streams drafting ``k`` tokens a step."""
        return 1000.0 * streams * mean_length(self.acceptance, k) / self.step_ms(k, streams)

    def best_k(self, streams: float) -> int:
        """The k with the highest predicted throughput; a larger k only when it gains at least MIN_GAIN."""
        best, best_rate = 0, self.tokens_per_second(0, streams)
        for k in range(1, self.max_k + 1):
            rate = self.tokens_per_second(k, streams)
            if rate > best_rate * (1.0 + MIN_GAIN):
                best, best_rate = k, rate
        return best


def _baseline_steps(levels: Sequence[Level]) -> tuple[tuple[float, float], ...]:
    """The baseline's step time by tokens (= streams), made non-decreasing: a step never gets cheaper with
    more tokens, and a noisy dip would make verification look free."""
    baseline: dict[int, float] = {}
    for level in levels:
        step = 1000.0 * level.concurrency / level.baseline_tokens_per_second
        baseline[level.concurrency] = max(step, baseline.get(level.concurrency, step))
    points, floor = [], 0.0
    for streams, ms in sorted(baseline.items()):
        floor = max(floor, ms)
        points.append((float(streams), floor))
    return tuple(points)


def step_model(levels: Iterable[Level], acceptance: Sequence[float], mode: str) -> StepModel:
    """The step model of measured ``levels``: a sweep at one k, plus any levels measured at other k (the
    schedule's own, :func:`refine`).

    The baseline gives the verify step up to its highest level. The speculative levels fit the rest by
    least squares on the log of the step time: the knee above which verification grows with its tokens,
    and the draft forward's cost and knee (for each pair of knees the cost has a closed form)."""
    levels = list(levels)
    if not levels:
        raise ValueError("no measured levels: the sweep needs at least one level with a baseline")
    acceptance = tuple(float(a) for a in acceptance)
    if any(not (0.0 <= a <= 1.0) for a in acceptance):
        raise ValueError(f"per-position acceptance must lie in [0, 1], got {acceptance}")
    verify = _baseline_steps(levels)
    max_k = max(level.k for level in levels)
    observed = [(level.concurrency, level.k,
                 1000.0 * level.concurrency * mean_length(acceptance, level.k) / level.tokens_per_second)
                for level in levels if level.k > 0]
    if not observed:
        return StepModel(verify, None, 0.0, None, acceptance, mode, max_k)
    top_tokens = verify[-1][0]
    best: tuple[float, StepModel] | None = None
    # A sweep at one k cannot tell a verify step that grows with its tokens from a draft forward that grows
    # with its streams: both raise the speculative step with the load. The drafter is the smaller model on the
    # same GPUs, so it turns compute-bound at no fewer streams than the target does at tokens; that settles it.
    for verify_knee in (None, top_tokens, *(knee for knee in _KNEES if knee > top_tokens)):
        target_knee = _target_knee(verify, verify_knee)
        for draft_knee in (None, *(knee for knee in reversed(_KNEES) if knee >= target_knee)):
            shape = StepModel(verify, verify_knee, 1.0, draft_knee, acceptance, mode, max_k)
            residuals = [(ms - shape.verify_ms(streams * (k + 1)),
                          draft_forwards(mode, k) * shape.draft_ms(streams), ms) for streams, k, ms in observed]
            weight = sum(g * g / (ms * ms) for _, g, ms in residuals)
            floor = max(0.0, sum(r * g / (ms * ms) for r, g, ms in residuals) / weight) if weight else 0.0
            model = StepModel(verify, verify_knee, floor, draft_knee, acceptance, mode, max_k)
            error = sum(math.log(model.step_ms(k, streams) / ms) ** 2 for streams, k, ms in observed)
            if best is None or error < best[0] - 1e-12:
                best = (error, model)
    assert best is not None  # the first candidate (no knees) is always tried
    return best[1]


@dataclass(frozen=True)
class Band:
    """Batch sizes ``start`` to ``end`` (inclusive) draft ``k`` tokens; predicted speedup over none there."""

    start: int
    end: int
    k: int
    predicted_speedup: float = field(compare=False)


def choose_bands(model: StepModel, max_batch_size: int, up_to: int | None = None,
                 ceilings: Sequence[tuple[int, int]] = ()) -> list[Band]:
    """k per batch size from 1 to ``up_to`` (default: the highest measured concurrency), merged into bands;
    the last band runs on to ``max_batch_size`` (vLLM carries the last k forward, so does SGLang's last tier).

    Above the sweep the model extrapolates: the highest band keeps the k chosen at the sweep's top. k never
    rises with the load (more streams make every verified token dearer and leave the acceptance as it is), so a
    prediction that wobbles between two k near a band's edge does not split it into more bands: at most k + 1.
    ``ceilings``: (batch size, k) pairs: from that batch size on, k is at most that (a measured loss)."""
    top = max(1, min(up_to or int(max(c for c, _ in model.verify_points)), max_batch_size))
    top = max(top, min(max((c for c, _ in ceilings), default=1), max_batch_size))
    bands: list[Band] = []
    for batch in range(1, top + 1):
        best = min([model.best_k(batch), *(ceiling for at, ceiling in ceilings if batch >= at)])
        k = best if not bands else min(best, bands[-1].k)
        if bands and bands[-1].k == k:
            last = bands[-1]
            bands[-1] = Band(last.start, batch, k, last.predicted_speedup)
        else:
            speedup = model.tokens_per_second(k, batch) / model.tokens_per_second(0, batch)
            bands.append(Band(batch, batch, k, round(speedup, 4)))
    last = bands[-1]
    bands[-1] = Band(last.start, max_batch_size, last.k, last.predicted_speedup)
    return bands


def schedule(bands: Sequence[Band]) -> list[tuple[int, int, int]]:
    """vLLM's ``num_speculative_tokens_per_batch_size``: ``(start, end, k)`` per band."""
    return [(band.start, band.end, band.k) for band in bands]


def refine(model_levels: Sequence[Level], measured: Iterable[Level], acceptance: Sequence[float],
           mode: str) -> StepModel:
    """The step model of the sweep with the schedule's own measured levels added: where the schedule ran a
    k the sweep did not, its measurement pins the draft cost there (see :func:`step_model`)."""
    return step_model([*model_levels, *measured], acceptance, mode)


def acceptance_of(result: dict, k: int) -> tuple[float, ...] | None:
    """A DrafterBenchmark status.result's per-position acceptance: the engine's per-position counters where it
    has them (vLLM), else a constant per-token acceptance solved from the mean acceptance length (SGLang
    exports only the mean); None when the result has neither."""
    per_position = result.get("perPositionAcceptance")
    if per_position:
        return tuple(float(a) for a in per_position)
    length = result.get("acceptanceLength")
    if length is None or k < 1:
        return None
    per_token = speedup.per_token_acceptance_from_length(min(max(float(length), 1.0), k + 1.0), k)
    return tuple(per_token ** (i + 1) for i in range(k))


def levels_of(result: dict, k: int) -> list[Level]:
    """The load sweep of a status.result at k drafts: the levels with both throughputs measured."""
    return [Level(int(level["concurrency"]), k, float(level["tokensPerSecond"]),
                  float(level["baselineTokensPerSecond"]))
            for level in result.get("levels") or ()
            if level.get("concurrency") and level.get("tokensPerSecond") and level.get("baselineTokensPerSecond")]


def bands_from_result(result: dict, k: int, mode: str, max_batch_size: int,
                      acceptance: Sequence[float] | None = None) -> list[Band] | None:
    """k per load band from a benchmark's load sweep at ``k``; None when the sweep lacks what the prediction
    needs (throughputs with a baseline at some level, and acceptance). ``acceptance``: per position, to predict
    with instead of the result's overall (a traffic mix's, engines/traffic_mix.py); the step costs are always
    fitted with the acceptance the sweep ran at, since that is what its throughputs were measured with."""
    levels = levels_of(result, k)
    measured = acceptance_of(result, k)
    if not levels or measured is None:
        return None
    return list(_bands(tuple(levels), tuple(measured[:k]), mode, max_batch_size, _at_k(acceptance, k)))


def _at_k(acceptance: Sequence[float] | None, k: int) -> tuple[float, ...] | None:
    return None if acceptance is None else tuple(float(a) for a in acceptance[:k])


def predicting(model: StepModel, acceptance: Sequence[float] | None) -> StepModel:
    """``model``'s step costs with the throughput of another traffic's per-position ``acceptance`` (None: its own)."""
    return model if acceptance is None else dataclasses.replace(model, acceptance=tuple(acceptance))


@functools.lru_cache(maxsize=512)
def _bands(levels: tuple[Level, ...], acceptance: tuple[float, ...], mode: str,
           max_batch_size: int, predict_with: tuple[float, ...] | None = None) -> tuple[Band, ...]:
    """The bands of one sweep, fitted once: every reconcile of a serving with ``drafter.dynamic`` asks again with
    the same finished sweep, and the fit (a few milliseconds) would otherwise run on each."""
    return tuple(choose_bands(predicting(step_model(levels, acceptance, mode), predict_with), max_batch_size))


@dataclass(frozen=True)
class Refinement:
    """What a schedule's own sweep said of its prediction: the largest relative gap between a level's measured
    and predicted speedup (``off_by``), and where that exceeds REFINE_TOLERANCE the bands fitted again with those
    levels added (``bands``; None: the prediction stands)."""

    off_by: float
    bands: tuple[Band, ...] | None


def refinement(result: dict, k: int, mode: str, max_batch_size: int, own: dict,
               acceptance: Sequence[float] | None = None) -> Refinement | None:
    """The predicted schedule of the sweep ``result`` (at ``k``) held to ``own``, the status.result of a sweep of
    the revision that ran that schedule: each of its levels ran the schedule's k at that concurrency. None when
    either sweep lacks what the prediction needs, or ``own`` has no level that drafted."""
    levels = levels_of(result, k)
    measured = acceptance_of(result, k)
    if not levels or measured is None:
        return None
    measured, predict_with = tuple(measured[:k]), _at_k(acceptance, k)
    predicted = schedule(_bands(tuple(levels), measured, mode, max_batch_size, predict_with))
    ran = [Level(level.concurrency, min(k, _k_at(predicted, level.concurrency)), level.tokens_per_second,
                 level.baseline_tokens_per_second) for level in levels_of(own, k)]
    return refine_bands(levels, measured, mode, max_batch_size, ran, predict_with)


def refine_bands(levels: Sequence[Level], acceptance: Sequence[float], mode: str, max_batch_size: int,
                 ran: Iterable[Level], predict_with: Sequence[float] | None = None) -> Refinement | None:
    """The bands of the sweep ``levels`` held to ``ran``: the levels measured while the predicted schedule ran (each
    at the k it drafted there), both at the per-position ``acceptance`` of the prompts they ran; the bands are
    chosen for ``predict_with`` (a traffic mix's acceptance; None: the same). None when none of them drafted."""
    ran = [level for level in ran if level.k > 0]
    if not ran:
        return None
    model = step_model(levels, acceptance, mode)
    off_by = max(abs((level.tokens_per_second / level.baseline_tokens_per_second)
                     / (model.tokens_per_second(level.k, level.concurrency)
                        / model.tokens_per_second(0, level.concurrency)) - 1.0) for level in ran)
    if off_by <= REFINE_TOLERANCE:
        return Refinement(round(off_by, 4), None)
    # The fit weighs every level; a level where the schedule's k measured slower than none is a fact the refined
    # schedule must not contradict, whatever the fit makes of it: from there on it drafts fewer.
    lost = [(level.concurrency, level.k - 1) for level in ran
            if level.tokens_per_second < level.baseline_tokens_per_second]
    refined = predicting(refine(levels, ran, acceptance, mode), predict_with)
    return Refinement(round(off_by, 4), tuple(choose_bands(refined, max_batch_size, ceilings=lost)))


def _k_at(ranges: Sequence[tuple[int, int, int]], batch: int) -> int:
    """k at ``batch`` of bands' ranges (contiguous from 1, the last running on)."""
    return next((k for start, end, k in ranges if start <= batch <= end), ranges[-1][2])
