"""Pipeline step (not a CPU substitution): keep a base drafter's vocabulary mapping when fine-tuning.

    python base_vocab_mapping.py BASE_DRAFTER OUT.pt

Fine-tuning an EAGLE-3 drafter must keep the draft-to-target mapping its ``lm_head`` rows were
trained with. SpecForge otherwise installs the mapping it derives from the new data's token counts
(``model.vocab_mapping_path`` unset, or the one ``prepare_hidden_states.py`` writes): the rows then
mean other tokens, acceptance collapses while train and eval accuracy look fine. This step copies
the base drafter's ``d2t`` and ``t2d`` tensors (from its safetensors; a hub id is read from the
Hugging Face cache, downloaded there unless HF_HUB_OFFLINE) into the ``{"d2t", "t2d"}`` file SpecForge's
``model.vocab_mapping_path`` and ``specforge export --vocab-mapping`` load; a file that already holds them
is left untouched (a resumed Train's checkpoint was written against it).
Self-contained (torch, safetensors, huggingface_hub).
"""

from __future__ import annotations

import glob
import os
import sys


def load_mapping(base: str) -> dict:
    from safetensors import safe_open

    directory = base
    if not os.path.isdir(base):
        from huggingface_hub import snapshot_download

        directory = snapshot_download(base, allow_patterns=["*.safetensors", "*.json"])
    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for key in f.keys():
                if key.split(".")[-1] in ("d2t", "t2d") and key.split(".")[-1] not in found:
                    found[key.split(".")[-1]] = f.get_tensor(key)
    missing = {"d2t", "t2d"} - set(found)
    if missing:
        raise SystemExit(f"base_vocab_mapping: {base} has no {sorted(missing)} tensors: "
                         "it is not an EAGLE-3 drafter with a reduced draft vocabulary")
    return found


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: base_vocab_mapping.py BASE_DRAFTER OUT.pt", file=sys.stderr)
        return 2
    import torch

    mapping = load_mapping(argv[0])
    wanted = {"d2t": mapping["d2t"], "t2d": mapping["t2d"].bool()}
    if unchanged(argv[1], wanted):
        # A Train started again (resumed from its checkpoint): SpecForge's resume checks the mapping file's size
        # and time against the checkpoint's, so the file the run began with stays as it is.
        print(f"base_vocab_mapping: {argv[1]} already holds the base drafter's mapping")
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(argv[1])), exist_ok=True)
    torch.save(wanted, argv[1])
    print(f"base_vocab_mapping: d2t {tuple(mapping['d2t'].shape)}, t2d {tuple(mapping['t2d'].shape)} -> {argv[1]}")
    return 0


def unchanged(path: str, wanted: dict) -> bool:
    """``path`` already holds exactly these tensors."""
    import torch

    if not os.path.isfile(path):
        return False
    try:
        found = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - a torn or foreign file is rewritten
        return False
    return isinstance(found, dict) and set(found) == set(wanted) and all(
        found[k].dtype == wanted[k].dtype and torch.equal(found[k], wanted[k]) for k in wanted)


if __name__ == "__main__":
    raise SystemExit(main())
