"""CPU substitution: run ``speculators`` with its trainer on the CPU.

    python cpu_trainer.py train --verifier-name-or-path T ... --draft-attn-impl sdpa --loss-implementation eager

speculators 0.9.0's ``Trainer`` puts the model and every batch on ``get_local_rank()`` (an int, i.e. a
CUDA device), picks its autocast device from ``torch.accelerator.current_accelerator()`` (which names
``cuda`` on PyPI's CUDA build of torch even where no GPU is present) and its step timer calls
``torch.accelerator.synchronize()``; its checkpointer loads a checkpoint to resume from onto
``get_current_device()`` (``cuda:0`` again). This wrapper changes exactly those things, in those two
modules only, so the model, batches, autocast and a resumed checkpoint use ``cpu``; then it hands the command line to
speculators' own CLI (``speculators.cli.app``) in this process. Nothing else is changed: the
rest of the CPU run is the trainer's own options, ``--draft-attn-impl sdpa`` (flex attention has no
CPU backward) and ``--loss-implementation eager`` (the fused loss is a Triton kernel).

One process only (``torchrun`` is not used on the CPU). Self-contained (torch and speculators): it runs
in a stock speculators image.
"""

from __future__ import annotations

import os
import sys


def install() -> None:
    import types

    import torch
    import speculators.train.checkpointer as checkpointer
    import speculators.train.trainer as trainer

    cpu = torch.device("cpu")
    accelerator = types.SimpleNamespace(**{name: getattr(torch.accelerator, name) for name in dir(torch.accelerator)
                                           if not name.startswith("_")})
    accelerator.current_accelerator = lambda check_available=False: cpu
    accelerator.synchronize = lambda device=None: None
    accelerator.is_available = lambda: False
    trainer.torch = types.SimpleNamespace(**{name: getattr(torch, name) for name in dir(torch)
                                             if not name.startswith("__")})
    trainer.torch.accelerator = accelerator
    trainer.get_local_rank = lambda: "cpu"
    checkpointer.get_current_device = lambda: "cpu"  # resuming from a checkpoint loads it here


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "LOCAL_RANK" in os.environ:
        print("cpu_trainer: one process only (do not start it with torchrun)", file=sys.stderr)
        return 2
    install()
    print("cpu_trainer: speculators' trainer runs on the CPU", flush=True)
    from speculators.cli import app

    try:
        app(args=argv, prog_name="speculators", standalone_mode=False)
    except SystemExit as exc:  # typer/click exit codes
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
