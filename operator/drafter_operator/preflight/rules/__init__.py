"""The preflight rules: pure functions of the drafter and target checkpoints, the engine and the method.

Each rule adds findings to a `Report`: a problem when the engine would refuse the drafter after its
model load or serve it with collapsed acceptance, a warning when something deserves a look, an ok
line with what was verified. The engine facts each rule relies on are in engines.py and
docs/preflight.md. One module per check (files, architecture, mtp, hidden, vocab, mapping, aux_layers; block and block_fields for
the block drafters dflash and dspark), each
reading a `Context` (context.py); `rules_for` orders them per method.
"""

from __future__ import annotations

from typing import Callable

from drafter_operator.preflight.rules.architecture import check_architecture
from drafter_operator.preflight.rules.aux_layers import check_aux_layers
from drafter_operator.preflight.rules.block import check_block_architecture, check_mask_token
from drafter_operator.preflight.rules.block_fields import (
    check_block_hidden,
    check_block_size,
    check_bundled_dspark,
    check_dflash_attention,
    check_markov,
    check_target_layers,
)
from drafter_operator.preflight.rules.context import CHECKED_METHODS, Context, Report
from drafter_operator.preflight.rules.files import check_files
from drafter_operator.preflight.rules.hidden import check_hidden
from drafter_operator.preflight.rules.mapping import check_mapping
from drafter_operator.preflight.rules.mtp import check_mtp, check_mtp_target
from drafter_operator.preflight.rules.vocab import check_draft_vocab, check_vocab

__all__ = ["CHECKED_METHODS", "Context", "Report", "Rule", "check_files", "rules_for"]

Rule = Callable[[Context, Report], None]


BLOCK_RULES: list[tuple[str, Rule]] = [
    ("architecture", check_block_architecture), ("hidden-size", check_block_hidden), ("mask-token", check_mask_token),
    ("target-layers", check_target_layers), ("block-size", check_block_size),
]


def rules_for(method: str, bundled: bool = False) -> list[tuple[str, Rule]]:
    """The rules for ``method``; ``bundled``: method dspark with no drafter (the target's own DSpark head)."""
    if method == "eagle3":
        return [("architecture", check_architecture), ("hidden-size", check_hidden), ("vocab-size", check_vocab),
                ("draft-vocab", check_draft_vocab), ("vocab-mapping", check_mapping), ("aux-layers", check_aux_layers)]
    if method == "eagle":
        return [("architecture", check_architecture), ("hidden-size", check_hidden), ("vocab-size", check_vocab)]
    if method == "mtp":
        return [("mtp-target", check_mtp_target), ("mtp-head", check_mtp)]
    if method == "dflash":
        return [*BLOCK_RULES, ("attention", check_dflash_attention)]
    if method == "dspark":
        return [("dspark-bundled", check_bundled_dspark)] if bundled else [*BLOCK_RULES, ("markov-head", check_markov)]
    return []
