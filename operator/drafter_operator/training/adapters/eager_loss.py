"""CPU substitution: run ``specforge`` with its EAGLE-3 loss computed eagerly instead of by Triton.

    python eager_loss.py train --config run.yaml      # = specforge train --config run.yaml

SpecForge 0.2.0's EAGLE-3 (and P-EAGLE) objective always calls ``LogSoftmaxLoss`` from
``specforge.core.loss``: a Triton kernel with no CPU backend. This wrapper replaces that one name, in
the modules that imported it, with the same function written in plain torch (the file's own reference
``_compute_loss`` without its ``torch.compile``, which needs a C++ toolchain on the CPU):

    loss = mean over batch and positions of  -sum_v position_mask * target_p * log_softmax(logits)

then hands the command line to SpecForge's own CLI (``specforge.cli.main``) in this process. That is
where a one-process run trains (``deployment.trainer`` world size 1). Across nodes torchrun runs this file
as its script on every rank (``torchrun ... eager_loss.py train --config run.yaml``), so every rank is
patched, and SpecForge's CLI, finding itself a torchrun worker, trains in the rank instead of launching
children of its own (children it launched would not see the patch: the operator renders no such run).
Self-contained (torch and specforge only): it runs in a stock SpecForge image.
"""

from __future__ import annotations

import os
import sys


class EagerLogSoftmaxLoss:
    """Drop-in for ``specforge.core.loss.LogSoftmaxLoss`` (``.apply(logits, target_p, position_mask)``)."""

    @staticmethod
    def apply(logits, target_p, position_mask):
        import torch

        log_p = torch.log_softmax(logits.float(), dim=-1)
        if position_mask.dim() == logits.dim() - 1:
            position_mask = position_mask.unsqueeze(-1)
        return -torch.sum(position_mask * target_p * log_p, dim=-1).mean()


#: The modules that bind LogSoftmaxLoss at import time.
PATCHED_MODULES = ("specforge.core.loss", "specforge.algorithms.eagle3.model", "specforge.algorithms.peagle.model")


def install() -> list[str]:
    import importlib

    patched = []
    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "LogSoftmaxLoss"):
            module.LogSoftmaxLoss = EagerLogSoftmaxLoss
            patched.append(name)
    return patched


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("SPECFORGE_DEVICE", "cpu")
    patched = install()
    print(f"eager_loss: LogSoftmaxLoss replaced in {', '.join(patched)}", flush=True)
    from specforge.cli import main as specforge_main

    return specforge_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
