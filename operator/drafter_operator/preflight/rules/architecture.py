"""architecture: the drafter is the kind of head the method needs, under a class the engine serves."""

from __future__ import annotations

from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.rules.context import Context, Report
from drafter_operator.engines import vllm_loading

CHECK = "architecture"


def head_kind(ctx: Context) -> str:
    """eagle3, eagle or unknown, from the tensors first (fc's input width, d2t), then the names."""
    hidden = ctx.draft_int("hidden_size")
    target_hidden = ctx.draft_int("target_hidden_size") or hidden
    fc = ctx.draft_tensor("fc.weight")
    if fc is not None and len(fc.shape) == 2 and hidden:
        width = fc.shape[1]
        if target_hidden and width >= 3 * target_hidden and width % target_hidden == 0:
            return "eagle3"
        if width == 2 * hidden and ctx.draft_tensor("d2t") is None:
            return "eagle"
    if ctx.draft_tensor("d2t", "t2d", "midlayer.self_attn.q_proj.weight") is not None:
        return "eagle3"
    if ctx.is_speculators:
        kind = str(ctx.raw.get("speculators_model_type"))
        return "eagle3" if kind in ("eagle3", "peagle") else ("eagle" if kind in ("eagle", "hass") else "unknown")
    archs = ctx.raw.get("architectures") or []
    if any("Eagle3" in a or "Peagle" in a or "PEagle" in a for a in archs):
        return "eagle3"
    if any(a.startswith("Eagle") or a.endswith("Eagle") for a in archs):
        return "eagle"
    return "unknown"


def check_architecture(ctx: Context, r: Report) -> None:
    kind = head_kind(ctx)
    ctx.facts["drafter_head"] = kind
    if ctx.is_speculators:
        check_speculators_architecture(ctx, r)
        return
    ctx.facts["drafter_format"] = "hf" if "eagle_config" not in ctx.raw else "hf (SpecForge/SGLang export)"
    archs = ctx.raw.get("architectures") or []
    arch = archs[0] if archs else None
    if not arch:
        r.problem(CHECK, "ArchitectureMissing", "the drafter's config.json has no architectures list: neither "
                  "engine can choose a model class.", "add architectures: [LlamaForCausalLMEagle3] (EAGLE-3)")
        return
    if "model_type" not in ctx.raw:
        r.problem(CHECK, "ModelTypeMissing", f"the drafter's config.json ({arch}) has no model_type: both engines "
                  "read it with transformers' AutoConfig, which refuses it.", 'add "model_type": "llama"')
        return
    if ctx.method == "eagle3":
        check_eagle3_architecture(ctx, r, kind, archs)
    elif ctx.method == "eagle":
        check_eagle_architecture(ctx, r, kind, archs)


def check_speculators_architecture(ctx: Context, r: Report) -> None:
    """A speculators checkpoint: served by vLLM only, with a speculator type and a draft-layer model type vLLM
    maps, under the method it was trained for."""
    raw, engine, method = ctx.raw, ctx.engine, ctx.method
    spec_type = raw.get("speculators_model_type")
    layer = raw.get("transformer_layer_config") or {}
    ctx.facts["drafter_format"] = f"speculators ({spec_type})"
    if ctx.speculators_refused:
        r.problem(CHECK, "SpeculatorsFormatOnSglang",
                  f"the drafter is in the speculators format (speculators_model_type {spec_type!r}, "
                  "no model_type): SGLang 0.5.23 reads draft configs with transformers' AutoConfig "
                  "(hf_transformers/config.py get_config) and refuses it (ValueError: Unrecognized model ... "
                  "Should have a `model_type` key) when its model runner starts.",
                  "serve it with vLLM, or convert it to the HF/SpecForge layout: architectures "
                  "[LlamaForCausalLMEagle3], the transformer_layer_config fields at the top level, "
                  "draft_vocab_size, and eagle_config.eagle_aux_hidden_state_layer_ids in SGLang's convention "
                  "(see the aux-layers check)")
        return
    if spec_type not in eng.VLLM_SPECULATORS_TYPES:
        r.problem(CHECK, "SpeculatorsTypeUnsupported",
                  f"speculators_model_type {spec_type!r}: vLLM 0.33.0 reads only "
                  f"{sorted(eng.VLLM_SPECULATORS_TYPES)} (speculators/algos.py SUPPORTED_SPECULATORS_TYPES) "
                  "and raises ValueError for anything else.",
                  "re-train or convert with a speculator type vLLM serves (eagle3)")
        return
    if method == "eagle3" and spec_type not in ("eagle3", "peagle"):
        r.problem(CHECK, "DrafterMethodMismatch",
                  f"speculators_model_type {spec_type!r} is not an EAGLE-3 head but the method is eagle3.",
                  f"use the method the checkpoint was trained for ({spec_type})")
        return
    if method == "eagle":
        r.problem(CHECK, "Eagle3DrafterAsEagle",
                  f"an EAGLE-3 speculators checkpoint ({spec_type}) with method eagle: vLLM builds the "
                  "Eagle3 head anyway (SpeculatorsConfig) but runs the EAGLE proposer, which feeds it no "
                  "auxiliary hidden states (eagle3_utils.requires_aux_hidden_states is eagle3-only).",
                  "set spec.drafter.method: eagle3")
        return
    model_type = layer.get("model_type", "llama")
    if model_type not in eng.VLLM_SPECULATORS_EAGLE3_MODEL_TYPES:
        r.problem(CHECK, "SpeculatorsModelTypeUnsupported",
                  f"transformer_layer_config.model_type {model_type!r}: vLLM's update_eagle3 maps only "
                  f"{sorted(eng.VLLM_SPECULATORS_EAGLE3_MODEL_TYPES)} and raises ValueError.",
                  "train the draft layer as a llama or qwen3 layer")
        return
    if spec_type == "peagle":
        r.warning(CHECK, "ParallelDrafting", "speculators_model_type peagle: vLLM serves it as eagle3 with "
                  "parallel_drafting, which 0.33.0 runs only on the V1 model runner.")
    r.ok(CHECK, f"speculators {spec_type} checkpoint: vLLM 0.33.0 loads it as "
                f"{eng.VLLM_SPECULATORS_EAGLE3_MODEL_TYPES[model_type]} (SpeculatorsConfig)")


def check_eagle3_architecture(ctx: Context, r: Report, kind: str, archs: list[str]) -> None:
    """Method eagle3 on an HF checkpoint: not an EAGLE head, and a class the engine builds as its EAGLE3 draft (an
    engine that renames config.json's class for the method, vLLM, builds the renamed one)."""
    loading, arch = ctx.checkpoint_loading, archs[0]
    classes = loading.draft_classes["eagle3"]
    if kind == "eagle":
        if loading.renames_draft_class:
            loaded = loading.draft_class(arch, "eagle3", ctx.raw.get("model_type"))
            how = (f"vLLM accepts it as {loaded} (configs/eagle.py EAGLEConfig renames it) and only the weight "
                   "load, after the target's, fails on fc.weight" if loaded in classes
                   else f"vLLM refuses {loaded} (not registered)")
        else:
            how = (f"SGLang does not rename architectures: it would build {arch} as the EAGLE3 draft model, "
                   "which is not an EAGLE-3 head")
        r.problem(CHECK, "EagleDrafterAsEagle3",
                  f"the drafter is an EAGLE (not EAGLE-3) head ({arch}: fc takes [embeddings, hidden] = "
                  f"2 x hidden, no d2t) but the method is eagle3: {how}.",
                  "set spec.drafter.method: eagle (with an architecture the engine serves as EAGLE), or use an "
                  "EAGLE-3 drafter")
        return
    if loading.renames_draft_class:
        loaded = loading.draft_class(arch, "eagle3", ctx.raw.get("model_type"))
        if loaded not in classes:
            r.problem(CHECK, "ArchitectureUnsupported",
                      f"vLLM loads architectures {archs} with method eagle3 as {loaded} "
                      "(configs/eagle.py EAGLEConfig), which vLLM 0.33.0 does not register: "
                      "SpeculativeConfig refuses it.",
                      "use architectures [LlamaForCausalLMEagle3] for a Llama-style EAGLE-3 head")
            return
        r.ok(CHECK, f"{arch} with method eagle3: vLLM loads it as {loaded}")
    else:
        if arch not in classes:
            r.problem(CHECK, "ArchitectureUnsupported",
                      f"SGLang loads the draft under the architecture its config names ({arch}); for EAGLE3 "
                      f"it has {sorted(classes)}: {arch} would load as a "
                      "different model (or fail) after the target has loaded.",
                      "set architectures: [LlamaForCausalLMEagle3] (what `specforge export --to sglang` writes)")
            return
        r.ok(CHECK, f"{arch}: SGLang's EAGLE3 draft class")
    if arch not in eng.LLAMA_STYLE_EAGLE3 and not arch.startswith("Eagle3Llama"):
        r.warning(CHECK, "TensorRulesPartial", f"{arch} is not a Llama-style EAGLE-3 head: the tensor "
                  "checks below assume fc/midlayer/lm_head/d2t names and may not apply.")


def check_eagle_architecture(ctx: Context, r: Report, kind: str, archs: list[str]) -> None:
    """Method eagle on an HF checkpoint: not an EAGLE-3 head, and a class the engine builds as its EAGLE draft (an
    engine that renames config.json's class for the method, vLLM, builds the renamed one)."""
    loading, arch = ctx.checkpoint_loading, archs[0]
    if kind == "eagle3":
        r.problem(CHECK, "Eagle3DrafterAsEagle",
                  f"the drafter is an EAGLE-3 head ({arch}) but the method is eagle: vLLM refuses "
                  f"{vllm_loading.eagle_architecture(arch, 'eagle')} (SpeculativeConfig), SGLang runs it under "
                  "--speculative-algorithm EAGLE without the auxiliary hidden states it was trained on "
                  "(about 1 token per step).",
                  "set spec.drafter.method: eagle3")
        return
    classes = loading.draft_classes["eagle"]
    if loading.renames_draft_class:
        loaded = loading.draft_class(arch, "eagle", ctx.raw.get("model_type"))
        if loaded not in classes:
            r.problem(CHECK, "ArchitectureUnsupported",
                      f"vLLM loads {archs} with method eagle as {loaded}, which 0.33.0 does not register.",
                      "use architectures [LlamaForCausalLM] (vLLM prefixes Eagle) for a Llama EAGLE head")
            return
        r.ok(CHECK, f"{arch} with method eagle: vLLM loads it as {loaded}")
    else:
        if arch not in classes:
            r.problem(CHECK, "ArchitectureUnsupported",
                      f"SGLang loads the draft as {arch}; its EAGLE draft classes are "
                      f"{sorted(classes)}.",
                      "set architectures: [LlamaForCausalLMEagle]")
            return
        r.ok(CHECK, f"{arch}: SGLang's EAGLE draft class")
