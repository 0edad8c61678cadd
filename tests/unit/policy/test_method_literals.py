"""One home for each drafter family (issue 40): outside families.py and engines/, no runtime module spells a
drafter method's name.

What a family is (its drafter model, how it drafts, whether it is trained, its settings object, its preflight
checks) is a field of its record in families.py; every set of methods (constants.METHODS_WITH_MODEL,
constants.BLOCK_METHODS, constants.CHECKED_METHODS, ...) is derived from the table. What an engine calls a
family stays on the engine's module under engines/. A new ``if drafter.method == "dflash":`` elsewhere fails
here, naming file:line.

The scan reads the syntax tree of every runtime module outside engines/ and families.py and flags a string
constant (not a docstring) that is a method's name (constants.DRAFTER_METHODS but "none") or one of the
checkpoint kinds below, unless its file and place (the enclosing function or class; at a module's top level,
the name assigned) are in ALLOWED, each with why it stays.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from drafter_operator import constants, engines, families
from tests.support import literal_scan

PACKAGE = literal_scan.PACKAGE
#: The checkpoint kinds that are not methods of their own: speculators' P-EAGLE and DFlash-2 layouts, which vLLM
#: serves under the eagle3 and dflash methods.
CHECKPOINT_KINDS = frozenset({"peagle", "dflash2"})
METHOD_NAMES = frozenset(constants.SPECULATIVE_METHODS) | CHECKPOINT_KINDS
#: The family table and the engines' modules: the homes, where the names are spelled.
HOMES = ("families.py", "engines/")

_LOADER_MODEL = ("the preflight's checkpoint-loader model: it restates an engine's loading code for one family's "
                 "checkpoint layout (file:line in the rule), where the method decides which class the engine builds")
_FRAMEWORK = "a training framework's own vocabulary (its strategy or algorithm name), which the command line passes"
_API_LITERAL = ("the API's Literal type (the CRDs' enum), which pydantic and the CRD generator read; "
                "tests/unit/root/test_families.py holds the family table to it, in order")

#: (file, place) -> why a method's name is spelled there.
ALLOWED: dict[tuple[str, str], str] = {
    ("constants.py", "DrafterMethod"): _API_LITERAL,
    ("constants.py", "TrainedMethod"): _API_LITERAL,
    # The training CRD: EAGLE-3 is the one family SpecForge trains and the one with three capture layers; the
    # rules' CEL and messages name it, and it is spec.method's default (a CRD enum default).
    ("api/training/spec.py", "DrafterTrainingSpec"): "the training CRD's CEL, its check and spec.method's default",
    ("training/specforge.py", "train_config"): _FRAMEWORK,
    ("training/adapters/hf_hidden_states.py", "specforge_parser"): _FRAMEWORK,
    ("training/speculators.py", "CONVERTERS"): _FRAMEWORK,
    ("preflight/engines.py", "VLLM_SPECULATORS_TYPES"): _LOADER_MODEL,
    ("preflight/families.py", "speculators_required_keys"): _LOADER_MODEL,
    ("preflight/families.py", "speculators_as_vllm_block_config"): _LOADER_MODEL,
    ("preflight/rules/architecture.py", "head_kind"): _LOADER_MODEL,
    ("preflight/rules/architecture.py", "check_architecture"): _LOADER_MODEL,
    ("preflight/rules/architecture.py", "check_speculators_architecture"): _LOADER_MODEL,
    ("preflight/rules/architecture.py", "check_eagle3_architecture"): _LOADER_MODEL,
    ("preflight/rules/architecture.py", "check_eagle_architecture"): _LOADER_MODEL,
    ("preflight/rules/block.py", "SPECULATORS_KINDS"): _LOADER_MODEL,
    ("preflight/rules/block.py", "drafter_kind"): _LOADER_MODEL,
    ("preflight/rules/block.py", "_default_arch"): _LOADER_MODEL,
    ("preflight/rules/block.py", "_check_vllm_class"): _LOADER_MODEL,
    ("preflight/rules/block.py", "_check_sglang_class"): _LOADER_MODEL,
    ("preflight/rules/block_fields.py", "check_block_size"): _LOADER_MODEL,
    ("preflight/rules/hidden.py", "check_hidden"): _LOADER_MODEL,
}


def method_literals(tree: ast.Module, names: frozenset[str] = METHOD_NAMES) -> Iterator[tuple[int, str, str]]:
    """(line, place, the name) for each string constant that is a method's name; the place is the enclosing
    function or class, or at the top level the name assigned ("<module>" for anything else)."""
    return literal_scan.literals(tree, names, name_top_level=True)


def _found() -> list[tuple[str, int, str, str]]:
    return literal_scan.found(HOMES, METHOD_NAMES, name_top_level=True)


def test_no_runtime_module_outside_the_homes_spells_a_method_name():
    found = [f"{relative}:{line} ({place}) spells {name!r}" for relative, line, place, name in _found()
             if (relative, place) not in ALLOWED]
    assert not found, (
        "ask the family instead of testing its name: a field of its record in families.py (families.family(method)) "
        "or a set of methods derived from the table in constants.py; an engine's own spelling belongs on its module "
        "under engines/:\n  " + "\n  ".join(found))


def test_every_allowed_place_still_spells_one():
    """An entry whose literal is gone leaves the list: the allow-list only shrinks."""
    present = {(relative, place) for relative, _, place, _ in _found()}
    stale = sorted(set(ALLOWED) - present)
    assert not stale, f"remove these from ALLOWED: {stale}"


def test_the_scan_catches_a_new_branch_on_a_method_name():
    source = '''
"""A module that mentions dflash in its docstring."""
BLOCKS = ("dflash", "dspark")

def queries(drafter):
    """eagle3"""
    if drafter.method == "dflash":
        return 1
    return {"peagle": 2}.get(drafter.method, "none")
'''
    assert list(method_literals(ast.parse(source))) == [
        (3, "BLOCKS", "dflash"), (3, "BLOCKS", "dspark"), (7, "queries", "dflash"), (9, "queries", "peagle")]


def test_every_method_has_a_family_and_the_homes_exist():
    assert {f.method for f in families.FAMILIES} == set(constants.SPECULATIVE_METHODS)
    for home in HOMES:
        assert (PACKAGE / home).exists(), home
