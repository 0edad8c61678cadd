"""The preflight rules: pure functions of the drafter and target checkpoints, the engine and the method.

Each rule adds findings to a `Report`: a problem when the engine would refuse the drafter after its
model load or serve it with collapsed acceptance, a warning when something deserves a look, an ok
line with what was verified. The engine facts each rule relies on are in engines.py and
docs/preflight.md. One module per check (files, architecture, mtp, hidden, vocab, mapping, aux_layers), each
reading a `Context` (context.py); `rules_for` orders them per method.
"""

from __future__ import annotations

from typing import Callable

from drafter_operator.preflight.rules.architecture import check_architecture
from drafter_operator.preflight.rules.aux_layers import check_aux_layers
from drafter_operator.preflight.rules.context import CHECKED_METHODS, Context, Report
from drafter_operator.preflight.rules.files import check_files
from drafter_operator.preflight.rules.hidden import check_hidden
from drafter_operator.preflight.rules.mapping import check_mapping
from drafter_operator.preflight.rules.mtp import check_mtp
from drafter_operator.preflight.rules.vocab import check_draft_vocab, check_vocab

__all__ = ["CHECKED_METHODS", "Context", "Report", "Rule", "check_files", "rules_for"]

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
