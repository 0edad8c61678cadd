"""checkpoint-files: the configs and weight headers are readable."""

from __future__ import annotations

from drafter_operator.preflight.rules.context import Context, Report


def check_files(ctx: Context, r: Report) -> bool:
    """Readable configs and weight headers. Returns False when nothing else can be checked."""
    fatal = False
    for role, ckpt in (("target", ctx.target), ("drafter", ctx.drafter)):
        if ckpt is None:
            continue
        for error in ckpt.errors:
            if ckpt.config is None:
                fatal = True
            r.problem("checkpoint-files", "CheckpointUnreadable", f"{role}: {error}.",
                      f"point --{role} at the checkpoint directory holding config.json and the *.safetensors "
                      "files (and their *.safetensors.index.json when sharded)")
    if ctx.drafter is not None and ctx.drafter.config is not None and not ctx.drafter.errors:
        if not ctx.drafter.tensors:
            other = ", ".join(ctx.drafter.other_weights[:3])
            r.warning("checkpoint-files", "NoSafetensors",
                      f"drafter {ctx.drafter.path} has no *.safetensors files"
                      + (f" (found {other}: not read, pickled weights cannot be inspected cheaply)" if other else "")
                      + ": the tensor checks (fc, lm_head, d2t) are skipped.",
                      "export the drafter as safetensors (SpecForge `specforge export`, speculators checkpoints are)")
        else:
            r.ok("checkpoint-files", f"drafter: config.json and {len(ctx.drafter.tensors)} tensors in "
                                     f"{len(ctx.drafter.weight_files)} safetensors file(s) (headers only)")
    if ctx.target.config is not None and not ctx.target.errors:
        r.ok("checkpoint-files", f"target: config.json, {len(ctx.target.tensors)} tensors")
    return not fatal
