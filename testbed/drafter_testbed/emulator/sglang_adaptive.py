"""SGLang 0.5.23's adaptive speculation (``--speculative-adaptive``): the number of draft steps per batch-size tier.

SGLang keeps one controller slot per batch-size tier of its adaptive config (``--speculative-adaptive-config``, a
JSON file; a built-in default without it). Before each decode step the worker activates the steps of the tier the
step's batch size falls in: the largest tier key not above it, the smallest tier below the first key. After the
step's verify, that tier's slot folds the mean accepted drafts per request into an exponential moving average
and, past a warm-up and then every ``update_interval`` steps, moves its steps along its candidates: down while the
average is at or below the next lower candidate less a half (the floor candidate 0 at 0.5), plus the down
hysteresis; otherwise up while it is above the current candidate less a half, plus the up hysteresis. A ceiling
coefficient may cap a step that does not rise at ``ceil(average x coefficient)``. A slot at 0 steps drafts
nothing and learns nothing, so at its next update it probes the smallest candidate above 0. The facts are read
from ``sglang/srt/speculative/adaptive_spec_params.py`` (the slot and the router), ``arg_groups/
speculative_hook.py`` (when the flag is dropped, which steps it starts with) and ``speculative/eagle_worker_v2.py``
with ``managers/scheduler_components/batch_result_processor.py`` (the batch size is the decode batch's request
count, the feedback each request's accepted drafts). ``tests/contract/test_sglang_adaptive_contract.py`` holds
this module to SGLang's own classes.

CUDA-graph padding (SGLang routes a batch size padded up to the next captured graph size when graphs are on) is
not modelled: the emulator has no graphs, so a batch routes by its own size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

#: SGLang's built-in tiers, used when ``--speculative-adaptive-config`` is not given.
DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}



class AdaptiveConfigRefused(ValueError):
    """A config SGLang refuses at start-up; ``kind`` is the exception SGLang raises, ``str()`` its message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# ------------------------------------------------------------------------------------- when it is dropped

# Why SGLang drops it is the operator's reading (engines/sglang.adaptive_dropped_by, which the emulator's command
# line asks): the spec says so before it is served, the emulator serves what it decides, and the contract tier holds
# it to SGLang's adaptive_unsupported_reason.


def disabled_warning(reason: str) -> str:
    """The warning SGLang logs when it drops adaptive speculation."""
    return f"speculative_adaptive disabled: {reason}. Falling back to static speculative params."


# ------------------------------------------------------------------------------------------------ config

@dataclass(frozen=True)
class TierRule:
    """How one batch-size tier's slot moves (the tier's entry over the config's top-level keys)."""

    candidate_steps: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    ceiling_coeff: float = 0


@dataclass(frozen=True)
class AdaptiveConfig:
    """The tiers of an adaptive config, smallest batch size first."""

    tiers: tuple[tuple[int, TierRule], ...]

    @property
    def candidate_steps(self) -> tuple[int, ...]:
        """Every step any tier may take, ascending (SGLang sizes its runtime states for these)."""
        return tuple(sorted({step for _, rule in self.tiers for step in rule.candidate_steps}))

    @property
    def default_steps(self) -> int:
        """The steps SGLang starts from when ``--speculative-num-steps`` is not given: the middle candidate."""
        steps = self.candidate_steps
        return steps[len(steps) // 2]


_RULE_KEYS = ("ema_alpha", "update_interval", "warmup_batches", "down_hysteresis", "up_hysteresis", "ceiling_coeff")


def parse_config(raw: Any) -> AdaptiveConfig:
    """An adaptive config as SGLang reads the JSON object: keys made of digits are tiers (other keys are
    defaults every tier inherits), each tier needs a non-empty list of non-negative integer candidate steps, and
    at least one tier. Raises :class:`AdaptiveConfigRefused` with SGLang's exception and message otherwise."""
    if not isinstance(raw, dict):
        raise AdaptiveConfigRefused("AttributeError", f"'{type(raw).__name__}' object has no attribute 'items'")
    entries: dict[int, Mapping[str, Any]] = {}
    for key, entry in raw.items():
        if not key.isdigit():
            continue
        if not isinstance(entry, dict):
            raise AdaptiveConfigRefused("AttributeError", f"'{type(entry).__name__}' object has no attribute 'get'")
        steps = entry.get("candidate_steps")
        # bool is an int to SGLang's isinstance check, so true and false pass as 1 and 0
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise AdaptiveConfigRefused(
                "ValueError", f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        entries[int(key)] = entry
    if not entries:
        raise AdaptiveConfigRefused(
            "ValueError", "speculative_adaptive_config must contain at least one integer-string BS key, e.g. "
            '{"1": {"candidate_steps": [1,3,7]}}. ' f"Got keys: {list(raw.keys())}")
    tiers = []
    for batch_size, entry in sorted(entries.items()):
        merged = {**raw, **entry}
        tiers.append((batch_size, TierRule(tuple(sorted(set(merged["candidate_steps"]))),
                                           **{key: merged[key] for key in _RULE_KEYS if key in merged})))
    return AdaptiveConfig(tuple(tiers))


def read_config(path: str | None) -> AdaptiveConfig:
    """The config at ``path`` (SGLang's default without one); a file SGLang cannot read is refused as it is."""
    if path is None:
        return parse_config(DEFAULT_ADAPTIVE_CONFIG)
    try:
        with open(path) as file:
            raw = json.load(file)
    except OSError as exc:
        raise AdaptiveConfigRefused(type(exc).__name__, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise AdaptiveConfigRefused("JSONDecodeError", str(exc)) from None
    return parse_config(raw)


def steps_refusal(steps: int, config: AdaptiveConfig) -> str | None:
    """SGLang's refusal of a ``--speculative-num-steps`` that no tier offers, or None."""
    candidates = list(config.candidate_steps)
    if steps in candidates:
        return None
    return (f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps {candidates}. "
            "Pass one of those values.")


# -------------------------------------------------------------------------------------------- one slot

@dataclass(frozen=True)
class SlotState:
    """One tier's slot: its steps, its moving average of accepted drafts per request, verifies seen."""

    steps: int
    average: float
    batches: int = 0

    @classmethod
    def start(cls, rule: TierRule, initial_steps: int) -> SlotState:
        """The engine's initial steps if the tier offers them, else the tier's middle candidate; the average
        starts neutral, one below the steps."""
        candidates = rule.candidate_steps
        steps = initial_steps if initial_steps in candidates else candidates[len(candidates) // 2]
        return cls(steps, float(steps - 1))


def after_verify(rule: TierRule, state: SlotState, accepted_per_request: Sequence[int]) -> SlotState:
    """The slot after one verify of its tier: ``accepted_per_request`` is each request's accepted drafts."""
    if not accepted_per_request:
        return state
    average = state.average
    if state.steps > 0:  # a step that drafted nothing says nothing about acceptance
        batch_mean = sum(accepted_per_request) / len(accepted_per_request)
        average = (1 - rule.ema_alpha) * average + rule.ema_alpha * batch_mean
    state = replace(state, average=average, batches=state.batches + 1)
    since_warmup = state.batches - rule.warmup_batches
    if since_warmup <= 0 or since_warmup % rule.update_interval != 0:
        return state
    return _retarget(rule, state)


def _retarget(rule: TierRule, state: SlotState) -> SlotState:
    candidates = rule.candidate_steps
    index = candidates.index(state.steps)
    if state.steps == 0:
        # Probe the smallest positive candidate; a slot that started at 0 has no average yet, so the probe starts
        # from that candidate's neutral one.
        target = candidates[min(index + 1, len(candidates) - 1)]
        average = float(target - 1) if target > 0 and state.average < 0 else state.average
        return replace(state, steps=target, average=average)
    start = index
    while index > 0:
        lower = candidates[index - 1]
        # 0 drafts nothing: reaching it takes an average of at most half a draft
        if state.average <= (0.5 if lower == 0 else lower - 0.5) + rule.down_hysteresis:
            index -= 1
        else:
            break
    if index == start:
        while index < len(candidates) - 1 and state.average > candidates[index] - 0.5 + rule.up_hysteresis:
            index += 1
    target = candidates[index]
    if rule.ceiling_coeff > 0:
        # The ceiling only holds a slot down; a rise goes through so the average can catch up with it.
        ceiling = max(1, math.ceil(state.average * rule.ceiling_coeff))
        if ceiling < target <= state.steps:
            while index > 0 and candidates[index] > ceiling:
                index -= 1
            target = candidates[index]
    return replace(state, steps=target)


# ------------------------------------------------------------------------------------------ the router

class AdaptiveSteps:
    """SGLang's controller for one engine: a slot per tier, and the steps last activated (what the worker
    drafts and what ``sglang:spec_num_steps`` reports)."""

    def __init__(self, config: AdaptiveConfig, initial_steps: int) -> None:
        self.config = config
        self._keys = [batch_size for batch_size, _ in config.tiers]
        self._rules = dict(config.tiers)
        self.slots = {batch_size: SlotState.start(rule, initial_steps) for batch_size, rule in config.tiers}
        self.active = initial_steps

    def tier(self, batch_size: int) -> int:
        """The tier a batch size routes to: the largest key at or below it, else the smallest."""
        below = [key for key in self._keys if key <= batch_size]
        return below[-1] if below else self._keys[0]

    def steps_for_batch(self, batch_size: int) -> int:
        """Activate and return the steps of a decode batch of ``batch_size`` requests."""
        self.active = self.slots[self.tier(batch_size)].steps
        return self.active

    def on_verify(self, accepted_per_request: Sequence[int], batch_size: int) -> int | None:
        """Feed one verify to its tier's slot; the new steps (then active) when the slot switched, else None."""
        key = self.tier(batch_size)
        before = self.slots[key]
        after = after_verify(self._rules[key], before, accepted_per_request)
        self.slots[key] = after
        if after.steps == before.steps:
            return None
        self.active = after.steps
        return after.steps
