"""Each engine's command-line flags as data: the generated tables and the engines' value types.

The tables in ``engines/flagtables/`` are generated from the real parsers (``vllm serve`` of vLLM
0.33.0, ``python -m sglang.launch_server`` of SGLang 0.5.23) by ``tests/contract/engine_parsers.py
table <engine>``; a contract test fails when the installed engines and the files disagree. Every
option string the parser matches is there (hidden aliases and negations included) with its
destination, action, nargs, type, choices and default, plus the tool-call and reasoning parser names
the engine registers.

``engines/command_line.py`` parses arguments with a table the way the engine does;
``engines/extra_args.py`` checks ``spec.target.extraArgs`` against the destinations the operator owns.

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
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

TABLES_PACKAGE = "drafter_operator.engines.flagtables"


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


def vllm_human_readable_int(value: str) -> int:
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
    return vllm_human_readable_int(stripped)


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
                      lambda m: m.group(1) or str(vllm_human_readable_int(m.group(2))), value)
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
        "vllm:human_readable_int": vllm_human_readable_int,
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
        "vllm:optional_type.<locals>._optional_type[human_readable_int]": _vllm_optional(vllm_human_readable_int),
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
