"""The emulated engine: startup state, token generation on the modelled clock, counters and state.

Every request is generated in full (``max_tokens`` tokens; a request without ``max_tokens`` stops
"naturally" at a default length). Token text is synthetic: one word per token.

A verification step always drafts ``k`` tokens even when fewer tokens remain before ``max_tokens``;
tokens past the limit are discarded after being counted, as the engines' rejection samplers count
them. So, per request: ``drafts == verification steps`` and ``emitted tokens <= 1 + steps + accepted``.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from drafter_operator.emulator.cmdline import EngineConfig
from drafter_operator.emulator.exporters import Exporter, SglangExporter, VllmExporter
from drafter_operator.emulator.model import Decoder, Pacer, Settings
from drafter_operator.emulator.profiles import Profile

VOCABULARY = (
    "the model drafts tokens and the target verifies them in one forward pass while the scheduler "
    "keeps every request moving through prefill and decode with cached keys values attention heads "
    "experts routing layers weights speculative acceptance length rate drafter serving cluster node "
    "replica revision benchmark window counter gauge histogram latency throughput stream chunk"
).split()

ENGINE_VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}


@dataclass
class Totals:
    """Lifetime counts, for ``/emulator/state``."""

    requests: int = 0
    aborted: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    verification_steps: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0


class EmulatedEngine:
    def __init__(self, config: EngineConfig, settings: Settings, profile: Profile,
                 clock=time.monotonic) -> None:
        self.config = config
        self.settings = settings
        self.profile = profile
        self._clock = clock
        self.started_at = clock()
        # Acceptance draws and synthetic text use separate streams, so the text never shifts the draws.
        self.rng = random.Random(settings.seed)
        self.text_rng = random.Random(None if settings.seed is None else f"text-{settings.seed}")
        spec = config.speculation
        if spec is None:
            acceptance, source = 0.0, "no speculation"
        elif settings.acceptance is not None:
            acceptance, source = settings.acceptance, "env:DRAFTER_EMULATOR_ACCEPTANCE"
        else:
            found = profile.lookup(config.engine, spec.drafter_key)
            acceptance, source = found.acceptance, found.source
        self.acceptance_source = source
        self.decoder = Decoder(config.k, acceptance, target_step_ms=profile.target_step_ms,
                               draft_cost=profile.draft_cost, rng=self.rng,
                               batch_slowdown=settings.batch_slowdown)
        self.exporter: Exporter
        if config.engine == "vllm":
            self.exporter = VllmExporter(config.model_name, config.k)
        else:
            self.exporter = SglangExporter(config.model_name, config.k,
                                           spec.num_draft_tokens if spec and spec.num_draft_tokens else 0)
        self.running = 0
        self._kv_tokens = 0
        self.totals = Totals()

    # ------------------------------------------------------------------------------------- lifecycle

    @property
    def ready(self) -> bool:
        if self.settings.fail_startup:
            return False
        return self._clock() - self.started_at >= self.settings.startup_seconds

    @property
    def status(self) -> str:
        if self.settings.fail_startup:
            return "failed"
        return "ready" if self.ready else "starting"

    def set_acceptance(self, acceptance: float) -> None:
        self.decoder.acceptance = acceptance
        self.acceptance_source = "control endpoint"

    # ------------------------------------------------------------------------------------ generation

    def _load_changed(self, running_delta: int, kv_delta: int) -> None:
        self.running += running_delta
        self._kv_tokens += kv_delta
        self.exporter.set_load(self.running, self._kv_tokens)

    def _words(self, n: int) -> list[str]:
        return [" " + self.text_rng.choice(VOCABULARY) for _ in range(n)]

    async def generate(self, prompt_tokens: int, max_tokens: int, *, streaming: bool) -> AsyncIterator[list[str]]:
        """Yield the tokens of each engine step (prefill first) on the modelled clock.

        Closing the generator early counts the request as aborted.
        """
        decoder, exporter = self.decoder, self.exporter
        arrival = time.monotonic()
        pacer = Pacer(self.settings.time_scale)
        emitted = steps = 0
        finished = False
        self._load_changed(+1, prompt_tokens)
        try:
            await pacer.advance(decoder.prefill_seconds())
            first = time.monotonic()
            exporter.prefill(prompt_tokens, first - arrival, streaming)
            self.totals.prompt_tokens += prompt_tokens
            emitted = 1
            self._load_changed(0, 1)
            self.totals.generated_tokens += 1
            yield self._words(1)
            last = first
            while emitted < max_tokens:
                await pacer.advance(decoder.step_seconds(self.running))
                accepted = decoder.draw_accepted() if decoder.speculative else 0
                n = min(1 + accepted, max_tokens - emitted)
                now = time.monotonic()
                exporter.step(n, decoder.k, accepted, now - last)
                last = now
                steps += 1
                emitted += n
                self._load_changed(0, n)
                self.totals.generated_tokens += n
                if decoder.speculative:
                    self.totals.verification_steps += 1
                    self.totals.draft_tokens += decoder.k
                    self.totals.accepted_tokens += accepted
                yield self._words(n)
            finished = True
        finally:
            self._load_changed(-1, -(prompt_tokens + emitted))
            if finished:
                self.totals.requests += 1
                exporter.finished(prompt_tokens=prompt_tokens, generated=emitted,
                                  verify_steps=steps if decoder.speculative else 0,
                                  e2e=time.monotonic() - arrival, finish_reason="length", streaming=streaming)
            else:
                self.totals.aborted += 1
                exporter.aborted()

    # ---------------------------------------------------------------------------------------- state

    def state(self) -> dict[str, object]:
        config, spec = self.config, self.config.speculation
        prediction = self.decoder.prediction().as_dict()
        totals = self.totals
        measured = {
            "requests": totals.requests,
            "abortedRequests": totals.aborted,
            "promptTokens": totals.prompt_tokens,
            "generatedTokens": totals.generated_tokens,
            "verificationSteps": totals.verification_steps,
            "draftTokens": totals.draft_tokens,
            "acceptedTokens": totals.accepted_tokens,
            "acceptanceRate": (totals.accepted_tokens / totals.draft_tokens) if totals.draft_tokens else None,
            "meanAcceptanceLength": (1 + totals.accepted_tokens / totals.verification_steps)
            if totals.verification_steps else None,
        }
        return {
            "engine": config.engine,
            "engineVersion": ENGINE_VERSIONS[config.engine],
            "entrypoint": config.entrypoint,
            "model": config.model,
            "servedModelName": config.model_name,
            "status": self.status,
            "uptimeSeconds": self._clock() - self.started_at,
            "running": self.running,
            "speculation": None if spec is None else {
                "method": spec.method,
                "drafter": spec.draft_model,
                "numSpeculativeTokens": spec.num_speculative_tokens,
                "eagleTopk": spec.eagle_topk,
                "numDraftTokens": spec.num_draft_tokens,
            },
            "acceptance": self.decoder.acceptance,
            "acceptanceSource": self.acceptance_source,
            "profile": self.profile.origin,
            "timeScale": self.settings.time_scale,
            "batchSlowdown": self.settings.batch_slowdown,
            "seed": self.settings.seed,
            "prediction": prediction,
            "totals": measured,
            "ignoredFlags": {k: v for k, v in config.ignored.items()},
        }
