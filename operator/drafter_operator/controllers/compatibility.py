"""The DrafterCompatible condition: known-bad drafter combinations (data/known-bad.yaml), checked when a
revision is created, and the verdict of the drafter checkpoint preflight its engine pods run first (the
`preflight` init container, resources/engine.py; docs/preflight.md). All pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Iterable

import yaml

from drafter_operator.api import DrafterServingSpec
from drafter_operator.controllers.swap import Verdict
from drafter_operator.preflight.verdict import parse_termination_record
from drafter_operator.resources.engine import PREFLIGHT_CONTAINER


@dataclass(frozen=True)
class KnownBad:
    id: str
    engine: str
    engine_versions: str
    methods: tuple[str, ...]
    architectures: tuple[str, ...]
    model_patterns: tuple[str, ...]
    reason: str
    link: str
    observed: str
    #: Preflight rules that, when they pass on the checkpoint, rule out this entry's cause.
    resolved_by_preflight: tuple[str, ...] = ()
    #: The cause is in the drafter checkpoint's layout, not the target: the entry applies to every target
    #: (its resolvedByPreflight rule rules it out per checkpoint).
    any_target: bool = False
    #: Where the engine's own code shows the fault (file:line in the pinned engine).
    source: str = ""


@lru_cache(maxsize=1)
def known_bad() -> tuple[KnownBad, ...]:
    text = resources.files("drafter_operator.data").joinpath("known-bad.yaml").read_text()
    return tuple(KnownBad(id=e["id"], engine=e["engine"], engine_versions=e.get("engineVersions") or "",
                          methods=tuple(e["methods"]), architectures=tuple(e.get("architectures") or ()),
                          model_patterns=tuple(e.get("modelPatterns") or ()), reason=" ".join(e["reason"].split()),
                          link=e.get("link", ""), observed=e.get("observed", ""),
                          resolved_by_preflight=tuple(e.get("resolvedByPreflight") or ()),
                          any_target=bool(e.get("anyTarget", False)), source=e.get("source", ""))
                 for e in yaml.safe_load(text))


def image_version(image: str) -> tuple[int, ...] | None:
    """`vllm/vllm-openai:v0.33.0` -> (0, 33, 0); None when the tag is not a version (latest, a digest)."""
    tag = image.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    match = re.match(r"v?(\d+(?:\.\d+)*)", tag)
    return tuple(int(p) for p in match[1].split(".")) if match else None


def version_in_range(version: tuple[int, ...] | None, spec: str) -> bool:
    """`spec` is comma-separated bounds like ">=0.10,<0.40"; an unknown version matches any range."""
    if not spec.strip() or version is None:
        return True
    for bound in spec.split(","):
        match = re.fullmatch(r"\s*(>=|<=|>|<|==)\s*v?([\d.]+)\s*", bound)
        if not match:
            raise ValueError(f"bad version bound {bound!r} in known-bad.yaml")
        op, other = match[1], tuple(int(p) for p in match[2].split("."))
        ok = {">=": version >= other, "<=": version <= other, ">": version > other, "<": version < other,
              "==": version == other}[op]
        if not ok:
            return False
    return True


def matching_known_bad(spec: DrafterServingSpec, image: str, architecture: str | None = None) -> list[KnownBad]:
    """Entries that match this serving's engine, image version, drafter method and target."""
    matches = []
    for entry in known_bad():
        if entry.engine != spec.engine or spec.drafter.method not in entry.methods:
            continue
        if not version_in_range(image_version(image), entry.engine_versions):
            continue
        if entry.any_target:
            hit = True
        elif architecture is not None:
            hit = architecture in entry.architectures
        else:
            hit = any(re.search(p, spec.target.model) for p in entry.model_patterns)
        if hit:
            matches.append(entry)
    return matches


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
