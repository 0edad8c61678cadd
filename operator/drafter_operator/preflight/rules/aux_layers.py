"""aux-layers: the engine captures the target layers the drafter was trained on."""

from __future__ import annotations

from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.rules.context import Context, Report


def recorded_layer_ids(ctx: Context) -> tuple[tuple[int, ...] | None, str, str]:
    """(ids, field, default convention) the drafter records for its training."""
    raw = ctx.raw
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if ctx.is_speculators:
        ids = raw.get("eagle_aux_hidden_state_layer_ids")
        return (tuple(ids) if ids else None), "eagle_aux_hidden_state_layer_ids", "vllm"
    if eagle.get("eagle_aux_hidden_state_layer_ids"):
        return tuple(eagle["eagle_aux_hidden_state_layer_ids"]), "eagle_config.eagle_aux_hidden_state_layer_ids", "sglang"
    if raw.get("eagle_aux_hidden_state_layer_ids"):
        return tuple(raw["eagle_aux_hidden_state_layer_ids"]), "eagle_aux_hidden_state_layer_ids", "vllm"
    return None, "", "vllm"


def _fix_for(ctx: Context, positions: tuple[int, ...], n_layers: int) -> str:
    if ctx.engine == "vllm":
        ids = eng.ids_for_positions("vllm", positions, "", n_layers)
        return (f'add "eagle_aux_hidden_state_layer_ids": {list(ids or [])} at the top level of the drafter\'s '
                "config.json (vLLM reads the top-level list first with either model runner; SGLang ignores it)")
    rule, _ = eng.sglang_capture_rule(ctx.target_architecture)
    ids = eng.ids_for_positions("sglang", positions, rule, n_layers)
    if ids is None:
        return (f"no eagle_aux_hidden_state_layer_ids make SGLang capture positions {list(positions)} on "
                f"{ctx.target_architecture} ({rule}): serve this drafter with vLLM")
    return f"set eagle_config.eagle_aux_hidden_state_layer_ids to {ids} (SGLang {rule} for {ctx.target_architecture})"


def check_aux_layers(ctx: Context, r: Report) -> None:
    check = "aux-layers"
    if ctx.is_speculators and ctx.engine == "sglang":
        return  # refused by the architecture check
    if not eng.uses_aux_hidden_states(ctx.draft):
        r.ok(check, "eagle_config.use_aux_hidden_state is false: the drafter reads only the last hidden state")
        return
    n_layers = ctx.target_int("num_hidden_layers")
    if n_layers is None:
        r.warning(check, "TargetLayersUnknown", "the target's config has no num_hidden_layers: layer ids not checked.")
        return
    num_aux = eng.num_aux_hidden_states(ctx.draft)
    capture = eng.engine_capture(ctx.engine, ctx.draft, n_layers, ctx.target_architecture, ctx.vllm_runner)  # type: ignore[arg-type]
    ids, field, default_convention = recorded_layer_ids(ctx)
    convention = ctx.trained_convention or default_convention
    trained = eng.trained_positions(ids, convention) if ids else None  # type: ignore[arg-type]
    runner = f" ({ctx.vllm_runner} model runner)" if ctx.engine == "vllm" else ""
    ctx.facts["aux_layers"] = {
        "target_layers": n_layers, "recorded_ids": list(ids) if ids else None, "recorded_field": field or None,
        "trained_convention": convention if ids else None, "trained_positions": list(trained) if trained else None,
        "engine_source": capture.source, "engine_requested": list(capture.requested),
        "engine_captured": list(capture.captured), "drafter_expects": num_aux,
    }
    if ctx.engine == "sglang":
        rule, known = eng.sglang_capture_rule(ctx.target_architecture)
        ctx.facts["aux_layers"]["sglang_rule"] = rule
        if not known:
            r.warning(check, "CaptureRuleUnverified",
                      f"SGLang's layer-id rule for target class {ctx.target_architecture} is not in the preflight's "
                      "table (verified against SGLang 0.5.23); assumed [id + 1], as most classes do.")
    if capture.layer_ids:
        read = f"reads {list(capture.layer_ids)} from {capture.source}"
    else:
        ignored = f" (it does not read {field})" if ids else ""
        read = f"finds no layer ids{ignored} and uses the {capture.source}"
    what = f"{ctx.engine}{runner} {read} and captures the residual stream after layers " \
           f"{eng.describe_positions(capture.requested)}"
    bad = False
    if capture.out_of_range:
        lo, hi = capture.valid
        r.problem(check, "AuxLayerOutOfRange",
                  f"{what}; the target has {n_layers} layers, so only positions {lo}..{hi} exist: "
                  f"{list(capture.out_of_range)} are never captured and the drafter gets {len(capture.captured)} of "
                  f"the {num_aux} states its fc expects (a shape error at the first forward, or garbage).",
                  _fix_for(ctx, trained, n_layers) if trained and all(0 <= p <= hi for p in trained)
                  else "the ids are for a deeper target: use a drafter trained for this one")
        bad = True
    elif len(capture.captured) != num_aux:
        r.problem(check, "AuxLayerCount",
                  f"{what}; de-duplicated that is {len(capture.captured)} states, the drafter's fc expects {num_aux} "
                  "(repeated ids, e.g. the default (2, N//2, N-3) on a shallow target, collapse).",
                  _fix_for(ctx, trained, n_layers) if trained else
                  f"record {num_aux} distinct layer ids in the drafter's config")
        bad = True
    if trained is not None:
        hi_trained = n_layers
        if any(not 0 <= p <= hi_trained for p in trained):
            if not bad:
                r.problem(check, "AuxLayerOutOfRange",
                          f"the drafter records {field} {list(ids or [])} ({convention} convention: positions "
                          f"{list(trained)}), beyond this {n_layers}-layer target: it was trained for another target.",
                          "use a drafter trained for this target")
            bad = True
        elif tuple(sorted(set(trained))) != capture.captured and not bad:
            r.problem(check, "AuxLayerMismatch",
                      f"{what}, but the drafter was trained on positions {eng.describe_positions(trained)} "
                      f"({field} {list(ids or [])} in the {convention} convention"
                      + ("" if ctx.trained_convention else ", inferred from the checkpoint's format") + "). The engine "
                      "accepts this silently and the drafter reads the wrong layers: acceptance collapses "
                      "(one model's position-0 acceptance fell from 45% to 10%).",
                      _fix_for(ctx, trained, n_layers))
            bad = True
        if ctx.engine == "vllm" and not bad:
            other = "v1" if ctx.vllm_runner == "v2" else "v2"
            alt = eng.vllm_capture(ctx.draft, n_layers, other)  # type: ignore[arg-type]
            if alt.captured != capture.captured:
                r.warning(check, "VllmRunnerDiffers",
                          f"with the {other} model runner (VLLM_USE_V2_MODEL_RUNNER={'0' if other == 'v1' else '1'}) "
                          f"vLLM would read {alt.source} and capture {eng.describe_positions(alt.captured)} instead.",
                          _fix_for(ctx, trained, n_layers))
    elif not bad:
        r.warning(check, "AuxLayersNotRecorded",
                  f"the drafter records no eagle_aux_hidden_state_layer_ids: {what} (the engine default). Right only "
                  "if the drafter was trained on those layers.", "record the training layer ids in config.json")
    if ctx.is_speculators is False and field == "eagle_config.eagle_aux_hidden_state_layer_ids" and \
            ctx.raw.get("eagle_aux_hidden_state_layer_ids") and trained is not None:
        top = tuple(ctx.raw["eagle_aux_hidden_state_layer_ids"])
        if tuple(sorted(set(top))) != tuple(sorted(set(trained))):
            r.warning(check, "AuxLayerListsDisagree",
                      f"the top-level eagle_aux_hidden_state_layer_ids {list(top)} (vLLM reads it, as positions) and "
                      f"eagle_config's {list(ids or [])} ({convention}: positions {list(trained)}) disagree.")
    if not bad:
        r.ok(check, f"{what}; the drafter expects {num_aux} states"
                    + (f", trained on {eng.describe_positions(trained)} ({convention} convention)" if trained else ""))
