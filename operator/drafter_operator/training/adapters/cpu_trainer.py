"""CPU substitution: run ``speculators`` with its trainer on the CPU.

    python cpu_trainer.py train --verifier-name-or-path T ... --draft-attn-impl sdpa --loss-implementation eager
    torchrun --nnodes 2 --nproc_per_node 1 --rdzv-backend c10d ... cpu_trainer.py train ...   # across pods

speculators 0.9.0's ``Trainer`` puts the model and every batch on ``get_local_rank()`` (an int, i.e. a
CUDA device), picks its autocast device from ``torch.accelerator.current_accelerator()`` (which names
``cuda`` on PyPI's CUDA build of torch even where no GPU is present) and its step timer calls
``torch.accelerator.synchronize()``; its checkpointer loads a checkpoint to resume from onto
``get_current_device()`` (``cuda:0`` again). Under torchrun, ``maybe_setup_distributed`` selects that
accelerator's device (``torch.accelerator.set_device_index``) and its default backend (NCCL) and passes
``device_id=local_rank`` to ``init_process_group``. This wrapper changes exactly those things, in those three
modules only, so the model, batches, autocast, a resumed checkpoint and the process group use ``cpu`` and
gloo; then it hands the command line to speculators' own CLI (``speculators.cli.app``) in this process. Nothing
else is changed: the rest of the CPU run is the trainer's own options, ``--draft-attn-impl sdpa`` (flex
attention has no CPU backward) and ``--loss-implementation eager`` (the fused loss is a Triton kernel), and
across processes speculators' own data-parallel path (DistributedDataParallel, its distributed batch
sampler), as on GPUs without ``--fsdp-shard``.

Each torchrun worker runs this file itself, so every rank has the substitutions. Self-contained (torch and
speculators): it runs in a stock speculators image.
"""

from __future__ import annotations

import sys


def _namespace(module, **overrides):
    """A copy of ``module``'s public names with ``overrides``: patched for one importer, not for everyone."""
    import types

    names = {name: getattr(module, name) for name in dir(module) if not name.startswith("__")}
    return types.SimpleNamespace(**{**names, **overrides})


def install() -> None:
    import torch
    import torch.distributed as torch_distributed
    import speculators.train.checkpointer as checkpointer
    import speculators.train.distributed as distributed
    import speculators.train.trainer as trainer

    cpu = torch.device("cpu")
    accelerator = _namespace(torch.accelerator, current_accelerator=lambda check_available=False: cpu,
                             synchronize=lambda device=None: None, is_available=lambda: False,
                             set_device_index=lambda index: None)
    trainer.torch = _namespace(torch, accelerator=accelerator)
    trainer.get_local_rank = lambda: "cpu"
    checkpointer.get_current_device = lambda: "cpu"  # resuming from a checkpoint loads it here

    def init_process_group(backend=None, device_id=None, **kwargs):
        # The CPU's backend is gloo (the default for a cpu device); a device_id would name a CUDA device.
        return torch_distributed.init_process_group(backend or "gloo", **kwargs)

    distributed.torch = _namespace(torch, accelerator=accelerator)
    distributed.dist = _namespace(torch_distributed, init_process_group=init_process_group)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
