"""The drafter families: one `Family` record per speculative method spec.drafter.method accepts, in one table.

Each record says what the rest of the package asks of a method: whether it loads a drafter model of its own,
drafts with the target's weights or drafts from the text; how it drafts (what numSpeculativeTokens means and
what a step's draft costs); whether a DrafterTraining trains it; which per-family settings object of
spec.drafter belongs to it; and which preflight checks read its checkpoint. Every set of methods the package
uses (constants.METHODS_WITH_MODEL, constants.BLOCK_METHODS, the preflight's CHECKED_METHODS, the emulator's
draft costs, ...) is derived from this table, so a new family is one record here (docs/architecture.md,
"Adding a drafter family"); tests/unit/policy/test_method_literals.py fails on a method's name spelled outside
this table and engines/.

What an engine calls a family (vLLM's speculative_config method, SGLang's algorithm and block-size flag) is the
engine's knowledge and stays on its module under engines/, keyed by the family's method.

This module imports nothing from the package: constants.py derives its method sets from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Where a family's draft weights come from, which decides spec.drafter.model:
#: own: a drafter checkpoint of its own (model required); text: none, it drafts from the text (model forbidden);
#: target: the target's own layers, always (model optional and unused: the preflight checks the target alone);
#: own-or-target: a checkpoint of its own, or without one the weights bundled in the target (model optional).
DraftWeights = Literal["own", "text", "target", "own-or-target"]

#: How a family drafts: what numSpeculativeTokens (k) means and what a step's draft costs.
#: chain: k drafter forwards a step, one per drafted token (each costs a forward of the drafter);
#: block: one drafter forward drafts a block of k tokens (it costs one forward over the block's queries, and the
#: preflight holds k to the block the drafter was trained with);
#: lookup: no forward, the tokens are looked up in the context (no draft cost; k is the most proposed, and a step
#: drafts fewer, or none, without a match).
Drafting = Literal["chain", "block", "lookup"]


@dataclass(frozen=True)
class Family:
    """One drafter family (see the module docstring)."""

    #: spec.drafter.method (the API's DrafterMethod Literal, in the table's order).
    method: str
    weights: DraftWeights
    drafting: Drafting
    #: block drafters: the queries the block's forward computes beyond the k drafts (DFlash's anchor: a 1 + k
    #: query block, vllm/v1/spec_decode/dflash.py:40, 126; DSpark's first prediction is its anchor, so none).
    block_extra_queries: int = 0
    #: Whether a DrafterTraining trains it (constants.TrainedMethod, spec.method).
    trained: bool = False
    #: The spec.drafter settings object (its JSON name) that holds this family's own settings, if any.
    settings: str | None = None
    #: The preflight checks on its checkpoint, in order, by their keys in preflight/rules (CHECKS); () for a
    #: family the preflight has no rules for.
    preflight: tuple[str, ...] = ()
    #: The checks with no drafter given (an own-or-target family drafting with the target's bundled weights);
    #: None: the same checks as with one.
    preflight_without_drafter: tuple[str, ...] | None = None


#: The checks every block drafter's checkpoint gets (DFlash and DSpark), before its family's own.
BLOCK_CHECKS = ("block-architecture", "block-hidden-size", "mask-token", "target-layers", "block-size")

#: Every speculative family, in the order of constants.DrafterMethod (tests/unit/root/test_families.py).
FAMILIES: tuple[Family, ...] = (
    Family("eagle3", weights="own", drafting="chain", trained=True,
           preflight=("architecture", "hidden-size", "vocab-size", "draft-vocab", "vocab-mapping", "aux-layers")),
    Family("eagle", weights="own", drafting="chain", preflight=("architecture", "hidden-size", "vocab-size")),
    Family("mtp", weights="target", drafting="chain", preflight=("mtp-target", "mtp-head")),
    Family("ngram", weights="text", drafting="lookup", settings="ngram"),
    Family("ngramGpu", weights="text", drafting="lookup", settings="ngram"),
    Family("suffix", weights="text", drafting="lookup", settings="suffix"),
    Family("dflash", weights="own", drafting="block", block_extra_queries=1, trained=True,
           preflight=(*BLOCK_CHECKS, "attention")),
    Family("dspark", weights="own-or-target", drafting="block", trained=True, settings="dspark",
           preflight=(*BLOCK_CHECKS, "markov-head"), preflight_without_drafter=("dspark-bundled",)),
    Family("draftModel", weights="own", drafting="chain"),
)

#: The settings objects of spec.drafter, in the order the CRD lists their rules (suffix, ngram, dspark).
SETTINGS_ORDER: tuple[str, ...] = ("suffix", "ngram", "dspark")

_BY_METHOD: dict[str, Family] = {f.method: f for f in FAMILIES}


def family(method: str) -> Family | None:
    """The family of spec.drafter.method; None for "none" (no speculation) or a name the API does not take."""
    return _BY_METHOD.get(method)


def methods(*, weights: tuple[str, ...] = (), drafting: tuple[str, ...] = (), trained: bool | None = None,
            checked: bool | None = None) -> tuple[str, ...]:
    """The methods whose families match every criterion given, in the table's order."""
    return tuple(f.method for f in FAMILIES
                 if (not weights or f.weights in weights) and (not drafting or f.drafting in drafting)
                 and (trained is None or f.trained == trained) and (checked is None or bool(f.preflight) == checked))


def settings_methods() -> dict[str, tuple[str, ...]]:
    """Each per-family settings object of spec.drafter (its JSON name) and the methods it belongs to."""
    return {name: tuple(f.method for f in FAMILIES if f.settings == name) for name in SETTINGS_ORDER}
