"""Drift against promotion (pure): the live mean acceptance length against what the swap gate measured for the
revision that serves (``status.acceptance.atPromotion``), and every word the DriftDetected condition says.

A drafter is gated once, on the gate's prompts; the traffic moves afterwards. A drafter trained at one maximum
length accepts less on longer generations (speculators#613), and long contexts can turn speculation into a loss
(vllm#47602). Degraded compares the live window with an absolute threshold; drift compares it with the figure
this revision earned its traffic with: DriftDetected is True once the window's mean acceptance length has stayed
below ``atPromotion.acceptanceLength x (1 - spec.acceptance.driftTolerance)`` (the floor) for
``spec.acceptance.for``.

The clock is the Degraded verdict's own state machine (``verdict.evaluate``) run on one threshold, the floor, so
drift follows the same evidence rules: no verdict under ``minDraftTokens`` or on untrusted data, a gap in usable
data longer than a window restarts the clock, and recovery needs the floor plus the length hysteresis for
``for``. Only the words differ, and a lost drafter is not judged here (Degraded says DrafterLost after one
window; drift waits ``for`` like any drop).
"""

from __future__ import annotations

from dataclasses import dataclass

from drafter_operator import timestamps
from drafter_operator.acceptance import verdict as a
from drafter_operator.api.common import format_duration, parse_decimal, parse_duration

CONDITION = "DriftDetected"
# The condition's reasons (one CamelCase word each); Unknown keeps the verdict's own (InsufficientData,
# MetricsUnavailable, MetricsInvalid), whose messages already say what is missing.
DRIFTED = "AcceptanceBelowPromotion"
PENDING = "DriftPending"
WITHIN = "WithinTolerance"
NOT_MONITORED = "NotMonitored"
NOT_GATED = "NotGated"


@dataclass(frozen=True)
class Baseline:
    """What the gate measured at promotion, and how far below it the live length may go."""

    revision: str  # the revision the gate measured
    benchmark: str
    length: float  # mean acceptance length over the gate's run, bonus token included
    tolerance: float  # spec.acceptance.driftTolerance

    @property
    def floor(self) -> float:
        return self.length * (1.0 - self.tolerance)


def baseline(at_promotion: dict | None, tolerance: str, describing: tuple[str, ...]) -> Baseline | None:
    """The baseline of ``status.acceptance.atPromotion`` when it describes the revision that serves (``describing``:
    the revisions whose benchmarks describe its drafter, ``revisions.measured_as``) and has a length; else None."""
    record = at_promotion or {}
    length = record.get("acceptanceLength")
    if record.get("revision") not in describing or not isinstance(length, (int, float)) or not record.get("benchmark"):
        return None
    return Baseline(revision=record["revision"], benchmark=record["benchmark"], length=float(length),
                    tolerance=parse_decimal(tolerance))


def thresholds(acceptance, b: Baseline) -> a.Thresholds:
    """The verdict's thresholds for drift: the floor as the one length threshold, spec.acceptance's window,
    minDraftTokens and ``for``."""
    return a.Thresholds(min_rate=None, min_length=b.floor, min_draft_tokens=acceptance.min_draft_tokens,
                        window_seconds=parse_duration(acceptance.window), for_seconds=parse_duration(acceptance.for_),
                        judge_lost=False)


@dataclass(frozen=True)
class Drift:
    """One look at drift: the baseline judged against, the verdict's state (its clocks, for the next look), the
    one before, and the condition it amounts to."""

    baseline: Baseline
    verdict: a.AcceptanceVerdict
    previous: a.AcceptanceVerdict | None
    condition: a.AcceptanceVerdict  # status, reason and message of DriftDetected

    @property
    def changed(self) -> bool:
        return not self.verdict.same_condition(self.previous)


def look(previous: a.AcceptanceVerdict | None, sample: a.AcceptanceSample, b: Baseline, t: a.Thresholds) -> Drift:
    """The drift verdict after ``sample`` (``t``: ``thresholds(...)``), and the condition it amounts to."""
    verdict = a.evaluate(previous, sample, t)
    return Drift(b, verdict, previous, condition(verdict, b, t, sample.at))


def condition(verdict: a.AcceptanceVerdict, b: Baseline, t: a.Thresholds, at: float) -> a.AcceptanceVerdict:
    """DriftDetected from the verdict's state: True below the floor for ``for`` (and until clear of it for ``for``),
    False within the tolerance or below it for less than ``for``, Unknown without a usable window."""
    if verdict.status == "Unknown" or verdict.window is None or verdict.window.mean_acceptance_length is None:
        return a.AcceptanceVerdict(status="Unknown", reason=verdict.reason, message=verdict.message)
    window = verdict.window
    live = (f"mean acceptance length {window.mean_acceptance_length:.2f} over {format_duration(t.window_seconds)} "
            f"({window.drafts:.0f} drafts)")
    gated = f"the {b.length:.2f} gate benchmark {b.benchmark} measured at promotion (revision {b.revision})"
    if verdict.status == "True":
        if verdict.healthy_since is not None:
            return a.AcceptanceVerdict(status="True", reason=DRIFTED, message=(
                f"{live}, back above {b.floor:.2f} for {format_duration(at - verdict.healthy_since)} of "
                f"{format_duration(t.for_seconds)} needed to clear; {b.tolerance:.0%} under {gated}"))
        return a.AcceptanceVerdict(status="True", reason=DRIFTED, message=(
            f"{live} < {b.floor:.2f}, more than {b.tolerance:.0%} under {gated}: the traffic has moved away from what "
            "the drafter was trained and gated on (longer contexts, another domain); see the acceptance-drift runbook"))
    if verdict.reason == a.BELOW_THRESHOLD and verdict.below_since is not None:
        return a.AcceptanceVerdict(status="False", reason=PENDING, message=(
            f"{live} < {b.floor:.2f} ({b.tolerance:.0%} under {gated}) for {format_duration(at - verdict.below_since)} "
            f"of {format_duration(t.for_seconds)}"))
    return a.AcceptanceVerdict(status="False", reason=WITHIN, message=f"{live}, within {b.tolerance:.0%} of {gated}")


def persisted(status: dict, b: Baseline) -> a.AcceptanceVerdict | None:
    """The drift verdict status records against ``b``, to resume from after an operator restart: a restart neither
    clears DriftDetected nor restarts its clock. The figure at promotion names the revision it is about (a new one
    resets the condition), so status.acceptance.revision, which a failed swap leaves on the revision before, is not
    asked."""
    promoted = (status.get("acceptance") or {}).get("atPromotion") or {}
    if (promoted.get("revision"), promoted.get("benchmark")) != (b.revision, b.benchmark):
        return None
    found = next((c for c in status.get("conditions") or [] if c.get("type") == CONDITION), None)
    if not found or found.get("status") != "True" or found.get("reason") != DRIFTED:
        return None
    since = timestamps.parse(found["lastTransitionTime"]).timestamp()
    return a.AcceptanceVerdict(status="True", reason=a.LOW_LENGTH, message=found.get("message", ""), below_since=since)


def not_monitored() -> a.AcceptanceVerdict:
    return a.AcceptanceVerdict(status="Unknown", reason=NOT_MONITORED,
                     message="spec.acceptance is not set: acceptance, and its drift from promotion, are not watched")


def not_gated(revision: str | None) -> a.AcceptanceVerdict:
    """No figure at promotion for the serving revision: nothing to drift from."""
    return a.AcceptanceVerdict(status="Unknown", reason=NOT_GATED, message=(
        f"revision {revision} took traffic without a gate measuring its acceptance length: drift is not judged; "
        "set spec.swap.gate so the next revision is measured before it serves"))


def new_promotion(revision: str | None, benchmark: str | None) -> a.AcceptanceVerdict:
    """A new figure at promotion: what the condition said was about the revision before."""
    return a.AcceptanceVerdict(status="Unknown", reason=a.INSUFFICIENT_DATA, message=(
        f"revision {revision} took traffic after gate benchmark {benchmark}: its live acceptance is compared with "
        "status.acceptance.atPromotion from the next window"))


def not_measured() -> a.AcceptanceVerdict:
    return a.AcceptanceVerdict(status="Unknown", reason=a.INSUFFICIENT_DATA,
                     message="no acceptance measured against status.acceptance.atPromotion yet")
