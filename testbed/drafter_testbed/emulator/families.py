"""What each drafter family's command line resolves to in vLLM 0.33.0 and SGLang 0.5.23 (pure).

``cmdline.py`` parses the flags; this module holds the per-family defaults and the checks the engines
run after parsing (vLLM's ``SpeculativeConfig.__post_init__``, SGLang's ``_handle_*`` resolution
hooks), each with the engine file and line it repeats. Paths are relative to the installed packages:
``SP`` = ``vllm/config/speculative.py``, ``SH`` = ``sglang/srt/arg_groups/speculative_hook.py``.

The parse-time checks (what the real parsers and pydantic field types refuse) stay in ``cmdline.py``;
what the engines find out only while resolving the configuration (which reads the checkpoints) is
reported by :func:`vllm_startup_problems` and :func:`sglang_startup_problems`, the emulator's "load".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drafter_testbed.emulator.cmdline import EngineConfig

#: vLLM methods that need no separate drafter checkpoint: prompt lookup, and mtp and dspark, whose
#: model defaults to the target's own weights (vllm/config/speculative.py:1252-1291).
VLLM_METHODS_WITHOUT_MODEL = frozenset({"ngram", "ngram_gpu", "suffix", "mtp", "dspark", "extract_hidden_states"})
#: SGLang algorithms that load a separate drafter checkpoint (NEXTN reads the target's MTP layers; DSPARK
#: falls back to the target's bundled weights, speculative_hook.py:720-755; DFLASH requires one, :324-327).
SGLANG_ALGORITHMS_NEEDING_DRAFT_MODEL = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "DFLASH"})
#: SP:538 ``suffix_decoding_max_tree_depth: int = 24``; with ``num_speculative_tokens`` unset suffix
#: decoding drafts up to that depth (SP:1732-1739): k is then a per-request upper bound.
VLLM_SUFFIX_MAX_TREE_DEPTH = 24
#: SP:1740-1760: the suffix settings' ranges, checked in ``__post_init__``.
VLLM_SUFFIX_RANGES = {"suffix_decoding_max_tree_depth": (1, None), "suffix_decoding_max_cached_requests": (0, None),
                      "suffix_decoding_max_spec_factor": (0, None), "suffix_decoding_min_token_prob": (0, 1)}
#: SGLang's DFLASH verify window when neither flag nor the draft's config gives one (SH:415-425).
SGLANG_DFLASH_DEFAULT_BLOCK = 16
#: SGLang's DSPARK gamma (drafts per step) when neither flag nor the draft's config gives one
#: (DEFAULT_DSPARK_GAMMA, sglang/srt/speculative/dspark_components/dspark_config.py:21; SH:816-822).
SGLANG_DSPARK_DEFAULT_GAMMA = 7
#: The emulator cannot read a DSpark checkpoint's block size; when vLLM would (k unset) it takes
#: SGLang's default gamma, the same drafter's block on the other engine (a modelling choice).
VLLM_DSPARK_ASSUMED_BLOCK = SGLANG_DSPARK_DEFAULT_GAMMA


@dataclass(frozen=True)
class SglangShape:
    """SGLang's resolved step shape: draft steps, tree width, verify window; and the model's k."""

    steps: int | None
    topk: int
    draft_tokens: int | None
    #: Tokens drafted per step: the steps of a chain, the block of a block drafter.
    k: int


def vllm_default_k(method: str, options: Mapping[str, Any]) -> int | None:
    """The k vLLM resolves when ``num_speculative_tokens`` is unset, None where it raises (SP:1614-1618)."""
    if method == "suffix":
        depth = options.get("suffix_decoding_max_tree_depth", VLLM_SUFFIX_MAX_TREE_DEPTH)
        return depth if isinstance(depth, int) and not isinstance(depth, bool) else None
    if method == "dspark":
        return VLLM_DSPARK_ASSUMED_BLOCK
    return None


def vllm_inferred_method(model: str | None) -> str:
    """vLLM infers the method from the drafter while loading (vllm/config/speculative.py:1432-1470, in
    that order); its name is what the emulator has."""
    name = (model or "").lower()
    for marker, method in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark"),
                           ("eagle", "eagle")):
        if marker in name:
            return method
    return "draft_model" if model else "ngram"


def vllm_startup_problems(method: str, options: Mapping[str, Any]) -> list[str]:
    """What ``SpeculativeConfig.__post_init__`` refuses for these settings (the fields passed parsing)."""
    problems = []
    if method == "suffix":
        for key, (low, high) in VLLM_SUFFIX_RANGES.items():
            value = options.get(key)
            if value is None:
                continue
            if value < low or (high is not None and value > high):
                bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
                problems.append(f"ValueError: {key}={value} must be {bound}")
    if method in ("ngram", "ngram_gpu"):
        low, high = options.get("prompt_lookup_min"), options.get("prompt_lookup_max")
        if low is not None and high is not None and low > high:  # SP:1322
            problems.append(f"ValueError: prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
    return problems


def _dflash(values: Mapping[str, Any]) -> SglangShape:
    """SH:287-446: steps and topk forced to 1; the block size is the verify window (draft tokens)."""
    block = values.get("speculative_dflash_block_size")
    draft_tokens = values.get("speculative_num_draft_tokens")
    window = block if block is not None else draft_tokens if draft_tokens is not None else SGLANG_DFLASH_DEFAULT_BLOCK
    return SglangShape(steps=1, topk=1, draft_tokens=window, k=max(window - 1, 0))


def _dspark(values: Mapping[str, Any]) -> SglangShape:
    """SH:757-850: steps and topk forced to 1; gamma drafts, a verify window of gamma + 1."""
    gamma = values.get("speculative_dspark_block_size")
    draft_tokens = values.get("speculative_num_draft_tokens")
    if gamma is None:
        gamma = draft_tokens - 1 if draft_tokens is not None else SGLANG_DSPARK_DEFAULT_GAMMA
    return SglangShape(steps=1, topk=1, draft_tokens=gamma + 1, k=max(gamma, 0))


def sglang_block_shape(algorithm: str, values: Mapping[str, Any]) -> SglangShape | None:
    """The shape of SGLang's block drafters (DFLASH, DSPARK); None for the other algorithms."""
    if algorithm == "DFLASH":
        return _dflash(values)
    if algorithm == "DSPARK":
        return _dspark(values)
    return None


def sglang_startup_problems(algorithm: str, values: Mapping[str, Any]) -> list[str]:
    """What SGLang's resolution hooks refuse once they run (``prepare_server_args`` -> ``_handle_*``)."""
    block, gamma = values.get("speculative_dflash_block_size"), values.get("speculative_dspark_block_size")
    draft_tokens = values.get("speculative_num_draft_tokens")
    problems = []
    if algorithm == "DFLASH":
        if block is not None and block <= 0:  # SH:368-373 (message at :371)
            problems.append(f"DFLASH requires --speculative-dflash-block-size to be positive, got {block}.")
        elif block is not None and draft_tokens is not None and draft_tokens != block:  # SH:374-382 (message at :379)
            problems.append("Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set "
                            f"but they differ. For DFLASH they must match ({draft_tokens} != {block}).")
    if algorithm == "DSPARK":
        if gamma is not None and gamma <= 0:  # SH:807-812
            problems.append(f"DSpark requires --speculative-dspark-block-size to be positive, got {gamma}.")
        elif gamma is not None and draft_tokens is not None and draft_tokens != gamma + 1:  # SH:824-837
            problems.append(f"DSpark speculative_num_draft_tokens must equal gamma + 1 (= {gamma + 1}), "
                            f"but got speculative_num_draft_tokens={draft_tokens}.")
        elif gamma is None and draft_tokens is not None and draft_tokens < 2:  # SH:846-850 (message at :848)
            problems.append(f"DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), got {draft_tokens}.")
    if algorithm == "FROZEN_KV_MTP" and values.get("speculative_num_steps") is None:
        # _handle_frozen_kv_mtp (SH:990-1011) resolves no steps, and the worker compares them with 0
        # (sglang/srt/speculative/frozen_kv_mtp_worker_v2.py:382): None fails there.
        problems.append("FROZEN_KV_MTP needs --speculative-num-steps (SGLang resolves none for it)")
    return problems


#: vLLM methods whose Model Runner V1 proposer supports a per-batch-size k; V2 truncates every method's
#: drafts centrally (vllm/config/vllm.py:1088-1108, ``_maybe_disable_dynamic_sd_for_v1``).
VLLM_V1_SCHEDULE_METHODS = frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"})
#: Methods Model Runner V2 does not support, so vLLM falls back to V1 (vllm/config/vllm.py:3066-3068, 758-766).
VLLM_V1_ONLY_METHODS = frozenset({"suffix", "custom_class"})


def vllm_schedule_dropped(method: str, data_parallel_size: int, environment: Mapping[str, str]) -> str | None:
    """Why vLLM silently serves a static k instead of ``num_speculative_tokens_per_batch_size``, or None.

    Data parallelism drops it (vllm/config/vllm.py:1110-1128), and so does Model Runner V1 for a method
    its proposer cannot truncate (:1088-1108). V2 is the default unless ``VLLM_USE_V2_MODEL_RUNNER`` says
    otherwise (``bool(int(value))``, vllm/envs.py:360-363) or the method needs V1 (:731-766)."""
    if data_parallel_size > 1:
        return "data parallelism"
    raw = environment.get("VLLM_USE_V2_MODEL_RUNNER")
    try:
        v2 = bool(int(raw)) if raw is not None else method not in VLLM_V1_ONLY_METHODS
    except ValueError:
        v2 = method not in VLLM_V1_ONLY_METHODS  # vLLM itself fails to start on a non-integer
    if not v2 and method not in VLLM_V1_SCHEDULE_METHODS:
        return f"Model Runner V1 with method {method!r}"
    return None


def stops_early(engine: str, method: str, options: Mapping[str, Any], environment: Mapping[str, str]) -> bool:
    """Whether the drafter may end a step's draft early (a variable drafted length per step).

    Suffix decoding always does: it speculates ``spec factor x match length`` tokens at most and stops
    below ``suffix_decoding_min_token_prob`` (SP:548-556; vllm/v1/spec_decode/suffix_decoding.py:80-90).
    DSpark's confidence head does where the engine schedules a cap: vLLM with
    ``enable_adaptive_verification`` (SP:585, dspark only, default False); SGLang in a ragged verify
    mode other than its default ``static`` (``SGLANG_RAGGED_VERIFY_MODE``, sglang/srt/environ.py:1572;
    the worker reports no cap without a layout, dspark_components/dspark_worker_v2.py:1337-1339)."""
    name = method.lower()
    if name == "suffix":
        return True
    if name != "dspark":
        return False
    if engine == "vllm":
        return bool(options.get("enable_adaptive_verification"))
    return environment.get("SGLANG_RAGGED_VERIFY_MODE", "static") != "static"


def startup_problems(config: EngineConfig) -> list[str]:
    """What the real engine refuses only once it reads the model's config (the emulator's "load")."""
    spec = config.speculation
    problems = []
    if spec is None:
        return problems
    if config.engine == "sglang" and spec.method in SGLANG_ALGORITHMS_NEEDING_DRAFT_MODEL and not spec.draft_model:
        problems.append(f"--speculative-algorithm {spec.method} needs --speculative-draft-model-path")
    if config.engine == "vllm" and spec.method not in VLLM_METHODS_WITHOUT_MODEL and not spec.draft_model:
        problems.append(f"--speculative-config: method {spec.method!r} needs a 'model'")
    if config.engine == "vllm":
        problems += vllm_startup_problems(spec.method, spec.options)
    else:
        problems += sglang_startup_problems(spec.method, spec.options)
    if problems:
        return problems
    if spec.num_speculative_tokens < 1:
        problems.append(f"speculative_num_steps resolved to {spec.num_speculative_tokens} "
                        f"(draft tokens {spec.num_draft_tokens} // topk {spec.eagle_topk}): raise the draft tokens")
    return problems
