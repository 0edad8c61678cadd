"""`kubectl drafter compare BENCHMARK...`: drafter families side by side, and the one to pick at each load (pure).

Each DrafterBenchmark measured one serving against its no-speculation baseline at its concurrency levels;
the comparison reads them as they are, and picks at each level as a DrafterBenchmark with spec.candidates
does (load_picks.py). Each sweep's measured break-even closes the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafter_operator import figures, load_picks
from drafter_operator.kubectl_plugin.actions import PluginError

NO_SPECULATION = load_picks.NO_SPECULATION
#: The pick column where not every candidate measured the level.
NOT_ALL_MEASURED = "-"


@dataclass(frozen=True)
class Candidate:
    """One benchmark: its name, the serving and drafter family it measured, its speedup per level."""

    benchmark: str
    serving: str
    method: str
    speedups: dict[int, float]
    break_even: float | None = None  # the sweep's interpolated crossover, in streams
    revision: str | None = None  # the serving revision the benchmark measured
    schedule: str = "?"  # how that revision drafts by load: "static", or its schedule (measured_schedule)


@dataclass(frozen=True)
class Comparison:
    candidates: list[Candidate]
    levels: list[int]
    picks: dict[int, str]  # concurrency -> a candidate's label, NO_SPECULATION or NOT_ALL_MEASURED
    labels: dict[str, str]  # benchmark -> what the table calls it: its serving, or itself where a serving repeats


def candidate(benchmark: dict, serving: dict | None) -> Candidate:
    """The candidate a Succeeded sweep describes; PluginError naming the benchmark when it cannot be compared."""
    name = benchmark["metadata"]["name"]
    status = benchmark.get("status") or {}
    if status.get("state") != "Succeeded":
        raise PluginError(f"drafterbenchmark/{name} is {status.get('state') or 'Pending'}: compare Succeeded runs "
                          f"(follow it with: kubectl get drafterbenchmark {name} -w)")
    result = status.get("result") or {}
    levels = result.get("levels") or []
    speedups = {level["concurrency"]: level["speedup"] for level in levels if level.get("speedup") is not None}
    if not speedups:
        raise PluginError(f"drafterbenchmark/{name} has no speedup per level: give it spec.concurrencyLevels and a "
                          "spec.baseline, then run it again")
    serving_name = ((benchmark.get("spec") or {}).get("servingRef") or {}).get("name") or "(endpoint)"
    revision = status.get("revision")
    return Candidate(name, serving_name, measured_method(revision, serving), speedups,
                     (result.get("crossover") or {}).get("estimate"), revision, measured_schedule(revision, serving))


def runs_of(benchmark: dict) -> list[str]:
    """The benchmarks to compare for ``benchmark``: itself, or for a comparison (spec.candidates) its candidates'
    own runs; PluginError while a candidate has not been measured."""
    if not (benchmark.get("spec") or {}).get("candidates"):
        return [benchmark["metadata"]["name"]]
    name = benchmark["metadata"]["name"]
    compared = ((benchmark.get("status") or {}).get("comparison") or {}).get("candidates") or []
    runs = [c.get("benchmark") for c in compared]
    if len(runs) != len(benchmark["spec"]["candidates"]) or not all(runs):
        raise PluginError(f"drafterbenchmark/{name} compares {len(benchmark['spec']['candidates'])} candidates and "
                          f"has started {len([r for r in runs if r])}: compare it once it Succeeded "
                          f"(follow it with: kubectl get drafterbenchmark {name} -w)")
    return runs


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
    """Every level any candidate measured, and the pick at each level all of them measured."""
    names = [c.benchmark for c in candidates]
    if len(set(names)) != len(names):
        raise PluginError("a benchmark is named twice: name each one once")
    # The servings are what one would serve; two runs of one serving (before and after a change) keep their names.
    servings = [c.serving for c in candidates]
    labels = {c.benchmark: c.serving if servings.count(c.serving) == 1 else c.benchmark for c in candidates}
    by_level = load_picks.picks_per_level({labels[c.benchmark]: c.speedups for c in candidates})
    levels = list(by_level)
    picks = {level: NOT_ALL_MEASURED if pick is None else pick for level, pick in by_level.items()}
    return Comparison(candidates, levels, picks, labels)


def measured_schedule(revision: str | None, serving: dict | None) -> str:
    """How the measured revision drafts by load: its load schedule when it is the serving's scheduled revision
    (spec.drafter.dynamic: "k 4/3/2/1/0 by load", "k 5/0 by load"), else "static"; "?" without the serving. A
    scheduled revision swept beside static ones compares a schedule with a family: the table says so."""
    if serving is None or revision is None:
        return "?"
    schedule = (serving.get("status") or {}).get("speculationSchedule") or {}
    if schedule.get("scheduledRevision") != revision or not schedule.get("ranges"):
        return "static"
    return "k " + "/".join(str(r["numSpeculativeTokens"]) for r in schedule["ranges"]) + " by load"


def rows(comparison: Comparison) -> list[list[str]]:
    """The table: a header, per level each candidate's speedup ("-" where it did not measure it) and the pick,
    then each sweep's break-even in streams ("-" where its levels did not bracket one), and the revision each
    column measured with how it drafts by load."""
    header = ["STREAMS", *(f"{comparison.labels[c.benchmark]} ({c.method})" for c in comparison.candidates), "PICK"]
    body = [[str(level), *(figures.speedup(c.speedups[level]) if level in c.speedups else "-" for c in comparison.candidates),
             comparison.picks[level]] for level in comparison.levels]
    footer = ["break-even", *(f"{c.break_even:g}" if c.break_even is not None else "-" for c in comparison.candidates), ""]
    measured = ["revision", *(f"{c.revision or '-'} ({c.schedule})" for c in comparison.candidates), ""]
    return [header, *body, footer, measured]


def render(comparison: Comparison) -> str:
    table = rows(comparison)
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "".join("   ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n" for row in table)
