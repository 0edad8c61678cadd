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
from typing import NamedTuple

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


class Token(NamedTuple):
    """One generated token: its id and text, its logprob, and the target's top-2 at its position."""

    id: int
    text: str
    logprob: float
    top: tuple[tuple[int, str, float], tuple[int, str, float]]


_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: 64 well-mixed bits from 64, in a few integer operations. The emulator generates
    tens of thousands of tokens a second under load, so each token costs about a microsecond, not a hash's five
    (a slower emulator would read as a slower engine in the wall-clock benchmarks)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


_UNIT = 1 / 65536  # 16 bits of a mixed word as a number in [0, 1)


@dataclass
class Continuation:
    """One request's greedy continuation, emitted token by token (``next``; ``token`` gives one in full)."""

    candidates: Sequence[tuple[int, str]]  # (token id, text) the target chooses among
    state: int  # mixed from the model and the prompt, then from every emitted token
    speculative: bool = False
    deterministic: bool = False
    fault: Lossy | None = None
    #: Per emitted position: (chosen candidate, top-1, top-2, top-1 logprob, margin, whether chosen was corrupted);
    #: the Token is built only when a response asks for logprobs or ids (most requests only take the text).
    emitted: list[tuple[int, int, int, float, float, bool]] = field(default_factory=list)

    @classmethod
    def start(cls, model: str, prompt_ids: Sequence[int], candidates: Sequence[tuple[int, str]], *,
              speculative: bool = False, deterministic: bool = False, fault: Lossy | None = None) -> Continuation:
        seed = hashlib.blake2b(model.encode() + b"\0" + b",".join(str(i).encode() for i in prompt_ids),
                               digest_size=8).digest()
        return cls(candidates, int.from_bytes(seed, "big"), speculative, deterministic, fault)

    def next(self) -> str:
        """The next token's text (``token(i)`` has the rest)."""
        a = _mix(self.state)
        b = _mix(a)
        n = len(self.candidates)
        first = a % n
        second = (first + 1 + (a >> 16) % (n - 1)) % n
        tie = ((a >> 32) & 0xFFFF) * _UNIT < NEAR_TIE_SHARE
        u = ((a >> 48) & 0xFFFF) * _UNIT
        margin = NEAR_TIE_MARGIN * u if tie else CLEAR_MARGIN_MIN + CLEAR_MARGIN_SPAN * u * u
        chosen, corrupted = first, False
        if self.speculative:
            if tie and not self.deterministic and ((b >> 16) & 0xFFFF) * _UNIT < FLIP_SHARE:
                chosen = second
            fault = self.fault
            if fault is not None and len(self.emitted) >= fault.after and ((b >> 32) & 0xFFFF) * _UNIT < fault.rate:
                chosen = (first + 1 + (b >> 48) % (n - 1)) % n
                if chosen == second:
                    chosen = (chosen + 1) % n if (chosen + 1) % n != first else (chosen + 2) % n
                corrupted = True
        self.emitted.append((chosen, first, second, -0.05 - 0.5 * (b & 0xFFFF) * _UNIT, margin, corrupted))
        token_id, text = self.candidates[chosen]
        self.state = _mix(b ^ token_id)
        return text

    def token(self, position: int) -> Token:
        """The emitted token at ``position`` in full: its logprob and the target's top-2 there."""
        chosen, first, second, best, margin, corrupted = self.emitted[position]
        top = ((*self.candidates[first], round(best, 6)), (*self.candidates[second], round(best - margin, 6)))
        logprob = round(best - margin - 1.0, 6) if corrupted else top[0][2] if chosen == first else top[1][2]
        return Token(*self.candidates[chosen], logprob, top)

    def tokens(self, start: int = 0, end: int | None = None) -> list[Token]:
        return [self.token(i) for i in range(start, len(self.emitted) if end is None else end)]
