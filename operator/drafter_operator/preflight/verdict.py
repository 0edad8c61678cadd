"""The preflight verdict: problems (the engine would refuse the drafter late or mis-serve it silently),
warnings (worth a look, not blocking), the checks that passed, and the Kubernetes condition it maps to."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["problem", "warning", "ok"]
CONDITION_TYPE = "DrafterCompatible"
MAX_CONDITION_MESSAGE = 4096  # well under the API server's 32768; long enough for every problem's first line


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
class Verdict:
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
            head = f"preflight passed for {where} with {len(self.warnings)} warning(s)"
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


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ...(truncated)"
