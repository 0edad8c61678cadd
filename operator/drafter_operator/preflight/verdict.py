"""The preflight verdict: problems (the engine would refuse the drafter late or mis-serve it silently),
warnings (worth a look, not blocking), the checks that passed, and the Kubernetes condition it maps to."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["problem", "warning", "ok"]
CONDITION_TYPE = "DrafterCompatible"
MAX_CONDITION_MESSAGE = 4096  # well under the API server's 32768; long enough for every problem's first line
# The kubelet keeps at most 4096 bytes of a container's termination message (and 12 KiB per pod): the
# record the preflight init container leaves there must fit whole, or it no longer parses.
TERMINATION_MESSAGE_BYTES = 4096
# Marks a termination message as a preflight record (and its layout's version).
RECORD_KIND = "drafter.dev/preflight/v1"


@dataclass(frozen=True)
class Finding:
    check: str  # the rule, e.g. "vocab-mapping"
    severity: Severity
    reason: str  # CamelCase, usable as a condition/Event reason, e.g. "DraftVocabMappingMissing"
    message: str  # what is wrong (or what was verified), naming the file/field and the engine behaviour
    fix: str = ""

    def line(self) -> str:
        return self.message + (f" Fix: {self.fix}" if self.fix else "")


@dataclass
class PreflightVerdict:
    engine: str
    method: str
    drafter: str | None
    target: str
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # what was read: formats, sizes, layer positions

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "problem"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def passed(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "ok"]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def checked(self) -> bool:
        """Whether any rule ran: False when nothing could be checked (an unchecked method, a checkpoint
        that is not there), so the verdict says nothing about compatibility either way."""
        return bool(self.problems or self.passed)

    # The condition (controllers/conditions.py takes anything with status, reason and message).
    @property
    def status(self) -> str:
        return "True" if self.ok else "False"

    @property
    def reason(self) -> str:
        if self.problems:
            return self.problems[0].reason
        return "PreflightPassedWithWarnings" if self.warnings else "PreflightPassed"

    @property
    def message(self) -> str:
        where = f"{self.engine} method {self.method}"
        if self.problems:
            head = f"preflight refused the drafter for {where}: {len(self.problems)} problem(s)"
            body = [f"[{p.check}] {p.line()}" for p in self.problems]
        elif self.warnings:
            # Nothing checked (an unchecked method, a checkpoint that is not there) is not "passed".
            head = (f"preflight passed for {where} with {len(self.warnings)} warning(s)" if self.checked
                    else f"preflight checked nothing for {where}")
            body = [f"[{w.check}] {w.line()}" for w in self.warnings]
        else:
            return f"preflight passed for {where}: {len(self.passed)} checks"
        return _truncate(head + ": " + " | ".join(body), MAX_CONDITION_MESSAGE)

    def condition(self) -> dict[str, str]:
        return {"type": CONDITION_TYPE, "status": self.status, "reason": self.reason, "message": self.message}

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "engine": self.engine, "method": self.method, "drafter": self.drafter, "target": self.target,
            "problems": [asdict(f) for f in self.problems],
            "warnings": [asdict(f) for f in self.warnings],
            "passed": [asdict(f) for f in self.passed],
            "facts": self.facts,
            "condition": self.condition(),
        }


def termination_record(verdict: PreflightVerdict, seconds: float | None = None) -> str:
    """The verdict as compact JSON of at most TERMINATION_MESSAGE_BYTES: what the preflight init container
    writes to its termination message and the serving controller reads back (`parse_termination_record`).
    Counts, not findings: the condition's message already carries every problem with its fix, and the
    full verdict (facts, passed checks) is in the container's log."""
    record: dict[str, Any] = {"kind": RECORD_KIND, "ok": verdict.ok, "checked": verdict.checked,
                              "status": verdict.status, "reason": verdict.reason, "message": verdict.message,
                              "problems": len(verdict.problems), "warnings": len(verdict.warnings),
                              "passed": len(verdict.passed),
                              # The rules that passed, by name: a known-bad entry whose cause one of them
                              # rules out does not apply to this checkpoint (controllers/serving/drafter_compatible.py).
                              "passedChecks": sorted({f.check for f in verdict.passed})}
    if seconds is not None:
        record["seconds"] = round(seconds, 3)
    return _fit(record, TERMINATION_MESSAGE_BYTES)


def parse_termination_record(text: str | None) -> dict[str, Any] | None:
    """A record written by `termination_record`, or None when ``text`` is not one (empty, cut, another
    program's output)."""
    try:
        record = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("kind") != RECORD_KIND:
        return None
    if not isinstance(record.get("ok"), bool) or not all(isinstance(record.get(k), str)
                                                         for k in ("status", "reason", "message")):
        return None
    return record


def _fit(record: dict[str, Any], limit: int) -> str:
    """Compact JSON within ``limit`` bytes, shortening the message (escaping and UTF-8 can make one
    character several bytes, so measure the encoded text, not the message)."""
    message = record["message"]
    text = json.dumps(record, separators=(",", ":"))
    while len(text.encode()) > limit:
        excess = len(text.encode()) - limit
        message = _truncate(message, max(len(message) - max(excess, 16), 20))
        text = json.dumps({**record, "message": message}, separators=(",", ":"))
    return text


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ...(truncated)"
