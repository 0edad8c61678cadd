"""spec.acceptance: live acceptance monitoring, its thresholds (numbers or "auto") and what Degraded does."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from drafter_operator.api.common import (
    DECIMAL_PATTERN,
    RATIO_PATTERN,
    ApiModel,
    Duration,
    Ratio,
    Rule,
    Url,
    decimal_range_rule,
    duration_range_rule,
)

#: The name of an operator-configured endpoint (a key of the chart's prometheus.endpoints).
EndpointName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", min_length=1, max_length=63)]

#: spec.acceptance thresholds may say "auto": the break-even threshold learned from the serving's last
#: benchmark (acceptance/break_even.py). The range rules below skip it (it does not match their patterns).
AUTO = "auto"
RATIO_OR_AUTO_PATTERN = "^(auto|" + RATIO_PATTERN[1:-1] + ")$"
DECIMAL_OR_AUTO_PATTERN = "^(auto|" + DECIMAL_PATTERN[1:-1] + ")$"
RatioOrAuto = Annotated[str, StringConstraints(pattern=RATIO_OR_AUTO_PATTERN, max_length=6)]
"""A decimal between 0 and 1 written as a string (e.g. "0.5"), or "auto"."""
DecimalOrAuto = Annotated[str, StringConstraints(pattern=DECIMAL_OR_AUTO_PATTERN, max_length=11)]
"""A non-negative decimal written as a string (e.g. "2.0"), or "auto"."""


class AcceptanceSpec(ApiModel):
    """Live acceptance monitoring: when the drafter's acceptance stays below threshold, the serving becomes Degraded."""

    rules = (
        Rule(
            cel="has(self.minAcceptanceRate) || has(self.minAcceptanceLength)",
            message=(
                "spec.acceptance needs a threshold: set minAcceptanceRate (e.g. \"0.5\") or minAcceptanceLength "
                "(e.g. \"2.0\"), or \"auto\" for the break-even threshold learned from the serving's last benchmark"
            ),
            check=lambda a: a.min_acceptance_rate is not None or a.min_acceptance_length is not None,
            reason="FieldValueRequired",
        ),
        decimal_range_rule(
            "minAcceptanceLength", DECIMAL_PATTERN,
            'spec.acceptance.minAcceptanceLength must be at least 1 (it counts the bonus token), e.g. "2.0", or "auto"',
            minimum=1.0,
        ),
        # "0" would flag any window a hair below the gate's figure: the gate's prompts are never the traffic.
        decimal_range_rule(
            "driftTolerance", RATIO_PATTERN,
            'spec.acceptance.driftTolerance must be above 0 (the fraction of the acceptance length at promotion the '
            'live length may lose), e.g. "0.25"; "1" never reports drift',
            minimum=0.0, exclusive_minimum=True,
        ),
        duration_range_rule(
            "window", "30s", "24h",
            'spec.acceptance.window must be between 30s and 24h, e.g. "5m"',
        ),
        duration_range_rule(
            "for", "0s", "24h",
            'spec.acceptance.for must be at most 24h, e.g. "10m"',
        ),
        # A URL of the tenant's choosing made the operator fetch it from inside the cluster (SSRF) and
        # report what came back: tenants now name an endpoint the operator's configuration allows.
        Rule(
            cel="!has(self.prometheusUrl)",
            message=("spec.acceptance.prometheusUrl is no longer accepted (the operator would fetch any URL): "
                     "remove it and set spec.acceptance.prometheus to the name of a Prometheus endpoint the "
                     "operator is configured with (chart value prometheus.endpoints; docs/security.md)"),
            check=lambda a: a.prometheus_url is None,
            field_path=".prometheusUrl",
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="self.source != 'prometheus' || has(self.prometheus)",
            message=("spec.acceptance.prometheus is required with source prometheus: set it to the name of a "
                     "Prometheus endpoint the operator is configured with (chart value prometheus.endpoints, "
                     "e.g. default), or use source engine"),
            check=lambda a: a.source != "prometheus" or a.prometheus is not None,
            field_path=".prometheus",
            reason="FieldValueRequired",
        ),
        Rule(
            cel="self.source == 'prometheus' || !has(self.prometheus)",
            message="spec.acceptance.prometheus is only used with source prometheus: set source: prometheus or remove it",
            check=lambda a: a.source == "prometheus" or a.prometheus is None,
            field_path=".prometheus",
            reason="FieldValueForbidden",
        ),
    )

    min_acceptance_rate: RatioOrAuto | None = None
    """Lowest acceptable acceptance rate (accepted / drafted tokens over the window), e.g. "0.5"; "auto" is the break-even mean length below expressed per drafted token, (length - 1) / k."""
    min_acceptance_length: DecimalOrAuto | None = None
    """Lowest acceptable mean acceptance length (tokens per verification step, bonus token included), e.g. "2.0"; "auto" is where speculation stops paying, learned from status.lastBenchmark of the active revision (break-even 1 + k x draft cost, plus 5%; see status.acceptanceThreshold)."""
    window: Duration = "5m"
    """Window the rate and length are computed over (deltas of the engine's counters)."""
    min_draft_tokens: Annotated[int, Field(ge=0, le=1000000000)] = 1000
    """No verdict while fewer tokens than this were drafted in the window (too little data)."""
    for_: Duration = Field(default="5m", alias="for")
    """How long acceptance must stay below threshold before the serving is Degraded (and below driftTolerance before DriftDetected)."""
    drift_tolerance: Ratio = "0.25"
    """How far the live mean acceptance length may fall below what the swap gate measured for the serving revision (status.acceptance.atPromotion.acceptanceLength), as a fraction of it: with "0.25" a drafter gated at 3.0 tokens per step is reported (DriftDetected True, Warning Event) once the live window stays below 2.25 for `for`. The gate's prompts are not the traffic, so a smaller figure flags ordinary differences; "1" never reports drift. Judged only on a revision that passed a gate."""
    source: Literal["engine", "prometheus"] = "engine"
    """engine scrapes the engine pods' /metrics directly; prometheus queries the Prometheus endpoint named by prometheus."""
    prometheus: EndpointName | None = None
    """For source prometheus: the name of a Prometheus endpoint the operator is configured with (chart value prometheus.endpoints, e.g. default); the administrator, not the tenant, chooses the URLs the operator queries."""
    prometheus_url: Url | None = None
    """Removed: refused (it let a tenant make the operator fetch any URL). Use prometheus, an endpoint name."""
    on_degraded: Literal["Alert", "Rollback", "DisableSpeculation"] = "Alert"
    """Alert (condition, event and metric only), Rollback (to the last good drafter) or DisableSpeculation (serve with method none)."""
