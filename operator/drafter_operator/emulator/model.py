"""The emulator's clock and decode model: settings from the environment, step timing, acceptance draws.

Timing (ARCHITECTURE.md section 4): the prefill produces the first token in one target step; each
later verification step costs ``target_step x (1 + k c)`` and emits ``1 + n`` tokens, where ``n``
counts draft tokens accepted i.i.d. with per-token probability ``a``, stopping at the first rejection
(so ``E[n] = a + a^2 + ... + a^k``). Without speculation (``k = 0``) a step costs one target step
and emits one token. Prompt length does not change the prefill cost.

Concurrency: every request decodes on its own clock; batching is not modelled unless
``DRAFTER_EMULATOR_BATCH_SLOWDOWN`` is set, in which case a step costs ``1 + s x (running - 1)``
times more while ``running`` requests decode (a crude linear slowdown, off by default).

Sleeps are scheduled against absolute deadlines, so event-loop wake-up latency does not accumulate
over a request: a 512-token stream ends within a millisecond or two of its modelled time.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from drafter_operator.engines import speedup

ENV_HOST = "DRAFTER_EMULATOR_HOST"
ENV_STARTUP_SECONDS = "DRAFTER_EMULATOR_STARTUP_SECONDS"
ENV_FAIL_STARTUP = "DRAFTER_EMULATOR_FAIL_STARTUP"
ENV_TIME_SCALE = "DRAFTER_EMULATOR_TIME_SCALE"
ENV_SEED = "DRAFTER_EMULATOR_SEED"
ENV_PROFILE = "DRAFTER_EMULATOR_PROFILE"
ENV_ACCEPTANCE = "DRAFTER_EMULATOR_ACCEPTANCE"
ENV_BATCH_SLOWDOWN = "DRAFTER_EMULATOR_BATCH_SLOWDOWN"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


@dataclass(frozen=True)
class Settings:
    """Emulator knobs that are not engine flags (all from ``DRAFTER_EMULATOR_*``)."""

    #: Bind here instead of --host (the local process runner sets the pod's loopback IP).
    host: str | None = None
    #: Wall-clock seconds of simulated model loading (not scaled by ``time_scale``).
    startup_seconds: float = 0.0
    #: Never become healthy (rollback tests).
    fail_startup: bool = False
    #: Multiplies every modelled duration: 0.1 runs ten times faster, 0 does not sleep at all.
    time_scale: float = 1.0
    seed: int | None = None
    profile_path: str | None = None
    #: Per-token acceptance that overrides the profile.
    acceptance: float | None = None
    batch_slowdown: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def number(name: str, default: float, minimum: float = 0.0, maximum: float = math.inf) -> float:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number") from None
            if not minimum <= value <= maximum:
                raise ValueError(f"{name}={raw!r} must lie in [{minimum}, {maximum}]")
            return value

        fail = env.get(ENV_FAIL_STARTUP, "").strip().lower()
        if fail not in _TRUE | _FALSE:
            raise ValueError(f"{ENV_FAIL_STARTUP}={fail!r} must be 1 or 0")
        seed_raw = env.get(ENV_SEED, "").strip()
        try:
            seed = int(seed_raw) if seed_raw else None
        except ValueError:
            raise ValueError(f"{ENV_SEED}={seed_raw!r} is not an integer") from None
        acceptance_raw = env.get(ENV_ACCEPTANCE, "").strip()
        return cls(
            host=env.get(ENV_HOST, "").strip() or None,
            startup_seconds=number(ENV_STARTUP_SECONDS, 0.0),
            fail_startup=fail in _TRUE,
            time_scale=number(ENV_TIME_SCALE, 1.0),
            seed=seed,
            profile_path=env.get(ENV_PROFILE, "").strip() or None,
            acceptance=number(ENV_ACCEPTANCE, 0.0, 0.0, 1.0) if acceptance_raw else None,
            batch_slowdown=number(ENV_BATCH_SLOWDOWN, 0.0),
        )


class Decoder:
    """Step timing and acceptance draws for one served configuration."""

    def __init__(self, k: int, acceptance: float, *, target_step_ms: float, draft_cost: float,
                 rng: random.Random, batch_slowdown: float = 0.0) -> None:
        if k < 0:
            raise ValueError("k must be >= 0")
        self.k = k
        self.target_step_ms = target_step_ms
        self.draft_cost = draft_cost
        self.batch_slowdown = batch_slowdown
        self.rng = rng
        self._acceptance = 0.0
        self.acceptance = acceptance

    @property
    def acceptance(self) -> float:
        return self._acceptance

    @acceptance.setter
    def acceptance(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"a per-token acceptance lies in [0, 1], got {value!r}")
        self._acceptance = float(value)

    @property
    def speculative(self) -> bool:
        return self.k > 0

    def prefill_seconds(self) -> float:
        return self.target_step_ms / 1000.0

    def step_seconds(self, running: int = 1) -> float:
        base = speedup.step_seconds(self.k, self.draft_cost, self.target_step_ms)
        return base * (1.0 + self.batch_slowdown * max(running - 1, 0))

    def draw_accepted(self) -> int:
        """Accepted draft tokens in one verification step (0..k)."""
        accepted = 0
        a = self._acceptance
        random_ = self.rng.random
        while accepted < self.k and random_() < a:
            accepted += 1
        return accepted

    def prediction(self) -> speedup.Prediction:
        return speedup.predict(self._acceptance, self.k, self.draft_cost, self.target_step_ms)


class Pacer:
    """Sleeps until absolute deadlines, so wake-up latency never accumulates."""

    def __init__(self, time_scale: float) -> None:
        self.time_scale = time_scale
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time()

    async def advance(self, model_seconds: float) -> None:
        self._deadline += model_seconds * self.time_scale
        delay = self._deadline - self._loop.time()
        await asyncio.sleep(delay if delay > 0 else 0)
