"""How the kubelet expands ``$(NAME)`` in a container's command and args (k8s.io/kubernetes
third_party/forked/golang/expansion): a reference to a variable of the container's environment becomes its value,
``$$`` becomes ``$``, and a reference to an unknown variable stays as written."""

from __future__ import annotations

import re

_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` as the container's process receives it with ``env`` as its environment."""
    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return [_REFERENCE.sub(one, arg) for arg in argv]
