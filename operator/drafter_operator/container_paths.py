"""Container paths on a node runtime without a filesystem namespace.

A real kubelet mounts each volume at its mountPath inside the container, so a process there opens
`/models/target/config.json` as it is written in the spec. The local process runner runs containers
as host processes instead: it rewrites the container's own argv and env (drafter_testbed/launch.py), and
hands every process the same mapping in ``DRAFTER_CONTAINER_PATHS`` (JSON: container path -> host
path) so that a tool that builds further paths and commands inside the container (``run-stage``
renders a training stage there) maps them the same way. On a real node the variable is unset and
nothing changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from drafter_operator.settings import CONTAINER_PATHS

PATH_MAP_ENV = CONTAINER_PATHS.name


def remap(value: str, path_map: Mapping[str, str]) -> str:
    """Replace mapped paths wherever they occur in a string, in one pass (a replacement is never mapped
    again: a host path may itself start with a container path), longest first, and only whole path
    components (``/work`` maps ``/work/data``, not ``/workspace``)."""
    if not path_map:
        return value
    sources = sorted(path_map, key=len, reverse=True)
    pattern = "|".join(re.escape(s.rstrip("/") or "/") for s in sources)
    return re.sub(f"(?:{pattern})(?![\\w.-])", lambda m: path_map.get(m.group(0), path_map.get(m.group(0) + "/", m.group(0))), value)


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The runtime's mapping (from ``environ``, else the process environment), or {} where containers see
    their volumes at their mount paths."""
    raw = CONTAINER_PATHS.read(environ)
    return dict(json.loads(raw)) if raw else {}
