"""The DrafterCompatible condition: the known-bad table (data/known-bad.yaml, controllers/serving/known_bad.py), checked
when a revision is created and again once its pods' GPU product is known, and the verdict of the drafter
checkpoint preflight its engine pods run first (the `preflight` init container, resources/engine.py;
docs/preflight.md). All pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from drafter_operator.api import DrafterServingSpec
from drafter_operator.controllers.serving.known_bad import KnownBad, image_version, known_bad, outcomes, serving_facts, \
    within
from drafter_operator.controllers.swap import Verdict
from drafter_operator.preflight.verdict import parse_termination_record
from drafter_operator.resources.engine import PREFLIGHT_CONTAINER

__all__ = ["KnownBad", "image_version", "known_bad", "known_bad_outcomes", "matching_known_bad", "pending_known_bad",
           "version_in_range"]


def version_in_range(version: tuple[int, ...] | None, spec: str) -> bool:
    """`spec` is comma-separated bounds like ">=0.10,<0.40"; an unknown version matches any range."""
    return not spec.strip() or version is None or within(version, spec)


def matching_known_bad(spec: DrafterServingSpec, image: str, architecture: str | None = None,
                       gpu_products: frozenset[str] | None = None) -> list[KnownBad]:
    """The rows that match this serving: its engine, image version, drafter method and k, target, launch flags,
    and GPU product (``gpu_products``: its placed pods' nodes', when known; spec.placement's counts first). A
    row that needs the GPU product while it is unknown does not match yet (`pending_known_bad`)."""
    return outcomes(serving_facts(spec, image, architecture, gpu_products))[0]


def known_bad_outcomes(spec: DrafterServingSpec, image: str, architecture: str | None = None,
                       gpu_products: frozenset[str] | None = None) -> tuple[list[KnownBad], list[KnownBad]]:
    """`matching_known_bad` and `pending_known_bad` together."""
    return outcomes(serving_facts(spec, image, architecture, gpu_products))


def pending_known_bad(spec: DrafterServingSpec, image: str, architecture: str | None = None,
                      gpu_products: frozenset[str] | None = None) -> list[KnownBad]:
    """The rows that would match but for the GPU product, which is not known yet: checked again once it is."""
    return outcomes(serving_facts(spec, image, architecture, gpu_products))[1]


# ---------------------------------------------------------------------------------------------------
# The preflight init container's verdict

#: How much of a preflight verdict a revision's failure (status.revisions[].failedReason, Progressing, the
#: RevisionFailed Event) quotes; DrafterCompatible carries the whole message.
FAILURE_MESSAGE_CHARS = 600


@dataclass(frozen=True)
class PreflightOutcome:
    """What one engine pod's preflight init container said, once it finished."""

    status: str  # the DrafterCompatible status it implies: True, False, or Unknown (no verdict)
    reason: str
    message: str
    failed: bool  # it exited non-zero: the engine container never starts in this pod
    checked: bool  # a rule ran (False: a checkpoint not on the volume, nothing to say either way)
    seconds: float | None = None  # how long the check itself took
    passed_checks: frozenset[str] = frozenset()  # the rules that passed, by name

    def failure(self) -> str:
        """The revision's failure, as RevisionObservation.exited carries it."""
        message = self.message if len(self.message) <= FAILURE_MESSAGE_CHARS else \
            self.message[:FAILURE_MESSAGE_CHARS] + "..."
        return f"drafter preflight failed ({self.reason}): {message}"


def pod_preflight(pod: dict) -> PreflightOutcome | None:
    """The outcome of ``pod``'s preflight init container from its status: its current termination, else
    the last one while the kubelet restarts it (restartPolicy Always restarts a failed init container
    with back-off, so a failure may show only as lastState). None while it has not finished once."""
    for container in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if container.get("name") != PREFLIGHT_CONTAINER:
            continue
        terminated = (container.get("state") or {}).get("terminated") or \
            (container.get("lastState") or {}).get("terminated")
        if not terminated or terminated.get("exitCode") is None:
            return None
        code = terminated["exitCode"]
        record = parse_termination_record(terminated.get("message"))
        if record is not None and record["ok"] == (code == 0):
            return PreflightOutcome(status=record["status"], reason=record["reason"], message=record["message"],
                                    failed=code != 0, checked=bool(record.get("checked")),
                                    seconds=record.get("seconds"),
                                    passed_checks=frozenset(c for c in record.get("passedChecks") or []
                                                            if isinstance(c, str)))
        if code == 0:
            return None  # exited cleanly without a verdict: nothing to report, and the engine starts
        # No verdict (killed, out of memory, an image whose CLI lacks the flags): the engine cannot start
        # in this pod all the same, so the revision fails now rather than at spec.startup.timeout.
        name = (pod.get("metadata") or {}).get("name", "<pod>")
        output = " ".join((terminated.get("message") or "").split())[:FAILURE_MESSAGE_CHARS]
        return PreflightOutcome(
            status="Unknown", reason="PreflightError",
            message=f"preflight init container exited with code {code} ({terminated.get('reason') or 'Error'}) "
                    f"without a verdict{': ' + output if output else ''}. See `kubectl logs {name} -c "
                    f"{PREFLIGHT_CONTAINER}`; the container needs the operator's image (DRAFTER_OPERATOR_IMAGE) "
                    "and read access to the model volume",
            failed=True, checked=False)
    return None


def revision_preflight(pods: Iterable[dict]) -> PreflightOutcome | None:
    """One revision's outcome over its pods: a failure first (one pod that cannot start is enough to
    know), else a verdict that checked something, else any."""
    outcomes = [o for o in map(pod_preflight, pods) if o is not None]
    return next((o for o in outcomes if o.failed), None) or next((o for o in outcomes if o.checked), None) or \
        next(iter(outcomes), None)


def _preflight_text(revision: str, outcome: PreflightOutcome) -> str:
    return f"revision {revision}: {outcome.message}"


def is_preflight_condition(condition: dict | None, revision: str) -> bool:
    """Whether ``condition`` (DrafterCompatible as last written) is the preflight verdict of ``revision``."""
    return bool(condition) and condition.get("message", "").startswith(f"revision {revision}: preflight")


def unresolved(entries: list[KnownBad], preflight: PreflightOutcome | None) -> list[KnownBad]:
    """The known-bad entries a passed preflight did not rule out: an entry names the preflight rules that
    check its cause (resolvedByPreflight), and when one of them passed on this very checkpoint, the
    catalogue's warning about the combination does not apply to it."""
    if preflight is None or preflight.failed:
        return list(entries)
    return [e for e in entries if not set(e.resolved_by_preflight) & preflight.passed_checks]


def drafter_compatible(known_bad: Verdict, preflight: PreflightOutcome | None, revision: str,
                       current: dict | None) -> Verdict | None:
    """DrafterCompatible for the revision the spec asks for (None: leave the condition as it is).

    ``known_bad``: the known-bad verdict; ``preflight``: its pods' preflight outcome, if one finished;
    ``current``: the condition as last written. A failed preflight wins (the engine will not start); a
    known-bad match comes next (it names an engine behaviour a surface check cannot see), unless the
    preflight rule that checks its cause passed (``unresolved``); then a preflight that checked something. A verdict outlives the pods it came from (a failed revision's Deployment is
    deleted; replicas 0): the condition keeps what this revision's preflight said."""
    if preflight is None:
        if is_preflight_condition(current, revision) and (current["status"] != "True" or known_bad.status == "True"):
            return None
        return known_bad
    verdict = Verdict(preflight.status, preflight.reason, _preflight_text(revision, preflight))
    if preflight.failed:
        return verdict
    if known_bad.status != "True":
        return known_bad
    if preflight.checked:
        if known_bad.message.startswith("known-bad"):  # an entry this preflight ruled out: say so
            return Verdict(verdict.status, verdict.reason, f"{verdict.message}; {known_bad.message}")
        return verdict
    return Verdict(known_bad.status, known_bad.reason, f"{known_bad.message}; {_preflight_text(revision, preflight)}")
