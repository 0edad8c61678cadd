"""The preflight rules: pure functions of the drafter and target checkpoints, the engine and the method.

Each rule adds findings to a `Report`: a problem when the engine would refuse the drafter after its
model load or serve it with collapsed acceptance, a warning when something deserves a look, an ok
line with what was verified. The engine facts each rule relies on are the serving engine's CHECKPOINT_LOADING
record (engines/checkpoint_loading.py; ``Context.checkpoint_loading``), engines.py and docs/preflight.md.
One module per check (files, architecture, mtp, hidden, vocab, mapping, aux_layers; block and block_fields for
the block drafters dflash and dspark), each
reading a `Context` (context.py); `rules_for` gives a method the checks its family lists (families.py), from `CHECKS`.
"""

from __future__ import annotations

from typing import Callable

from drafter_operator.families import family
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
from drafter_operator.preflight.rules.context import Context, Report
from drafter_operator.preflight.rules.files import check_files
from drafter_operator.preflight.rules.hidden import check_hidden
from drafter_operator.preflight.rules.mapping import check_mapping
from drafter_operator.preflight.rules.mtp import check_mtp, check_mtp_target
from drafter_operator.preflight.rules.vocab import check_draft_vocab, check_vocab

__all__ = ["CHECKS", "Context", "Report", "Rule", "check_files", "rules_for"]

Rule = Callable[[Context, Report], None]


#: Every check a family may list (families.py, Family.preflight), by its key: the name its findings carry and the
#: rule. A block drafter's architecture and hidden-size checks are rules of their own under the same names.
CHECKS: dict[str, tuple[str, Rule]] = {
    "architecture": ("architecture", check_architecture),
    "hidden-size": ("hidden-size", check_hidden),
    "vocab-size": ("vocab-size", check_vocab),
    "draft-vocab": ("draft-vocab", check_draft_vocab),
    "vocab-mapping": ("vocab-mapping", check_mapping),
    "aux-layers": ("aux-layers", check_aux_layers),
    "mtp-target": ("mtp-target", check_mtp_target),
    "mtp-head": ("mtp-head", check_mtp),
    "block-architecture": ("architecture", check_block_architecture),
    "block-hidden-size": ("hidden-size", check_block_hidden),
    "mask-token": ("mask-token", check_mask_token),
    "target-layers": ("target-layers", check_target_layers),
    "block-size": ("block-size", check_block_size),
    "attention": ("attention", check_dflash_attention),
    "markov-head": ("markov-head", check_markov),
    "dspark-bundled": ("dspark-bundled", check_bundled_dspark),
}


def rules_for(method: str, bundled: bool = False) -> list[tuple[str, Rule]]:
    """The rules for ``method``, its family's checks in order; ``bundled``: no drafter given (an own-or-target
    family then checks the target's bundled weights, e.g. dspark's DSpark head)."""
    f = family(method)
    if f is None:
        return []
    keys = f.preflight_without_drafter if bundled and f.preflight_without_drafter is not None else f.preflight
    return [CHECKS[key] for key in keys]
