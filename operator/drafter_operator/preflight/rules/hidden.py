"""hidden-size: the drafter is fed target hidden states of the width it was built for (fc, the draft layer)."""

from __future__ import annotations

from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.rules.context import Context, Report, shape


def check_hidden(ctx: Context, r: Report) -> None:
    check = "hidden-size"
    hidden = ctx.draft_int("hidden_size")
    target_hidden = ctx.target_int("hidden_size")
    declared_target = ctx.draft_int("target_hidden_size")
    if hidden is None or target_hidden is None:
        r.warning(check, "HiddenSizeUnknown",
                  f"hidden_size missing (drafter {hidden}, target {target_hidden}): the hidden-size checks are skipped.")
        return
    ctx.facts.update(drafter_hidden_size=hidden, target_hidden_size=target_hidden)
    fed = declared_target or hidden  # what the engines size fc's input from
    bad = False
    if fed != target_hidden:
        where = "target_hidden_size" if declared_target else "hidden_size (no target_hidden_size)"
        r.problem(check, "HiddenSizeMismatch",
                  f"the drafter expects target hidden states of width {fed} ({where}) but the target's hidden_size "
                  f"is {target_hidden}: both engines size fc from the drafter config (target_hidden_size, else "
                  "hidden_size), load the weights without complaint, and fail at the first forward. The drafter was "
                  "built for another target.",
                  "train the drafter against this target (or point --target at the model it was trained for)")
        bad = True
    embed = ctx.draft_tensor("embed_tokens.weight")
    if hidden != target_hidden and embed is None:
        r.problem(check, "HiddenSizeMismatch",
                  f"drafter hidden_size {hidden} differs from the target's {target_hidden} and the drafter ships no "
                  f"embed_tokens, so it gets the target's embeddings (width {target_hidden}): its first layer "
                  "concatenates embeddings and hidden states of different widths and fails (vLLM llama_eagle3.py "
                  "LlamaModel.forward asserts equal widths).",
                  "ship embed_tokens of width hidden_size, or train with hidden_size equal to the target's")
        bad = True
    if ctx.method == "eagle3" and ctx.has_tensors:
        bad |= _check_fc(ctx, r, check, hidden, fed)
        q = ctx.draft_tensor("midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight")
        if q is not None and len(q.shape) == 2 and q.shape[1] != 2 * hidden:
            r.problem(check, "DraftLayerShape",
                      f"{q.name} is {shape(q)}: an EAGLE-3 draft layer takes [embeddings, hidden] = 2 x {hidden} "
                      f"= {2 * hidden} inputs (llama_eagle3.py LlamaDecoderLayer builds qkv_proj with 2 x "
                      "hidden_size in both engines); the weight load fails.",
                      "check hidden_size in config.json against the exported weights")
            bad = True
    elif ctx.method == "eagle" and ctx.has_tensors:
        fc = ctx.draft_tensor("fc.weight")
        if fc is not None and tuple(fc.shape) != (hidden, 2 * hidden):
            r.problem(check, "FcShape", f"fc.weight is {shape(fc)}; an EAGLE head's fc maps [embeddings, hidden] = "
                      f"{2 * hidden} to {hidden} (vLLM llama_eagle.py, SGLang llama_eagle.py): the load fails.",
                      "check hidden_size against the exported weights")
            bad = True
    if not bad:
        r.ok(check, f"drafter hidden {hidden}, fed target states of width {fed} = target hidden_size {target_hidden}")


def _check_fc(ctx: Context, r: Report, check: str, hidden: int, fed: int) -> bool:
    if not eng.uses_aux_hidden_states(ctx.draft):
        ctx.facts["aux_hidden_states"] = False
        return False
    fc = ctx.draft_tensor("fc.weight")
    num_aux = eng.num_aux_hidden_states(ctx.draft)
    expected = (hidden, fed * num_aux)
    ctx.facts["fc_expected"] = list(expected)
    if fc is None:
        r.problem(check, "FcMissing",
                  "the EAGLE-3 drafter has no fc.weight: it projects the concatenated target states "
                  f"({num_aux} x {fed}) to {hidden}; without it the engines run an uninitialised projection.",
                  "re-export the drafter with fc.weight (SpecForge export requires it)")
        return True
    if tuple(fc.shape) != expected:
        why = (f"{num_aux} auxiliary states (num_aux_hidden_states, else the length of "
               "eagle_config.eagle_aux_hidden_state_layer_ids, else 3)")
        trained_aux = fc.shape[1] / fed if len(fc.shape) == 2 else None
        r.problem(check, "FcShape",
                  f"fc.weight is {shape(fc)} but the engines build fc as [{hidden}, {fed} x {num_aux}] = "
                  f"{list(expected)} from the config ({why}): the weight load refuses it after the target has "
                  "loaded (a weight-loader shape assertion in both engines)"
                  + (f"; fc was trained on {trained_aux:g} states of width {fed}" if trained_aux else "") + ".",
                  "make num_aux_hidden_states / eagle_config.eagle_aux_hidden_state_layer_ids (and hidden_size) "
                  "match the exported fc, or re-export")
        return True
    return False
