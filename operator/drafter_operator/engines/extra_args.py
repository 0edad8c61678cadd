"""``spec.target.extraArgs`` against the parser destinations the operator owns, and parser names.

Arguments are parsed by the engine's own rules (``engines/command_line.py``), so a destination the
operator owns is refused whatever spelling reaches it. Each engine module lists its owned
destinations (``OWNED_DESTINATIONS`` in ``engines/vllm.py`` and ``engines/sglang.py``).
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from types import MappingProxyType

from drafter_operator.engines.command_line import CommandLineRejected, parse, rewrite
from drafter_operator.engines.flags import Option, table


@dataclass(frozen=True)
class OwnedDestination:
    """A parser destination the operator sets itself (or must keep), and what to use instead."""

    #: What setting it through extraArgs would change, for the message.
    controls: str
    #: What to do instead, e.g. "use spec.target.tensorParallelSize".
    remedy: str


@dataclass(frozen=True)
class SecretDestination:
    """A parser destination whose value is a credential. On the command line it would be readable by
    everyone who may read the DrafterServing, its Deployment or its pods (and it would land in status
    messages and Events), so extraArgs may not carry it literally."""

    #: What the value is, for the message.
    holds: str
    #: The environment variable the engine (or the library it uses) reads the same secret from; None
    #: where it reads none: then the item may name an env variable as ``$(NAME)``, which the kubelet
    #: substitutes when the container starts, so the value lives only in the Secret.
    env: str | None

    def remedy(self, flag: str) -> str:
        source = "spec.env[].valueFrom.secretKeyRef or spec.envFrom[].secretRef"
        if self.env:
            return (f"remove it, put the value in a Secret and set the env variable {self.env} from it ({source}), "
                    f"or write the item as {flag}=$(NAME) with an env variable set from a Secret")
        return (f"put the value in a Secret, set an env variable from it ({source}) and write the item as "
                f"{flag}=$(NAME) with that variable's name: the kubelet substitutes it when the pod starts")


#: An item's whole value naming a container env variable, as the kubelet expands it in command and args.
ENV_REFERENCE = re.compile(r"\$\([A-Za-z_][A-Za-z0-9_.-]*\)")


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
        "nnodes": OwnedDestination("the nodes one replica spans", "use spec.resources.nodesPerReplica"),
        "node_rank": OwnedDestination("this pod's place in a replica that spans nodes (the operator renders it "
                                      "from the group's environment)", "use spec.resources.nodesPerReplica"),
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


def check_extra_args(engine: str, extra_args: list[str], owned: dict[str, OwnedDestination], *,
                     known_flags_only: bool = True,
                     placeholder_positionals: tuple[str, ...] = (),
                     secrets: dict[str, SecretDestination] | None = None) -> list[str]:
    """:func:`checked_extra_args`, remembered: every reconcile validates the spec, and a parse against the
    engine's whole flag table is most of a reconcile's CPU (the answer depends only on these inputs)."""
    return list(_remembered(engine, tuple(extra_args), tuple(owned.items()), known_flags_only,
                            tuple(placeholder_positionals), tuple((secrets or {}).items())))


@functools.lru_cache(maxsize=4096)
def _remembered(engine: str, extra_args: tuple[str, ...], owned: tuple[tuple[str, OwnedDestination], ...],
                known_flags_only: bool, placeholder_positionals: tuple[str, ...],
                secrets: tuple[tuple[str, SecretDestination], ...]) -> tuple[str, ...]:
    return tuple(checked_extra_args(engine, list(extra_args), dict(owned), known_flags_only=known_flags_only,
                                    placeholder_positionals=placeholder_positionals, secrets=dict(secrets)))


#: Where the items come from, as every message names it.
WHERE = "spec.target.extraArgs"


def checked_extra_args(engine: str, extra_args: list[str], owned: dict[str, OwnedDestination], *,
                       known_flags_only: bool = True,
                       placeholder_positionals: tuple[str, ...] = (),
                       secrets: dict[str, SecretDestination] | None = None) -> list[str]:
    """Why ``spec.target.extraArgs`` cannot go on this engine's command line; empty when it can.

    The arguments are parsed by the engine's own rules (see :func:`parse`). A destination in
    ``owned`` (a key ending in ``*`` is a prefix) is refused whatever spelling reached it.
    ``known_flags_only`` refuses flags the engine's table does not have (what the engine itself would
    do); turn it off for an image of another engine version. ``placeholder_positionals`` stand in
    for the positionals the operator renders before extraArgs (vLLM's model). A destination in
    ``secrets`` is refused unless its value is a whole ``$(NAME)`` env reference; the message names
    the flag only, never the value (it lands in status and Events).
    """
    flags = table(engine)
    try:
        parsed = parse(engine, [*placeholder_positionals, *extra_args], with_defaults=False,
                       known_only=not known_flags_only)
    except CommandLineRejected as exc:
        return [f"{WHERE} is refused by the {engine} {flags.version} argument parser ({_without_values(str(exc))})"
                f"{other_engine_hint(engine, extra_args)}: fix or remove the item (the engine would exit with "
                "status 2 at startup)"]
    problems = []
    positional_dests = {p.dest for p in flags.positionals}
    spelled = first_spellings(engine, extra_args)
    for dest, spelling in parsed.given.items():
        if dest in positional_dests and placeholder_positionals:
            continue
        option = flags.by_dest(dest)
        item = spelled.get(dest, spelling)
        canonical = option.canonical if option else dest
        secret = (secrets or {}).get(dest)
        if secret is not None:
            problem = secret_value_problem(item, canonical, secret, parsed.values.get(dest))
        else:
            problem = owned_destination_problem(item, canonical, owned_rule(owned, dest))
        if problem:
            problems.append(problem)
    return problems



def parallel_field_problems(engine: str, spec, destinations: dict[str, tuple[str, ...]],
                            placeholder_positionals: tuple[str, ...] = ()) -> list[str]:
    """extraArgs items that set what a spec.target parallel field renders, while that field is set too: the two
    would say one thing twice, and the rendered flag, after extraArgs, wins. ``destinations``: each field (its
    attribute name) and the parser destinations it renders; extraArgs may still reach them when it is unset.
    ``placeholder_positionals`` as for :func:`checked_extra_args`."""
    target = spec.target
    fields = [(name, dests) for name, dests in destinations.items() if getattr(target, name) is not None]
    if not fields:
        return []
    try:
        given = _given_destinations(engine, (*placeholder_positionals, *(target.extra_args or [])))
    except CommandLineRejected:
        return []  # the parse itself is a problem of its own (checked_extra_args)
    spelled = first_spellings(engine, list(target.extra_args or []))
    return [f"{WHERE} item {spelled.get(dest, given[dest])!r} sets what spec.target.{_camel(name)} renders: keep "
            f"spec.target.{_camel(name)} and remove the item"
            for name, dests in fields for dest in dests if dest in given]


# Cached: every reconcile of a serving with a parallel field set asks again of the same extraArgs (1,771 parses
# in four simulated scenarios); the parse reads no file here, so equal arguments give equal answers.
@functools.lru_cache(maxsize=256)
def _given_destinations(engine: str, args: tuple[str, ...]) -> MappingProxyType:
    """The destinations ``args`` set, each with the spelling written (parse's ``given``), read-only."""
    return MappingProxyType(parse(engine, list(args), with_defaults=False, known_only=True).given)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def other_engine_hint(engine: str, extra_args: list[str]) -> str:
    """"; --x is a sglang flag, not a vllm one" for the first item only the other engine knows, else ""."""
    other = "sglang" if engine == "vllm" else "vllm"
    for item in extra_args:
        if item.startswith("--") and resolve_spelling(engine, item) is None and resolve_spelling(other, item):
            return f"; {item.split('=', 1)[0]} is a {other} flag, not a {engine} one"
    return ""


def first_spellings(engine: str, extra_args: list[str]) -> dict[str, str]:
    """Each destination the items reach, with the first item that reached it (as the user wrote it)."""
    spelled: dict[str, str] = {}
    for item in extra_args:
        option = resolve_spelling(engine, item)
        if option is not None:
            spelled.setdefault(option.dest, item)
    return spelled


def secret_value_problem(item: str, canonical: str, secret: SecretDestination, value: object) -> str | None:
    """A secret-bearing flag whose value is not a whole $(NAME) reference; the message names the flag only."""
    # vLLM's --api-key appends (several keys): every one must be a reference.
    values = value if isinstance(value, list) else [value]
    if all(isinstance(v, str) and ENV_REFERENCE.fullmatch(v) for v in values):
        return None
    flag = item.split("=", 1)[0]
    read_as = "" if flag == canonical else f" (the engine reads it as {canonical})"
    return (f"{WHERE} item {flag}{read_as} carries {secret.holds} in the pod's command line, readable by anyone "
            f"who may read the DrafterServing, its Deployment or its pods: {secret.remedy(canonical)}")


def owned_destination_problem(item: str, canonical: str, rule: OwnedDestination | None) -> str | None:
    """An item reaching a destination the operator owns (``rule``; None when it owns none there)."""
    if rule is None:
        return None
    spelled_as = "" if item.split("=", 1)[0] == canonical else f" (the engine reads it as {canonical})"
    return f"{WHERE} item {item!r}{spelled_as} would change {rule.controls}, which the operator owns: {rule.remedy}"


def _without_values(message: str) -> str:
    """argparse's "unrecognized arguments: ..." with only the flags: the values after a mistyped flag
    (a mistyped --hf-token's token, say) would otherwise reach status and Events."""
    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
        return message
    flags = [item.split("=", 1)[0] for item in message[len(prefix):].split() if item.startswith("-")]
    return prefix + (" ".join(flags) if flags else "a value without its flag")


def parser_name_problems(engine: str, field_path: str, registry: str, name: str | None) -> list[str]:
    """A tool-call or reasoning parser name the engine does not register, with the closest names."""
    if not name:
        return []
    names = table(engine).registries.get(registry)
    if not names or name in names:
        return []
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    suggestion = f"did you mean {', '.join(close)}?" if close else f"choose one of {', '.join(names)}"
    return [f"{field_path} {name!r} is not a {registry.replace('_', '-')} of {engine} {table(engine).version}: {suggestion}"]
