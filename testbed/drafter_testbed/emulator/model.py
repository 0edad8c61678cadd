"""The emulator's settings from the environment, step timing and acceptance draws.

Timing follows the batching model of ``drafter_testbed/emulator/batching.py`` (docs/emulator-model.md): the engine
runs one step at a time for all running requests (``emulator/scheduler.py``). A step with ``B``
decoding requests and ``P`` newly admitted prompt tokens costs
``T max(1, B v / N_t) + f c T max(1, B w / N_d) + P / R_p`` (``f`` draft forwards per step, set by
the drafter family) and emits ``1 + n`` tokens per decoding request, where ``n`` counts draft tokens
accepted with per-position probability ``a d^i`` (``d = 1``: i.i.d.), stopping at the first rejection
(so ``E[n] = a + a^2 + ... + a^k`` for ``d = 1``); a newly admitted request gets its first token at the
end of the step that prefills it. A single stream of a chain keeps the single-stream model of
``engines/speedup.py``: prefill ``T + P / R_p``, then ``T (1 + k c)`` per verification step.

Steps are scheduled against absolute deadlines, so event-loop wake-up latency does not accumulate
over a run: a 512-token stream ends within a millisecond or two of its modelled time.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from drafter_operator.engines import dynamic, speedup
from drafter_testbed.emulator import batching

ENV_HOST = "DRAFTER_EMULATOR_HOST"
ENV_STARTUP_SECONDS = "DRAFTER_EMULATOR_STARTUP_SECONDS"
ENV_FAIL_STARTUP = "DRAFTER_EMULATOR_FAIL_STARTUP"
ENV_TIME_SCALE = "DRAFTER_EMULATOR_TIME_SCALE"
ENV_SEED = "DRAFTER_EMULATOR_SEED"
ENV_PROFILE = "DRAFTER_EMULATOR_PROFILE"
ENV_ACCEPTANCE = "DRAFTER_EMULATOR_ACCEPTANCE"
ENV_DOWNLOAD_SECONDS = "DRAFTER_EMULATOR_DOWNLOAD_SECONDS"
#: A drafter trained at a shorter length (speculators#613): past this many tokens of context (prompt and output
#: so far) a request's per-token acceptance falls to ENV_LONG_CONTEXT_ACCEPTANCE times its own.
ENV_TRAINED_LENGTH = "DRAFTER_EMULATOR_TRAINED_LENGTH"
ENV_LONG_CONTEXT_ACCEPTANCE = "DRAFTER_EMULATOR_LONG_CONTEXT_ACCEPTANCE"
#: Acceptance by traffic category: each request's category, inferred from its text
#: (drafter_operator/capture/categorize.py), scales how often its draft tokens are rejected by the profile's
#: ``categories`` factor. Off by default, so runs calibrated on one acceptance per drafter keep it.
ENV_CATEGORIES = "DRAFTER_EMULATOR_CATEGORIES"
#: The node's nvidia.com/gpu.product label (the local process runner sets it from the pod's node).
ENV_GPU_PRODUCT = "DRAFTER_EMULATOR_GPU_PRODUCT"
#: How long a worker of a replica that spans nodes tries to reach its leader before it gives up (emulator/group.py).
ENV_GROUP_JOIN_SECONDS = "DRAFTER_EMULATOR_GROUP_JOIN_SECONDS"

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
    #: Wall-clock seconds an emulated hub download takes, per model not in the hub cache (emulator/hub.py).
    download_seconds: float = 0.0
    #: The GPU the engine "runs" on: what a lossy speculative path depends on (emulator/outputs.py).
    gpu_product: str | None = None
    #: Context length the drafter was trained for; None: acceptance does not depend on the context.
    trained_length: int | None = None
    #: Share of its acceptance a request keeps past ``trained_length``.
    long_context_acceptance: float = 0.5
    #: Whether a request's traffic category scales its acceptance (the profile's ``categories``).
    category_acceptance: bool = False
    #: Wall-clock seconds a group's worker keeps trying to reach its leader (torch.distributed's rendezvous waits
    #: minutes for its store too; a pod's DNS name and its leader's listener come some seconds after it starts).
    group_join_seconds: float = 300.0

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
        categories = env.get(ENV_CATEGORIES, "").strip().lower()
        if categories not in _TRUE | _FALSE:
            raise ValueError(f"{ENV_CATEGORIES}={categories!r} must be 1 or 0")
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
            download_seconds=number(ENV_DOWNLOAD_SECONDS, 0.0),
            gpu_product=env.get(ENV_GPU_PRODUCT, "").strip() or None,
            trained_length=int(number(ENV_TRAINED_LENGTH, 0.0, 1.0)) if env.get(ENV_TRAINED_LENGTH, "").strip() else None,
            long_context_acceptance=number(ENV_LONG_CONTEXT_ACCEPTANCE, 0.5, 0.0, 1.0),
            category_acceptance=categories in _TRUE,
            group_join_seconds=number(ENV_GROUP_JOIN_SECONDS, 300.0),
        )


@dataclass(frozen=True)
class Family:
    """How a drafter family's acceptance and drafted length vary per step (emulator/profiles.py ``Shape``)."""

    decay: float = 1.0
    match_rate: float = 1.0
    confidence_recall: float = 0.0

    @property
    def varies(self) -> bool:
        """Whether steps verify fewer tokens than ``k + 1`` on average (no match, or a capped block)."""
        return self.match_rate < 1.0 or self.confidence_recall > 0.0

    def mean_drafted(self, curve: tuple[float, ...], k: int) -> float:
        """Expected drafted tokens per step: ``k`` when matched and not capped, the accepted ones when capped."""
        reach, below_k = 1.0, 0.0
        for i in range(k):  # P(exactly i accepted) * i, for i < k: a capped block drafts i
            stop = reach * (1.0 - curve[i])
            below_k += stop * i
            reach *= curve[i]
        capped = self.confidence_recall * below_k + (1.0 - self.confidence_recall * (1.0 - reach)) * k
        return self.match_rate * capped

    def mean_verified(self, curve: tuple[float, ...], k: int) -> float:
        """Expected tokens verified per request and step: the drafted ones plus the bonus token."""
        return 1.0 + self.mean_drafted(curve, k)


class Decoder:
    """Step timing and acceptance draws for one served configuration."""

    def __init__(self, k: int, acceptance: float, *, target_step_ms: float, draft_cost: float,
                 rng: random.Random, costs: batching.StepCosts | None = None,
                 verify_tokens: int | None = None, draft_width: int = 1,
                 schedule: Iterable[tuple[int, int, int]] = (), method: str = "",
                 family: Family | None = None, trained_length: int | None = None, long_context: float = 1.0,
                 step_choices: Iterable[int] = ()) -> None:
        """``costs`` gives the batching parameters (its ``target_step_ms`` and ``draft_cost`` are
        replaced by the arguments); ``verify_tokens`` and ``draft_width`` describe tree drafting;
        ``schedule`` is vLLM's per-batch-size k (engines/dynamic.py), empty for k at every batch size;
        ``method`` picks the family's draft cost (``batching.speculation_for``); ``family`` how its
        acceptance and drafted length vary per step; ``step_choices`` the other draft lengths a step may
        take, above k too (SGLang's adaptive candidates, emulator/sglang_adaptive.py)."""
        if k < 0:
            raise ValueError("k must be >= 0")
        self.k = k
        self.step_choices = tuple(sorted(set(step_choices)))
        #: The drafter's trained context length and the share of acceptance kept past it (``draw``).
        self.trained_length = trained_length
        self.long_context = long_context
        self.family = family or Family()
        self.schedule = tuple(schedule) if k else ()
        self.target_step_ms = target_step_ms
        self.draft_cost = draft_cost
        base = costs or batching.StepCosts()
        self.costs = batching.StepCosts(target_step_ms, draft_cost, base.compute_knee_tokens,
                                        base.draft_knee_tokens, base.prefill_tokens_per_second)
        self._method, self._tree = method, (verify_tokens, draft_width)
        self.rng = rng
        self._acceptance = 0.0
        self.acceptance = acceptance

    def _shape(self, k: int) -> batching.Speculation:
        """What a step drafting ``k`` computes; a step of the family's mean verify window per request."""
        verify, width = self._tree if k == self.k else (None, 1)
        if verify is None and k and self.family.varies:
            verify = self.family.mean_verified(self._curve, k)
        return batching.speculation_for(self._method, k, verify, width)

    @property
    def acceptance(self) -> float:
        return self._acceptance

    @acceptance.setter
    def acceptance(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"a per-token acceptance lies in [0, 1], got {value!r}")
        self._acceptance = float(value)
        # Long enough for the longest draft a step may take (adaptive steps may rise above the initial k).
        self._curve = speedup.position_curve(self._acceptance, max(self.k, *self.step_choices, 0), self.family.decay)
        # The speculation depends on the acceptance where the drafted length does (a confidence head).
        self.speculation = self._shape(self.k)
        # What a step computes when the schedule gives it k' < k, or adaptive steps another k': a chain of k'
        # (0: no drafting at all).
        self._speculation_by_k = {**{step_k: self._shape(step_k) for step_k in self.step_choices if step_k != self.k},
                                  self.k: self.speculation,
                                  **{step_k: self._shape(step_k) for _, _, step_k in self.schedule if step_k < self.k}}

    @property
    def curve(self) -> tuple[float, ...]:
        """The per-step acceptance per position the batching model sees (no match: nothing accepted), for the
        configured k's positions."""
        if not self._curve or not self.k:
            return ()
        return (self._curve[0] * self.family.match_rate, *self._curve[1:self.k])

    @property
    def speculative(self) -> bool:
        return self.k > 0

    def k_at(self, scheduled: int) -> int:
        """Draft tokens per request in a step that schedules ``scheduled`` requests (vLLM counts every
        request of the step, prefills included: ``len(num_scheduled_tokens)``)."""
        if not self.schedule:
            return self.k
        return dynamic.k_for_batch(self.schedule, max(1, scheduled), self.k)

    def prefill_seconds(self, prompt_tokens: int = 1) -> float:
        """A step that only prefills ``prompt_tokens`` (an idle engine's time to first token)."""
        return batching.step_ms(0, self.speculation, self.costs, prompt_tokens) / 1000.0

    def step_seconds(self, running: int = 1, prefill_tokens: int = 0, k: int | None = None) -> float:
        """One engine step: ``running`` requests verify ``k`` draft tokens each (default: the configured
        k) while ``prefill_tokens`` are prefilled."""
        spec = self.speculation if k is None else self._speculation_by_k[k]
        return batching.step_ms(running, spec, self.costs, prefill_tokens) / 1000.0

    def draw(self, k: int | None = None, context: int = 0, rejection: float = 1.0) -> tuple[int, int]:
        """``(drafted, accepted)`` in one verification step of up to ``k`` drafts (default: the configured k), for a
        request with ``context`` tokens so far: past ``trained_length`` each position's acceptance is scaled by
        ``long_context`` (a drafter trained at a shorter length). ``rejection`` scales how often each position
        is rejected, ``1 - (1 - p) rejection`` (its traffic category's factor; 1: the drafter's mean).

        A prompt-lookup drafter that finds no match drafts nothing; position ``i`` is accepted with the
        curve's ``a decay^i``, stopping at the first rejection; DSpark's confidence head may end the
        block right after the accepted tokens (the only draws a plain drafter makes are the positions')."""
        limit = self.k if k is None else k
        random_, family = self.rng.random, self.family
        if limit == 0 or (family.match_rate < 1.0 and random_() >= family.match_rate):
            return 0, 0
        accepted = 0
        curve = self._curve
        scale = self.long_context if self.trained_length is not None and context > self.trained_length else 1.0
        if rejection != 1.0:
            curve = tuple(max(0.0, 1.0 - (1.0 - p) * rejection) for p in curve)
        while accepted < limit and random_() < curve[accepted] * scale:
            accepted += 1
        drafted = limit
        if family.confidence_recall and accepted < limit and random_() < family.confidence_recall:
            drafted = accepted
        return drafted, accepted

    def draw_accepted(self, k: int | None = None) -> int:
        """Accepted draft tokens in one verification step of ``k`` drafts (default: the configured k)."""
        return self.draw(k)[1]

    def prediction(self) -> speedup.Prediction:
        """The single-stream prediction (the batching model at one stream)."""
        if not self.family.varies and self.speculation.forwards == self.k:
            return speedup.predict(self._acceptance, self.k, self.draft_cost, self.target_step_ms)
        spec, costs = self.speculation, self.costs
        length = batching.mean_length(self.curve, self.k)
        drafted = self.family.mean_drafted(self._curve, self.k)
        step = batching.step_ms(1, spec, costs)
        return speedup.Prediction(self._acceptance, self.k, self.draft_cost, self.target_step_ms, length,
                                  (length - 1.0) / drafted if drafted else None,
                                  batching.speedup_at(1, self.curve, spec, costs), 1000.0 * length / step,
                                  1000.0 / self.target_step_ms, step)

    def prediction_under_load(self, streams: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)) -> dict[str, object]:
        """Aggregate throughput and speedup the batching model predicts at each concurrency."""
        a, spec, costs = self.curve, self.speculation, self.costs
        crossover = batching.crossover_streams(a, spec, costs) if self.speculative else None
        at = {n: self._speculation_by_k[self.k_at(n)] for n in streams}  # a scheduled k per batch size
        return {
            "computeKneeTokens": costs.compute_knee_tokens,
            "draftKneeTokens": costs.draft_knee_tokens,
            "prefillTokensPerSecond": costs.prefill_tokens_per_second,
            "tokensVerifiedPerRequest": spec.verified_per_request,
            "breakEvenStreams": crossover,
            "byStreams": [{"streams": n, "numSpeculativeTokens": at[n].k,
                           "tokensPerSecond": batching.tokens_per_second(n, a, at[n], costs),
                           "speedup": batching.speedup_at(n, a, at[n], costs)} for n in streams],
        }


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
