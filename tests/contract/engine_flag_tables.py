"""The engines' flag tables (`engine_parsers.py table vllm|sglang`): every option string of the parser the
engine's CLI builds, with what the operator's table-built parser re-creates of it."""

from __future__ import annotations

import json

from parser_harness_common import jsonable
from vllm_parser_harness import Vllm



# argparse action classes -> the kind the operator's table-built parser re-creates.
ACTION_KINDS = {
    "_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const", "_AppendAction": "append", "_AppendConstAction": "append_const",
    "_CountAction": "count", "_HelpAction": "help", "_VersionAction": "version",
    "BooleanOptionalAction": "boolean_optional", "EnableDisableAction": "boolean_optional",
    "_ExtendAction": "extend",
}


def type_name(kind) -> str | None:
    """A stable name for an argparse `type` callable (None means str)."""
    if kind is None:
        return None
    if kind in (int, float, str):
        return kind.__name__
    name = getattr(kind, "__qualname__", None) or type(kind).__name__
    module = getattr(kind, "__module__", "") or ""
    # Closures made by factories (vLLM's optional_type(int), parse_type(json.loads), ...): record the
    # factory and what it wraps, which is what decides the accepted values.
    closure = getattr(kind, "__closure__", None) or ()
    wrapped = []
    for cell in closure:
        try:
            inner = cell.cell_contents
        except ValueError:
            continue
        if callable(inner) and not isinstance(inner, type) or inner in (int, float, str, bool):
            wrapped.append(getattr(inner, "__qualname__", repr(inner)))
        elif isinstance(inner, type):
            wrapped.append(inner.__qualname__)
    suffix = f"[{','.join(sorted(set(wrapped)))}]" if wrapped else ""
    return f"{module.split('.')[0]}:{name}{suffix}"


def describe_action(action, option_strings: list[str]) -> dict:
    """One action; `option_strings` are every spelling the parser matches (hidden ones included)."""
    kind = ACTION_KINDS.get(type(action).__name__, "custom:" + type(action).__name__)
    nargs = action.nargs
    if nargs is not None and not isinstance(nargs, int):
        nargs = str(nargs)
    choices = None
    if action.choices is not None:
        try:
            choices = sorted(str(c) for c in action.choices)
        except TypeError:
            choices = [repr(action.choices)]
    # Spellings that set a boolean to False: argparse's --no-x, vLLM's --disable-x for --enable-x.
    negative = sorted(getattr(action, "negative_option_strings", None)
                      or [o for o in option_strings if o.startswith("--no-")]) if kind == "boolean_optional" else []
    default = action.default
    plain = isinstance(default, (type(None), bool, int, float, str)) or (
        isinstance(default, (list, dict)) and len(json.dumps(jsonable(default))) < 200)
    return {
        "flags": option_strings,
        "negative_flags": negative,
        "dest": action.dest,
        "action": kind,
        "nargs": nargs,
        "type": type_name(action.type),
        "choices": choices,
        "const": jsonable(action.const) if isinstance(action.const, (type(None), bool, int, float, str)) else repr(action.const),
        # Dataclass-valued defaults (vLLM's config groups) are not needed by anyone and not stable text.
        "default": jsonable(default) if plain else None,
        "required": bool(action.required),
    }


def describe_parser(parser) -> dict:
    spellings: dict[int, list[str]] = {}
    for option, action in parser._option_string_actions.items():
        spellings.setdefault(id(action), []).append(option)
    options, positionals = [], []
    for action in parser._actions:
        if action.option_strings:
            # Declared order first (the help's spelling), then hidden aliases.
            names = list(dict.fromkeys([*action.option_strings, *sorted(spellings.get(id(action), []))]))
            options.append(describe_action(action, names))
        else:
            positionals.append(describe_action(action, []))
    return {
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "prefix_chars": parser.prefix_chars,
        "class": type(parser).__name__,
        "positionals": positionals,
        "options": sorted(options, key=lambda o: o["flags"]),
    }


def vllm_table() -> dict:
    from importlib.metadata import version

    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    import dataclasses
    import typing

    from vllm.config import SpeculativeConfig

    engine = Vllm()
    names = lambda manager, eager: sorted(set(getattr(manager, eager)) | set(manager.lazy_parsers))  # noqa: E731
    method_hint = typing.get_type_hints(SpeculativeConfig)["method"]
    methods = sorted(a for arg in typing.get_args(method_hint) for a in typing.get_args(arg) if isinstance(a, str))
    return {"engine": "vllm", "version": version("vllm"), "parser": describe_parser(engine.parser),
            "registries": {"tool_call_parser": names(ToolParserManager, "tool_parsers"),
                           "reasoning_parser": names(ReasoningParserManager, "reasoning_parsers")},
            # --speculative-config JSON: SpeculativeConfig's method literal and its init fields (extra=forbid).
            "speculative_config": {"methods": methods,
                                   "fields": sorted(f.name for f in dataclasses.fields(SpeculativeConfig) if f.init)}}


def sglang_table() -> dict:
    import argparse
    from importlib.metadata import version

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")  # as prepare_server_args builds it
    ServerArgs.add_cli_args(parser)
    described = describe_parser(parser)
    by_dest = {o["dest"]: o for o in described["options"]}
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    registries = {dest: by_dest[dest]["choices"] for dest in ("tool_call_parser", "reasoning_parser")
                  if dest in by_dest and by_dest[dest]["choices"]}
    # --speculative-algorithm is a free string checked by SpeculativeAlgorithm.from_string after parsing.
    from sglang.srt.speculative.spec_registry import _RESERVED_ALIASES

    algorithms = sorted(member.name for member in SpeculativeAlgorithm if member.name != "NONE")
    aliases = {alias: SpeculativeAlgorithm.from_string(alias).name for alias in sorted(_RESERVED_ALIASES)}
    return {"engine": "sglang", "version": version("sglang"), "parser": described, "registries": registries,
            # Matched case-insensitively by SpeculativeAlgorithm.from_string; aliases resolve to a member.
            "speculative_algorithms": {"members": algorithms, "aliases": aliases}}
