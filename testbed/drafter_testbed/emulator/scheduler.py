"""Continuous batching: one engine-wide step loop that advances every running request together.

Like the real engines' schedulers, each iteration is one step: requests that arrived since the last
step are admitted and prefilled in it (their first token comes at its end), every running request
verifies one speculative step (``1 + accepted`` tokens, capped at its ``max_tokens``), and the step's
duration comes from the batching model (``Decoder.step_seconds``) for that batch. With vLLM's
per-batch-size schedule the step drafts the k the schedule gives for the number of requests it
schedules (``Decoder.k_at``), possibly none. Under SGLang's adaptive speculation the step drafts the steps
its decode batch's tier has reached, and the tier learns from the step's accepted drafts
(``emulator/sglang_adaptive.py``). A request arriving
mid-step waits for the next one, as it would on a real engine. The loop runs while there is work and
exits when idle; the next arrival starts it again.

Steps are paced against absolute deadlines (``time_scale`` x modelled time), so event-loop latency
does not accumulate; a loaded CPU makes the loop fall behind and then catch up without sleeping.

Events go to an :class:`Observer` at the end of each step (metrics move when the engine computes the
tokens, not when a slow client reads them); tokens go to each request's queue for its consumer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from drafter_testbed.emulator.model import Decoder
from drafter_testbed.emulator.sglang_adaptive import AdaptiveSteps


@dataclass(eq=False)
class Ticket:
    """One request inside the scheduler."""

    prompt_tokens: int
    max_tokens: int
    arrival: float
    #: Token counts per step for the consumer; ``None`` ends the stream.
    outbox: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    emitted: int = 0
    verify_steps: int = 0
    last_token_at: float = 0.0
    #: How often its draft tokens are rejected relative to the drafter's mean (its traffic category's factor).
    rejection: float = 1.0
    finished: bool = False
    cancelled: bool = False


class Observer(Protocol):
    def on_first_token(self, ticket: Ticket, at: float) -> None: ...

    def on_step(self, ticket: Ticket, emitted: int, drafted: int, accepted: int, at: float) -> None: ...

    def on_finished(self, ticket: Ticket, at: float) -> None: ...


class Scheduler:
    """The step loop of one emulated engine (single asyncio event loop)."""

    def __init__(self, decoder: Decoder, time_scale: float, observer: Observer,
                 clock: Callable[[], float] = time.monotonic, adaptive: AdaptiveSteps | None = None) -> None:
        """``adaptive``: SGLang's adaptive speculation picks each step's k instead of the decoder."""
        self.decoder = decoder
        self.adaptive = adaptive
        self.time_scale = time_scale
        self.observer = observer
        self._clock = clock
        self._waiting: list[Ticket] = []
        self._running: list[Ticket] = []
        self._task: asyncio.Task[None] | None = None
        #: Modelled seconds spent in steps and the number of steps, over the engine's lifetime.
        self.model_seconds = 0.0
        self.steps = 0

    @property
    def batch(self) -> int:
        """Requests decoding in the current step."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, prompt_tokens: int, max_tokens: int, rejection: float = 1.0) -> Ticket:
        """Queue a request for the next step; start the loop if it is idle."""
        ticket = Ticket(prompt_tokens, max(1, max_tokens), arrival=self._clock(), rejection=rejection)
        self._waiting.append(ticket)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="emulator-step-loop")
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """The consumer went away: the request leaves the batch at the next step boundary."""
        ticket.cancelled = True
        if ticket in self._waiting:
            self._waiting.remove(ticket)

    async def _run(self) -> None:
        try:
            await self._loop()
        except BaseException:
            # Never leave a consumer waiting on a dead loop: end every stream.
            for ticket in self._waiting + self._running:
                ticket.outbox.put_nowait(None)
            self._waiting, self._running = [], []
            raise

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        decoder = self.decoder
        while True:
            admitted = [t for t in self._waiting if not t.cancelled]
            self._waiting = []
            running = [t for t in self._running if not t.cancelled]
            if not admitted and not running:
                self._running = []
                return
            k = self._step_k(len(running), len(admitted))
            seconds = decoder.step_seconds(len(running), sum(t.prompt_tokens for t in admitted), k)
            self.model_seconds += seconds
            self.steps += 1
            deadline += seconds * self.time_scale
            delay = deadline - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            now = self._clock()
            still_running = []
            accepted_per_request = []
            # Acceptance is drawn in batch order, so a seeded single stream draws as it always did.
            for ticket in running:
                if ticket.cancelled:
                    continue
                # fewer than k, even none, for some families; less past the drafter's trained length; by category
                drafted, accepted = decoder.draw(k, ticket.prompt_tokens + ticket.emitted, ticket.rejection)
                accepted_per_request.append(accepted)
                emitted = min(1 + accepted, ticket.max_tokens - ticket.emitted)
                ticket.emitted += emitted
                ticket.verify_steps += 1
                self.observer.on_step(ticket, emitted, drafted, accepted, now)
                ticket.last_token_at = now
                ticket.outbox.put_nowait(emitted)
                self._finish_or_keep(ticket, now, still_running)
            if self.adaptive is not None and running:
                self.adaptive.on_verify(accepted_per_request, len(running))
            for ticket in admitted:
                if ticket.cancelled:
                    continue
                ticket.emitted = 1
                self.observer.on_first_token(ticket, now)
                ticket.last_token_at = now
                ticket.outbox.put_nowait(1)
                self._finish_or_keep(ticket, now, still_running)
            self._running = still_running

    def _step_k(self, decoding: int, admitted: int) -> int:
        """Draft tokens per decoding request in a step that decodes ``decoding`` requests and prefills
        ``admitted``."""
        if self.adaptive is None:
            # vLLM's dynamic speculation picks this step's k from every request it schedules.
            return self.decoder.k_at(decoding + admitted)
        # SGLang activates the steps of its decode batch's tier before drafting; a step that only prefills keeps
        # the steps last active.
        return self.adaptive.steps_for_batch(decoding) if decoding else self.adaptive.active

    def _finish_or_keep(self, ticket: Ticket, now: float, still_running: list[Ticket]) -> None:
        if ticket.emitted >= ticket.max_tokens:
            ticket.finished = True
            self.observer.on_finished(ticket, now)
            ticket.outbox.put_nowait(None)
        else:
            still_running.append(ticket)
