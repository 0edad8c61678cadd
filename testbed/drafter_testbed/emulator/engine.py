"""The emulated engine: startup state, token generation on the modelled clock, counters and state.

Every request is generated in full (``max_tokens`` tokens; a request without ``max_tokens`` stops
"naturally" at a default length). Token text is synthetic: one word per token. Requests are batched
continuously by one engine-wide step loop (``emulator/scheduler.py``), timed by the batching model
(``drafter_testbed/emulator/batching.py``): concurrent requests slow each other down as a real engine's do.

A verification step drafts ``k`` tokens even when fewer tokens remain before ``max_tokens``; tokens
past the limit are discarded after being counted, as the engines' rejection samplers count them. A
family whose drafted length varies (prompt lookup without a match, suffix decoding's and a capped
DSpark block's early stop; ``model.Family``) drafts fewer, or none: vLLM then counts no draft for that
step. So, per request: ``drafts <= verification steps`` (equal for a drafter that always drafts ``k``)
and ``emitted tokens <= 1 + steps + accepted``.
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass

from drafter_operator import engines
from drafter_operator.capture import categorize

from drafter_testbed.emulator.cmdline import EngineConfig
from drafter_testbed.emulator.exporters import Exporter, SglangExporter, VllmExporter
from drafter_testbed.emulator.families import stops_early, vllm_schedule_dropped
from drafter_testbed.emulator.hub import EMULATOR_ENV_PREFIX, HubReport
from drafter_testbed.emulator import outputs, request_log
from drafter_testbed.emulator import tokenizer as tok
from drafter_testbed.emulator.model import Decoder, Family, Settings
from drafter_testbed.emulator.profiles import DEFAULT_SHAPE, Profile
from drafter_testbed.emulator.scheduler import Scheduler, Ticket
from drafter_testbed.emulator.sglang_adaptive import AdaptiveSteps

VOCABULARY = (
    "the model drafts tokens and the target verifies them in one forward pass while the scheduler "
    "keeps every request moving through prefill and decode with cached keys values attention heads "
    "experts routing layers weights speculative acceptance length rate drafter serving cluster node "
    "replica revision benchmark window counter gauge histogram latency throughput stream chunk"
).split()

#: The release each engine's profile emulates: the one the operator pins (engines/<name>.py VERSION).
ENGINE_VERSIONS = {name: module.VERSION for name, module in engines.ENGINES.items()}


@functools.lru_cache(maxsize=1)
def candidates() -> tuple[tuple[int, str], ...]:
    """The words of VOCABULARY as (token id, text) of the shipped tokenizer: each is one token there."""
    tokenizer = tok.shipped()
    pairs = []
    for word in VOCABULARY:
        ids = tokenizer.encode(" " + word, add_special_tokens=False)
        if len(ids) == 1:
            pairs.append((ids[0], tokenizer.decode(ids)))
    return tuple(dict.fromkeys(pairs))


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
    #: Sum of each step's accepted count squared: with the counts above, the spread of a step's acceptance
    #: length, which tells how far a window of n steps may lie from the lifetime mean by chance alone.
    accepted_squares: int = 0
    #: Every step of a speculative decoder, one that drafted nothing too: SGLang counts each as a
    #: verification (``spec_verify_ct``), vLLM only those that drafted (``verification_steps``).
    verify_forwards: int = 0


def _length_statistics(totals: Totals, steps: int) -> dict[str, float | int] | None:
    """Mean and population standard deviation of ``1 + accepted`` over ``steps`` steps."""
    if not steps:
        return None
    mean = totals.accepted_tokens / steps
    return {"steps": steps, "mean": 1 + mean,
            "stdev": math.sqrt(max(totals.accepted_squares / steps - mean * mean, 0.0))}


def _tree_shape(spec) -> dict[str, int]:
    """Tokens verified per request and draft width of SGLang tree drafting (``topk > 1``).

    With a chain (``topk`` 1 or unset) the target verifies ``k + 1`` tokens per request; a tree
    verifies ``--speculative-num-draft-tokens`` and each draft step expands ``topk`` branches.
    """
    if spec is None or not spec.eagle_topk or spec.eagle_topk <= 1 or not spec.num_draft_tokens:
        return {}
    return {"verify_tokens": int(spec.num_draft_tokens), "draft_width": int(spec.eagle_topk)}


class EmulatedEngine:
    def __init__(self, config: EngineConfig, settings: Settings, profile: Profile,
                 clock=time.monotonic, *, environment_names: Iterable[str] | None = None,
                 hub: HubReport | None = None, environment: Mapping[str, str] | None = None) -> None:
        """``environment_names``: the names (never the values) of the environment the engine started with,
        None when it was built without one (in-process tests); ``hub``: how its models were resolved;
        ``environment``: the engine's environment, read for the engine's own settings (SGLang's
        ``SGLANG_RAGGED_VERIFY_MODE``)."""
        self.config = config
        self.settings = settings
        self.profile = profile
        self.environment_names = None if environment_names is None else sorted(
            name for name in environment_names if not name.startswith(EMULATOR_ENV_PREFIX))
        self.hub = hub
        self._clock = clock
        self.started_at = clock()
        # Acceptance draws and synthetic text use separate streams, so the text never shifts the draws.
        self.rng = random.Random(settings.seed)
        self.text_rng = random.Random(None if settings.seed is None else f"text-{settings.seed}")
        spec = config.speculation
        shape = DEFAULT_SHAPE
        #: The drafter's profile entry (its own category factors, if any); None without speculation.
        self.drafter_entry = None
        if spec is None:
            acceptance, source = 0.0, "no speculation"
        else:
            found = self.drafter_entry = profile.lookup(config.engine, spec.drafter_key)
            acceptance, source, shape = found.acceptance, found.source, found.shape
            if settings.acceptance is not None:
                acceptance, source = settings.acceptance, "env:DRAFTER_EMULATOR_ACCEPTANCE"
        self.acceptance_source = source
        # The family's draft cost mode comes from the method (batching.speculation_for: none for prompt
        # lookup, one forward for a block); the profile entry may set the cost of that forward.
        capped = spec is not None and stops_early(config.engine, spec.method, spec.options, environment or {})
        schedule = spec.schedule if spec else ()
        self.schedule_dropped = None if not schedule else vllm_schedule_dropped(
            spec.method, config.data_parallel_size, environment or {})
        if self.schedule_dropped:
            schedule = ()  # vLLM warns once and serves the static k
        family = Family(shape.decay, shape.match_rate, shape.confidence_recall if capped else 0.0)
        adaptive = spec.adaptive if spec else None
        #: SGLang's adaptive speculation (emulator/sglang_adaptive.py): each decode step's steps by batch tier.
        self.adaptive = None if adaptive is None else AdaptiveSteps(adaptive, config.k)
        self.decoder = Decoder(config.k, acceptance, target_step_ms=profile.target_step_ms,
                               draft_cost=profile.draft_cost if shape.draft_cost is None else shape.draft_cost,
                               rng=self.rng, costs=profile.costs, schedule=schedule,
                               method=spec.method if spec else "", family=family,
                               trained_length=settings.trained_length,
                               long_context=settings.long_context_acceptance,
                               step_choices=adaptive.candidate_steps if adaptive else (), **_tree_shape(spec))
        self.exporter: Exporter
        if config.engine == "vllm":
            self.exporter = VllmExporter(config.model_name, config.k)
        else:
            self.exporter = SglangExporter(config.model_name, spec.num_steps or 0 if spec else 0,
                                           spec.num_draft_tokens if spec and spec.num_draft_tokens else 0,
                                           capped=capped and spec.method == "DSPARK",
                                           active_steps=(lambda: self.adaptive.active) if self.adaptive else None)
        # What the target says (emulator/outputs.py): its deterministic mode and a lossy speculative path.
        self.deterministic = (environment or {}).get("VLLM_BATCH_INVARIANT", "0").strip() not in ("", "0") \
            if config.engine == "vllm" else config.ignored.get("--enable-deterministic-inference") is True
        self.lossy = None if spec is None else outputs.lossy_fault(config.engine, spec.method, config.k,
                                                                    settings.gpu_product)
        self.running = 0
        self._kv_tokens = 0
        self.totals = Totals()
        self._streaming: dict[Ticket, bool] = {}
        self.scheduler = Scheduler(self.decoder, settings.time_scale, self, adaptive=self.adaptive)
        #: The group's leader side (emulator/group.py Leader) when this engine is node rank 0 of several.
        self.group_leader = None
        #: The engine's own request logger (emulator/request_log.py), opened as the engine opens it when it starts:
        #: by the process that serves the API. None: vLLM without --enable-log-requests, or a worker.
        self.request_log = request_log.request_log_for(config.engine, config.request_logging, environment or {}) \
            if config.serves_api else None

    # ------------------------------------------------------------------------------------- lifecycle

    @property
    def ready(self) -> bool:
        if self.settings.fail_startup or self.group_waiting_for:
            return False
        return self._clock() - self.started_at >= self.settings.startup_seconds

    @property
    def status(self) -> str:
        if self.settings.fail_startup:
            return "failed"
        if self.group_waiting_for:
            return "waiting for node ranks " + ", ".join(map(str, self.group_waiting_for))
        return "ready" if self.ready else "starting"

    @property
    def group_waiting_for(self) -> list[int]:
        """The node ranks the leader of a replica that spans nodes still waits for (emulator/group.py): a real
        engine loads until its whole process group has formed."""
        return self.group_leader.waiting_for if self.group_leader is not None else []

    def set_acceptance(self, acceptance: float) -> None:
        self.decoder.acceptance = acceptance
        self.acceptance_source = "control endpoint"

    # ------------------------------------------------------------------------------------ generation

    def _load_changed(self, running_delta: int, kv_delta: int) -> None:
        self.running += running_delta
        self._kv_tokens += kv_delta
        self.exporter.set_load(self.running, self._kv_tokens)

    def _words(self, n: int, continuation: outputs.Continuation | None) -> list[str]:
        if continuation is not None:
            return [continuation.next() for _ in range(n)]
        return [" " + self.text_rng.choice(VOCABULARY) for _ in range(n)]

    def continuation(self, prompt_ids: list[int]) -> outputs.Continuation:
        """The greedy continuation this engine generates for a prompt (emulator/outputs.py)."""
        return outputs.Continuation.start(self.config.model_name, prompt_ids, candidates(),
                                          speculative=self.decoder.speculative, deterministic=self.deterministic,
                                          fault=self.lossy)

    def traffic_category(self, body: object) -> str | None:
        """A request body's traffic category (drafter_operator/capture/categorize.py) where acceptance depends on
        it, else None: the classifier reads the whole prompt, which requests need not pay for when nothing uses the
        answer."""
        if not self.settings.category_acceptance or not isinstance(body, dict):
            return None
        return categorize.classify(body)

    def rejection_factor(self, category: str | None) -> float:
        """How often a request of traffic ``category`` has its draft tokens rejected, relative to the drafter's
        mean: its entry's or the profile's factor where DRAFTER_EMULATOR_CATEGORIES is on, else 1."""
        return self.profile.rejection_factor(category, self.drafter_entry) if self.settings.category_acceptance else 1.0

    async def generate(self, prompt_tokens: int, max_tokens: int, *, streaming: bool,
                       continuation: outputs.Continuation | None = None,
                       category: str | None = None) -> AsyncIterator[list[str]]:
        """Yield the tokens of each engine step (prefill first) as the step loop produces them: the prompt's
        ``continuation`` (its tokens land in ``continuation.emitted``), or synthetic words without one.
        ``category``: the request's traffic category (drafter_operator/capture/categorize.py), which its
        acceptance follows.

        Closing the generator before the engine finished the request counts it as aborted.
        """
        self._load_changed(+1, prompt_tokens)
        ticket = self.scheduler.submit(prompt_tokens, max_tokens, self.rejection_factor(category))
        self._streaming[ticket] = streaming
        try:
            while (emitted := await ticket.outbox.get()) is not None:
                yield self._words(emitted, continuation)
        finally:
            if not ticket.finished:
                self.scheduler.cancel(ticket)
                self._streaming.pop(ticket, None)
                self._load_changed(-1, -(ticket.prompt_tokens + ticket.emitted))
                self.totals.aborted += 1
                self.exporter.aborted()

    # Observer of the step loop: metrics and totals move when the engine computes the tokens.

    def on_first_token(self, ticket: Ticket, at: float) -> None:
        self.exporter.prefill(ticket.prompt_tokens, at - ticket.arrival, self._streaming.get(ticket, False))
        self.totals.prompt_tokens += ticket.prompt_tokens
        self.totals.generated_tokens += 1
        self._load_changed(0, 1)

    def on_step(self, ticket: Ticket, emitted: int, drafted: int, accepted: int, at: float) -> None:
        # ``drafted`` is this step's k: below the configured k (even 0) under a per-batch-size schedule,
        # and like vLLM a step that drafted nothing counts no draft.
        self.exporter.step(emitted, drafted, accepted, at - ticket.last_token_at)
        self.totals.generated_tokens += emitted
        if self.decoder.speculative:
            self.totals.verify_forwards += 1
        if drafted:
            self.totals.verification_steps += 1
            self.totals.draft_tokens += drafted
            self.totals.accepted_tokens += accepted
            self.totals.accepted_squares += accepted * accepted
        self._load_changed(0, emitted)

    def on_finished(self, ticket: Ticket, at: float) -> None:
        streaming = self._streaming.pop(ticket, False)
        self._load_changed(-1, -(ticket.prompt_tokens + ticket.emitted))
        self.totals.requests += 1
        self.exporter.finished(prompt_tokens=ticket.prompt_tokens, generated=ticket.emitted,
                               verify_steps=ticket.verify_steps if self.decoder.speculative else 0,
                               e2e=at - ticket.arrival, finish_reason="length", streaming=streaming)

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
            "verifyForwards": totals.verify_forwards,
            # The acceptance length as this engine counts its steps (a step that drafted nothing adds 0 to
            # both sums), and its spread over those steps.
            "engineAcceptanceLength": _length_statistics(totals, totals.verify_forwards if config.engine == "sglang"
                                                         else totals.verification_steps),
        }
        return {
            "engine": config.engine,
            "engineVersion": ENGINE_VERSIONS[config.engine],
            "entrypoint": config.entrypoint,
            "model": config.model,
            "servedModelName": config.model_name,
            "status": self.status,
            "group": None if config.group is None else {
                **config.group.as_dict(), "waitingFor": self.group_waiting_for},
            "uptimeSeconds": self._clock() - self.started_at,
            "running": self.running,
            "speculation": None if spec is None else {
                "method": spec.method,
                "drafter": spec.draft_model,
                "numSpeculativeTokens": spec.num_speculative_tokens,
                "eagleTopk": spec.eagle_topk,
                "numDraftTokens": spec.num_draft_tokens,
                "numSteps": spec.num_steps,
                "numSpeculativeTokensPerBatchSize": [list(entry) for entry in self.decoder.schedule] or None,
                "scheduleDroppedBy": self.schedule_dropped,
                "adaptive": None if self.adaptive is None else {
                    "activeSteps": self.adaptive.active,
                    "tiers": [{"batchSize": batch_size, "candidateSteps": list(rule.candidate_steps),
                               "steps": self.adaptive.slots[batch_size].steps,
                               "averageAcceptedDrafts": self.adaptive.slots[batch_size].average}
                              for batch_size, rule in self.adaptive.config.tiers]},
                "adaptiveDroppedBy": spec.adaptive_dropped,
            },
            "acceptance": self.decoder.acceptance,
            "acceptanceByPosition": list(self.decoder.curve),
            "acceptanceSource": self.acceptance_source,
            # What the outputs depend on (emulator/outputs.py).
            "trainedLength": self.settings.trained_length,
            "outputs": {"gpuProduct": self.settings.gpu_product, "deterministic": self.deterministic,
                        "lossyFault": None if self.lossy is None else self.lossy.issue},
            "profile": self.profile.origin,
            "timeScale": self.settings.time_scale,
            "batching": {**self.decoder.prediction_under_load(), "batch": self.scheduler.batch,
                         "waiting": self.scheduler.waiting, "steps": self.scheduler.steps,
                         "modelSeconds": self.scheduler.model_seconds},
            "seed": self.settings.seed,
            "prediction": prediction,
            "totals": measured,
            "ignoredFlags": {k: v for k, v in config.ignored.items()},
            # Names only, without the emulator's own DRAFTER_EMULATOR_* knobs (emulator/hub.py).
            "environment": None if self.environment_names is None else {
                "names": list(self.environment_names), "excludedPrefixes": [EMULATOR_ENV_PREFIX]},
            "hub": None if self.hub is None else self.hub.as_dict(),
        }
