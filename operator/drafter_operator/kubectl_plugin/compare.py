"""`kubectl drafter compare BENCHMARK...`: drafter families side by side, and the one to pick at each load (pure).

Each DrafterBenchmark measured one serving against its no-speculation baseline at its concurrency levels;
the comparison reads them as they are. At each level the pick is the candidate with the highest speedup
among those measured there, and no speculation where none of them is faster than the baseline: under
load verification multiplies the tokens each step computes, so the pick can change with the streams.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafter_operator.kubectl_plugin.actions import PluginError

#: What the pick is called where no candidate beats the baseline.
NO_SPECULATION = "no speculation"


@dataclass(frozen=True)
class Candidate:
    """One benchmark: its name, the serving and drafter family it measured, its speedup per level."""

    benchmark: str
    serving: str
    method: str
    speedups: dict[int, float]


@dataclass(frozen=True)
class Comparison:
    candidates: list[Candidate]
    levels: list[int]
    picks: dict[int, str]  # concurrency -> the benchmark's name, or NO_SPECULATION


def candidate(benchmark: dict, serving: dict | None) -> Candidate:
    """The candidate a Succeeded sweep describes; PluginError naming the benchmark when it cannot be compared."""
    name = benchmark["metadata"]["name"]
    status = benchmark.get("status") or {}
    if status.get("state") != "Succeeded":
        raise PluginError(f"drafterbenchmark/{name} is {status.get('state') or 'Pending'}: compare Succeeded runs "
                          f"(follow it with: kubectl get drafterbenchmark {name} -w)")
    levels = (status.get("result") or {}).get("levels") or []
    speedups = {level["concurrency"]: level["speedup"] for level in levels if level.get("speedup") is not None}
    if not speedups:
        raise PluginError(f"drafterbenchmark/{name} has no speedup per level: give it spec.concurrencyLevels and a "
                          "spec.baseline, then run it again")
    serving_name = ((benchmark.get("spec") or {}).get("servingRef") or {}).get("name") or "(endpoint)"
    return Candidate(name, serving_name, measured_method(status.get("revision"), serving), speedups)


def measured_method(revision: str | None, serving: dict | None) -> str:
    """The drafter family of the revision the benchmark measured (the serving's record of it), else its spec's."""
    if serving is None:
        return "?"
    status = serving.get("status") or {}
    for record in status.get("revisions") or []:
        if record.get("name") == revision:
            if method := (record.get("drafterSpec") or {}).get("method"):
                return method
            if record.get("drafter"):  # "eagle3:/models/drafters/kimi-eagle3", or "none"
                return record["drafter"].split(":", 1)[0]
    return ((serving.get("spec") or {}).get("drafter") or {}).get("method", "?")


def compare(candidates: list[Candidate]) -> Comparison:
    """Every level any candidate measured, and the pick at each."""
    names = [c.benchmark for c in candidates]
    if len(set(names)) != len(names):
        raise PluginError("a benchmark is named twice: name each one once")
    levels = sorted({level for c in candidates for level in c.speedups})
    picks = {}
    for level in levels:
        measured = [(c.speedups[level], c.benchmark) for c in candidates if level in c.speedups]
        best, name = max(measured, key=lambda pair: pair[0])
        picks[level] = name if best > 1.0 else NO_SPECULATION
    return Comparison(candidates, levels, picks)


def rows(comparison: Comparison) -> list[list[str]]:
    """The table: a header, then per level each candidate's speedup ("-" where it did not measure it) and the pick."""
    header = ["STREAMS", *(f"{c.benchmark} ({c.method})" for c in comparison.candidates), "PICK"]
    body = [[str(level), *(f"{c.speedups[level]:.2f}x" if level in c.speedups else "-" for c in comparison.candidates),
             comparison.picks[level]] for level in comparison.levels]
    return [header, *body]


def render(comparison: Comparison) -> str:
    table = rows(comparison)
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "".join("   ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n" for row in table)
