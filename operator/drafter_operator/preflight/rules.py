"""The preflight rules: pure functions of the drafter and target checkpoints, the engine and the method.

Each rule adds findings to a `Report`: a problem when the engine would refuse the drafter after its
model load or serve it with collapsed acceptance, a warning when something deserves a look, an ok
line with what was verified. The engine facts each rule relies on are in engines.py and
docs/preflight.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from drafter_operator.preflight import engines as eng
from drafter_operator.preflight.checkpoint import Checkpoint
from drafter_operator.preflight.safetensors import INTEGER_DTYPES, SafetensorsError, TensorInfo, read_integers
from drafter_operator.preflight.verdict import Finding

EAGLE_METHODS = ("eagle3", "eagle")
CHECKED_METHODS = ("eagle3", "eagle", "mtp")
MAPPING_READ_LIMIT = 64 * 1024 * 1024


@dataclass
class Context:
    engine: str
    method: str
    target: Checkpoint
    drafter: Checkpoint | None
    trained_convention: str | None = None  # as given; None: inferred from the checkpoint's format
    vllm_runner: str = "v2"
    facts: dict[str, Any] = field(default_factory=dict)

    # -- the drafter as the engine sees it ---------------------------------------------------------
    @property
    def raw(self) -> dict[str, Any]:
        return (self.drafter.config if self.drafter else None) or {}

    @property
    def is_speculators(self) -> bool:
        return "speculators_model_type" in self.raw

    @property
    def draft(self) -> dict[str, Any]:
        """The drafter's config as vLLM reads it (speculators: the transformer_layer_config view)."""
        return eng.speculators_as_vllm_config(self.raw) if self.is_speculators else self.raw

    @property
    def target_config(self) -> dict[str, Any]:
        return self.target.text_config()

    @property
    def target_architecture(self) -> str | None:
        archs = (self.target.config or {}).get("architectures") or []
        return archs[0] if archs else None

    def target_int(self, key: str) -> int | None:
        value = self.target_config.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def draft_int(self, key: str) -> int | None:
        value = self.draft.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def draft_tensor(self, *names: str) -> TensorInfo | None:
        if self.drafter is None:
            return None
        for name in names:
            for candidate in (name, "model." + name):
                if candidate in self.drafter.tensors:
                    return self.drafter.tensors[candidate]
        return None

    @property
    def has_tensors(self) -> bool:
        return bool(self.drafter and self.drafter.tensors)


class Report:
    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def problem(self, check: str, reason: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(check, "problem", reason, message, fix))

    def warning(self, check: str, reason: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(check, "warning", reason, message, fix))

    def ok(self, check: str, message: str) -> None:
        self.findings.append(Finding(check, "ok", "", message))


def shape(t: TensorInfo | None) -> str:
    return "absent" if t is None else f"{t.dtype}{list(t.shape)}"


# ---------------------------------------------------------------------------------------------------
# checkpoint-files


def check_files(ctx: Context, r: Report) -> bool:
    """Readable configs and weight headers. Returns False when nothing else can be checked."""
    fatal = False
    for role, ckpt in (("target", ctx.target), ("drafter", ctx.drafter)):
        if ckpt is None:
            continue
        for error in ckpt.errors:
            if ckpt.config is None:
                fatal = True
            r.problem("checkpoint-files", "CheckpointUnreadable", f"{role}: {error}.",
                      f"point --{role} at the checkpoint directory holding config.json and the *.safetensors "
                      "files (and their *.safetensors.index.json when sharded)")
    if ctx.drafter is not None and ctx.drafter.config is not None and not ctx.drafter.errors:
        if not ctx.drafter.tensors:
            other = ", ".join(ctx.drafter.other_weights[:3])
            r.warning("checkpoint-files", "NoSafetensors",
                      f"drafter {ctx.drafter.path} has no *.safetensors files"
                      + (f" (found {other}: not read, pickled weights cannot be inspected cheaply)" if other else "")
                      + ": the tensor checks (fc, lm_head, d2t) are skipped.",
                      "export the drafter as safetensors (SpecForge `specforge export`, speculators checkpoints are)")
        else:
            r.ok("checkpoint-files", f"drafter: config.json and {len(ctx.drafter.tensors)} tensors in "
                                     f"{len(ctx.drafter.weight_files)} safetensors file(s) (headers only)")
    if ctx.target.config is not None and not ctx.target.errors:
        r.ok("checkpoint-files", f"target: config.json, {len(ctx.target.tensors)} tensors")
    return not fatal


# ---------------------------------------------------------------------------------------------------
# architecture


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
    check = "architecture"
    raw, engine, method = ctx.raw, ctx.engine, ctx.method
    kind = head_kind(ctx)
    ctx.facts["drafter_head"] = kind
    archs = raw.get("architectures") or []
    arch = archs[0] if archs else None
    if ctx.is_speculators:
        spec_type = raw.get("speculators_model_type")
        layer = raw.get("transformer_layer_config") or {}
        ctx.facts["drafter_format"] = f"speculators ({spec_type})"
        if engine == "sglang":
            r.problem(check, "SpeculatorsFormatOnSglang",
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
            r.problem(check, "SpeculatorsTypeUnsupported",
                      f"speculators_model_type {spec_type!r}: vLLM 0.33.0 reads only "
                      f"{sorted(eng.VLLM_SPECULATORS_TYPES)} (speculators/algos.py SUPPORTED_SPECULATORS_TYPES) "
                      "and raises ValueError for anything else.",
                      "re-train or convert with a speculator type vLLM serves (eagle3)")
            return
        if method == "eagle3" and spec_type not in ("eagle3", "peagle"):
            r.problem(check, "DrafterMethodMismatch",
                      f"speculators_model_type {spec_type!r} is not an EAGLE-3 head but the method is eagle3.",
                      f"use the method the checkpoint was trained for ({spec_type})")
            return
        if method == "eagle":
            r.problem(check, "Eagle3DrafterAsEagle",
                      f"an EAGLE-3 speculators checkpoint ({spec_type}) with method eagle: vLLM builds the "
                      "Eagle3 head anyway (SpeculatorsConfig) but runs the EAGLE proposer, which feeds it no "
                      "auxiliary hidden states (eagle3_utils.requires_aux_hidden_states is eagle3-only).",
                      "set spec.drafter.method: eagle3")
            return
        model_type = layer.get("model_type", "llama")
        if model_type not in eng.VLLM_SPECULATORS_EAGLE3_MODEL_TYPES:
            r.problem(check, "SpeculatorsModelTypeUnsupported",
                      f"transformer_layer_config.model_type {model_type!r}: vLLM's update_eagle3 maps only "
                      f"{sorted(eng.VLLM_SPECULATORS_EAGLE3_MODEL_TYPES)} and raises ValueError.",
                      "train the draft layer as a llama or qwen3 layer")
            return
        if spec_type == "peagle":
            r.warning(check, "ParallelDrafting", "speculators_model_type peagle: vLLM serves it as eagle3 with "
                      "parallel_drafting, which 0.33.0 runs only on the V1 model runner.")
        r.ok(check, f"speculators {spec_type} checkpoint: vLLM 0.33.0 loads it as "
                    f"{eng.VLLM_SPECULATORS_EAGLE3_MODEL_TYPES[model_type]} (SpeculatorsConfig)")
        return

    ctx.facts["drafter_format"] = "hf" if "eagle_config" not in raw else "hf (SpecForge/SGLang export)"
    if not arch:
        r.problem(check, "ArchitectureMissing", "the drafter's config.json has no architectures list: neither "
                  "engine can choose a model class.", "add architectures: [LlamaForCausalLMEagle3] (EAGLE-3)")
        return
    if "model_type" not in raw:
        r.problem(check, "ModelTypeMissing", f"the drafter's config.json ({arch}) has no model_type: both engines "
                  "read it with transformers' AutoConfig, which refuses it.", 'add "model_type": "llama"')
        return
    if method == "eagle3":
        if kind == "eagle":
            if engine == "vllm":
                loaded = eng.vllm_eagle_architecture(arch, "eagle3")
                how = (f"vLLM accepts it as {loaded} (configs/eagle.py EAGLEConfig renames it) and only the weight "
                       "load, after the target's, fails on fc.weight" if loaded in eng.VLLM_EAGLE3_ARCHITECTURES
                       else f"vLLM refuses {loaded} (not registered)")
            else:
                how = (f"SGLang does not rename architectures: it would build {arch} as the EAGLE3 draft model, "
                       "which is not an EAGLE-3 head")
            r.problem(check, "EagleDrafterAsEagle3",
                      f"the drafter is an EAGLE (not EAGLE-3) head ({arch}: fc takes [embeddings, hidden] = "
                      f"2 x hidden, no d2t) but the method is eagle3: {how}.",
                      "set spec.drafter.method: eagle (with an architecture the engine serves as EAGLE), or use an "
                      "EAGLE-3 drafter")
            return
        if engine == "vllm":
            loaded = eng.vllm_eagle_architecture(arch, "eagle3")
            if loaded not in eng.VLLM_EAGLE3_ARCHITECTURES:
                r.problem(check, "ArchitectureUnsupported",
                          f"vLLM loads architectures {archs} with method eagle3 as {loaded} "
                          "(configs/eagle.py EAGLEConfig), which vLLM 0.33.0 does not register: "
                          "SpeculativeConfig refuses it.",
                          "use architectures [LlamaForCausalLMEagle3] for a Llama-style EAGLE-3 head")
                return
            r.ok(check, f"{arch} with method eagle3: vLLM loads it as {loaded}")
        else:
            if arch not in eng.SGLANG_EAGLE3_ARCHITECTURES:
                r.problem(check, "ArchitectureUnsupported",
                          f"SGLang loads the draft under the architecture its config names ({arch}); for EAGLE3 "
                          f"it has {sorted(eng.SGLANG_EAGLE3_ARCHITECTURES)}: {arch} would load as a "
                          "different model (or fail) after the target has loaded.",
                          "set architectures: [LlamaForCausalLMEagle3] (what `specforge export --to sglang` writes)")
                return
            r.ok(check, f"{arch}: SGLang's EAGLE3 draft class")
        if arch not in eng.LLAMA_STYLE_EAGLE3 and not arch.startswith("Eagle3Llama"):
            r.warning(check, "TensorRulesPartial", f"{arch} is not a Llama-style EAGLE-3 head: the tensor "
                      "checks below assume fc/midlayer/lm_head/d2t names and may not apply.")
        return
    if method == "eagle":
        if kind == "eagle3":
            r.problem(check, "Eagle3DrafterAsEagle",
                      f"the drafter is an EAGLE-3 head ({arch}) but the method is eagle: vLLM refuses "
                      f"{eng.vllm_eagle_architecture(arch, 'eagle')} (SpeculativeConfig), SGLang runs it under "
                      "--speculative-algorithm EAGLE without the auxiliary hidden states it was trained on "
                      "(about 1 token per step).",
                      "set spec.drafter.method: eagle3")
            return
        if engine == "vllm":
            loaded = eng.vllm_eagle_architecture(arch, "eagle")
            if loaded not in eng.VLLM_EAGLE_ARCHITECTURES:
                r.problem(check, "ArchitectureUnsupported",
                          f"vLLM loads {archs} with method eagle as {loaded}, which 0.33.0 does not register.",
                          "use architectures [LlamaForCausalLM] (vLLM prefixes Eagle) for a Llama EAGLE head")
                return
            r.ok(check, f"{arch} with method eagle: vLLM loads it as {loaded}")
        else:
            if arch not in eng.SGLANG_EAGLE_ARCHITECTURES:
                r.problem(check, "ArchitectureUnsupported",
                          f"SGLang loads the draft as {arch}; its EAGLE draft classes are "
                          f"{sorted(eng.SGLANG_EAGLE_ARCHITECTURES)}.",
                          "set architectures: [LlamaForCausalLMEagle]")
                return
            r.ok(check, f"{arch}: SGLang's EAGLE draft class")


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


# ---------------------------------------------------------------------------------------------------
# hidden-size


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


# ---------------------------------------------------------------------------------------------------
# vocab-size (tokenizer identity) and draft-vocab (lm_head)


def check_vocab(ctx: Context, r: Report) -> None:
    check = "vocab-size"
    target_vocab = ctx.target_int("vocab_size")
    draft_vocab = ctx.draft_int("vocab_size") if ctx.drafter is not None else None
    ctx.facts.update(target_vocab_size=target_vocab, drafter_vocab_size=draft_vocab)
    bad = False
    if target_vocab is None:
        r.warning(check, "VocabSizeUnknown", "the target's config has no vocab_size: vocabulary checks skipped.")
        return
    if draft_vocab is not None and draft_vocab != target_vocab:
        r.problem(check, "VocabSizeMismatch",
                  f"the drafter's vocab_size is {draft_vocab}, the target's {target_vocab}: the drafter was built "
                  "for another tokenizer. vLLM sizes the drafter's embeddings and target-space logits from its "
                  "vocab_size (llama_eagle3.py) and maps drafts into the target's vocabulary; token ids no longer "
                  "mean the same thing and acceptance collapses (or the forward fails).",
                  "train the drafter with the target's tokenizer (vocab_size must equal the target's)")
        bad = True
    embed = ctx.draft_tensor("embed_tokens.weight")
    if embed is not None and embed.shape and embed.shape[0] != target_vocab:
        r.problem(check, "VocabSizeMismatch", f"{embed.name} is {shape(embed)}: {embed.shape[0]} rows, the target "
                  f"has {target_vocab} tokens.", "drop embed_tokens (the engines share the target's) or re-train")
        bad = True
    tok_t = ctx.target.tokenizer
    tok_d = ctx.drafter.tokenizer if ctx.drafter is not None and ctx.drafter.path != ctx.target.path else None
    if tok_t is None:
        r.warning(check, "TargetTokenizerMissing", f"no tokenizer files in the target {ctx.target.path}: the engines "
                  "need them (tokenizer.json or tokenizer.model); tokenizer checks skipped.")
    elif tok_t.size is not None and tok_t.size > target_vocab:
        r.problem(check, "TokenizerLargerThanVocab", f"the target's tokenizer.json defines {tok_t.size} ids but its "
                  f"vocab_size is {target_vocab}: ids above {target_vocab - 1} have no embedding.",
                  "use the tokenizer shipped with the target")
        bad = True
    if tok_t is not None and tok_d is not None:
        if tok_t.vocab_digest and tok_d.vocab_digest and tok_t.vocab_digest != tok_d.vocab_digest:
            sizes = f" ({tok_d.size} vs {tok_t.size} ids)" if tok_d.size != tok_t.size else ""
            r.problem(check, "TokenizerMismatch",
                      f"the drafter ships a tokenizer.json whose vocabulary differs from the target's{sizes}: it was "
                      "trained on other token ids. The engines tokenise with the target's tokenizer, so every draft "
                      "token means something else and acceptance collapses without an error.",
                      "train the drafter on the target's tokenizer (and ship the target's tokenizer files with it)")
            bad = True
        elif tok_t.chat_template_digest and tok_d.chat_template_digest and \
                tok_t.chat_template_digest != tok_d.chat_template_digest:
            r.warning(check, "ChatTemplateDiffers", "the drafter's tokenizer_config.json has a different chat "
                      "template from the target's: it was trained on differently rendered conversations "
                      "(acceptance may be lower on chat requests).")
    if ctx.is_speculators:
        verifier = ((ctx.raw.get("speculators_config") or {}).get("verifier") or {})
        varchs = verifier.get("architectures") or []
        tarchs = (ctx.target.config or {}).get("architectures") or []
        if varchs and tarchs and list(varchs) != list(tarchs):
            r.warning(check, "VerifierDiffers", f"speculators_config.verifier.architectures {varchs} differ from the "
                      f"target's {tarchs} ({verifier.get('name_or_path')}): the drafter was trained against another "
                      "model.")
    if not bad:
        sized = f", target tokenizer {tok_t.size} ids" if tok_t is not None and tok_t.size else ""
        same = ", drafter tokenizer identical" if tok_d is not None and tok_d.vocab_digest == (tok_t.vocab_digest
                                                                                             if tok_t else None) else ""
        r.ok(check, f"vocab_size {target_vocab}" + (f" (drafter {draft_vocab})" if draft_vocab else "") + sized + same)


def draft_vocab_size(ctx: Context) -> int | None:
    return ctx.draft_int("draft_vocab_size")


def check_draft_vocab(ctx: Context, r: Report) -> None:
    check = "draft-vocab"
    target_vocab = ctx.target_int("vocab_size")
    vocab = ctx.draft_int("vocab_size") or target_vocab
    hidden = ctx.draft_int("hidden_size")
    dv = draft_vocab_size(ctx)
    lm_head = ctx.draft_tensor("lm_head.weight")
    ctx.facts["draft_vocab_size"] = dv
    if vocab is None:
        return
    bad = False
    if dv is None:
        rows = lm_head.shape[0] if lm_head is not None and lm_head.shape else None
        if rows is not None and rows != vocab:
            r.problem(check, "DraftVocabSizeMissing",
                      f"config.json has no draft_vocab_size but lm_head.weight is {shape(lm_head)}: both engines then "
                      f"size lm_head as vocab_size = {vocab} rows (vLLM llama_eagle3.py Eagle3LlamaForCausalLM; "
                      "SGLang llama_eagle3.py) and the {rows}-row head fails to load after the target has loaded."
                      .replace("{rows}", str(rows)),
                      f'add "draft_vocab_size": {rows} to config.json')
            return
        if ctx.engine == "sglang" and not ctx.draft.get("tie_word_embeddings"):
            r.warning(check, "LmHeadFromTarget",
                      "no draft_vocab_size: SGLang sets load_lm_head_from_target and replaces the drafter's lm_head "
                      "with the target's (llama_eagle3.py LlamaForCausalLMEagle3, eagle_worker_v2.init_lm_head); "
                      "vLLM keeps the drafter's own. Fine if the head was trained frozen from the target's.",
                      f'add "draft_vocab_size": {vocab} to keep the trained head on SGLang')
        r.ok(check, f"full-vocabulary drafter (draft_vocab_size unset = vocab_size {vocab}), lm_head {shape(lm_head)}")
        return
    if dv <= 0 or dv > (target_vocab or vocab):
        r.problem(check, "DraftVocabSizeInvalid",
                  f"draft_vocab_size {dv} is outside 1..{target_vocab or vocab} (the target's vocab_size).",
                  "set draft_vocab_size to the number of rows of lm_head.weight")
        return
    if ctx.has_tensors:
        if lm_head is None:
            r.problem(check, "LmHeadMissing",
                      f"draft_vocab_size is {dv} but the drafter has no lm_head.weight: the engines build a "
                      f"[{dv}, {hidden}] head that nothing fills (SpecForge export requires lm_head).",
                      "re-export the drafter with its lm_head")
            bad = True
        elif hidden is not None and tuple(lm_head.shape) != (dv, hidden):
            r.problem(check, "LmHeadShape",
                      f"lm_head.weight is {shape(lm_head)}, the engines build it as [draft_vocab_size, hidden_size] = "
                      f"[{dv}, {hidden}] (ParallelLMHead in both llama_eagle3.py): vLLM's weight loader refuses it "
                      "after the model load.",
                      "set draft_vocab_size (and hidden_size) to the exported head's shape")
            bad = True
    if ctx.engine == "sglang" and ctx.draft.get("tie_word_embeddings") and dv != vocab:
        r.problem(check, "TiedHeadIgnoresDraftVocab",
                  "tie_word_embeddings is true: SGLang then uses embed_tokens (vocab_size rows) as the drafter's "
                  f"lm_head (llama_eagle3.py) and ignores the {dv}-token draft head.",
                  'set "tie_word_embeddings": false')
        bad = True
    if not bad:
        r.ok(check, f"draft_vocab_size {dv} of {vocab}, lm_head {shape(lm_head)}")


# ---------------------------------------------------------------------------------------------------
# vocab-mapping (d2t / t2d)


def check_mapping(ctx: Context, r: Report) -> None:
    check = "vocab-mapping"
    if not ctx.has_tensors:
        return
    target_vocab = ctx.target_int("vocab_size")
    vocab = target_vocab or ctx.draft_int("vocab_size")  # vLLM compares draft_vocab_size with the target's
    dv = draft_vocab_size(ctx)
    lm_rows = None
    head = ctx.draft_tensor("lm_head.weight")
    if head is not None and head.shape:
        lm_rows = head.shape[0]
    dv_effective = dv if dv is not None else (ctx.draft_int("vocab_size") or vocab)
    d2t = ctx.draft_tensor("d2t")
    t2d = ctx.draft_tensor("t2d")
    if vocab is None or dv_effective is None:
        return
    needs_mapping = dv_effective < vocab or (lm_rows is not None and lm_rows < vocab)
    if not needs_mapping:
        if d2t is not None and ctx.engine == "vllm":
            r.problem(check, "DraftVocabMappingUnexpected",
                      f"the drafter ships d2t but its draft vocabulary is the whole vocabulary ({vocab}): vLLM then has "
                      "no draft_id_to_target_id parameter and refuses the d2t weight after the model load "
                      "(llama_eagle3.py Eagle3LlamaForCausalLM.load_weights: 'There is no module or parameter named "
                      "draft_id_to_target_id').",
                      "set draft_vocab_size to d2t's length, or drop d2t/t2d from the checkpoint")
            return
        r.ok(check, "no mapping needed (draft vocabulary = target vocabulary)")
        return
    if d2t is None:
        r.problem(check, "DraftVocabMappingMissing",
                  f"the draft vocabulary has {dv_effective} of {vocab} tokens but the drafter has no d2t tensor "
                  "(draft id -> target id offsets). Both engines load it without complaint and treat draft id i "
                  "as target id i (vLLM llama_eagle3.py load_weights leaves draft_id_to_target_id at zero; SGLang "
                  "llama_eagle3.py load_weights leaves hot_token_id None): acceptance collapses silently.",
                  "re-export the drafter with the d2t it was trained with (SpecForge export and speculators "
                  "checkpoints carry it); do not regenerate it, a new mapping no longer matches the trained lm_head")
        return
    bad = False
    if d2t.dtype not in INTEGER_DTYPES:
        r.problem(check, "DraftVocabMappingDtype",
                  f"d2t is {shape(d2t)}: it holds integer offsets (vLLM loads it into an int64 parameter, SGLang adds "
                  "it to arange() and indexes with it).", "re-export d2t as int64")
        bad = True
    if tuple(d2t.shape) != (dv_effective,):
        r.problem(check, "DraftVocabMappingShape",
                  f"d2t is {shape(d2t)} but the draft vocabulary has {dv_effective} tokens: vLLM refuses it after the "
                  f"model load (draft_id_to_target_id is [{dv_effective}]); SGLang builds hot_token_id from it "
                  "unchecked and maps drafts to the wrong tokens.",
                  "d2t must have one entry per lm_head row: re-export, or fix draft_vocab_size")
        bad = True
    if not bad:
        bad = _check_mapping_values(ctx, r, check, d2t, t2d, vocab)
    if t2d is not None:
        if t2d.dtype != "BOOL" or tuple(t2d.shape) != (vocab,):
            r.warning(check, "TargetToDraftShape",
                      f"t2d is {shape(t2d)}, expected BOOL[{vocab}] (a mask over the target vocabulary). Neither engine "
                      "reads t2d (both skip it in load_weights); it only shows the export is inconsistent.")
    if not bad:
        r.ok(check, f"d2t {shape(d2t)} maps the {dv_effective} draft tokens into the target vocabulary"
                    + (f"; t2d {shape(t2d)}" if t2d is not None else "; no t2d (neither engine reads it)"))


def _check_mapping_values(ctx: Context, r: Report, check: str, d2t: TensorInfo, t2d: TensorInfo | None,
                          vocab: int) -> bool:
    try:
        offsets = read_integers(d2t, MAPPING_READ_LIMIT)
    except SafetensorsError as exc:
        r.warning(check, "DraftVocabMappingUnread", f"d2t values not checked: {exc}")
        return False
    targets = [i + o for i, o in enumerate(offsets)]
    outside = [t for t in targets if not 0 <= t < vocab]
    if outside:
        r.problem(check, "DraftVocabMappingOutOfRange",
                  f"d2t maps {len(outside)} draft ids outside the target vocabulary 0..{vocab - 1} (e.g. to "
                  f"{outside[0]}): the mapping belongs to another target/tokenizer.",
                  "use the d2t exported with this drafter for this target")
        return True
    if len(set(targets)) != len(targets):
        r.problem(check, "DraftVocabMappingDuplicates",
                  f"d2t maps {len(targets) - len(set(targets))} draft ids onto target ids already taken: the mapping "
                  "is corrupt.", "re-export d2t")
        return True
    if not any(offsets):
        r.warning(check, "DraftVocabMappingIdentity",
                  "d2t is all zeros: draft id i is target id i, exactly what a missing mapping does. Right only if the "
                  "draft vocabulary really is the first draft_vocab_size target tokens.")
    if t2d is not None and t2d.dtype == "BOOL" and tuple(t2d.shape) == (vocab,):
        try:
            mask = read_integers(t2d, MAPPING_READ_LIMIT)
            marked = {i for i, v in enumerate(mask) if v}
            if marked != set(targets):
                r.warning(check, "TargetToDraftDisagrees",
                          f"t2d marks {len(marked)} target tokens, d2t maps to {len(set(targets))} and "
                          f"{len(marked ^ set(targets))} differ: the two were not exported together. The engines use "
                          "d2t only.")
        except SafetensorsError:
            pass
    ctx.facts["d2t_targets_head"] = targets[:8]
    return False


# ---------------------------------------------------------------------------------------------------
# aux-layers


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


# ---------------------------------------------------------------------------------------------------

Rule = Callable[[Context, Report], None]


def rules_for(method: str) -> list[tuple[str, Rule]]:
    if method == "eagle3":
        return [("architecture", check_architecture), ("hidden-size", check_hidden), ("vocab-size", check_vocab),
                ("draft-vocab", check_draft_vocab), ("vocab-mapping", check_mapping), ("aux-layers", check_aux_layers)]
    if method == "eagle":
        return [("architecture", check_architecture), ("hidden-size", check_hidden), ("vocab-size", check_vocab)]
    if method == "mtp":
        return [("mtp-head", check_mtp)]
    return []
