"""What the emulated target says, and how speculation may change it (docs/emulator-model.md, "Outputs").

The target's greedy continuation of a prompt is a pure function of the served model name and the prompt's
token ids: each position's state hashes the previous state and the token emitted there, and names the
position's top-1 and top-2 candidates (single-token words of the shipped tokenizer) and their logprob
margin. A divergence therefore changes everything after it, as a real continuation conditioned on another
prefix does. Without speculation the engine always emits the top-1 token.

With speculation two things can differ, as on real engines:
- Near-ties. A verify forward (k + 1 tokens at once) and a decode step are not bit-exact, so where the
  target's top-2 margin is tiny (``NEAR_TIE_MARGIN``) the verify forward may pick the runner-up
  (``FLIP_SHARE`` of those positions). The engines' deterministic modes (vLLM ``VLLM_BATCH_INVARIANT=1``,
  SGLang ``--enable-deterministic-inference``) remove these flips.
- A lossy fault (``LOSSY``): an engine x method x k x GPU product whose speculative path corrupts the
  output from some position on, e.g. DSpark at depth 5 on SM120 GPUs (sglang#33800). From ``after`` on,
  ``rate`` of the positions emit a token that is neither candidate, whatever the margin.
The logprobs a response reports are the target's own at each position (top-1 first), so a client
comparing two sides reads the baseline's margin at the first divergence, as it would from a real engine.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

#: Share of positions whose top-2 margin is a near-tie, and how near (nats).
NEAR_TIE_SHARE = 0.03
NEAR_TIE_MARGIN = 0.05
#: Share of near-ties a verify forward resolves the other way outside a deterministic mode.
FLIP_SHARE = 0.3
#: Margins of the other positions: 0.3 nats to about 8, most of them a few nats.
CLEAR_MARGIN_MIN = 0.3
CLEAR_MARGIN_SPAN = 7.7


@dataclass(frozen=True)
class Lossy:
    """A speculative path that corrupts output: where it applies and how it corrupts."""

    engine: str
    method: str  # the engine's method name, case-insensitive (vLLM "dspark", SGLang "DSPARK")
    k: int  # draft tokens per step (SGLang's block drafters: the block's k)
    gpu_products: str  # a regex over the node label nvidia.com/gpu.product
    after: int  # first generated position that may be corrupted
    rate: float  # share of positions from ``after`` on that are corrupted
    issue: str

    def applies(self, engine: str, method: str | None, k: int, gpu_product: str | None) -> bool:
        return (engine == self.engine and method is not None and method.lower() == self.method.lower()
                and k == self.k and gpu_product is not None and re.search(self.gpu_products, gpu_product) is not None)


#: The faults the emulator reproduces. SM120 is the RTX PRO 6000 Blackwell (and the B300's sibling in the issue).
LOSSY: tuple[Lossy, ...] = (
    Lossy(engine="sglang", method="dspark", k=5, gpu_products=r"(?i)RTX-PRO-6000|B300", after=24, rate=0.25,
          issue="https://github.com/sgl-project/sglang/issues/33800"),
)


def lossy_fault(engine: str, method: str | None, k: int, gpu_product: str | None) -> Lossy | None:
    return next((fault for fault in LOSSY if fault.applies(engine, method, k, gpu_product)), None)


@dataclass(frozen=True)
class Token:
    """One generated token: its id and text, its logprob, and the target's top-2 at its position."""

    id: int
    text: str
    logprob: float
    top: tuple[tuple[int, str, float], tuple[int, str, float]]


def _unit(digest: bytes, offset: int) -> float:
    """A number in [0, 1) from 4 bytes of ``digest``."""
    return int.from_bytes(digest[offset:offset + 4], "big") / 2 ** 32


@dataclass
class Continuation:
    """One request's greedy continuation, emitted token by token (``next``)."""

    candidates: Sequence[tuple[int, str]]  # (token id, text) the target chooses among
    state: bytes  # the hash of the model and the prompt, then of every emitted token
    speculative: bool = False
    deterministic: bool = False
    fault: Lossy | None = None
    emitted: list[Token] = field(default_factory=list)

    @classmethod
    def start(cls, model: str, prompt_ids: Sequence[int], candidates: Sequence[tuple[int, str]], *,
              speculative: bool = False, deterministic: bool = False, fault: Lossy | None = None) -> Continuation:
        seed = hashlib.blake2b(model.encode() + b"\0" + b",".join(str(i).encode() for i in prompt_ids),
                               digest_size=32).digest()
        return cls(candidates, seed, speculative, deterministic, fault)

    def next(self) -> Token:
        position = len(self.emitted)
        digest = hashlib.blake2b(self.state, digest_size=32).digest()
        n = len(self.candidates)
        first = int.from_bytes(digest[0:4], "big") % n
        second = (first + 1 + int.from_bytes(digest[4:8], "big") % (n - 1)) % n
        tie = _unit(digest, 8) < NEAR_TIE_SHARE
        margin = NEAR_TIE_MARGIN * _unit(digest, 12) if tie else \
            CLEAR_MARGIN_MIN + CLEAR_MARGIN_SPAN * _unit(digest, 12) ** 2
        best = -0.05 - 0.5 * _unit(digest, 16)
        top = ((*self.candidates[first], round(best, 6)), (*self.candidates[second], round(best - margin, 6)))
        chosen = top[0]
        if self.speculative and tie and not self.deterministic and _unit(digest, 20) < FLIP_SHARE:
            chosen = top[1]
        if self.speculative and self.fault is not None and position >= self.fault.after \
                and _unit(digest, 24) < self.fault.rate:
            wrong = (first + 1 + int.from_bytes(digest[28:32], "big") % (n - 1)) % n
            if wrong == second:
                wrong = (wrong + 1) % n if (wrong + 1) % n != first else (wrong + 2) % n
            chosen = (*self.candidates[wrong], round(best - margin - 1.0, 6))
        token = Token(id=chosen[0], text=chosen[1], logprob=chosen[2], top=top)
        self.emitted.append(token)
        self.state = hashlib.blake2b(digest + str(token.id).encode(), digest_size=32).digest()
        return token
