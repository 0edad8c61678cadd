"""vocab-size (the tokenizer identity) and draft-vocab (the drafter's lm_head)."""

from __future__ import annotations

from drafter_operator.preflight.rules.context import Context, Report, shape


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
        if ctx.checkpoint_loading.lm_head_from_target_without_draft_vocab and not ctx.draft.get("tie_word_embeddings"):
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
    if ctx.checkpoint_loading.tied_head_ignores_draft_vocab and ctx.draft.get("tie_word_embeddings") and dv != vocab:
        r.problem(check, "TiedHeadIgnoresDraftVocab",
                  "tie_word_embeddings is true: SGLang then uses embed_tokens (vocab_size rows) as the drafter's "
                  f"lm_head (llama_eagle3.py) and ignores the {dv}-token draft head.",
                  'set "tie_word_embeddings": false')
        bad = True
    if not bad:
        r.ok(check, f"draft_vocab_size {dv} of {vocab}, lm_head {shape(lm_head)}")
