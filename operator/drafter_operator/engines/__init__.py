"""Per-engine knowledge: command rendering, ports, health paths, metric names and parsing."""

from __future__ import annotations

from types import ModuleType

from drafter_operator.engines import extra_args, flags, sglang, vllm

#: Each engine's module by its name (constants.ENGINES, in that order: tests/unit/root/test_constants.py). An engine
#: module is the one home of what the operator knows of that engine: its release, image, ports and paths, metric
#: names and parsing, rendering, flags it owns, and its capabilities (section 0 of each module, with
#: CHECKPOINT_LOADING, how it loads a drafter checkpoint: engines/checkpoint_loading.py), which the rest of the
#: package asks instead of testing the engine's name (tests/unit/policy/test_engine_literals.py).
ENGINES: dict[str, ModuleType] = {module.ENGINE: module for module in (vllm, sglang)}
# The engines' upstream images, at the versions whose flags and metrics the contract tier checks (tests/contract).
DEFAULT_IMAGES: dict[str, str] = {name: module.DEFAULT_IMAGE for name, module in ENGINES.items()}
#: The speculative methods each engine does not implement (refused at apply; the reasons are in the CRD's rules
#: and docs/engines-contract.md).
METHODS_REFUSED_BY_ENGINE: dict[str, tuple[str, ...]] = {name: module.REFUSED_METHODS
                                                         for name, module in ENGINES.items()}
#: The engine assumed where none is said: `drafter-operator bench` without --engine, an endpoint benchmark's
#: endpoint without the engine annotation, a revision whose record and spec name none.
DEFAULT_ENGINE: str = vllm.ENGINE
#: The engine a DrafterTraining's data generation serves the target with when spec.data.generation.engine is
#: unset (the CRD's default).
DEFAULT_GENERATION_ENGINE: str = sglang.ENGINE


def engines_without(capability: str) -> tuple[str, ...]:
    """The engines whose module says False (or nothing) for a capability flag, in ENGINES' order: what a CRD
    rule refuses a setting on (e.g. ``engines_without("SUPPORTS_DYNAMIC_SCHEDULE")``)."""
    return tuple(name for name, module in ENGINES.items() if not getattr(module, capability, False))


def owned_spellings() -> tuple[str, ...]:
    """Every exact spelling, on either engine, of a flag whose destination the operator owns.

    What the CRD's CEL rule can check at admission; abbreviations, vLLM's underscores and dotted keys
    are caught by each engine's ``extra_args_problems`` in the operator, before any pod starts.
    """
    spellings: set[str] = set()
    for module in ENGINES.values():
        flag_table = flags.table(module.ENGINE)
        dests = [o.dest for o in flag_table.options if extra_args.owned_rule(module.OWNED_DESTINATIONS, o.dest)]
        spellings.update(flag_table.spellings(dests))
    return tuple(sorted(spellings))


def engine(name: str) -> ModuleType:
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}: choose one of {sorted(ENGINES)}") from None


def draft_tokens_per_step(engine_name: str, drafter) -> int | None:
    """k as a drafter spec (``api.serving.DrafterSpec``) gives it to ``engine_name``, per method (each engine's
    ``draft_tokens_per_step``): vLLM's num_speculative_tokens as rendered, SGLang's numSteps or a block drafter's
    numSpeculativeTokens; None when the engine picks it."""
    return engine(engine_name).draft_tokens_per_step(drafter)


def deterministic_mode(spec) -> bool:
    """Whether a DrafterServingSpec runs its engine's deterministic mode (each engine's ``deterministic``): then a
    verify forward and a decode step give the same logits, and an output check counts every divergence."""
    return engine(spec.engine).deterministic(spec)
