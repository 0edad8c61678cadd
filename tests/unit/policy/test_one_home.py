"""One home per fact (issue 26): the runtime package spells its fixed names only in constants.py, reads the
environment only through settings.py, and parses or writes timestamps only in timestamps.py.

Each check scans the source of operator/drafter_operator with ast, so a second definition that comes back
(a copied annotation key, an ``os.environ.get`` beside a Setting, a local ``strftime``) fails here, naming
the file and line. The allowlists say why each exception is not the fact.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from drafter_operator import constants, settings, timestamps

PACKAGE = Path(constants.__file__).parent

#: The names constants.py owns (its public module-level names).
CONSTANT_NAMES = frozenset(name for name in vars(constants) if not name.startswith("_") and name[0].isupper()
                           and name != "Literal")


def modules(*homes: str) -> Iterator[tuple[str, ast.Module]]:
    """Every module of the runtime package but ``homes`` (paths relative to it), parsed."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative not in homes:
            yield relative, ast.parse(path.read_text(), filename=relative)


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of string constants that stand alone as statements (docstrings, attribute docs)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def strings(tree: ast.Module) -> Iterator[ast.Constant]:
    """String constants that are values (not docstrings): what a key or a name would be spelled as."""
    skip = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node


def is_key(text: str, prefixes: tuple[str, ...]) -> bool:
    """A label/annotation key or group-ish name under one of ``prefixes``: no spaces (a sentence that
    mentions a key, such as a CEL message or a help text, is not a second definition of it)."""
    return not any(char.isspace() for char in text) and any(
        text == prefix.rstrip("/") or text.startswith(prefix) for prefix in prefixes)


# --------------------------------------------------------------------------------------------------
# constants.py


#: Strings under the API group's prefix that name something else than the API or a key of it.
GROUP_PREFIX_ALLOWED = {
    # The preflight's termination record is versioned on its own (a file format, not a Kubernetes kind).
    ("preflight/verdict.py", "drafter.dev/preflight/v1"),
}


def test_the_group_version_and_its_literal_are_one_spelling():
    from typing import get_args

    assert get_args(constants.ApiGroupVersion) == (constants.API_GROUP_VERSION,)
    assert constants.API_GROUP_VERSION == f"{constants.API_GROUP}/{constants.API_VERSION}"


def test_no_module_spells_the_api_group_or_a_key_under_it():
    prefixes = (f"{constants.API_GROUP}/", constants.API_GROUP)
    found = [(relative, node.lineno, node.value) for relative, tree in modules("constants.py")
             for node in strings(tree) if is_key(node.value, prefixes)
             and (relative, node.value) not in GROUP_PREFIX_ALLOWED]
    assert not found, f"spell constants.API_GROUP (or a key from constants.py) instead: {found}"


def test_no_module_spells_a_recommended_label_key():
    found = [(relative, node.lineno, node.value) for relative, tree in modules("constants.py")
             for node in strings(tree) if is_key(node.value, ("app.kubernetes.io/",))]
    assert not found, f"use constants.NAME_LABEL, INSTANCE_LABEL, ...: {found}"


def test_no_module_spells_a_kinds_resource_name():
    plurals = {constants.SERVING_PLURAL, constants.BENCHMARK_PLURAL, constants.TRAINING_PLURAL}
    found = [(relative, node.lineno, node.value) for relative, tree in modules("constants.py")
             for node in strings(tree) if node.value in plurals]
    assert not found, f"use constants.SERVING_PLURAL, BENCHMARK_PLURAL or TRAINING_PLURAL: {found}"


def test_each_kind_models_plural_is_the_constant():
    from drafter_operator.api import KINDS

    assert {kind.plural for kind in KINDS} == {constants.SERVING_PLURAL, constants.BENCHMARK_PLURAL,
                                               constants.TRAINING_PLURAL}


def test_the_scan_would_catch_a_copied_key():
    tree = ast.parse('"""drafter.dev/v1alpha1"""\nRETRY = "drafter.dev/retry"\nWHY = "see drafter.dev/retry here"\n')
    assert [node.value for node in strings(tree) if is_key(node.value, ("drafter.dev/",))] == ["drafter.dev/retry"]


#: Module-level names that match a constants name but are a different thing (checked against it elsewhere).
SAME_NAME_ALLOWED = {
    # The engine modules by engine name: a table of modules, in the order of constants.ENGINES
    # (test_constants.py test_the_engine_modules_are_the_engines_in_order).
    ("engines/__init__.py", "ENGINES"),
}


def test_no_module_defines_a_name_constants_owns():
    found = []
    for relative, tree in modules("constants.py"):
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in CONSTANT_NAMES \
                        and (relative, target.id) not in SAME_NAME_ALLOWED:
                    found.append((relative, node.lineno, target.id))
    assert not found, f"import these from constants.py instead of defining them again: {found}"


def test_constants_names_are_imported_from_constants_only():
    """Not through a module that passes them on (resources.labels, resources.gate, api.common, ...): an
    importer names the home, so moving a key never leaves a chain of re-exports behind."""
    found = []
    for relative, tree in modules("constants.py"):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("drafter_operator") \
                    and node.module != "drafter_operator.constants":
                found += [(relative, node.lineno, node.module, alias.name) for alias in node.names
                          if alias.name in CONSTANT_NAMES and (relative, alias.name) not in SAME_NAME_ALLOWED]
    assert not found, f"import from drafter_operator.constants: {found}"


def literal_strings(node: ast.AST) -> tuple[str, ...] | None:
    """The strings of a tuple/list/set display or a Literal[...] made only of string constants, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
        node = node.slice
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


@pytest.mark.parametrize("name", ["ENGINES", "DRAFTER_METHODS", "METHODS_WITH_MODEL", "SPECULATIVE_METHODS"])
def test_no_module_lists_the_engines_or_methods_again(name):
    wanted = set(getattr(constants, name))
    found = [(relative, node.lineno) for relative, tree in modules("constants.py") for node in ast.walk(tree)
             if (values := literal_strings(node)) is not None and len(values) > 1 and set(values) == wanted]
    assert not found, f"derive from constants.{name}: {found}"


def test_the_list_scan_would_catch_a_copied_literal():
    tree = ast.parse('E = Literal["vllm", "sglang"]\nF = ("sglang", "vllm")\nG = {"vllm": 1, "sglang": 2}\n')
    lines = {node.lineno for node in ast.walk(tree) if (values := literal_strings(node)) and len(values) > 1}
    assert lines == {1, 2}  # the Literal and the tuple; a dict keyed by engine is another fact


# --------------------------------------------------------------------------------------------------
# settings.py

#: Modules that touch os.environ without reading an operator setting.
ENVIRON_ALLOWED = {
    # torch.distributed's own protocol (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_PORT) and SpecForge's device
    # switch, in the training container: another program's variables (settings.py says so).
    "training/adapters/cpu_trainer.py",
    "training/adapters/eager_loss.py",
    "training/adapters/hf_hidden_states.py",
    # Hands the whole environment on to the stage's child processes; it reads no variable.
    "training/stage_runner.py",
}


def environ_uses(tree: ast.Module) -> Iterator[int]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr in ("environ", "getenv", "environb", "putenv"):
            yield node.lineno
        if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                {alias.name for alias in node.names} & {"environ", "getenv", "environb"}:
            yield node.lineno


def test_only_settings_reads_the_environment():
    found = [(relative, line) for relative, tree in modules("settings.py") if relative not in ENVIRON_ALLOWED
             for line in environ_uses(tree)]
    assert not found, f"add a Setting to settings.py and read() it: {found}"


def test_no_module_spells_a_settings_variable():
    names = {setting.name for setting in settings.ALL}
    found = [(relative, node.lineno, node.value) for relative, tree in modules("settings.py")
             for node in strings(tree) if node.value in names]
    assert not found, f"use the Setting (its .name for a message): {found}"


def test_the_environ_scan_would_catch_a_read():
    assert sorted(environ_uses(ast.parse("import os\nx = os.environ.get('X')\ny = os.getenv('Y')\n"))) == [2, 3]


# --------------------------------------------------------------------------------------------------
# timestamps.py


def time_text_calls(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("strftime", "strptime", "fromisoformat", "isoformat"):
            yield node.lineno, node.attr


def test_only_timestamps_reads_or_writes_time_text():
    found = [(relative, line, attr) for relative, tree in modules("timestamps.py")
             for line, attr in time_text_calls(tree)]
    assert not found, f"use timestamps.parse / format_seconds / format_micro: {found}"


def test_the_time_scan_would_catch_a_local_format():
    tree = ast.parse('s = now.strftime("%Y")\nt = dt.datetime.fromisoformat(s)\n')
    assert sorted(time_text_calls(tree)) == [(1, "strftime"), (2, "fromisoformat")]
    assert timestamps.parse("2026-01-02T03:04:05Z").tzinfo is not None
