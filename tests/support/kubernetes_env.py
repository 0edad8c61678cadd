"""How the kubelet expands ``$(NAME)`` in a container's command and args (k8s.io/kubernetes
third_party/forked/golang/expansion): a reference to a variable of the container's environment becomes its value,
``$$`` becomes ``$``, and a reference to an unknown variable stays as written. The rules live with the local
process runner, which runs pods this way (drafter_testbed/env_expansion.py)."""

from __future__ import annotations

from drafter_testbed.env_expansion import expand_all


def expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` as the container's process receives it with ``env`` as its environment."""
    return expand_all(argv, env)
