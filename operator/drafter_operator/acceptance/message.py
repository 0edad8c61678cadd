"""What the Degraded condition says: every reason, and every sentence, in one place.

The verdict state machine (``verdict.py``) and the serving's acceptance step
(``controllers/serving/acceptance.py``) choose a reason; the words come from here, so a reason reads the
same wherever it is set. Each function is pure and returns the condition's message.
"""

from __future__ import annotations

from drafter_operator.api.common import format_duration
from drafter_operator.engines.metrics import AcceptanceWindow

# Condition reasons (one CamelCase word each). The verdict's own:
INSUFFICIENT_DATA = "InsufficientData"
LOW_RATE = "LowAcceptanceRate"
LOW_LENGTH = "LowAcceptanceLength"
BELOW_THRESHOLD = "BelowThresholdPending"
#: The drafter's first position accepts next to nothing while it drafts: it is not running as trained (lost after
#: vLLM's sleep level 2, a wrong checkpoint, a vocabulary mapping off), not merely a slow day.
DRAFTER_LOST = "DrafterLost"
HEALTHY = "AcceptanceHealthy"
METRICS_UNAVAILABLE = "MetricsUnavailable"
METRICS_INVALID = "MetricsInvalid"
# The serving's: nothing to judge, or an onDegraded action in force.
NOT_MONITORED = "NotMonitored"
NO_BENCHMARK = "NoBenchmark"
SPECULATION_DISABLED = "SpeculationDisabled"
# While an onDegraded action's revision does not serve: starting, failed, or its name held by an object not ours.
ACTION_IN_PROGRESS = "ActionInProgress"
ACTION_FAILED = "ActionFailed"
ACTION_BLOCKED = "ActionBlocked"
#: Reasons that say the metrics themselves are missing or unusable (no verdict on the drafter).
DATA_PROBLEMS = frozenset({METRICS_UNAVAILABLE, METRICS_INVALID})

NOT_MONITORED_MESSAGE = "spec.acceptance is not set: acceptance is not watched"
NOT_MEASURED_MESSAGE = "no acceptance measured yet"


def figures(window: AcceptanceWindow, window_seconds: float, low: tuple[str, str] | None = None) -> str:
    """The numbers behind a verdict, e.g. "acceptance 15.0% over 5m (1127/7530 draft tokens) < 40%";
    ``low`` (reason, comparison) puts the comparison right after the figure it is about."""
    parts = []
    if window.acceptance_rate is not None:
        counts = (f" ({window.accepted_tokens:.0f}/{window.draft_tokens:.0f} draft tokens"
                  f"{', estimated' if window.estimated else ''})" if window.draft_tokens is not None else "")
        rate = f"acceptance {window.acceptance_rate:.1%} over {format_duration(window_seconds)}{counts}"
        parts.append(rate + (f" {low[1]}" if low and low[0] == LOW_RATE else ""))
    if window.mean_acceptance_length is not None:
        length = f"mean acceptance length {window.mean_acceptance_length:.2f} ({window.drafts:.0f} drafts)"
        parts.append(length + (f" {low[1]}" if low and low[0] == LOW_LENGTH else ""))
    if low and low[0] == DRAFTER_LOST:
        parts.append(low[1])
    return ", ".join(parts) or f"no acceptance figures over {format_duration(window_seconds)}"


def below_rate(min_rate: float, auto: bool, basis: str | None) -> str:
    """The comparison after a rate under its threshold; a learned (``auto``) one cites its benchmark."""
    if not auto:
        return f"< {min_rate:.0%}"
    return f"< {min_rate:.1%}" + (f" ({basis}): speculation no longer pays" if basis else "")


def drafter_lost(first_position: float, below: float, per_position: bool) -> str:
    """The comparison of a lost drafter: what its first position accepted, against the floor."""
    what = "first draft position accepted" if per_position else "accepted draft tokens per step (first position at most)"
    return (f"{what} {first_position:.1%} < {below:.0%} while drafting: the drafter is not running as trained "
            "(lost after a sleep, a wrong checkpoint or vocabulary mapping); see the drafter-lost runbook")


def below_length(min_length: float, basis: str | None) -> str:
    return f"< {min_length:.2f}" + (f" ({basis}): speculation no longer pays" if basis else "")


def too_few(seen: str, window_seconds: float, min_draft_tokens: float) -> str:
    """InsufficientData: fewer draft tokens in the window than a verdict needs."""
    return (f"{seen} draft tokens in the last {format_duration(window_seconds)}, fewer than "
            f"minDraftTokens {min_draft_tokens:.0f}: no verdict yet")


def still_low(numbers: str, below: bool) -> str:
    """Degraded and still so: under the threshold, or above it but not by the hysteresis."""
    return numbers + ("" if below else " (not yet clear of the threshold)")


def recovered(numbers: str) -> str:
    return f"{numbers}: recovered"


def recovering(numbers: str, healthy_for: float, for_seconds: float) -> str:
    return (f"{numbers}: above threshold for {format_duration(healthy_for)} of "
            f"{format_duration(for_seconds)} needed to recover")


def pending(numbers: str, below_for: float, for_seconds: float) -> str:
    """BelowThresholdPending: under the threshold, not yet for spec.acceptance.for."""
    return f"{numbers} for {format_duration(below_for)} of {format_duration(for_seconds)}"


def no_benchmark(auto_fields: list[str], why: str) -> str:
    """NoBenchmark: an ``auto`` threshold with no benchmark of the active revision to learn it from."""
    verb = "is" if len(auto_fields) == 1 else "are"
    return (f"spec.acceptance.{' and '.join(auto_fields)} {verb} auto, the break-even threshold learned from a "
            f"benchmark of the active revision with a baseline: {why}")


def who_serves(active: str | None, desired: str) -> str:
    return f"revision {active} (degraded) keeps serving" if active and active != desired else "no revision serves"


def action_failed(kind: str, desired: str, why: str, serving: str) -> str:
    return (f"onDegraded {kind} could not take effect: revision {desired} failed ({why}); {serving}. "
            "Change the spec to try another revision.")


def action_in_progress(kind: str, desired: str, serving: str) -> str:
    return f"onDegraded {kind} under way: starting revision {desired}; {serving} until it is Ready"


def action_blocked(kind: str | None, why: str, active: str | None) -> str:
    return f"onDegraded {kind} cannot take effect: {why}; revision {active} (degraded) keeps serving"
