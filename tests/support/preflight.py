"""The arguments `drafter-operator preflight` parses, with defaults, for calling it in process."""
from __future__ import annotations

from argparse import Namespace


def cli_args(**kw):
    base = dict(drafter=None, target=None, engine="vllm", method="eagle3", trained_convention=None,
                vllm_model_runner="v2", json=False, termination_message=None, skip_missing=False,
                num_speculative_tokens=None)
    return Namespace(**{**base, **kw})
