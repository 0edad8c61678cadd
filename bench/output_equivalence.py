"""What the output check costs and how often it is wrong, against the engine emulator (docs/performance.md).

Starts emulators in process on loopback: a no-speculation SGLang baseline, a clean speculative revision (SGLang
DSpark at k = 5 on an H200) and the lossy one (the same on an RTX PRO 6000 Blackwell, sglang#33800), and runs the
benchmark client's output check (benchmark_client/equivalence.py) exactly as the bench Job does.

1. Time per prompt at the emulator's modelled speed (--time-scale 1: 82.5 tok/s without speculation, the
   DSpark revision's per-step timing with it), --prompts prompts of --tokens tokens: each prompt is one request
   to each side, one after the other.
2. Across --seeds targets (each seed is another served model name, so another set of continuations: the
   emulator's outputs depend on the model and the prompt), with the clock off (--time-scale 0): the clean
   revision's defects (false defects: a divergence judged clear when speculation changed nothing), its near-ties
   and identical prompts, and the lossy revision's prompts caught as defects.

    python bench/output_equivalence.py [--prompts 8] [--tokens 128] [--seeds 20] [--min-margin 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
from collections.abc import AsyncIterator

import aiohttp

from drafter_operator.benchmark_client import equivalence
from drafter_operator.benchmark_client import prompts as prompt_sets
from drafter_operator.benchmark_client.stream import Endpoint
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator.server import EmulatorServer, bind_host

SM120 = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
DSPARK_5 = ["--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5"]


@contextlib.asynccontextmanager
async def emulator(model: str, extra: list[str], time_scale: float, gpu: str) -> AsyncIterator[str]:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", model, "--port", "0", "--enable-metrics", *extra]
    engine = EmulatedEngine(parse_command_line(argv), Settings(host="127.0.0.1", time_scale=time_scale, seed=1,
                                                               gpu_product=gpu), load_profile())
    server = EmulatorServer(engine, bind_host(engine), 0)
    await server.start()
    try:
        yield server.url
    finally:
        await server.stop()


async def compare(model: str, gpu: str, prompts: list[str], tokens: int, min_margin: float,
                  time_scale: float) -> equivalence.EquivalenceResult:
    async with emulator(model, [], time_scale, "NVIDIA-H200") as base, \
            emulator(model, DSPARK_5, time_scale, gpu) as served, aiohttp.ClientSession() as session:
        return await equivalence.check(session, equivalence.Sides(Endpoint("target", served, model, tokens),
                                                                  Endpoint("baseline", base, model, tokens)),
                                       prompts, tokens, min_margin, False)


async def main(args: argparse.Namespace) -> None:
    prompts = prompt_sets.select(prompt_sets.builtin(), args.prompts)
    timed = await compare("/models/DeepSeek-V4.1-Flash", "NVIDIA-H200", prompts, args.tokens, args.min_margin, 1.0)
    print(f"time per prompt at the modelled speed ({args.prompts} prompts x {args.tokens} tokens, both sides): "
          f"{timed.seconds_per_prompt:.2f} s")
    clean = [await compare(f"/models/target-{seed}", "NVIDIA-H200", prompts, args.tokens, args.min_margin, 0.0)
             for seed in range(args.seeds)]
    lossy = [await compare(f"/models/target-{seed}", SM120, prompts, args.tokens, args.min_margin, 0.0)
             for seed in range(args.seeds)]
    total = args.seeds * args.prompts
    print(f"clean revision, {args.seeds} targets x {args.prompts} prompts ({total}): "
          f"false defects {sum(r.defects for r in clean)}, near-ties {sum(r.near_ties for r in clean)}, "
          f"identical {sum(r.identical for r in clean)}")
    print(f"  near-tie margins: max {max((d.margin for r in clean for d in r.divergences or ()), default=0):.4f} nats")
    caught = [r.defects for r in lossy]
    print(f"lossy revision: defects in {sum(caught)} of {total} prompts; every target caught: "
          f"{all(c > 0 for c in caught)} (fewest {min(caught)}, median {statistics.median(caught)} of {args.prompts})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--min-margin", type=float, default=1.0)
    asyncio.run(main(parser.parse_args()))
