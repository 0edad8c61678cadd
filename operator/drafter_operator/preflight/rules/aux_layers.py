"""aux-layers: the engine captures the target layers the drafter was trained on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafter_operator import engines as engine_modules
from drafter_operator.engines.checkpoint_loading import CheckpointLoading
from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.rules.context import Context, Report

CHECK = "aux-layers"


def _conventions() -> list[tuple[str, CheckpointLoading]]:
    """(engine, its loading record) for each layer-id convention, one recording its ids in a nested field first
    (SpecForge writes eagle_config's list, and an export may carry vLLM's top-level list beside it: the nested one
    says how it was trained)."""
    records = [(name, module.CHECKPOINT_LOADING) for name, module in engine_modules.ENGINES.items()]
    return sorted(records, key=lambda entry: -entry[1].layer_ids_field.count("."))


def recorded_layer_ids(ctx: Context) -> tuple[tuple[int, ...] | None, str, str]:
    """(ids, field, default convention) the drafter records for its training. A speculators checkpoint records them
    where, and as, the engine that reads the format does; other checkpoints in the first convention of _conventions
    whose field holds ids. Without ids the convention is moot: the default engine's."""
    raw = ctx.raw
    if ctx.is_speculators:
        convention = next(name for name, module in engine_modules.ENGINES.items() if module.READS_SPECULATORS_FORMAT)
        loading = engine_modules.engine(convention).CHECKPOINT_LOADING
        ids = loading.recorded_layer_ids(raw)
        return (tuple(ids) if ids else None), loading.layer_ids_field, convention
    for convention, loading in _conventions():
        ids = loading.recorded_layer_ids(raw)
        if ids:
            return tuple(ids), loading.layer_ids_field, convention
    return None, "", engine_modules.DEFAULT_ENGINE


def _fix_for(ctx: Context, positions: tuple[int, ...], n_layers: int) -> str:
    return ctx.checkpoint_loading.layer_ids_fix(positions, n_layers, ctx.target_architecture)


@dataclass(frozen=True)
class RecordedLayers:
    """The layer ids a drafter records for its training, and the target positions they mean."""

    ids: tuple[int, ...] | None
    field: str  # where the ids were found ("" when none)
    convention: str  # an engine's name (its layer-id convention): as given, else inferred from the checkpoint's format
    positions: tuple[int, ...] | None  # the trained positions; None without ids


def recorded_layers(ctx: Context) -> RecordedLayers:
    ids, field, default_convention = recorded_layer_ids(ctx)
    convention = ctx.trained_convention or default_convention
    positions = eng.trained_positions(ids, convention) if ids else None  # type: ignore[arg-type]
    return RecordedLayers(ids, field, convention, positions)


def check_aux_layers(ctx: Context, r: Report) -> None:
    if ctx.speculators_refused:
        return  # refused by the architecture check
    if not eng.uses_aux_hidden_states(ctx.draft):
        r.ok(CHECK, "eagle_config.use_aux_hidden_state is false: the drafter reads only the last hidden state")
        return
    n_layers = ctx.target_int("num_hidden_layers")
    if n_layers is None:
        r.warning(CHECK, "TargetLayersUnknown", "the target's config has no num_hidden_layers: layer ids not checked.")
        return
    num_aux = eng.num_aux_hidden_states(ctx.draft)
    capture = ctx.checkpoint_loading.capture(ctx.draft, n_layers, ctx.target_architecture, ctx.vllm_runner)
    recorded = recorded_layers(ctx)
    ctx.facts["aux_layers"] = aux_layer_facts(n_layers, num_aux, capture, recorded)
    note_sglang_capture_rule(ctx, r)
    what = describe_capture(ctx, capture, recorded)
    bad = capture_problems(ctx, r, what, capture, recorded, num_aux, n_layers)
    if recorded.positions is not None:
        bad = trained_position_problems(ctx, r, what, capture, recorded, n_layers, bad)
    elif not bad:
        r.warning(CHECK, "AuxLayersNotRecorded",
                  f"the drafter records no eagle_aux_hidden_state_layer_ids: {what} (the engine default). Right only "
                  "if the drafter was trained on those layers.", "record the training layer ids in config.json")
    warn_if_layer_lists_disagree(ctx, r, recorded)
    if not bad:
        trained = recorded.positions
        on = f", trained on {eng.describe_positions(trained)} ({recorded.convention} convention)" if trained else ""
        r.ok(CHECK, f"{what}; the drafter expects {num_aux} states{on}")


def aux_layer_facts(n_layers: int, num_aux: int, capture: eng.Capture, recorded: RecordedLayers) -> dict[str, Any]:
    """What the verdict reports about the layers: the target's depth, what the drafter records and expects, what
    the engine captures."""
    ids, trained = recorded.ids, recorded.positions
    return {
        "target_layers": n_layers, "recorded_ids": list(ids) if ids else None,
        "recorded_field": recorded.field or None, "trained_convention": recorded.convention if ids else None,
        "trained_positions": list(trained) if trained else None,
        "engine_source": capture.source, "engine_requested": list(capture.requested),
        "engine_captured": list(capture.captured), "drafter_expects": num_aux,
    }


def note_sglang_capture_rule(ctx: Context, r: Report) -> None:
    """Record the engine's layer-id rule for the target's class, where its mapping depends on the class (SGLang's);
    warn when the preflight's table does not know the class."""
    rule_for = ctx.checkpoint_loading.capture_rule
    if rule_for is None:
        return  # the engine reads ids the same way on every target (vLLM)
    rule, known = rule_for(ctx.target_architecture)
    ctx.facts["aux_layers"]["sglang_rule"] = rule
    if not known:
        r.warning(CHECK, "CaptureRuleUnverified",
                  f"SGLang's layer-id rule for target class {ctx.target_architecture} is not in the preflight's "
                  "table (verified against SGLang 0.5.23); assumed [id + 1], as most classes do.")


def describe_capture(ctx: Context, capture: eng.Capture, recorded: RecordedLayers) -> str:
    """Where the engine reads the layer ids and which layers it captures, for the messages."""
    runner = f" ({ctx.vllm_runner} model runner)" if engine_modules.engine(ctx.engine).MODEL_RUNNERS else ""
    if capture.layer_ids:
        read = f"reads {list(capture.layer_ids)} from {capture.source}"
    else:
        ignored = f" (it does not read {recorded.field})" if recorded.ids else ""
        read = f"finds no layer ids{ignored} and uses the {capture.source}"
    return f"{ctx.engine}{runner} {read} and captures the residual stream after layers " \
           f"{eng.describe_positions(capture.requested)}"


def capture_problems(ctx: Context, r: Report, what: str, capture: eng.Capture, recorded: RecordedLayers,
                     num_aux: int, n_layers: int) -> bool:
    """The engine captures layers the target has, as many distinct ones as the drafter's fc expects."""
    trained = recorded.positions
    if capture.out_of_range:
        lo, hi = capture.valid
        r.problem(CHECK, "AuxLayerOutOfRange",
                  f"{what}; the target has {n_layers} layers, so only positions {lo}..{hi} exist: "
                  f"{list(capture.out_of_range)} are never captured and the drafter gets {len(capture.captured)} of "
                  f"the {num_aux} states its fc expects (a shape error at the first forward, or garbage).",
                  _fix_for(ctx, trained, n_layers) if trained and all(0 <= p <= hi for p in trained)
                  else "the ids are for a deeper target: use a drafter trained for this one")
        return True
    if len(capture.captured) != num_aux:
        r.problem(CHECK, "AuxLayerCount",
                  f"{what}; de-duplicated that is {len(capture.captured)} states, the drafter's fc expects {num_aux} "
                  "(repeated ids, e.g. the default (2, N//2, N-3) on a shallow target, collapse).",
                  _fix_for(ctx, trained, n_layers) if trained else
                  f"record {num_aux} distinct layer ids in the drafter's config")
        return True
    return False


def trained_position_problems(ctx: Context, r: Report, what: str, capture: eng.Capture, recorded: RecordedLayers,
                              n_layers: int, bad: bool) -> bool:
    """The positions the drafter was trained on exist in this target and are the ones the engine captures (and,
    on vLLM, the other model runner would capture them too). Returns ``bad`` or whether a problem was added."""
    trained, ids, field, convention = recorded.positions, recorded.ids, recorded.field, recorded.convention
    if trained is None:
        return bad
    if any(not 0 <= p <= n_layers for p in trained):
        if not bad:
            r.problem(CHECK, "AuxLayerOutOfRange",
                      f"the drafter records {field} {list(ids or [])} ({convention} convention: positions "
                      f"{list(trained)}), beyond this {n_layers}-layer target: it was trained for another target.",
                      "use a drafter trained for this target")
        return True
    if tuple(sorted(set(trained))) != capture.captured and not bad:
        r.problem(CHECK, "AuxLayerMismatch",
                  f"{what}, but the drafter was trained on positions {eng.describe_positions(trained)} "
                  f"({field} {list(ids or [])} in the {convention} convention"
                  + ("" if ctx.trained_convention else ", inferred from the checkpoint's format") + "). The engine "
                  "accepts this silently and the drafter reads the wrong layers: acceptance collapses "
                  "(one model's position-0 acceptance fell from 45% to 10%).",
                  _fix_for(ctx, trained, n_layers))
        return True
    engine = engine_modules.engine(ctx.engine)
    if engine.MODEL_RUNNERS and not bad:  # where vLLM reads the ids depends on its model runner
        other = "v1" if ctx.vllm_runner == "v2" else "v2"
        alt = ctx.checkpoint_loading.capture(ctx.draft, n_layers, ctx.target_architecture, other)
        if alt.captured != capture.captured:
            r.warning(CHECK, "VllmRunnerDiffers",
                      f"with the {other} model runner ({engine.MODEL_RUNNER_ENV}={'0' if other == 'v1' else '1'}) "
                      f"vLLM would read {alt.source} and capture {eng.describe_positions(alt.captured)} instead.",
                      _fix_for(ctx, trained, n_layers))
    return bad


def warn_if_layer_lists_disagree(ctx: Context, r: Report, recorded: RecordedLayers) -> None:
    """An HF export with both lists: the top-level one (vLLM's, positions) and eagle_config's must agree."""
    if ctx.is_speculators is False and recorded.field == "eagle_config.eagle_aux_hidden_state_layer_ids" and \
            ctx.raw.get("eagle_aux_hidden_state_layer_ids") and recorded.positions is not None:
        top = tuple(ctx.raw["eagle_aux_hidden_state_layer_ids"])
        if tuple(sorted(set(top))) != tuple(sorted(set(recorded.positions))):
            r.warning(CHECK, "AuxLayerListsDisagree",
                      f"the top-level eagle_aux_hidden_state_layer_ids {list(top)} (vLLM reads it, as positions) and "
                      f"eagle_config's {list(recorded.ids or [])} ({recorded.convention}: positions "
                      f"{list(recorded.positions)}) disagree.")
