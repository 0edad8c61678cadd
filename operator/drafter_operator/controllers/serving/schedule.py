"""spec.drafter.dynamic fromBenchmark: the batch-size schedule a revision renders, learned from a load sweep (pure)."""

from __future__ import annotations

from typing import Mapping

from drafter_operator import engines, families
from drafter_operator.controllers.serving.revisions import revision_hash
from drafter_operator.engines import dynamic, k_bands, traffic_mix

Schedule = list[tuple[int, int, int]]


def speculation_schedule(spec, image: str, measured: Mapping[str, list[dict]],
                         known: dict | None) -> tuple[Schedule | None, dict | None]:
    """spec.drafter.dynamic fromBenchmark (pure): the batch-size schedule to render and status.speculationSchedule.

    The sweep is the load sweep (status.result.levels) of the newest finished DrafterBenchmark (its gate,
    or one run by hand while it served) of the static-k revision of this spec (the revision the spec runs
    before any schedule: its hash, without one). Not the active revision's: once a schedule runs, its
    own benchmarks measure the schedule, and a schedule learned from them would start yet another
    revision; they only refine a k-per-band prediction, once (``_refined``). Without a sweep of it the static
    k runs, and the status says why. When the benchmark is no longer observed, the schedule already recorded
    for that revision is kept."""
    drafter = spec.drafter
    schedules = engines.engine(spec.engine).SUPPORTS_DYNAMIC_SCHEDULE
    if getattr(drafter, "dynamic", None) != "fromBenchmark" or not schedules or drafter.method == "none":
        return None, None
    measured_revision = revision_hash(spec, image)
    # The k vLLM runs the family with (mtp: the operator's default). Never None here: the API refuses dynamic where
    # vLLM would take k from the draft checkpoint (dspark without numSpeculativeTokens) or drop the schedule (suffix).
    k = engines.draft_tokens_per_step(spec.engine, drafter)
    runs = measured.get(measured_revision, [])
    sweep = next((b for b in runs if dynamic.measured(b["status"]["result"].get("levels"))), None)
    if sweep is not None:
        return _refined(spec, image, _from_sweep(spec, image, sweep, k, measured_revision), sweep, measured, known)
    known = known or {}
    if known.get("revision") == measured_revision and known.get("ranges") and known.get("source", "").startswith("benchmark"):
        return [(r["start"], r["end"], r["numSpeculativeTokens"]) for r in known["ranges"]], known
    why = (f"{len(runs)} finished benchmark(s) of it, none with concurrencyLevels" if runs
           else "no finished benchmark of it: run a DrafterBenchmark with concurrencyLevels against this serving, "
                "or set spec.swap.gate.concurrencyLevels")
    return None, {"source": "static", "revision": measured_revision,
                  "message": f"static k={k}: no load sweep of revision {measured_revision} yet ({why})"}



def _refined(spec, image: str, predicted: tuple[Schedule, dict], sweep: dict, measured: Mapping[str, list[dict]],
             known: dict | None) -> tuple[Schedule, dict]:
    """A k-per-band schedule held to its own sweep: once the revision that runs the predicted schedule was swept
    (its gate with concurrencyLevels, or a run against the serving while it served), the bands are fitted again
    with those levels where a level's speedup is more than k_bands.REFINE_TOLERANCE off the prediction
    (``k_bands.refinement``). The refined schedule is a revision of its own; its sweeps are not used again, so the
    schedule settles after one refinement, and it is kept (from ``known``) once the predicted revision's sweep is
    no longer observed."""
    schedule, block = predicted
    if block.get("basis") != "kPerBand":
        return predicted
    predicted_revision = block["scheduledRevision"]
    own = next((b for b in measured.get(predicted_revision, [])
                if dynamic.measured(b["status"]["result"].get("levels"))), None)
    if own is None:
        if known and known.get("predictedRevision") == predicted_revision and known.get("refinedWith") \
                and known.get("ranges"):
            return [(r["start"], r["end"], r["numSpeculativeTokens"]) for r in known["ranges"]], known
        return predicted
    k = engines.draft_tokens_per_step(spec.engine, spec.drafter)
    mode = families.family(spec.drafter.method).drafting
    found = k_bands.refinement(sweep["status"]["result"], k, mode, dynamic.MAX_BATCH_SIZE, own["status"]["result"],
                               _mix_acceptance(spec, sweep["status"]["result"], k))
    name = own["metadata"]["name"]
    if found is None:
        return predicted
    if found.bands is None:
        return schedule, {**block, "message": f"{block['message']}; the sweep of {name} of this schedule agrees with "
                                              f"it (within {found.off_by:.1%} at every level)"}
    bands = list(found.bands)
    refined = k_bands.schedule(bands)
    return refined, {**block, "scheduledRevision": revision_hash(spec, image, refined), "refinedWith": name,
                     "predictedRevision": predicted_revision,
                     "ranges": [{"start": b.start, "end": b.end, "numSpeculativeTokens": b.k,
                                 "predictedSpeedup": b.predicted_speedup} for b in bands],
                     "message": f"k per load band, refined with the sweep of {name} of the predicted schedule "
                                f"(off by up to {found.off_by:.1%}): "
                                + ", ".join(f"k={b.k} from {b.start}" for b in bands)}


def _mix_acceptance(spec, result: dict, k: int):
    """The per-position acceptance of the serving's traffic mix in a sweep's result, None without a mix or the
    categories it names (engines/traffic_mix.py)."""
    mix = spec.traffic.mix if spec.traffic is not None else None
    return traffic_mix.acceptance_for_mix(result.get("acceptanceByCategory") or [], mix, k) if mix else None


def _from_sweep(spec, image: str, sweep: dict, k: int, measured_revision: str) -> tuple[Schedule, dict]:
    """The schedule of one load sweep at the static k: k per load band where the sweep has the acceptance to
    predict every smaller k from (engines/k_bands.py), else k below the break-even and none from it."""
    result = sweep["status"]["result"]
    levels = result["levels"]
    name = sweep["metadata"]["name"]
    at, found = dynamic.crossover(levels), dynamic.break_even(levels)
    mix = spec.traffic.mix if spec.traffic is not None else None
    mixed = _mix_acceptance(spec, result, k)
    bands = k_bands.bands_from_result(result, k, families.family(spec.drafter.method).drafting, dynamic.MAX_BATCH_SIZE,
                                      mixed)
    if bands is not None:
        schedule = k_bands.schedule(bands)
        ranges = [{"start": b.start, "end": b.end, "numSpeculativeTokens": b.k, "predictedSpeedup": b.predicted_speedup}
                  for b in bands]
        shares = ", ".join(f"{category} {weight}" for category, weight in (mix or {}).items())
        basis = (f"for the traffic mix {shares}" if mixed is not None else
                 f"for its prompts (no acceptance by category in it for the traffic mix {shares})" if mix else "")
        message = (f"k per load band, predicted from the sweep of {name}{' ' + basis if basis else ''}: "
                   + ", ".join(f"k={b.k} from {b.start}" for b in bands))
        basis = "kPerBand"
    else:
        schedule = dynamic.schedule_from_levels(levels, k)
        ranges = [{"start": a, "end": b, "numSpeculativeTokens": n} for a, b, n in schedule]
        off = dynamic.off_from(levels)
        if found is None:
            message = f"speculation paid at every level {name} measured: k={k} at every batch size"
        elif found.estimate is None:
            message = f"k={k} below {off} concurrent streams, none from {off} ({name}: slower from its lowest level)"
        else:
            message = (f"k={k} below {off} concurrent streams, none from {off} (break-even of {name}: "
                       f"{found.estimate:.1f} streams, between {found.above} and {found.below})")
        basis = "onOff"
    block = {"source": f"benchmark {name}", "revision": measured_revision,
             "scheduledRevision": revision_hash(spec, image, schedule), "crossoverConcurrency": at,
             "aboveConcurrency": found.above if found else None,
             "breakEvenConcurrency": round(found.estimate, 2) if found and found.estimate is not None else None,
             "basis": basis, "ranges": ranges, "message": message}
    return schedule, {key: value for key, value in block.items() if value is not None}
