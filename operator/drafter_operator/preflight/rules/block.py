"""Block drafters (methods dflash and dspark): the class each engine builds, the mask token, the target
layers, the block size and the hidden width, as vLLM 0.33.0 and SGLang 0.5.23 read them (the engine's
CHECKPOINT_LOADING record: engines/vllm_loading.py, engines/sglang_loading.py; the speculators format:
preflight/families.py)."""

from __future__ import annotations

from typing import Any

from drafter_operator.preflight import families as fam
from drafter_operator.preflight.rules.context import Context, Report
from drafter_operator.engines import sglang_loading

SPECULATORS_KINDS = {"dflash": ("dflash", "dflash2"), "dspark": ("dspark",)}


def block_view(ctx: Context) -> dict[str, Any] | None:
    """The drafter's config as the engine reads it: an engine that reads the speculators format (vLLM) converts a
    speculators config (algos.py); both engines read an HF config as is. None when vLLM's conversion itself raises
    (a required key missing)."""
    if ctx.is_speculators and not ctx.speculators_refused:
        try:
            return fam.speculators_as_vllm_block_config(ctx.raw)
        except KeyError:
            return None
    return ctx.raw


def unreadable(ctx: Context) -> bool:
    """The engine cannot read the drafter's config at all (the architecture check says why): the field
    checks have nothing to check."""
    return ctx.speculators_refused or (ctx.is_speculators and block_view(ctx) is None)


def drafter_kind(raw: dict) -> str | None:
    """dspark, dflash or None, from what the checkpoint says it is (speculators type, class, DSpark fields)."""
    spec_type = raw.get("speculators_model_type")
    if spec_type is not None:
        return next((k for k, kinds in SPECULATORS_KINDS.items() if spec_type in kinds), None)
    archs = " ".join(raw.get("architectures") or [])
    merged = {**fam.nested(raw, "dflash_config"), **fam.nested(raw, "dspark_config")}
    if "DSpark" in archs or merged.get("projector_type") == "dspark" or "markov_rank" in merged \
            or "markov_rank" in raw or any(k in raw for k in sglang_loading.BUNDLED_DSPARK_KEYS):
        return "dspark"
    if "DFlash" in archs or "dflash_config" in raw:
        return "dflash"
    return None


def check_block_architecture(ctx: Context, r: Report) -> None:
    check, raw, method = "architecture", ctx.raw, ctx.method
    kind = drafter_kind(raw)
    ctx.facts["drafter_head"] = kind or "unknown"
    ctx.facts["drafter_format"] = f"speculators ({raw['speculators_model_type']})" if ctx.is_speculators else "hf"
    if kind is not None and kind != method:
        r.problem(check, "DrafterMethodMismatch",
                  f"the drafter is a {kind} checkpoint ({_what(raw)}) but the method is {method}: the engine would "
                  f"build the {method} drafter over weights trained for another head.",
                  f"set spec.drafter.method: {kind}")
        return
    if ctx.is_speculators:
        _check_speculators(ctx, r)
        return
    archs = raw.get("architectures") or []
    if not archs:
        r.problem(check, "ArchitectureMissing", "the drafter's config.json has no architectures list: neither engine "
                  "can choose a model class.", f"add architectures: [{_default_arch(method)}]")
        return
    if "model_type" not in raw:
        r.problem(check, "ModelTypeMissing", f"the drafter's config.json ({archs[0]}) has no model_type: both engines "
                  "read it with transformers' AutoConfig, which refuses it.", 'add "model_type": "qwen3"')
        return
    if ctx.checkpoint_loading.renames_draft_class:
        _check_vllm_class(ctx, r, archs[0])
    else:
        _check_sglang_class(ctx, r, archs[0])


def _what(raw: dict) -> str:
    if "speculators_model_type" in raw:
        return f"speculators_model_type {raw['speculators_model_type']!r}"
    return f"architectures {raw.get('architectures')}"


def _default_arch(method: str) -> str:
    return "DFlashDraftModel" if method == "dflash" else "DSparkDraftModel"


def _check_speculators(ctx: Context, r: Report) -> None:
    check, raw = "architecture", ctx.raw
    spec_type = raw.get("speculators_model_type")
    if ctx.speculators_refused:
        r.problem(check, "SpeculatorsFormatOnSglang",
                  f"the drafter is in the speculators format (speculators_model_type {spec_type!r}): SGLang 0.5.23 "
                  "reads the draft with transformers' AutoConfig and never reads speculators_model_type (no code in "
                  "sglang/srt does); the config has no model_type, so it is refused when the model runner starts.",
                  "serve it with vLLM, or export it in the HF layout SGLang reads (architectures "
                  f"[{_default_arch(ctx.method)}], model_type qwen3, dflash_config with mask_token_id and "
                  "target_layer_ids)")
        return
    if spec_type not in SPECULATORS_KINDS[ctx.method]:
        r.problem(check, "DrafterMethodMismatch", f"speculators_model_type {spec_type!r} is not a {ctx.method} "
                  "drafter.", "set spec.drafter.method to the family the checkpoint was trained for")
        return
    missing = [k for k in fam.speculators_required_keys(spec_type) if raw.get(k) is None]
    if missing:
        r.problem(check, "SpeculatorsFieldMissing",
                  f"the speculators config has no {' or '.join(missing)}: vLLM's update_{spec_type} "
                  "(transformers_utils/configs/speculators/algos.py:114-119 update_dflash, :192 update_dspark) "
                  "indexes them and raises KeyError while building the SpeculativeConfig.",
                  f"add {', '.join(missing)} to config.json (speculators writes them when it exports)")
        return
    view = block_view(ctx) or {}
    r.ok(check, f"speculators {spec_type} checkpoint: vLLM 0.33.0 loads it as {view.get('architectures')}")


def _check_vllm_class(ctx: Context, r: Report, arch: str) -> None:
    """An engine that renames config.json's class for the method (vLLM): the class it builds, registered, and for
    dspark the separate draft the checkpoint holds."""
    check, loading = "architecture", ctx.checkpoint_loading
    loaded = loading.draft_class(arch, ctx.method, ctx.raw.get("model_type"))
    if ctx.method == "dflash":
        if loaded not in loading.draft_classes[ctx.method]:
            r.problem(check, "ArchitectureUnsupported",
                      f"vLLM renames {arch} to {loaded} for method dflash (configs/eagle.py EAGLEConfig), which 0.33.0 "
                      "does not register (model_executor/models/registry.py:664-697): SpeculativeConfig refuses it.",
                      "set architectures: [DFlashDraftModel] (what SpecForge and speculators export)")
            return
        r.ok(check, f"{arch} with method dflash: vLLM builds {loaded}")
        return
    if loaded not in loading.draft_classes[ctx.method]:
        r.problem(check, "DSparkArchitectureRewritten",
                  f"vLLM 0.33.0 serves a separate DSpark draft only as {sorted(loading.draft_classes[ctx.method])} or "
                  f"DSparkDraftModel with model_type qwen3; it rewrites {arch} (model_type "
                  f"{ctx.raw.get('model_type')!r}) to DeepSeek-V4's bundled DSparkDraftModel with model_type "
                  "deepseek_v4 (config/speculative.py:1542-1567), a different model than the checkpoint holds.",
                  "set architectures: [Qwen3DSparkModel] (a Qwen3-layer DSpark draft), or serve it with SGLang")
        return
    r.ok(check, f"{arch} with method dspark: vLLM builds {loaded}")


def _check_sglang_class(ctx: Context, r: Report, arch: str) -> None:
    """An engine that builds the class config.json names (SGLang): one of its classes for the method."""
    table = ctx.checkpoint_loading.draft_classes[ctx.method]
    if arch not in table:
        source = "models/dflash.py:1317-1324" if ctx.method == "dflash" else "models/dspark.py:995"
        r.problem("architecture", "ArchitectureUnsupported",
                  f"SGLang builds the draft class config.json names ({arch}); its {ctx.method.upper()} classes are "
                  f"{sorted(table)} ({source} EntryClass).", f"set architectures: [{_default_arch(ctx.method)}]")
        return
    r.ok("architecture", f"{arch}: SGLang's {ctx.method.upper()} draft class")


def as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def check_mask_token(ctx: Context, r: Report) -> None:
    """The token the drafter fills its block with: present where the engine requires it, inside the vocab."""
    if unreadable(ctx):
        return
    check, view = "mask-token", block_view(ctx) or {}
    read = ctx.checkpoint_loading.mask_token(view, ctx.method)
    value, field = read.value, read.field
    required, where = read.required_by is not None, read.required_by or ""
    ctx.facts["mask_token_id"] = value
    if value is None:
        if required:
            r.problem(check, "MaskTokenMissing", f"the drafter records no mask token id: {ctx.engine} requires one "
                      f"for {ctx.method} ({where}).", "add dflash_config.mask_token_id (the id the drafter was "
                      "trained with, e.g. the tokenizer's <|MASK|> or an unused special token)")
        else:
            r.warning(check, "MaskTokenFromTokenizer",
                      "no mask_token_id: SGLang looks dflash_config.mask_token (default <|MASK|>) up in the target's "
                      "tokenizer and adds it when absent (dflash_worker_v2.py:1424-1460): right only if the drafter "
                      "was trained with that token's id.", "record dflash_config.mask_token_id")
        return
    vocab = ctx.target_int("vocab_size")
    if as_int(value) is None or value < 0 or (vocab is not None and value >= vocab):
        r.problem(check, "MaskTokenOutOfVocab",
                  f"{field}={value!r} is not a token id of the target (vocab_size {vocab}): SGLang refuses it "
                  "(dflash_worker_v2.py:1400-1408, dspark_config.py:123-128) and vLLM embeds it as an input token.",
                  "set the mask token id the drafter was trained with, below the target's vocab_size")
        return
    r.ok(check, f"{field}={value} (target vocab {vocab})")
