"""mtp-head: the target ships the multi-token-prediction layers method mtp drafts with."""

from __future__ import annotations

from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.rules.context import Context, Report


def check_mtp(ctx: Context, r: Report) -> None:
    check = "mtp-head"
    config = ctx.target_config
    counts = {k: config.get(k) for k in eng.MTP_LAYER_KEYS if isinstance(config.get(k), int)}
    layers = max(counts.values(), default=0)
    ctx.facts["target_mtp_layers"] = layers
    if layers <= 0:
        r.problem(check, "TargetHasNoMtpHead",
                  f"method mtp drafts with the target's own multi-token-prediction layers, but the target's "
                  f"config ({ctx.target_architecture}) declares none ("
                  + (", ".join(f"{k}={v}" for k, v in counts.items()) or "no " + " / ".join(eng.MTP_LAYER_KEYS))
                  + ").", "use a checkpoint that ships its MTP layers (DeepSeek-V3 style: num_nextn_predict_layers "
                  "> 0), or an EAGLE-3 drafter")
        return
    n_layers = ctx.target_int("num_hidden_layers")
    if "num_nextn_predict_layers" in counts and n_layers is not None and ctx.target.tensors:
        missing = [i for i in range(counts["num_nextn_predict_layers"])
                   if not any(name.startswith(eng.mtp_layer_weight_prefixes(n_layers, i)) for name in ctx.target.tensors)]
        if missing:
            r.problem(check, "MtpWeightsMissing",
                      f"the target declares num_nextn_predict_layers={counts['num_nextn_predict_layers']} but its "
                      f"safetensors hold no weights for layer(s) {[n_layers + i for i in missing]} "
                      "(model.layers.<num_hidden_layers + i>.*): the MTP head was stripped from this checkpoint.",
                      "use the full checkpoint with its MTP layer, or an EAGLE-3 drafter")
            return
        r.ok(check, f"target ships {layers} MTP layer(s) with weights at layer {n_layers}")
        return
    r.ok(check, f"target declares {layers} MTP layer(s) ({', '.join(counts)})"
                + ("" if ctx.target.tensors else "; its weights were not checked (no safetensors)"))
