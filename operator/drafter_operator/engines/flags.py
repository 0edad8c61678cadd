"""Each engine's command-line flags as data, and the rules by which the engine matches them.

The tables in ``engines/flagtables/`` are generated from the real parsers (``vllm serve`` of vLLM
0.33.0, ``python -m sglang.launch_server`` of SGLang 0.5.23) by ``tests/contract/engine_parsers.py
table <engine>``; a contract test fails when the installed engines and the files disagree. Every
option string the parser matches is there (hidden aliases and negations included) with its
destination, action, nargs, type, choices and default, plus the tool-call and reasoning parser names
the engine registers.

From a table this module builds a plain :mod:`argparse` parser that matches arguments the way the
engine's own does (argparse is what both engines use): exact spellings, ``--flag=value``, unique
prefixes (both parsers allow abbreviations), ``--no-<flag>`` negations and vLLM's
``--disable-<x>`` inverses. vLLM's ``FlexibleArgumentParser`` adds its own rewriting before argparse
sees the arguments (``_`` for ``-`` in names, dotted keys merged into JSON, ``-O3``); SGLang has none
besides config files. Both engines load more flags from ``--config FILE``: a file the operator cannot
read, so the destination ``config`` is one the operator owns.

Values are converted with the engines' own rules (vLLM's and SGLang's ``human_readable_int`` differ,
vLLM's ``optional_type`` reads "None" as unset, ...). Types this module does not model (vLLM's
dataclass-valued config groups, checked by pydantic inside vLLM) are checked as JSON only: such a
value can pass here and still be refused by the engine; ``UNMODELLED_TYPE_CHECK`` says how.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

TABLES_PACKAGE = "drafter_operator.engines.flagtables"


class CommandLineRejected(ValueError):
    """The engine's parser would exit with status 2 on these arguments; ``message`` says why."""


@dataclass(frozen=True)
class Option:
    """One argparse action of an engine's parser, as the flag table records it."""

    flags: tuple[str, ...]
    dest: str
    action: str
    nargs: int | str | None
    type: str | None
    choices: tuple[str, ...] | None
    negative_flags: tuple[str, ...] = ()
    const: Any = None
    default: Any = None
    required: bool = False

    @property
    def canonical(self) -> str:
        """The spelling the engine's help shows first."""
        return self.flags[0] if self.flags else self.dest

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Option:
        return cls(flags=tuple(raw["flags"]), dest=raw["dest"], action=raw["action"], nargs=raw["nargs"],
                   type=raw["type"], choices=tuple(raw["choices"]) if raw["choices"] is not None else None,
                   negative_flags=tuple(raw.get("negative_flags") or ()), const=raw.get("const"),
                   default=raw.get("default"), required=bool(raw.get("required")))


@dataclass(frozen=True)
class FlagTable:
    """An engine's parser: its options, positionals, matching settings and parser-name registries."""

    engine: str
    version: str
    prog: str
    allow_abbrev: bool
    options: tuple[Option, ...]
    positionals: tuple[Option, ...]
    registries: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Engine-specific facts generated beside the parser: vLLM's SpeculativeConfig methods and fields,
    #: SGLang's speculative algorithm names.
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FlagTable:
        parser = raw["parser"]
        extras = {k: v for k, v in raw.items() if k not in ("engine", "version", "parser", "registries")}
        return cls(engine=raw["engine"], version=raw["version"], prog=parser["prog"],
                   allow_abbrev=bool(parser["allow_abbrev"]),
                   options=tuple(Option.from_json(o) for o in parser["options"]),
                   positionals=tuple(Option.from_json(p) for p in parser["positionals"]),
                   registries={k: tuple(v) for k, v in raw.get("registries", {}).items()}, extras=extras)

    def by_dest(self, dest: str) -> Option | None:
        return next((o for o in self.options if o.dest == dest), None)

    def by_flag(self, flag: str) -> Option | None:
        return next((o for o in self.options if flag in o.flags), None)

    def spellings(self, dests: Iterable[str]) -> tuple[str, ...]:
        """Every exact spelling (negations included) of the options with these destinations."""
        wanted = set(dests)
        return tuple(sorted({f for o in self.options if o.dest in wanted for f in o.flags}))


@cache
def table(engine: str) -> FlagTable:
    """The packaged flag table of an engine (``vllm`` or ``sglang``)."""
    try:
        text = resources.files(TABLES_PACKAGE).joinpath(f"{engine}.json").read_text()
    except FileNotFoundError:
        raise ValueError(f"no flag table for engine {engine!r}") from None
    return FlagTable.from_json(json.loads(text))


# --------------------------------------------------------------------------------------------------
# Value conversion: each engine's type functions, by the name the table records


def _vllm_human_readable_int(value: str) -> int:
    # vllm/utils/argparse_utils.py: k/m/g/t are decimal, K/M/G/T binary (no decimals with binary).
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if "." in number:
            raise argparse.ArgumentTypeError(f"Decimals are not allowed with binary suffixes like {suffix}")
        return int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
    return int(value)


def _vllm_human_readable_int_or_auto(value: str) -> int:
    stripped = value.strip()
    if stripped == "-1" or stripped.lower() == "auto":
        return -1
    return _vllm_human_readable_int(stripped)


def _sglang_human_readable_int(value: str) -> int:
    # sglang/srt/utils/common.py: SI k/M/G/T (decimals allowed), IEC Ki/Mi/Gi/Ti (integers only).
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix.endswith("i"):
            if "." in number:
                raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes like '{suffix}'")
            return int(number) * 2 ** (10 * ("KMGT".index(suffix[0]) + 1))
        from decimal import Decimal
        return int(Decimal(number) * 10 ** (3 * "kMGT".index(suffix) + 3))
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid integer value: '{value}'") from None


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def _vllm_optional(inner: Callable[[str], Any]) -> Callable[[str], Any]:
    # vLLM's optional_type: "" and "None" mean unset; anything else goes through parse_type(inner).
    def convert(value: str) -> Any:
        if value in ("", "None"):
            return None
        try:
            return inner(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"Value {value} cannot be converted: {exc}") from None
    return convert


def _vllm_union_dict_and_str(value: str) -> Any:
    if not re.match(r"(?s)^\s*{.*}\s*$", value):
        return value
    return _vllm_optional(_json)(value)


def _vllm_dataclass_json(value: str) -> Any:
    # vLLM validates these with pydantic against its config dataclasses after expanding 80g-style
    # numbers; the operator checks that the value is a JSON object (UNMODELLED_TYPE_CHECK).
    expanded = re.sub(r'("(?:[^"\\]|\\.)*")|\b(\d+(?:\.\d+)?[kKmMgGtT])\b',
                      lambda m: m.group(1) or str(_vllm_human_readable_int(m.group(2))), value)
    parsed = _json(expanded)
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return parsed


def _sglang_nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


def _identity(value: str) -> str:
    return value


_BASE_TYPES: dict[str | None, Callable[[str], Any]] = {None: _identity, "str": str, "int": int, "float": float}

CONVERTERS: dict[str, dict[str, Callable[[str], Any]]] = {
    "vllm": {
        "vllm:human_readable_int": _vllm_human_readable_int,
        "vllm:human_readable_int_or_auto": _vllm_human_readable_int_or_auto,
        "vllm:union_dict_and_str": _vllm_union_dict_and_str,
        "vllm:parse_reasoning_parser": lambda v: "" if v.lower() == "none" else v,
        "vllm:_compute_kwargs.<locals>.parse_dataclass": _vllm_dataclass_json,
        "json:loads": _json,
        "vllm:parse_type.<locals>._parse_type[loads]": _json,
        "vllm:optional_type.<locals>._optional_type[str]": _vllm_optional(str),
        "vllm:optional_type.<locals>._optional_type[int]": _vllm_optional(int),
        "vllm:optional_type.<locals>._optional_type[float]": _vllm_optional(float),
        "vllm:optional_type.<locals>._optional_type[loads]": _vllm_optional(_json),
        "vllm:optional_type.<locals>._optional_type[human_readable_int]": _vllm_optional(_vllm_human_readable_int),
        "vllm:optional_type.<locals>._optional_type[_compute_kwargs.<locals>.parse_dataclass]":
            _vllm_optional(_vllm_dataclass_json),
        "vllm:optional_type.<locals>._optional_type[parse_type.<locals>._parse_type]": _vllm_optional(_json),
    },
    "sglang": {
        "sglang:human_readable_int": _sglang_human_readable_int,
        "sglang:nullable_str": _sglang_nullable_str,
        "sglang:json_list_type": _json,
        "json:loads": _json,
    },
}
#: What happens to a type this module has no converter for: its value is accepted as text.
UNMODELLED_TYPE_CHECK = "accepted as text"


def converter(engine: str, option: Option) -> Callable[[str], Any]:
    """The value conversion of ``option``, followed by its choices check (as argparse does)."""
    convert = _BASE_TYPES.get(option.type) or CONVERTERS.get(engine, {}).get(option.type or "", _identity)
    choices = option.choices

    def checked(value: str) -> Any:
        result = convert(value)
        if choices is not None and result is not None and str(result) not in choices:
            shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
            raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {shown})")
        return result

    checked.__name__ = option.type or "str"  # argparse names the type in its error message
    return checked


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
    processed: list[str] = []
    origin: dict[str, str] = {}
    index = 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("--"):
            key, sep, value = arg.partition("=")
            processed.append(_DOTTED_NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + sep + value)
        elif arg.startswith("-O") and arg != "-O":
            processed += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and index + 1 < len(args) and args[index + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)
        index += 1

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
        if name.endswith("+"):
            name = name[:-1]
            value_text = json.dumps(value_text.split(","))
        key, *path = name.split(".")
        try:
            value: Any = json.loads(value_text)
        except json.JSONDecodeError:
            try:
                value = _vllm_human_readable_int(value_text)
            except (ValueError, argparse.ArgumentTypeError):
                value = value_text
        for part in reversed(path):
            value = {part: value}
        _merge(merged.setdefault(key, {}), value)
        origin.setdefault(key, arg)
    for key, value in merged.items():
        kept += [key, json.dumps(value)]
    return kept, origin


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
    import yaml

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


# --------------------------------------------------------------------------------------------------
# extraArgs against the flags the operator owns


@dataclass(frozen=True)
class OwnedDestination:
    """A parser destination the operator sets itself (or must keep), and what to use instead."""

    #: What setting it through extraArgs would change, for the message.
    controls: str
    #: What to do instead, e.g. "use spec.target.tensorParallelSize".
    remedy: str


def owned_by_every_engine(port: int) -> dict[str, OwnedDestination]:
    """Destinations both engines name alike and the operator owns on each: the listener, files, help."""
    return {
        "config": OwnedDestination("any flag, loaded from a file the operator cannot check",
                                   "use spec fields and individual extraArgs"),
        "host": OwnedDestination("the address the engine listens on (probes and the Service need 0.0.0.0)",
                                 "remove it: the operator sets it"),
        "port": OwnedDestination(f"the port the probes, the Service and metrics scraping use ({port})",
                                 "remove it: the operator sets it"),
        "served_model_name": OwnedDestination("the model name clients use and the model_name label of every metric "
                                              "the operator reads", "use spec.target.servedModelName"),
        "trust_remote_code": OwnedDestination("whether the model repository's code runs",
                                              "use spec.target.trustRemoteCode"),
        "tool_call_parser": OwnedDestination("the tool-call parser", "use spec.target.toolCallParser"),
        "reasoning_parser": OwnedDestination("the reasoning parser", "use spec.target.reasoningParser"),
        "nnodes": OwnedDestination("the nodes one replica spans (multi-node replicas are not supported yet)",
                                   "use spec.resources.gpusPerReplica"),
        "help": OwnedDestination("whether the engine serves (it would print help and exit)", "remove it"),
    }


def resolve_spelling(engine: str, item: str) -> Option | None:
    """The option an extraArgs item names, by the engine's matching rules; None if it names none.

    Exact spellings, ``--flag=value``, vLLM's rewriting (``_`` for ``-``, dotted keys) and unique
    prefixes. Used to name the item that set an owned destination; the verdict itself comes from
    :func:`parse`.
    """
    if not item.startswith("-"):
        return None
    flags = table(engine)
    probe = item if "=" in item or "." not in item else item + "=0"
    rewritten, _ = rewrite(engine, [probe])
    name = rewritten[0].split("=", 1)[0] if rewritten else item
    exact = flags.by_flag(name)
    if exact is not None or not (flags.allow_abbrev and name.startswith("--")):
        return exact
    matches = {o.dest: o for o in flags.options for f in o.flags if f.startswith(name)}
    return next(iter(matches.values())) if len(matches) == 1 else None


def owned_rule(owned: dict[str, OwnedDestination], dest: str) -> OwnedDestination | None:
    """The rule for ``dest``: an exact key, or a key ending in ``*`` that ``dest`` starts with."""
    if dest in owned:
        return owned[dest]
    return next((rule for key, rule in owned.items() if key.endswith("*") and dest.startswith(key[:-1])), None)


def extra_args_problems(engine: str, extra_args: list[str], owned: dict[str, OwnedDestination], *,
                        known_flags_only: bool = True,
                        placeholder_positionals: tuple[str, ...] = ()) -> list[str]:
    """Why ``spec.target.extraArgs`` cannot go on this engine's command line; empty when it can.

    The arguments are parsed by the engine's own rules (see :func:`parse`). A destination in
    ``owned`` (a key ending in ``*`` is a prefix) is refused whatever spelling reached it.
    ``known_flags_only`` refuses flags the engine's table does not have (what the engine itself would
    do); turn it off for an image of another engine version. ``placeholder_positionals`` stand in
    for the positionals the operator renders before extraArgs (vLLM's model).
    """
    flags = table(engine)
    name = f"{engine} {flags.version}"
    where = "spec.target.extraArgs"
    try:
        parsed = parse(engine, [*placeholder_positionals, *extra_args], with_defaults=False,
                       known_only=not known_flags_only)
    except CommandLineRejected as exc:
        hint = ""
        other = "sglang" if engine == "vllm" else "vllm"
        for item in extra_args:
            if item.startswith("--") and resolve_spelling(engine, item) is None and resolve_spelling(other, item):
                hint = f"; {item.split('=', 1)[0]} is a {other} flag, not a {engine} one"
                break
        return [f"{where} is refused by the {name} argument parser ({exc}){hint}: "
                f"fix or remove the item (the engine would exit with status 2 at startup)"]

    problems = []
    positional_dests = {p.dest for p in flags.positionals}
    spelled = {}
    for item in extra_args:
        option = resolve_spelling(engine, item)
        if option is not None:
            spelled.setdefault(option.dest, item)
    for dest, spelling in parsed.given.items():
        if dest in positional_dests and placeholder_positionals:
            continue
        rule = owned_rule(owned, dest)
        if rule is None:
            continue
        option = flags.by_dest(dest)
        item = spelled.get(dest, spelling)
        canonical = option.canonical if option else dest
        spelled_as = "" if item.split("=", 1)[0] == canonical else f" (the engine reads it as {canonical})"
        problems.append(f"{where} item {item!r}{spelled_as} would change {rule.controls}, which the operator "
                        f"owns: {rule.remedy}")
    return problems


def parser_name_problems(engine: str, field_path: str, registry: str, name: str | None) -> list[str]:
    """A tool-call or reasoning parser name the engine does not register, with the closest names."""
    if not name:
        return []
    names = table(engine).registries.get(registry)
    if not names or name in names:
        return []
    import difflib

    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    suggestion = f"did you mean {', '.join(close)}?" if close else f"choose one of {', '.join(names)}"
    return [f"{field_path} {name!r} is not a {registry.replace('_', '-')} of {engine} {table(engine).version}: {suggestion}"]
