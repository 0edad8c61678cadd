"""The emulator's acceptance profile: which per-token acceptance a drafter gets, per engine.

Format and lookup rules are documented at the top of ``data/emulator-profiles.yaml``, the packaged
default; ``DRAFTER_EMULATOR_PROFILE`` points at a replacement in the same format.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES, unknown_category_message
from drafter_operator.engines import speedup
from drafter_testbed.emulator import batching

ENGINES = ("vllm", "sglang")
PACKAGED_PROFILE = "emulator-profiles.yaml"


class ProfileError(ValueError):
    """The profile file is malformed."""


@dataclass(frozen=True)
class Shape:
    """How a drafter's acceptance and drafting vary per step (the entry keys in parentheses).

    ``decay`` (``decay``): position ``i`` is accepted with ``a decay^i`` given the earlier ones were;
    ``draft_cost`` (``draftCost``): one draft forward relative to a target step, None for the
    calibration's; ``match_rate`` (``matchRate``): the share of steps a prompt-lookup drafter finds a
    match and drafts at all; ``confidence_recall`` (``confidenceRecall``): the share of steps DSpark's
    confidence head stops the block right after the last token the target will accept."""

    decay: float = 1.0
    draft_cost: float | None = None
    match_rate: float = 1.0
    confidence_recall: float = 0.0


DEFAULT_SHAPE = Shape()
#: Entry keys of a :class:`Shape`: its field and whether a value must lie in [0, 1].
_SHAPE_KEYS = {"decay": ("decay", True), "draftCost": ("draft_cost", False), "matchRate": ("match_rate", True),
               "confidenceRecall": ("confidence_recall", True)}


@dataclass(frozen=True)
class DrafterEntry:
    name: str
    patterns: tuple[str, ...]
    acceptance: dict[str, float]
    description: str = ""
    shape: Shape = DEFAULT_SHAPE
    #: This drafter's own rejection factors by traffic category (its ``categories``), over the profile's: a
    #: drafter trained on other data than the calibrated one's (code only, or the traffic it serves).
    category_rejection: dict[str, float] | None = None

    def matches(self, key: str) -> bool:
        candidates = {key.lower(), key.rstrip("/").rsplit("/", 1)[-1].lower()}
        return any(fnmatch.fnmatchcase(c, p.lower()) for p in self.patterns for c in candidates)


@dataclass(frozen=True)
class Lookup:
    """The outcome of a lookup: the acceptance and where it came from."""

    acceptance: float
    source: str  # "profile:<entry name>" or "profile:default"
    shape: Shape = DEFAULT_SHAPE
    category_rejection: dict[str, float] | None = None  # the entry's own factors, where it has them


@dataclass(frozen=True)
class Profile:
    target_step_ms: float
    draft_cost: float
    default: dict[str, float]
    drafters: tuple[DrafterEntry, ...]
    origin: str
    #: The batching model's parameters (``calibration`` section); ``None``: the defaults.
    step_costs: batching.StepCosts | None = None
    #: Per traffic category, how often its tokens are rejected relative to the drafter's mean (``categories``
    #: section; a category left out: 1). Applied where DRAFTER_EMULATOR_CATEGORIES is on (``model.py``).
    category_rejection: dict[str, float] | None = None

    def rejection_factor(self, category: str | None, drafter: Lookup | None = None) -> float:
        """The factor of ``category`` for ``drafter``: its entry's own ``categories`` where they name it, else the
        profile's (1 for none, or one both leave out)."""
        own = (drafter.category_rejection if drafter is not None else None) or {}
        if category in own:
            return own[category]
        return (self.category_rejection or {}).get(category or "", 1.0)

    @property
    def costs(self) -> batching.StepCosts:
        """Every step-time parameter, ``targetStepMs`` and ``draftCost`` included."""
        base = self.step_costs or batching.StepCosts()
        return batching.StepCosts(self.target_step_ms, self.draft_cost, base.compute_knee_tokens,
                                  base.draft_knee_tokens, base.prefill_tokens_per_second)

    def lookup(self, engine: str, drafter_key: str) -> Lookup:
        for entry in self.drafters:
            if entry.matches(drafter_key) and engine in entry.acceptance:
                return Lookup(entry.acceptance[engine], f"profile:{entry.name}", entry.shape, entry.category_rejection)
        return Lookup(self.default[engine], "profile:default")


#: The ``calibration`` keys and their defaults (the batching model's parameters, drafter_testbed/emulator/batching.py).
_CALIBRATION_KEYS = {
    "targetStepMs": speedup.DEFAULT_TARGET_STEP_MS,
    "draftCost": speedup.DEFAULT_DRAFT_COST,
    "computeKneeTokens": batching.DEFAULT_COMPUTE_KNEE_TOKENS,
    "draftKneeTokens": batching.DEFAULT_DRAFT_KNEE_TOKENS,
    "prefillTokensPerSecond": batching.DEFAULT_PREFILL_TOKENS_PER_SECOND,
}


def _number(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _probability(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ProfileError(f"{where}: must be a number in [0, 1] (a probability), got {value!r}")
    return float(value)


def _per_engine(where: str, value: object, required: bool) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: expected a mapping of engine -> acceptance")
    unknown = set(value) - set(ENGINES)
    if unknown:
        raise ProfileError(f"{where}: unknown engine(s) {sorted(unknown)} (engines: {', '.join(ENGINES)})")
    if required and set(value) != set(ENGINES):
        raise ProfileError(f"{where}: needs an acceptance for every engine ({', '.join(ENGINES)})")
    return {engine: _probability(f"{where}.{engine}", a) for engine, a in value.items()}


def _shape(where: str, raw: dict) -> Shape:
    values = {}
    for key, (attribute, probability) in _SHAPE_KEYS.items():
        if key in raw:
            value = (_probability if probability else _number)(f"{where}.{key}", raw[key])
            if value < 0:
                raise ProfileError(f"{where}.{key}: must be >= 0, got {value!r}")
            values[attribute] = value
    return Shape(**values)


def _categories(where: str, value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: expected a mapping of traffic category -> rejection factor, e.g. code: 0.6")
    factors = {}
    for category, factor in value.items():
        if category not in TRAFFIC_CATEGORIES:
            raise ProfileError(unknown_category_message(category, where))
        factors[category] = _number(f"{where}.{category}", factor)
        if factors[category] < 0:
            raise ProfileError(f"{where}.{category}: a rejection factor is >= 0, got {factor!r}")
    return factors


def parse_profile(document: object, origin: str) -> Profile:
    if not isinstance(document, dict):
        raise ProfileError(f"{origin}: expected a mapping at the top level")
    calibration = document.get("calibration") or {}
    if not isinstance(calibration, dict):
        raise ProfileError(f"{origin}: 'calibration' must be a mapping")
    unknown = set(calibration) - set(_CALIBRATION_KEYS)
    if unknown:
        raise ProfileError(f"{origin}: unknown calibration key(s) {sorted(unknown)} "
                           f"(known: {', '.join(_CALIBRATION_KEYS)})")
    values = {key: _number(f"{origin}: calibration.{key}", calibration.get(key, default))
              for key, default in _CALIBRATION_KEYS.items()}
    try:
        costs = batching.StepCosts(values["targetStepMs"], values["draftCost"], values["computeKneeTokens"],
                                   values["draftKneeTokens"], values["prefillTokensPerSecond"])
    except ValueError as exc:
        raise ProfileError(f"{origin}: calibration: {exc}") from None
    target_step_ms, draft_cost = costs.target_step_ms, costs.draft_cost
    default = _per_engine(f"{origin}: default", document.get("default"), required=True)
    entries = []
    for i, raw in enumerate(document.get("drafters") or []):
        where = f"{origin}: drafters[{i}]"
        if not isinstance(raw, dict) or "name" not in raw or "acceptance" not in raw:
            raise ProfileError(f"{where}: needs 'name' and 'acceptance'")
        patterns = raw.get("match") or [raw["name"]]
        if isinstance(patterns, str):
            patterns = [patterns]
        entries.append(DrafterEntry(
            name=str(raw["name"]),
            patterns=tuple(str(p) for p in patterns),
            acceptance=_per_engine(f"{where}.acceptance", raw["acceptance"], required=False),
            description=str(raw.get("description", "")),
            shape=_shape(where, raw),
            category_rejection=_categories(f"{where}.categories", raw["categories"]) if "categories" in raw else None,
        ))
    categories = _categories(f"{origin}: categories", document["categories"]) if "categories" in document else None
    return Profile(target_step_ms, draft_cost, default, tuple(entries), origin, costs, categories)


def load_profile(path: str | Path | None = None) -> Profile:
    """The profile at ``path``, or the packaged default."""
    if path:
        origin = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read the emulator profile {origin}: {exc}") from exc
    else:
        origin = f"drafter_testbed/data/{PACKAGED_PROFILE}"
        text = resources.files("drafter_testbed").joinpath("data", PACKAGED_PROFILE).read_text(encoding="utf-8")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{origin}: not valid YAML: {exc}") from exc
    return parse_profile(document, origin)
