"""Block drafters' fields (methods dflash and dspark): target layers, block size, hidden width, the DSpark
Markov head, vLLM's DFlash attention mask, and a target's bundled DSpark head (the engine facts, each with its
source line, are the engine's CHECKPOINT_LOADING record: engines/vllm_loading.py, engines/sglang_loading.py)."""

from __future__ import annotations

from drafter_operator.families import family
from drafter_operator.preflight import families as fam
from drafter_operator.preflight.rules.block import as_int, block_view, unreadable
from drafter_operator.preflight.rules.context import Context, Report
from drafter_operator.engines import sglang_loading


def check_target_layers(ctx: Context, r: Report) -> None:
    """The target layers the drafter reads exist in this target, as the engine numbers them (its
    block_target_layers: vLLM positions 0..N, SGLang ids 0..N-1)."""
    if unreadable(ctx):
        return
    check, view = "target-layers", block_view(ctx) or {}
    n = ctx.target_int("num_hidden_layers")
    if n is None:
        r.warning(check, "TargetLayersUnknown", "the target's config has no num_hidden_layers: layer ids not checked.")
        return
    loading = ctx.checkpoint_loading
    read = loading.block_target_layers(view, ctx.method, n)
    ids, field, valid, where = read.ids, read.field, read.valid, read.rule
    if loading.requires_draft_num_hidden_layers and view.get("num_hidden_layers") is None:
        r.problem(check, "DraftLayersMissing", "the drafter's config has no num_hidden_layers: SGLang requires it "
                  "(dflash_utils.py:545-551 require_num_layers, at startup).", "add num_hidden_layers")
        return
    ctx.facts["block_layers"] = {"target_layers": n, "field": field or None, "read": list(ids) if ids else None}
    if not ids:
        r.warning(check, "TargetLayersNotRecorded", f"the drafter records no target_layer_ids: {ctx.engine} picks "
                  "its own default layers; right only if the drafter was trained on them.",
                  "record dflash_config.target_layer_ids (0-based target layer outputs)")
        return
    bad = [i for i in ids if not (as_int(i) is not None and valid[0] <= i <= valid[1])]
    if bad:
        r.problem(check, "TargetLayerOutOfRange",
                  f"{field} {list(ids)} reads {bad}, outside this {n}-layer target: {where}. The drafter was "
                  "trained on a deeper target.", "train the drafter against this target (or point --target at the "
                  "model it was trained for)")
        return
    r.ok(check, f"{field} {list(ids)} within the target's {n} layers ({ctx.engine})")


def check_block_size(ctx: Context, r: Report) -> None:
    """The block the drafter was trained with: readable, and what numSpeculativeTokens should be."""
    if unreadable(ctx):
        return
    # What the drafter was trained with, as recorded (vLLM's speculators conversion drops block_size).
    check, view = "block-size", ctx.raw if ctx.is_speculators else (block_view(ctx) or {})
    if ctx.method == "dspark":
        size = sglang_loading.dspark_fields(view)["block_size"]
    else:
        size = sglang_loading.dflash_fields(view)["block_size"]
    ctx.facts["block_size"] = size
    if size is None:
        r.warning(check, "BlockSizeUnknown", "the drafter records no block_size: numSpeculativeTokens cannot be "
                  "checked against the block it was trained with.", "record block_size in config.json")
        return
    # The block's queries beyond the k drafts (DFlash's anchor): a block holds them and at least one draft.
    extra = family(ctx.method).block_extra_queries
    if as_int(size) is None or size < extra + 1:
        r.problem(check, "BlockSizeInvalid", f"block_size {size!r} is not a usable block: SGLang parses it as a "
                  "positive int (dflash_utils.py:609-617) and a DFlash block holds the anchor plus at least one draft.",
                  "record the block size the drafter was trained with")
        return
    k = size - extra
    given = ctx.num_speculative_tokens
    if given is not None and given != k:
        r.warning(check, "BlockSizeMismatch",
                  f"numSpeculativeTokens {given} but the drafter was trained on blocks of {size} ({k} drafts): both "
                  "engines serve the block the flag asks for without complaint (SGLang only logs a DSpark gamma "
                  "mismatch, dspark_config.py:108-117), and drafts past the trained block are positions the "
                  "drafter never learned.", f"set spec.drafter.numSpeculativeTokens: {k}")
        return
    r.ok(check, f"trained block_size {size}: serve it with numSpeculativeTokens {k} "
                f"({'the anchor + k drafts' if extra else 'k drafts'} per block)")


def check_block_hidden(ctx: Context, r: Report) -> None:
    """The drafter's fc takes target hidden states of the target's width."""
    if unreadable(ctx):
        return
    view = block_view(ctx) or {}
    fed = as_int(view.get("target_hidden_size")) or as_int(view.get("hidden_size"))
    target = ctx.target_int("hidden_size")
    if fed is None or target is None:
        r.warning("hidden-size", "HiddenSizeUnknown", f"hidden sizes unknown (drafter {fed}, target {target}).")
        return
    if fed != target:
        r.problem("hidden-size", "HiddenSizeMismatch",
                  f"the drafter takes target hidden states of width {fed} (target_hidden_size, else hidden_size) but "
                  f"the target's hidden_size is {target}: both engines size fc from the drafter config "
                  "(vLLM qwen3_dflash.py:84-93) and fail at the first forward.",
                  "train the drafter against this target")
        return
    r.ok("hidden-size", f"drafter fed target width {fed}")


def check_markov(ctx: Context, r: Report) -> None:
    """DSpark's Markov head: where the engine reads markov_rank and which head types it builds."""
    if unreadable(ctx):
        return
    view = block_view(ctx) or {}
    if ctx.checkpoint_loading.reads_markov_head_nested:
        _sglang_markov(ctx, r, view)
    else:
        _vllm_markov(ctx, r, view)


def _sglang_markov(ctx: Context, r: Report, view: dict) -> None:
    """An engine that reads the head from dflash_config/dspark_config and the dspark_* keys (SGLang)."""
    fields = sglang_loading.dspark_fields(view)
    rank, head = fields["markov_rank"], fields["markov_head_type"]
    head_types = ctx.checkpoint_loading.markov_head_types
    if rank <= 0:
        r.problem("markov-head", "MarkovRankMissing", f"markov_rank is {rank}: SGLang's DSpark requires markov_rank "
                  "> 0 (dspark_config.py:94-98 resolve_runtime_config).",
                  "record dflash_config.markov_rank the drafter was trained with")
    elif head is None and not fields["prefixed"]:
        r.problem("markov-head", "MarkovHeadTypeMissing", "markov_rank is set but markov_head_type is not: SGLang "
                  "raises ValueError (dspark_config.py:265-268).", "record dflash_config.markov_head_type")
    elif head is not None and str(head).lower() not in head_types:
        r.problem("markov-head", "MarkovHeadUnsupported", f"markov_head_type {head!r}: SGLang builds "
                  f"{list(head_types)} (dspark_config.py:22, 269-275).", "use one of those heads")
    else:
        r.ok("markov-head", f"markov_rank {rank}, head {head or 'from the dspark_* keys'} (SGLang)")


def _vllm_markov(ctx: Context, r: Report, view: dict) -> None:
    """An engine whose DSpark classes read the head at config.json's top level (vLLM's Qwen3DSparkModel)."""
    loading = ctx.checkpoint_loading
    arch = loading.draft_class((view.get("architectures") or [""])[0], ctx.method, view.get("model_type"))
    if arch not in loading.top_level_markov_classes:
        return  # other classes read their own fields (the architecture check covers them)
    nested = {**fam.nested(view, "dflash_config"), **fam.nested(view, "dspark_config")}
    head = view.get("markov_head_type", nested.get("markov_head_type"))
    if view.get("markov_rank") is None:
        if nested.get("markov_rank") is not None:
            keys = [k for k in ("markov_rank", "markov_head_type", "enable_confidence_head",
                                "confidence_head_with_markov") if k in nested and k not in view]
            r.problem("markov-head", "MarkovRankNotTopLevel",
                      f"markov_rank is nested in dflash_config (SpecForge's DSpark export) but vLLM 0.33.0's "
                      "Qwen3DSparkModel reads config.markov_rank at the top level (models/qwen3_dspark.py:209-213) "
                      "and fails with AttributeError after the target has loaded; it reads enable_confidence_head "
                      "and confidence_head_with_markov at the top level too (:220-224), so nested ones are ignored.",
                      f"copy {', '.join(keys)} from dflash_config to the top level of config.json, or serve it with "
                      "SGLang (which reads dflash_config)")
        else:
            r.problem("markov-head", "MarkovRankMissing", "the drafter has no markov_rank: vLLM's Qwen3DSparkModel "
                      "reads config.markov_rank (models/qwen3_dspark.py:209-213) and fails with AttributeError.",
                      "record markov_rank at the top level of config.json")
        return
    if head is not None and str(head).lower() not in loading.markov_head_types:
        r.problem("markov-head", "MarkovHeadUnsupported",
                  f"markov_head_type {head!r}: vLLM 0.33.0 builds only the low-rank (vanilla) DSparkMarkovHead "
                  "whatever the config says (models/qwen3_dspark.py:209-218); the trained head is not served.",
                  "serve a gated or rnn head with SGLang (dspark_config.py:22), or train a vanilla head")
        return
    r.ok("markov-head", f"markov_rank {view['markov_rank']} at the top level (vLLM)")


def check_dflash_attention(ctx: Context, r: Report) -> None:
    """vLLM's DFlash: the anchor layout it serves and the attention mask it builds per draft layer."""
    if not ctx.checkpoint_loading.dflash_layout_limits or unreadable(ctx):
        return
    check, view, raw = "attention", block_view(ctx) or {}, ctx.raw
    if fam.nested(view, "dflash_config").get("sample_from_anchor", False):
        r.problem(check, "SampleFromAnchorUnsupported", "dflash_config.sample_from_anchor is true: vLLM's DFlash "
                  "serves only the anchor-as-bonus layout and raises ValueError "
                  "(v1/worker/gpu/spec_decode/dflash/speculator.py:80-90).",
                  "serve it with method dspark (which samples from the anchor) or with SGLang")
        return
    layer_types = view.get("layer_types") or []
    sliding = sum(t == "sliding_attention" for t in layer_types)
    if 0 < sliding < len(layer_types) and ctx.vllm_runner == "v1":
        r.problem(check, "MixedAttentionNeedsV2Runner", "the drafter mixes sliding and full attention layers: vLLM's "
                  "V1 model runner refuses it (models/qwen3_dflash.py:127-137).", "unset VLLM_USE_V2_MODEL_RUNNER=0")
        return
    full = len(layer_types) - sliding if layer_types else 1
    if ctx.is_speculators and raw.get("sliding_window_non_causal") is False and full:
        r.problem(check, "DFlashCausalMismatch",
                  "sliding_window_non_causal is false: vLLM sets dflash_config.causal = true from it "
                  "(speculators/algos.py:124-126), which makes every draft layer causal (models/qwen3_dflash.py:62-73), "
                  "but speculators trains full-attention layers bidirectionally whatever that flag says "
                  "(speculators/models/dflash/attention.py:43): the full-attention layers are served with a mask "
                  "they were not trained with.",
                  "if every draft layer is full attention, set sliding_window_non_causal: true in config.json; "
                  "otherwise export the HF layout (dflash_config without causal, with layer_types)")
        return
    r.ok(check, "the draft layers' attention mask is the one they were trained with (vLLM)")


def check_bundled_dspark(ctx: Context, r: Report) -> None:
    """Method dspark with no drafter: the target must carry its own DSpark head."""
    ok, why = ctx.checkpoint_loading.bundled_dspark_head(ctx.target.path, ctx.target.config or {}, ctx.target_config)
    if not ok:
        r.problem("dspark-bundled", "NoBundledDSpark", f"method dspark with no drafter checkpoint: {why}.",
                  "set spec.drafter.model to a DSpark drafter trained for this target")
        return
    r.ok("dspark-bundled", f"the target carries its DSpark head ({ctx.engine})")
