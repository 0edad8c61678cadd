"""`$(VAR)` references in a container's command, args and env values, expanded as the kubelet expands them.

The kubelet's rules (k8s.io/kubernetes third_party/forked/golang/expansion, Expand and MappingFuncFor):

- `$(NAME)` becomes the value of NAME when NAME is defined, and stays `$(NAME)` as written when it is not (an
  empty NAME included: `$()` stays);
- `$$` is an escaped `$`: `$$(NAME)` gives `$(NAME)`, never expanded;
- a `$` before anything else, or at the very end, stays as it is; `$(` without a closing `)` stays too, and the
  text after it is read on (so `$($(A)` gives `$(` followed by A's value);
- the scan is one pass: a value that itself holds `$(OTHER)` is not expanded again.

A container's command and args are expanded from its whole environment (every resolved variable, the ones LWS
injects included); an env value from the variables defined before it.
"""

from __future__ import annotations

from collections.abc import Mapping

OPERATOR = "$"
OPENER = "("
CLOSER = ")"


def expand(text: str, variables: Mapping[str, str]) -> str:
    """``text`` with its `$(NAME)` references replaced from ``variables`` (see the module doc)."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == OPERATOR and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            following = text[cursor + 1]
            if following == OPERATOR:
                out.append(OPERATOR)  # an escaped operator
                advance = 1
            elif following == OPENER:
                closer = text.find(CLOSER, cursor + 2)
                if closer == -1:
                    out.append(OPERATOR + OPENER)  # an incomplete reference; the text after it is read on
                    advance = 1
                else:
                    name = text[cursor + 2:closer]
                    out.append(variables[name] if name in variables else f"{OPERATOR}{OPENER}{name}{CLOSER}")
                    advance = closer - cursor
            else:
                out.append(OPERATOR + following)  # an operator that begins no reference
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def expand_all(items: list[str], variables: Mapping[str, str]) -> list[str]:
    """Each of ``items`` expanded on its own, as the kubelet expands a command's and args' elements."""
    return [expand(item, variables) for item in items]
