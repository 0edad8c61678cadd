"""vocab-mapping: d2t maps the draft vocabulary into the target's (t2d, which no engine reads, agrees)."""

from __future__ import annotations

from drafter_operator.preflight.rules.context import MAPPING_READ_LIMIT, Context, Report, shape
from drafter_operator.preflight.rules.vocab import draft_vocab_size
from drafter_operator.preflight.safetensors import INTEGER_DTYPES, SafetensorsError, TensorInfo, read_integers


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
        if d2t is not None and ctx.checkpoint_loading.refuses_d2t_with_full_vocab:
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
