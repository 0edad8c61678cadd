"""How an engine loads a drafter checkpoint: the record each engine module declares as ``CHECKPOINT_LOADING``.

The preflight (preflight/rules/) asks the serving engine's record (``engines.engine(name).CHECKPOINT_LOADING``)
where vLLM and SGLang load a checkpoint differently: which config keys they read and require, how they number
layers, the class they build. Each engine's record sits in a module beside the engine's (engines/vllm_loading.py,
engines/sglang_loading.py) with the tables and functions it is made of, each restating one piece of that release's
loading code (file:line); tests/contract runs the real code on the same inputs and asserts the same answers.
Nothing here imports an engine or the preflight (which sits above engines/).

Layer positions. Both engines feed an EAGLE-3 drafter the target's residual stream at a few depths. A *position* p
is "the residual stream after p target layers": 0 is the embeddings, N (the target's num_hidden_layers) the last
layer's output before the final norm. Each engine turns the drafter's layer ids into positions its own way (its
record's ``capture``), and a drafter's trainer records them in its engine's convention (``layer_ids_field``,
``layer_id_offset``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def nested(config: dict, key: str) -> dict:
    """config[key] when it is an object, else an empty one (a missing or malformed section reads as empty)."""
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def eagle_config(config: dict) -> dict:
    """The drafter's eagle_config section (SpecForge's export writes the EAGLE-3 settings there)."""
    return nested(config, "eagle_config")


@dataclass(frozen=True)
class Capture:
    """What one engine captures from the target for this drafter."""

    engine: str
    source: str  # where the ids came from, e.g. "eagle_config.eagle_aux_hidden_state_layer_ids"
    layer_ids: tuple[int, ...] | None  # as read (None: the engine's default)
    requested: tuple[int, ...]  # positions asked for (vLLM: the ids; SGLang: layers_to_capture)
    valid: tuple[int, int]  # the positions that exist, inclusive
    captured: tuple[int, ...] = field(default=())  # positions really captured, in order, each once

    @property
    def out_of_range(self) -> tuple[int, ...]:
        lo, hi = self.valid
        return tuple(p for p in self.requested if not lo <= p <= hi)


def first_ids_capturing(positions: Sequence[int], offsets: Sequence[int],
                        requested: Callable[[list[int]], Sequence[int]]) -> list[int] | None:
    """The first list of layer ids, the positions less each offset in turn, whose requested positions are exactly
    ``positions`` (each once, any order); None if none is. An offset of 0 tries the positions as written."""
    wanted = sorted(set(positions))
    for offset in offsets:
        candidate = list(positions) if offset == 0 else [p - offset for p in positions]
        if sorted(set(requested(candidate))) == wanted:
            return candidate
    return None


@dataclass(frozen=True)
class MaskTokenRead:
    """The token id a block drafter fills its block with, as an engine reads it."""

    value: Any  # as written in the config (None: none found)
    field: str | None  # where it was read
    required_by: str | None  # the engine code that refuses a drafter without one (file:line); None: it falls back


@dataclass(frozen=True)
class BlockLayersRead:
    """The target layers a block drafter reads, as an engine reads them."""

    ids: list | None  # as the engine reads them, in the terms ``valid`` is in (None or empty: none recorded)
    field: str  # where they were read ("" when nowhere)
    valid: tuple[int, int]  # the values the engine accepts for this target, inclusive
    rule: str  # what the engine does with them, and where (file:line), for the messages


@dataclass(frozen=True)
class CheckpointLoading:
    """How one engine release loads a drafter checkpoint: what the preflight's rules ask instead of the engine's name.

    Data where the engines differ in data (key names, conventions, tables, yes/no), a function where they differ in
    logic. Each engine's record, with the source of every fact: engines/<engine>_loading.py.
    """

    # -- EAGLE-3: the target layers the drafter reads (preflight/rules/aux_layers.py) -------------------------------
    #: Where a drafter trained in this engine's layer-id convention records its ids (a dotted key: nested objects).
    layer_ids_field: str
    #: position = recorded id + offset, in this engine's convention (vLLM's: ids are positions; SGLang's: an id
    #: names the layer whose output is taken).
    layer_id_offset: int
    #: (config, num_layers, target_architecture, model_runner) -> the positions the engine captures for the drafter.
    capture: Callable[[dict, int, str | None, str], Capture]
    #: target_architecture -> (rule, known): how the engine maps ids to positions for that target class; None where
    #: the mapping does not depend on the target.
    capture_rule: Callable[[str | None], tuple[str, bool]] | None
    #: (positions, rule, num_layers) -> layer ids that make the engine capture ``positions`` (None: no list can).
    layer_ids_for_positions: Callable[[Sequence[int], str, int], list[int] | None]
    #: (positions, num_layers, target_architecture) -> the change to config.json that makes it capture them.
    layer_ids_fix: Callable[[Sequence[int], int, str | None], str]

    # -- The draft class it builds (preflight/rules/architecture.py, block.py) -------------------------------------
    #: True: config.json's architecture is renamed for the method (``draft_class``); False: built as named.
    renames_draft_class: bool
    #: (architecture, method, model_type) -> the class the engine builds.
    draft_class: Callable[[str, str, str | None], str]
    #: method -> the draft classes the engine has for it.
    draft_classes: Mapping[str, frozenset[str]]

    # -- The draft vocabulary (preflight/rules/vocab.py, mapping.py) -----------------------------------------------
    #: Refuses a d2t tensor when the draft vocabulary is the whole vocabulary (no parameter to load it into).
    refuses_d2t_with_full_vocab: bool
    #: Without draft_vocab_size (and untied), replaces the drafter's lm_head with the target's.
    lm_head_from_target_without_draft_vocab: bool
    #: With tie_word_embeddings, uses embed_tokens (vocab_size rows) as lm_head whatever draft_vocab_size says.
    tied_head_ignores_draft_vocab: bool

    # -- Block drafters, dflash and dspark (preflight/rules/block.py, block_fields.py) ------------------------------
    #: (config as the engine reads it, method) -> the mask token.
    mask_token: Callable[[dict, str], MaskTokenRead]
    #: (config as the engine reads it, method, num_layers) -> the target layers the drafter reads.
    block_target_layers: Callable[[dict, str, int], BlockLayersRead]
    #: Refuses a block drafter whose config has no num_hidden_layers.
    requires_draft_num_hidden_layers: bool
    #: True: reads DSpark's Markov head from dflash_config/dspark_config (and dspark_* keys); False: from the top
    #: level, on the classes in ``top_level_markov_classes`` (the others read their own fields).
    reads_markov_head_nested: bool
    top_level_markov_classes: frozenset[str]
    #: The Markov head types it builds.
    markov_head_types: tuple[str, ...]
    #: Its DFlash serves only the anchor-as-bonus layout and builds each draft layer's attention mask from config.json
    #: (causal, layer_types), refusing what it cannot build: what the attention check holds a drafter to.
    dflash_layout_limits: bool
    #: (target path, target config, its text config) -> (the target carries a DSpark head the engine uses when no
    #: drafter is given, why: the engine's rule and the target's fields it looked at).
    bundled_dspark_head: Callable[[str, dict, dict], tuple[bool, str]]

    # -- Method mtp (preflight/rules/mtp.py) ----------------------------------------------------------------------
    #: (model_type, architecture) -> the MTP model the engine makes of the target's layers (None: none); None where
    #: the engine drafts with the target itself instead (``nextn_target_classes``).
    mtp_variant: Callable[[str | None, str | None], str | None] | None
    #: model_type -> the method to use instead, for targets whose extra layers are not an MTP head.
    mtp_refused_model_types: Mapping[str, str]
    #: model_types no MTP variant is made of (the engine raises at start).
    mtp_unmapped_model_types: frozenset[str]
    #: Target classes the engine drafts with when no draft path is given.
    nextn_target_classes: frozenset[str]

    def recorded_layer_ids(self, config: dict) -> Any:
        """What a drafter's config.json holds at ``layer_ids_field`` (None where a level is missing)."""
        *sections, key = self.layer_ids_field.split(".")
        for section in sections:
            config = nested(config, section)
        return config.get(key)
