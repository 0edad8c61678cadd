"""mtp-head: the target ships the multi-token-prediction layers method mtp drafts with."""

from __future__ import annotations

from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.rules.context import Context, Report


def check_mtp_target(ctx: Context, r: Report) -> None:
    """The engine makes an MTP model of the target's layers (vLLM) or drafts from the target itself when no draft
    path is given (SGLang NEXTN)."""
    check, arch, loading = "mtp-target", ctx.target_architecture, ctx.checkpoint_loading
    if loading.mtp_variant is not None:
        _check_mtp_variant(ctx, r)
        return
    if arch not in loading.nextn_target_classes:
        r.warning(check, "NextnDraftPathNotDefaulted",
                  f"SGLang uses the target as its own NEXTN draft only for {sorted(loading.nextn_target_classes)} "
                  f"(arg_groups/speculative_hook.py:1120-1148); for {arch} it needs a draft model path.",
                  "set spec.drafter.model to the target's own path")
        return
    r.ok(check, f"SGLang drafts NEXTN with the target ({arch}) itself")


def _check_mtp_variant(ctx: Context, r: Report) -> None:
    """An engine that makes an MTP model of the target's layers (its record's ``mtp_variant``, vLLM's): one exists
    for the target."""
    check, model_type, arch = "mtp-target", ctx.target_config.get("model_type"), ctx.target_architecture
    loading = ctx.checkpoint_loading
    if model_type in loading.mtp_refused_model_types:
        r.problem(check, "MtpVariantRefused",
                  f"the target's model_type {model_type!r} ships DSpark stages, not a classic MTP head: vLLM "
                  "0.33.0 refuses method mtp for it (config/speculative.py:1474-1485).",
                  f"set spec.drafter.method: {loading.mtp_refused_model_types[model_type]}")
        return
    variant = loading.mtp_variant(model_type, arch)
    ctx.facts["vllm_mtp_variant"] = variant
    if variant is None and model_type in loading.mtp_unmapped_model_types:
        r.problem(check, "MtpVariantMissing",
                  f"vLLM 0.33.0 has no MTP variant for the target's model_type {model_type!r} ({arch}): "
                  "hf_config_override (config/speculative.py:711-1182) leaves it as it is, and SpeculativeConfig "
                  "raises NotImplementedError(\"Unsupported speculative method: 'mtp'\") at engine start "
                  "(config/speculative.py:1496-1501).",
                  "serve mtp on SGLang (NEXTN), or use method eagle3 with an EAGLE-3 drafter")
        return
    if variant is None:
        r.warning(check, "MtpVariantUnverified",
                  f"the target's model_type {model_type!r} ({arch}) is not in the preflight's table of vLLM "
                  "0.33.0's MTP variants (config/speculative.py:711-1182): vLLM refuses mtp unless it maps it.")
        return
    r.ok(check, f"vLLM serves the target's MTP layers as {variant}")


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
