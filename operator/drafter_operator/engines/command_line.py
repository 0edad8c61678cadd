"""Parse an engine's arguments the way the engine does, from its flag table (``engines/flags.py``).

A plain :mod:`argparse` parser is built from the table, so arguments match as they do in the engine's
own argparse: exact spellings, ``--flag=value``, unique prefixes (both engines allow abbreviations),
``--no-<flag>`` negations and vLLM's ``--disable-<x>`` inverses. Before argparse, vLLM's
``FlexibleArgumentParser`` rewriting is repeated (``_`` for ``-`` in names, dotted keys merged into
JSON, ``-O3``); SGLang has none. Both engines read more flags from ``--config FILE``; only the
emulator expands such files (the operator owns ``config`` and refuses it instead).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from drafter_operator.engines.flags import Option, vllm_human_readable_int, converter, table


class CommandLineRejected(ValueError):
    """The engine's parser would exit with status 2 on these arguments; ``message`` says why."""


# --------------------------------------------------------------------------------------------------
# vLLM's FlexibleArgumentParser rewriting (vllm/utils/argparse_utils.py, 0.33.0)

_DOTTED_NAME = re.compile(r"(?<=--)[^.]*")


def vllm_rewrite(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The arguments vLLM's argparse sees, and for each rewritten flag the item the user wrote.

    ``--max_model_len`` -> ``--max-model-len`` (underscores before the first dot); ``-O3`` ->
    ``--optimization-level 3``; dotted keys ``--speculative-config.method ngram`` or
    ``-sc.num_speculative_tokens=3`` are merged into one JSON object per key
    (``-sc '{"method": "ngram", ...}'``) appended at the end, with ``+`` suffixes building lists, the
    way ``FlexibleArgumentParser.parse_args`` does. ``--config FILE`` is left in place (the engine
    would read the file; the operator cannot).
    """
    kept, origin = merge_dotted_keys(vllm_spelled(args))
    return kept, origin


def vllm_spelled(args: list[str]) -> list[str]:
    """The spellings vLLM's parser normalises before argparse: underscores in a --flag's name (before its first
    dot) become dashes, and -O<level> (or -O followed by a level) becomes --optimization-level <level>."""
    processed: list[str] = []
    for index, arg in enumerate(args):
        if arg.startswith("--"):
            key, sep, value = arg.partition("=")
            processed.append(_DOTTED_NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + sep + value)
        elif arg.startswith("-O") and arg != "-O":
            processed += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and index + 1 < len(args) and args[index + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)
    return processed


def merge_dotted_keys(processed: list[str]) -> tuple[list[str], dict[str, str]]:
    """Dotted keys (``--speculative-config.method ngram``, ``-sc.k=3``, ``key.list+ a,b``) merged into one JSON
    object per key, appended after the other arguments; and for each merged key the first item that set it."""
    origin: dict[str, str] = {}
    merged: dict[str, dict[str, Any]] = {}
    kept: list[str] = []
    skip = set()
    for i, arg in enumerate(processed):
        if i in skip:
            continue
        if not (arg.startswith("-") and "." in arg):
            kept.append(arg)
            continue
        if "=" in arg:
            name, value_text = arg.split("=", 1)
            if "." not in name:  # the dot was in the value
                kept.append(arg)
                continue
        else:
            name = arg
            if i + 1 >= len(processed):
                raise CommandLineRejected(f"{arg} needs a value")
            value_text = processed[i + 1]
            skip.add(i + 1)
        key, value = dotted_value(name, value_text)
        _merge(merged.setdefault(key, {}), value)
        origin.setdefault(key, arg)
    for key, value in merged.items():
        kept += [key, json.dumps(value)]
    return kept, origin


def dotted_value(name: str, value_text: str) -> tuple[str, Any]:
    """``--key.a.b`` with ``value_text`` -> (``--key``, {"a": {"b": value}}): the value read as JSON, else as
    vLLM's human-readable integer ("2k"), else kept as text; a ``+`` suffix splits it on commas into a list."""
    if name.endswith("+"):
        name = name[:-1]
        value_text = json.dumps(value_text.split(","))
    key, *path = name.split(".")
    try:
        value: Any = json.loads(value_text)
    except json.JSONDecodeError:
        try:
            value = vllm_human_readable_int(value_text)
        except (ValueError, argparse.ArgumentTypeError):
            value = value_text
    for part in reversed(path):
        value = {part: value}
    return key, value


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def expand_config_file(engine: str, args: list[str]) -> list[str]:
    """``--config FILE`` replaced by the flags in the YAML file, where each engine puts them.

    Both engines accept only a ``.yaml``/``.yml`` file and read it before argparse runs: a file that
    is missing or not YAML fails the launch. Values become flags the engine's way: ``true`` -> the
    bare flag, ``false`` -> ``--no-<key>`` (vLLM, when it exists) or nothing, lists -> the flag with
    each item, mappings -> JSON. Config flags come before the command line's, so the command line
    wins (vLLM keeps its positional model first). Only the emulator calls this: the operator refuses
    ``--config`` in extraArgs instead of reading files.
    """
    if "--config" not in args:
        return list(args)
    if args.count("--config") > 1:
        raise CommandLineRejected("More than one config file specified!")
    index = args.index("--config")
    if index == len(args) - 1:
        raise CommandLineRejected("No config file specified after --config")
    path = args[index + 1]
    if not path.lower().endswith((".yaml", ".yml")):
        raise CommandLineRejected(f"Config file must be YAML format, got: {path}")
    try:
        with open(path) as handle:
            config = yaml.safe_load(handle) or {}
    except OSError as exc:
        raise CommandLineRejected(f"Config file not found: {path} ({exc.strerror})") from None
    if not isinstance(config, dict):
        raise CommandLineRejected("Config file must contain a dictionary at root level")
    spellings = {f for o in table(engine).options for f in o.flags}
    by_key = {f[2:].replace("-", "_"): o for o in table(engine).options for f in o.flags if f.startswith("--")}
    from_file: list[str] = []
    for key, value in config.items():
        flag = f"--{key}"
        option = by_key.get(str(key).replace("-", "_"))
        if engine == "sglang" and option is not None and option.action not in ("store_true", "store") \
                and option.nargs is not None and option.dest not in ("config", "help"):
            # SGLang's ConfigArgumentMerger takes store_true and single-value flags only.
            raise CommandLineRejected(f"Unsupported config option '{str(key).replace('-', '_')}' "
                                      f"with action '{option.action}'")
        if isinstance(value, bool):
            if engine == "sglang" and not (option is not None and option.action == "store_true"):
                from_file += [flag, str(value).lower()]  # SGLang writes other booleans as values
            elif value:
                from_file.append(flag)
            elif engine == "vllm" and f"--no-{key}" in spellings:
                from_file.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                from_file += [flag, *map(str, value)]
        elif isinstance(value, dict):
            from_file += [flag, json.dumps(value)]
        else:
            from_file += [flag, str(value)]
    rest = args[:index] + args[index + 2:]
    if engine == "vllm" and rest and not rest[0].startswith("-"):
        return [rest[0], *from_file, *rest[1:]]
    return [*from_file, *rest]


def rewrite(engine: str, args: list[str], *, read_config: bool = False) -> tuple[list[str], dict[str, str]]:
    """What the engine's argparse sees of ``args`` (SGLang passes them on unchanged).

    ``read_config`` expands ``--config FILE`` as the engine would (the emulator); otherwise
    ``--config`` stays a flag, which the operator owns and refuses.
    """
    if read_config:
        args = expand_config_file(engine, args)
    if engine == "vllm":
        return vllm_rewrite(args)
    return list(args), {}


# --------------------------------------------------------------------------------------------------
# Parsing with a table-built argparse parser


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting (status 2 in the engines)."""

    def error(self, message: str):  # type: ignore[override]
        raise CommandLineRejected(message)


class _Given:
    """Mixin for actions: remembers which spelling set each destination (the last one wins)."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        given = namespace.__dict__.setdefault("_given", {})
        given[self.dest] = option_string or self.dest  # type: ignore[attr-defined]
        super().__call__(parser, namespace, values, option_string)  # type: ignore[misc]


class _Store(_Given, argparse._StoreAction):
    pass


class _StoreConst(_Given, argparse._StoreConstAction):
    pass


class _Append(_Given, argparse._AppendAction):
    pass


class _Count(_Given, argparse._CountAction):
    pass


class _Terminal(_Given, argparse.Action):
    """--help / --version: the engine prints and exits 0, so it would never serve."""

    def __init__(self, option_strings, dest, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        namespace.__dict__.setdefault("_given", {})[self.dest] = option_string
        setattr(namespace, self.dest, True)


class _Boolean(_Given, argparse.Action):
    """BooleanOptionalAction and vLLM's EnableDisableAction: the spelling decides the value."""

    def __init__(self, option_strings, dest, negative=(), **kwargs):  # type: ignore[no-untyped-def]
        self.negative = frozenset(negative)
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        namespace.__dict__.setdefault("_given", {})[self.dest] = option_string
        setattr(namespace, self.dest, option_string not in self.negative)


_NARGS = {"?": "?", "*": "*", "+": "+", "...": argparse.REMAINDER, "A...": argparse.PARSER}


def _add(parser: argparse.ArgumentParser, engine: str, option: Option, *, with_defaults: bool) -> None:
    # A recorded default of "==SUPPRESS==" is argparse.SUPPRESS itself: the attribute stays unset.
    default = option.default if with_defaults and option.default != argparse.SUPPRESS else argparse.SUPPRESS
    kind = option.action.removeprefix("custom:")
    names = list(option.flags)
    if kind in ("help", "version"):
        parser.add_argument(*names, dest=option.dest, action=_Terminal)
    elif kind == "boolean_optional":
        parser.add_argument(*names, dest=option.dest, action=_Boolean, negative=option.negative_flags)
        if with_defaults:
            parser.set_defaults(**{option.dest: option.default})
    elif kind in ("store_true", "store_false", "store_const", "DeprecatedStoreTrueAction",
                  "DeprecatedStoreConstAction", "append_const"):
        const = {"store_true": True, "store_false": False, "DeprecatedStoreTrueAction": True}.get(kind, option.const)
        parser.add_argument(*names, dest=option.dest, action=_StoreConst, const=const, default=default)
    elif kind == "count":
        parser.add_argument(*names, dest=option.dest, action=_Count, default=default)
    else:  # store, append, extend and the engines' custom store-like actions
        nargs = _NARGS.get(option.nargs, option.nargs) if isinstance(option.nargs, str) else option.nargs
        action = _Append if kind in ("append", "extend") else _Store
        parser.add_argument(*names, dest=option.dest, action=action, nargs=nargs,
                            type=converter(engine, option), default=default)


@cache
def _parser(engine: str, with_defaults: bool) -> argparse.ArgumentParser:
    flags = table(engine)
    parser = _RaisingParser(prog=flags.prog, allow_abbrev=flags.allow_abbrev, add_help=False)
    for positional in flags.positionals:
        nargs = _NARGS.get(positional.nargs, positional.nargs) if isinstance(positional.nargs, str) else positional.nargs
        parser.add_argument(positional.dest, nargs=nargs,
                            default=positional.default if with_defaults else argparse.SUPPRESS)
    for option in flags.options:
        _add(parser, engine, option, with_defaults=with_defaults)
    return parser


def format_help(engine: str) -> str:
    """The option listing of the engine's parser (what ``--help`` prints, without the help texts)."""
    return _parser(engine, True).format_help()


@dataclass(frozen=True)
class ParsedCommandLine:
    """What the engine's parser makes of a command line."""

    engine: str
    #: Every destination with its value (defaults included when parsed ``with_defaults``).
    values: dict[str, Any]
    #: The destinations the arguments set, each with the spelling the user wrote.
    given: dict[str, str]

    def __getitem__(self, dest: str) -> Any:
        return self.values[dest]

    def get(self, dest: str, default: Any = None) -> Any:
        return self.values.get(dest, default)


def parse(engine: str, args: list[str], *, with_defaults: bool = True, known_only: bool = False,
          read_config: bool = False) -> ParsedCommandLine:
    """Parse the arguments after the engine's entrypoint (``vllm serve`` / ``-m sglang.launch_server``).

    Raises :class:`CommandLineRejected` where the engine's parser would exit with status 2 (or, for
    an unreadable ``--config`` file with ``read_config``, crash). ``known_only`` tolerates unknown flags (for engines newer than the table), as argparse's
    ``parse_known_args`` does. Required options are checked only ``with_defaults``.
    """
    rewritten, origin = rewrite(engine, args, read_config=read_config)
    parser = _parser(engine, with_defaults)
    if known_only:
        namespace, _unknown = parser.parse_known_args(rewritten)
    else:
        namespace = parser.parse_args(rewritten)
    values = dict(vars(namespace))
    given = values.pop("_given", {})
    for dest, spelling in list(given.items()):
        given[dest] = origin.get(spelling, spelling)
    if with_defaults:
        missing = [o.canonical for o in table(engine).options if o.required and o.dest not in given]
        if missing:
            raise CommandLineRejected(f"the following arguments are required: {', '.join(missing)}")
    return ParsedCommandLine(engine=engine, values=values, given=given)
