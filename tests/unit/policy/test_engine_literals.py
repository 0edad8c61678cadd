"""One home for each engine (issue 40): outside engines/, no runtime module spells an engine's name.

What differs between engines (ports, metric names, the Prometheus window, the per-batch-size schedule, the model
runner, the methods refused, the speculators format, the launch facts, the release and image, how it loads a
drafter checkpoint) is a capability on the engine's module (engines/vllm.py, engines/sglang.py, section 0 and below;
CHECKPOINT_LOADING, the preflight's, is a record of its own: engines/checkpoint_loading.py), which the rest of the
package asks through ``engines.engine(name)``. A new ``if spec.engine == "vllm":`` elsewhere fails here, naming file:line.

The scan reads the syntax tree of every runtime module outside engines/ and flags a string constant (not a
docstring) equal to a name in engines.ENGINES, unless its file and enclosing function are in ALLOWED, each with
why it stays.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from drafter_operator import constants, engines
from drafter_operator.engines import sglang
from tests.support import literal_scan

ENGINE_NAMES = frozenset(engines.ENGINES)

_CHECKPOINT_FORMAT = ("'sglang' names SpecForge's checkpoint layout (DrafterTraining spec.output.format, a CRD "
                      "enum), not an engine")

#: (file, enclosing function or class, "<module>" at the top level) -> why an engine's name is spelled there.
ALLOWED: dict[tuple[str, str], str] = {
    # The API's Literal type of engine names (the CRDs' enum): constants.py sits below engines/ and imports
    # nothing; tests/unit/test_constants.py holds engines.ENGINES to it, in order.
    ("constants.py", "<module>"): "the engines' names, the API's Literal (checked against engines.ENGINES)",
    ("api/training/sections.py", "OutputSpec"): _CHECKPOINT_FORMAT,
    ("training/rendering.py", "RenderOptions"): _CHECKPOINT_FORMAT,
}

#: What every engine module declares: what the rest of the package asks of an engine (docs/architecture.md,
#: "Adding an engine").
ENGINE_INTERFACE = (
    "ENGINE", "VERSION", "DEFAULT_IMAGE", "DEFAULT_PORT", "HEALTH_PATH", "READINESS_PATH", "METRICS_PATH",
    "MODELS_PATH", "COMPLETIONS_PATH", "CHAT_COMPLETIONS_PATH", "CLIENT_REQUEST_ID_FIELD", "REQUESTS_IN_FLIGHT",
    "SUPPORTS_DYNAMIC_SCHEDULE", "REFUSED_METHODS", "READS_SPECULATORS_FORMAT", "PLACEHOLDER_POSITIONALS",
    "MODEL_RUNNERS", "model_runner",
    "RATE_PER_DRAFTED_TOKEN", "RATE_NOT_PER_K_DRAFTS", "WINDOW_COUNTERS", "WINDOW_REQUIRED", "PER_POSITION_COUNTER",
    "WINDOW_GAUGES", "parse_spec_decode_metrics",
    "OWNED_DESTINATIONS", "SECRET_DESTINATIONS", "extra_args_problems", "spec_problems", "render_command",
    "schedule_files",
    "draft_tokens_per_step", "deterministic", "launch_facts", "METHOD_SPELLINGS",
    "parallel_flags", "group_flags", "PARALLEL_FIELD_DESTINATIONS", "DYNAMIC_WITH_DATA_PARALLEL",
    "PIPELINE_REFUSED_METHODS", "DATA_PARALLEL_REFUSED_METHODS",
    "capture_flags", "capture_environment", "capture_files", "CAPTURE_SPOOL", "capture_line",
    "CAPTURE_OWNED_DESTINATIONS", "CHECKPOINT_LOADING",
)


def engine_literals(tree: ast.Module, names: frozenset[str] = ENGINE_NAMES) -> Iterator[tuple[int, str, str]]:
    """(line, enclosing function or class, the name) for each string constant that is an engine's name."""
    return literal_scan.literals(tree, names)


def _found() -> list[tuple[str, int, str, str]]:
    return literal_scan.found(("engines/",), ENGINE_NAMES)


def test_no_runtime_module_outside_engines_spells_an_engine_name():
    found = [f"{relative}:{line} ({scope}) spells {name!r}" for relative, line, scope, name in _found()
             if (relative, scope) not in ALLOWED]
    assert not found, (
        "ask the engine's module instead of testing its name: engines.engine(spec.engine).<CAPABILITY> "
        "(add the capability to every module in engines/, section 0), or engines.DEFAULT_ENGINE for a default:\n  "
        + "\n  ".join(found))


def test_every_allowed_place_still_spells_one():
    """An entry whose literal is gone leaves the list: the allow-list only shrinks."""
    present = {(relative, scope) for relative, _, scope, _ in _found()}
    stale = sorted(set(ALLOWED) - present)
    assert not stale, f"remove these from ALLOWED: {stale}"


def test_the_scan_catches_a_new_branch_on_an_engine_name():
    source = '''
"""A module that mentions vllm in its docstring."""

def replicas(spec):
    """sglang"""
    if spec.engine == "vllm":
        return 1
    return {"sglang": 2}.get(spec.engine)
'''
    assert list(engine_literals(ast.parse(source))) == [(6, "replicas", "vllm"), (8, "replicas", "sglang")]


@pytest.mark.parametrize("name", sorted(ENGINE_NAMES))
def test_every_engine_module_declares_the_engine_interface(name):
    module = engines.engine(name)
    missing = [attr for attr in ENGINE_INTERFACE if not hasattr(module, attr)]
    assert not missing, f"engines/{name}.py lacks {missing}"
    assert module.ENGINE == name
    assert module.VERSION in module.DEFAULT_IMAGE
    assert set(module.WINDOW_REQUIRED) <= set(module.WINDOW_COUNTERS)
    assert set(module.REFUSED_METHODS) <= set(constants.SPECULATIVE_METHODS)
    assert set(module.MODEL_RUNNERS) == set() or module.MODEL_RUNNER_ENV


def test_the_defaults_are_engines():
    assert engines.DEFAULT_ENGINE in engines.ENGINES
    assert engines.DEFAULT_GENERATION_ENGINE in engines.ENGINES
    assert tuple(engines.METHODS_REFUSED_BY_ENGINE) == tuple(engines.ENGINES)


def test_the_block_methods_are_the_ones_sglang_renders_a_block_size_for():
    assert tuple(sglang.BLOCK_SIZE_FLAGS) == constants.BLOCK_METHODS
