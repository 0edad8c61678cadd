"""The known-bad table (data/known-bad.yaml): its schema, the facts of a serving that its rows are matched
against, and the match. All pure.

A row names an engine behaviour (a refusal at start, a hang, corrupt output, collapsed acceptance) and the
combination it needs: engine version, drafter method, k, GPU product, parallelism, prefill/decode role, page
size, sleep mode, context length, model runner, target. A key a row leaves out matches anything. The facts
come from the spec the way the engine reads it: k from spec.drafter as each engine renders it, parallelism,
role, page size and sleep mode from spec.target.extraArgs parsed with the engine's own parser rules
(engines/command_line.py), the GPU product from spec.placement or, once the pods are placed, from their
nodes' nvidia.com/gpu.product label. A row that needs the GPU product while it is unknown is pending, not a
match: it is checked again once the product is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator, \
    model_validator
from pydantic.alias_generators import to_camel

from drafter_operator import engines
from drafter_operator.constants import DrafterMethod, Engine
from drafter_operator.engines.command_line import CommandLineRejected, parse
from drafter_operator.engines.flags import table
from drafter_operator.engines.group import Parallelism as Layout
from drafter_operator.engines.launch import LaunchFacts
from drafter_operator.preflight.engines import VllmRunner
from drafter_operator.resources.engine import GPU_PRODUCT_LABEL

DATA_FILE = "known-bad.yaml"
#: The word a list of k values or page sizes uses for "left to the engine" (k from the checkpoint or the
#: engine's own choice; the page size the engine picks for the attention backend).
DEFAULT = "default"

# ---------------------------------------------------------------------------------------------------
# Bounds: ">=0.30,<0.34" over versions, ">=4" over k, ">8192" over a length

_BOUND = re.compile(r"\s*(>=|<=|>|<|==)\s*v?(\d+(?:\.\d+)*)\s*")
_COMPARE = {">=": tuple.__ge__, "<=": tuple.__le__, ">": tuple.__gt__, "<": tuple.__lt__, "==": tuple.__eq__}


def parse_bounds(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Comma-separated bounds, each an operator and a dotted number; ValueError names a bad one."""
    bounds = []
    for bound in text.split(","):
        match = _BOUND.fullmatch(bound)
        if not match:
            raise ValueError(f"bad bound {bound.strip()!r}: write comparisons such as \">=0.30,<0.34\" or \">=4\"")
        bounds.append((match[1], tuple(int(p) for p in match[2].split("."))))
    return tuple(bounds)


def within(value: tuple[int, ...], text: str) -> bool:
    """Whether ``value`` meets every bound of ``text`` (already checked by the schema)."""
    return all(_COMPARE[op](value, other) for op, other in parse_bounds(text))


def _bounds(text: str) -> str:
    parse_bounds(text)
    return text


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"bad regex {pattern!r}: {exc}") from None
    return pattern


Bounds = Annotated[str, Field(min_length=1)]
#: k values or page sizes: a list (with "default" for what the engine picks), or bounds.
Sizes = tuple[Annotated[int, Field(ge=1)] | Literal["default"], ...] | Bounds
#: A parallelism condition: true (size above 1), false (size 1), or a least size.
Parallel = StrictBool | Annotated[StrictInt, Field(ge=2)]

# ---------------------------------------------------------------------------------------------------
# The schema


class _Strict(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Parallelism(_Strict):
    data_parallel: Parallel | None = None
    expert_parallel: Parallel | None = None
    pipeline_parallel: Parallel | None = None


class KnownBad(_Strict):
    """One row: a combination and what goes wrong with it."""

    id: Annotated[str, Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length=80)]
    engine: Engine
    engine_versions: str = ""
    methods: tuple[DrafterMethod, ...] = Field(min_length=1)
    architectures: tuple[str, ...] = ()
    model_patterns: tuple[str, ...] = ()
    num_speculative_tokens: Sizes | None = None
    gpu_products: tuple[str, ...] = ()
    parallelism: Parallelism | None = None
    role: Literal["prefill", "decode"] | None = None
    page_size: Sizes | None = None
    sleep_level: Literal[1, 2] | None = None
    max_model_len: Bounds | None = None
    model_runner: VllmRunner | None = None
    issue: Annotated[str, Field(pattern=r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$")] | None = None
    source: str = ""
    reason: str
    fix: Annotated[str, Field(min_length=1)]
    observed: str = ""
    #: Preflight rules that, when they pass on the checkpoint, rule out this row's cause.
    resolved_by_preflight: tuple[str, ...] = ()

    @field_validator("engine_versions", "max_model_len", "num_speculative_tokens", "page_size")
    @classmethod
    def _bounds_parse(cls, value):
        return _bounds(value) if isinstance(value, str) and value.strip() else value

    @field_validator("model_patterns", "gpu_products")
    @classmethod
    def _regexes_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(map(_regex, value))

    @field_validator("reason", "fix", "observed", "source")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return " ".join(value.split())  # folded YAML keeps a trailing newline; the condition wants one line

    @model_validator(mode="after")
    def _cited(self) -> KnownBad:
        if not self.issue and not self.source:
            raise ValueError("cite the evidence: set issue (the upstream issue's URL) or source (the pinned "
                             "engine's file:line)")
        if self.model_runner is not None and not engines.engine(self.engine).MODEL_RUNNERS:
            raise ValueError("modelRunner is a vLLM setting (VLLM_USE_V2_MODEL_RUNNER): remove it or set engine vllm")
        return self

    @property
    def any_target(self) -> bool:
        """The row names no target: every target of its engine and method (a drafter checkpoint's layout)."""
        return not self.architectures and not self.model_patterns

    @property
    def citation(self) -> str:
        """Where the evidence is: the upstream issue, else the pinned engine's source."""
        return self.issue or f"the pinned engine's source, {self.source}"


class KnownBadTable(_Strict):
    version: Annotated[StrictInt, Field(ge=1)]
    rows: tuple[KnownBad, ...]

    @model_validator(mode="after")
    def _unique_ids(self) -> KnownBadTable:
        if not self.rows:
            raise ValueError("the table has no rows: a table that matches nothing is a mistake")
        seen: set[str] = set()
        for row in self.rows:
            if row.id in seen:
                raise ValueError(f"row id {row.id!r} is used twice: give each row its own id")
            seen.add(row.id)
        return self


class KnownBadTableError(ValueError):
    """The data file does not fit the schema; the message names each row and field and how to fix it."""


def load_table(text: str, name: str = DATA_FILE) -> KnownBadTable:
    """Read and check a table; KnownBadTableError names the row id and field of each problem."""
    raw = yaml.safe_load(text)
    try:
        return KnownBadTable.model_validate(raw)
    except ValidationError as exc:
        raise KnownBadTableError("\n".join(_problems(name, raw, exc.errors()))) from None


def _problems(name: str, raw: Any, errors: list[dict]) -> list[str]:
    """One line per (row, field): a union field (k, page size) fails once per member, and the value error (a bad
    bound, a bad regex) is the one that says what is wrong."""
    chosen: dict[tuple[str, str], dict] = {}
    for error in errors:
        where, field = _place(name, raw, list(error["loc"]))
        if (where, field) not in chosen or error["type"] == "value_error":
            chosen[(where, field)] = error
    return [f"{where}, field {field}: {_message(error, field, where == name)}"
            for (where, field), error in chosen.items()]


def _place(name: str, raw: Any, loc: list) -> tuple[str, str]:
    """The row (by id) and the field (its YAML key, parallelism's inner key too) an error's location names."""
    where = name
    if len(loc) >= 2 and loc[0] == "rows" and isinstance(loc[1], int):
        rows = raw.get("rows") if isinstance(raw, dict) else None
        row = rows[loc[1]] if isinstance(rows, list) and loc[1] < len(rows) else None
        row_id = row.get("id") if isinstance(row, dict) else None
        where = f"{name} row {row_id!r} (rows[{loc[1]}])" if row_id else f"{name} rows[{loc[1]}]"
        loc = loc[2:]
    if not loc:
        return where, "(the row)" if where != name else "(the file)"
    field = str(loc[0])
    if field == "parallelism" and len(loc) > 1 and isinstance(loc[1], str):
        field += f".{loc[1]}"
    return where, field


def _message(error: dict, field: str, top_level: bool) -> str:
    if error["type"] == "extra_forbidden":
        model = KnownBadTable if top_level else Parallelism if field.startswith("parallelism.") else KnownBad
        keys = sorted(info.alias or key for key, info in model.model_fields.items())
        return f"unknown key: remove it, or use one of {', '.join(keys)}"
    return str(error["msg"]).removeprefix("Value error, ")


@lru_cache(maxsize=1)
def packaged_table() -> KnownBadTable:
    return load_table(resources.files("drafter_operator.data").joinpath(DATA_FILE).read_text())


def known_bad() -> tuple[KnownBad, ...]:
    """The packaged table's rows."""
    return packaged_table().rows

# ---------------------------------------------------------------------------------------------------
# What a serving runs, as the rows ask it


@dataclass(frozen=True)
class ServingFacts:
    engine: str
    version: tuple[int, ...] | None  # None: a tag that is not a version (latest, a digest)
    method: str
    model: str
    architecture: str | None  # config.json's, once read
    k: int | None  # None: left to the engine or the checkpoint
    launch: LaunchFacts
    max_model_len: int | None
    model_runner: str | None  # vLLM only
    gpu_products: frozenset[str] | None  # None: not known yet


def image_version(image: str) -> tuple[int, ...] | None:
    """`vllm/vllm-openai:v0.33.0` -> (0, 33, 0); None when the tag is not a version (latest, a digest)."""
    tag = image.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    match = re.match(r"v?(\d+(?:\.\d+)*)", tag)
    return tuple(int(p) for p in match[1].split(".")) if match else None


def admission_gpu_products(spec) -> frozenset[str] | None:
    """The GPU product the spec pins its pods to (spec.placement.gpuProduct, or the label in its nodeSelector):
    known before anything is placed. None when the spec leaves it to the scheduler."""
    placement = spec.placement
    product = placement and (placement.gpu_product or (placement.node_selector or {}).get(GPU_PRODUCT_LABEL))
    return frozenset({product}) if product else None


def serving_facts(spec, image: str, architecture: str | None = None,
                  gpu_products: frozenset[str] | None = None) -> ServingFacts:
    """The facts of a serving spec on ``image``. ``gpu_products``: the placed pods' nodes' products, when known;
    the spec's own placement counts first."""
    drafter = spec.drafter
    return ServingFacts(
        engine=spec.engine, version=image_version(image), method=drafter.method, model=spec.target.model,
        architecture=architecture, k=engines.draft_tokens_per_step(spec.engine, drafter),
        launch=launch_facts(spec.engine, launch_args(spec), spec.target.tensor_parallel_size),
        max_model_len=spec.target.max_model_len,
        model_runner=engines.engine(spec.engine).model_runner(spec),
        gpu_products=admission_gpu_products(spec) or gpu_products)


def launch_args(spec) -> tuple[str, ...]:
    """The engine flags a launch's facts are read from: extraArgs, then the sizes spec.target's parallel fields
    render after them (pipeline, data and expert parallelism), which win as they do on the command line."""
    module = engines.engine(spec.engine)
    return (*(spec.target.extra_args or ()), *module.parallel_flags(Layout.of(spec)))


@lru_cache(maxsize=256)
def launch_facts(engine: str, extra_args: tuple[str, ...], tensor_parallel: int) -> LaunchFacts:
    """Parallelism, role, page size and sleep mode from extraArgs, read by the engine's own parser rules. Arguments
    the parser refuses are refused at admission already (spec problems); here they leave the defaults."""
    module = engines.engine(engine)
    args = [*module.PLACEHOLDER_POSITIONALS, *extra_args]  # the engine's positionals (vLLM's model) first
    try:
        given = parse(engine, args, with_defaults=False, known_only=True).values
    except CommandLineRejected:
        return LaunchFacts()
    defaults = {o.dest: o.default for o in table(engine).options}

    def value(dest: str) -> Any:
        return given.get(dest, defaults.get(dest))

    return module.launch_facts(value, tensor_parallel)

# ---------------------------------------------------------------------------------------------------
# The match

Outcome = Literal["match", "pending"]


def row_outcome(row: KnownBad, facts: ServingFacts) -> Outcome | None:
    """"match" when every key of the row holds for the facts; "pending" when all do but the GPU product the row
    needs is not known yet; None when one does not hold."""
    if row.engine != facts.engine or facts.method not in row.methods:
        return None
    if row.engine_versions.strip() and facts.version is not None and not within(facts.version, row.engine_versions):
        return None  # an unknown version (latest, a digest) may be any version: it matches
    held = (_target(row, facts) and _sizes(row.num_speculative_tokens, facts.k)
            and _parallelism(row.parallelism, facts.launch) and (row.role is None or row.role in facts.launch.roles)
            and _sizes(row.page_size, facts.launch.page_size) and (row.sleep_level is None or facts.launch.sleep_mode)
            and _length(row.max_model_len, facts.max_model_len)
            and (row.model_runner is None or row.model_runner == facts.model_runner))
    if not held:
        return None
    if not row.gpu_products:
        return "match"
    if facts.gpu_products is None:
        return "pending"
    hit = any(re.search(p, product) for p in row.gpu_products for product in facts.gpu_products)
    return "match" if hit else None


def _target(row: KnownBad, facts: ServingFacts) -> bool:
    """config.json's architecture once known (when the row lists architectures), else the model path."""
    if row.any_target:
        return True
    if facts.architecture is not None and row.architectures:
        return facts.architecture in row.architectures
    return any(re.search(p, facts.model) for p in row.model_patterns)


def _sizes(wanted: tuple | str | None, value: int | None) -> bool:
    if wanted is None:
        return True
    if isinstance(wanted, str):
        return value is not None and within((value,), wanted)
    return (DEFAULT if value is None else value) in wanted


def _length(wanted: str | None, value: int | None) -> bool:
    """Bounds over maxModelLen; an unset one (the model's own maximum, not read here) meets none."""
    return wanted is None or (value is not None and within((value,), wanted))


def _parallelism(wanted: Parallelism | None, launch: LaunchFacts) -> bool:
    if wanted is None:
        return True
    return all(_parallel(want, size) for want, size in ((wanted.data_parallel, launch.data_parallel),
                                                         (wanted.expert_parallel, launch.expert_parallel),
                                                         (wanted.pipeline_parallel, launch.pipeline_parallel)))


def _parallel(want: bool | int | None, size: int) -> bool:
    if want is None:
        return True
    if isinstance(want, bool):
        return (size > 1) == want
    return size >= want


def outcomes(facts: ServingFacts, rows: tuple[KnownBad, ...] | None = None) -> tuple[list[KnownBad], list[KnownBad]]:
    """The rows that match the facts, and those that wait for the GPU product."""
    matched, pending = [], []
    for row in known_bad() if rows is None else rows:
        outcome = row_outcome(row, facts)
        if outcome == "match":
            matched.append(row)
        elif outcome == "pending":
            pending.append(row)
    return matched, pending
