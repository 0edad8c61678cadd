"""The base of the three top-level kinds: TypeMeta, ObjectMeta (kept as a dict), spec and status."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from drafter_operator.api.common import DNS1035_LABEL_PATTERN, ApiModel, Rule

# Every kind's name becomes part of child object names (Deployments "<name>-<revision>", Jobs
# "<name>-<stage>-g<generation>", gate benchmarks "<name>-gate-<revision>") and of label values (at most
# 63 characters), so it is a DNS-1035 label of at most 52 characters: a Deployment's 11-character suffix
# always fits; a longer child name is cut and carries a hash of the full one (resources/names.py).
NAME_MAX_LENGTH = 52
_NAME_RE = re.compile(DNS1035_LABEL_PATTERN)


def _name_ok(obj: Any) -> bool:
    name = (obj.metadata or {}).get("name")
    if not isinstance(name, str) or not name:
        return True  # not known yet (generateName) or not given: the apiserver decides
    return len(name) <= NAME_MAX_LENGTH and bool(_NAME_RE.match(name))


NAME_RULE = Rule(
    cel=f"self.metadata.name.size() <= {NAME_MAX_LENGTH} && self.metadata.name.matches(r'{DNS1035_LABEL_PATTERN}')",
    message=(
        f"metadata.name must be at most {NAME_MAX_LENGTH} lowercase letters, digits and '-', starting with a letter "
        "and ending with a letter or digit (it names the Service, Deployments and Jobs the operator creates): "
        "e.g. kimi-k25-eagle3"
    ),
    check=_name_ok,
)


class KindModel(ApiModel):
    """A whole custom object as the apiserver returns it (kopf bodies parse too)."""

    model_config = ConfigDict(extra="ignore")

    # Filled in by each kind.
    kind_name: ClassVar[str] = ""
    plural: ClassVar[str] = ""
    singular: ClassVar[str] = ""
    short_names: ClassVar[tuple[str, ...]] = ()
    printer_columns: ClassVar[tuple[dict[str, Any], ...]] = ()
    rules = (NAME_RULE,)

    metadata: dict[str, Any] = Field(default_factory=dict)
    """Standard object metadata."""

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
