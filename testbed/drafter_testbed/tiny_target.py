"""A tiny target model and chat dataset for running the real training frameworks on a CPU.

    python -m drafter_testbed.tiny_target target  OUT_DIR [--seed 0] [--shape tiny|standin]
    python -m drafter_testbed.tiny_target dataset OUT.jsonl [--conversations 48] [--seed 0] [--exchanges 1 2]

``target`` writes a randomly initialised Llama-style causal LM (4 layers, hidden 64, 2 heads of 32:
vLLM's CPU attention accepts head_dim 32/64/80/..., SpecForge's loader needs a sharded checkpoint with
``model.safetensors.index.json``) with the project's own byte-level BPE tokenizer
(``drafter_operator/data/tokenizer``, 4096 tokens, ChatML chat template without a system prompt), so
nothing is downloaded. The same seed writes the same weights. ``--shape standin`` writes the same kind of
model at a few hundred million parameters (24 layers, hidden 1024: ``STANDIN``), the size training throughput
is measured on (bench/gpu_training.py): the tiny one is all start-up.

``dataset`` writes conversations in the JSONL format SpecForge's ``scripts/prepare_data.py`` writes and
both frameworks read: one ``{"id": ..., "conversations": [{"role": "user"|"assistant", "content": ...}]}``
per line, built from word lists with a seeded generator (short: a few dozen tokens per turn).

Runs in an environment with torch and transformers (the training environment ``.ci/training-env``
builds); importing this module needs neither.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

#: The target's shape. vocab_size is the shipped tokenizer's (special tokens included).
NUM_LAYERS = 4
HIDDEN_SIZE = 64
NUM_HEADS = 2
HEAD_DIM = 32
INTERMEDIATE_SIZE = 128
VOCAB_SIZE = 4096
MAX_POSITIONS = 2048
#: Small shards so the checkpoint is sharded (with its index) like a real target.
MAX_SHARD_SIZE = "200KB"
ARCHITECTURE = "LlamaForCausalLM"


#: The stand-in's shape (overrides of the tiny one): 24 layers of hidden 1024, 16 heads of 64, MLP 2816, about
#: 315M parameters with the 4096-token vocabulary.
STANDIN = {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 24, "num_attention_heads": 16,
           "num_key_value_heads": 16, "head_dim": 64}
#: Kimi-K2.5's width (hidden 7168, 64 heads of 128... here 56 of 128 = 7168, MLP 18432) at 4 layers, about 2.4B
#: parameters: the drafter trained for it has the width of the real one, so its training rate is Kimi's drafter's
#: (but for the draft vocabulary, which the 4096-token tokenizer caps).
WIDE = {"hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 4, "num_attention_heads": 56,
        "num_key_value_heads": 56, "head_dim": 128}
SHAPES = {"tiny": {}, "standin": STANDIN, "wide": WIDE}


def target_config(shape: str = "tiny") -> dict[str, Any]:
    """The config.json fields of the tiny target, or of another shape (transformers LlamaConfig keyword arguments)."""
    return {**_tiny_config(), **SHAPES[shape]}


def _tiny_config() -> dict[str, Any]:
    return {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": 2,  # <|im_end|> in the shipped tokenizer
        "pad_token_id": 0,  # <|endoftext|>
        "architectures": [ARCHITECTURE],
    }


def write_target(out_dir: Path, seed: int = 0, shape: str = "tiny") -> Path:
    """Write the tiny target, or the ``shape`` one (sharded safetensors + index, config, tokenizer), into ``out_dir``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = LlamaConfig(**target_config(shape))
    model = LlamaForCausalLM(config)
    # Wider than the default init so the hidden states and logits are not all near zero.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.08)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out_dir, max_shard_size=MAX_SHARD_SIZE if shape == "tiny" else "200MB",
                          safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(TOKENIZER_DIR / name, out_dir / name)
    if not (out_dir / "model.safetensors.index.json").is_file():
        raise RuntimeError(f"tiny_target: {out_dir} was not saved sharded (no model.safetensors.index.json)")
    return out_dir


SUBJECTS = ("the server", "a drafter", "the cluster", "our model", "the cache", "a request", "the team",
            "the network", "the scheduler", "each worker", "the database", "a student", "the city")
VERBS = ("explain", "describe", "summarize", "list", "compare", "improve", "measure", "test", "plan", "build")
OBJECTS = ("the latency", "its memory use", "the token budget", "the error rate", "the weekly report",
           "the training data", "a small program", "the water supply", "the morning schedule", "the results")
REASONS = ("because the load keeps growing", "so that people can trust it", "before the next release",
           "without spending more money", "while the service stays online", "for the new users")
STEPS = ("First, look at the numbers from last week.", "Then write down what changed and why.",
         "Next, try one small change at a time.", "Check the result against the old value.",
         "Keep a short note for the team.", "Finally, repeat the test to be sure.",
         "Ask a colleague to read the plan.", "Start with the part that costs the most.")


def conversation(rng: random.Random, index: int, exchanges: tuple[int, int] = (1, 2)) -> dict[str, Any]:
    """One chat: one to two (``exchanges``) user/assistant exchanges in plain English, a few dozen tokens each."""
    turns = []
    for _ in range(rng.randint(*exchanges)):
        question = (f"Please {rng.choice(VERBS)} {rng.choice(OBJECTS)} of {rng.choice(SUBJECTS)} "
                    f"{rng.choice(REASONS)}.")
        answer = " ".join(rng.sample(STEPS, rng.randint(3, 5)))
        answer = f"Sure. To {rng.choice(VERBS)} {rng.choice(OBJECTS)}: {answer}"
        turns += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return {"id": f"tiny-{index:04d}", "conversations": turns}


def write_dataset(path: Path, conversations: int = 48, seed: int = 0, exchanges: tuple[int, int] = (1, 2)) -> Path:
    """Write ``conversations`` chats as JSONL to ``path``."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for index in range(conversations):
            out.write(json.dumps(conversation(rng, index, exchanges), ensure_ascii=False) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    target = sub.add_parser("target", help="write the tiny target model directory")
    target.add_argument("out", type=Path)
    target.add_argument("--seed", type=int, default=0)
    target.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    dataset = sub.add_parser("dataset", help="write the tiny chat dataset (JSONL)")
    dataset.add_argument("out", type=Path)
    dataset.add_argument("--conversations", type=int, default=48)
    dataset.add_argument("--seed", type=int, default=0)
    dataset.add_argument("--exchanges", type=int, nargs=2, default=(1, 2), metavar=("MIN", "MAX"),
                         help="user/assistant exchanges per conversation (longer samples for throughput runs)")
    args = parser.parse_args(argv)
    if args.command == "target":
        print(write_target(args.out, seed=args.seed, shape=args.shape))
    else:
        print(write_dataset(args.out, conversations=args.conversations, seed=args.seed, exchanges=tuple(args.exchanges)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
