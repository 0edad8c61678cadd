"""How far does a verify forward stray from a decode step on a real GPU? The margin the output check needs.

Speculative decoding scores the k draft tokens and the bonus token in one forward of k + 1 positions (the verify
forward); plain decoding scores one position per forward. Mathematically the same logits, numerically not: other
kernel shapes, other reduction orders, in bf16. Where the target's top-1 and top-2 are closer than that noise, a
clean speculative revision may emit the other token, and the output check (benchmark_client/equivalence.py) must
call it a near-tie, not a defect. This script measures the noise with transformers' Llama on the device it runs on:

1. greedy decode of --prompts random prompts, --tokens tokens each, one position per forward with the KV cache
   (what a no-speculation engine does), recording every position's logits;
2. the same sequences scored again in verify blocks of k + 1 positions (--k) on the cache of the prefix (what the
   speculative revision's target forward does), with the same weights;
3. per position: does the top-1 differ, the decode step's top-1 minus top-2 logprob margin there, and the largest
   logprob difference between the two forwards.

The model is randomly initialised (nothing can be downloaded where the GPU is) at a realistic width and depth, so
its distributions are flatter than a trained model's (more near-ties), which overstates flips; the figure the
check needs is the largest margin at which a flip happens, which is the kernels' noise, not the weights'.

    python bench/verify_decode_numerics.py [--prompts 16] [--tokens 256] [--k 4] [--hidden 2048] [--layers 16]
        [--dtype bfloat16] [--device cuda] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build(args: argparse.Namespace) -> LlamaForCausalLM:
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4,
                         num_hidden_layers=args.layers, num_attention_heads=args.hidden // 128,
                         num_key_value_heads=max(1, args.hidden // 512), max_position_embeddings=8192)
    model = LlamaForCausalLM(config).to(device=args.device, dtype=getattr(torch, args.dtype)).eval()
    # Trained models have peaked next-token distributions; a random init's are nearly flat. Scale the output
    # head so margins spread over a few nats, as a trained model's do (it changes no kernel).
    with torch.no_grad():
        model.lm_head.weight.mul_(args.head_scale)
    return model


@torch.no_grad()
def decode(model, prompt: torch.Tensor, tokens: int, top_logits: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy, one position per forward: (generated ids, log-softmax of each generated position); each position's
    largest logit goes to ``top_logits`` (bf16 spaces its values 2^-7 of their magnitude apart)."""
    out = model(prompt, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1:]
    ids, logprobs = [], []
    for _ in range(tokens):
        top_logits.append(float(logits.float().max()))
        lp = torch.log_softmax(logits.float(), dim=-1)
        token = lp.argmax(-1)
        ids.append(token)
        logprobs.append(lp)
        out = model(token, past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1:]
    return torch.cat(ids, dim=1), torch.cat(logprobs, dim=1)


@torch.no_grad()
def verify(model, prompt: torch.Tensor, generated: torch.Tensor, k: int) -> torch.Tensor:
    """The same sequence scored in blocks of k + 1 positions on the prefix's cache: log-softmax per position."""
    out = model(prompt, use_cache=True)
    cache, last = out.past_key_values, out.logits[:, -1:]
    scored = [torch.log_softmax(last.float(), dim=-1)]  # position 0 comes from the prompt's forward in both
    position = 0
    while position < generated.shape[1] - 1:
        block = generated[:, position:position + k + 1]
        out = model(block, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        scored.append(torch.log_softmax(out.logits.float(), dim=-1))
        position += block.shape[1]
    return torch.cat(scored, dim=1)[:, :generated.shape[1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--head-scale", type=float, default=8.0)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    model = build(args)
    generator = torch.Generator().manual_seed(args.seed + 1)
    flips, positions, margins_at_flips, max_delta, margins, top_logits = 0, 0, [], 0.0, [], []
    started = time.perf_counter()
    for _ in range(args.prompts):
        prompt = torch.randint(0, args.vocab, (1, args.prompt_tokens), generator=generator).to(args.device)
        generated, decoded = decode(model, prompt, args.tokens, top_logits)
        verified = verify(model, prompt, generated, args.k)
        top2 = decoded.topk(2, dim=-1).values[0]
        margin = (top2[:, 0] - top2[:, 1]).cpu()
        differ = (verified.argmax(-1)[0] != generated[0]).cpu()
        flips += int(differ.sum())
        positions += generated.shape[1]
        margins_at_flips += [round(float(m), 5) for m in margin[differ]]
        margins += margin.tolist()
        max_delta = max(max_delta, float((verified - decoded).abs().max()))
    margins.sort()
    top_logits.sort()
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__, "dtype": args.dtype, "k": args.k,
        "model": {"hidden": args.hidden, "layers": args.layers, "vocab": args.vocab, "headScale": args.head_scale},
        "positions": positions, "flips": flips, "flipRate": flips / positions,
        "largestMarginAtAFlip": max(margins_at_flips, default=None),
        "marginsAtFlips": sorted(margins_at_flips)[-20:],
        "largestLogprobDifference": round(max_delta, 5),
        "marginPercentiles": {p: round(margins[int(p / 100 * (len(margins) - 1))], 4) for p in (1, 5, 10, 50, 90)},
        "positionsBelow": {m: sum(x < m for x in margins) for m in (0.01, 0.05, 0.1, 0.5)},
        "topLogitPercentiles": {p: round(top_logits[int(p / 100 * (len(top_logits) - 1))], 3) for p in (50, 99)},
        "seconds": round(time.perf_counter() - started, 1),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
