"""Where a benchmark's prompts come from (PromptsSpec): shared by a DrafterBenchmark's spec.prompts and a gate's
gate.prompts (api/benchmark_gate.py BenchmarkGate), so both kinds of run read the same sources the same way.

The rules' messages name the fields relative to the object ("prompts.inline"), as the gate's do ("gate.minSpeedup"):
the same model sits at spec.prompts of a DrafterBenchmark and at spec.swap.gate.prompts of a DrafterServing, and the
apiserver and pydantic both report the full path beside the message.
"""

from __future__ import annotations

import json
import re
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from drafter_operator import timestamps
from drafter_operator.constants import CAPTURED_PER_CATEGORY
from drafter_operator.api.common import (
    RATIO_PATTERN,
    ApiModel,
    ConfigMapKeyReference,
    ObjectName,
    Ratio,
    Rule,
    decimal_range_rule,
    exactly_one_rule,
)
from drafter_operator.traffic_categories import TrafficCategory

PromptText = Annotated[str, StringConstraints(min_length=1, max_length=65536)]
#: Characters of inline or categorized prompts a run takes: they ride to the benchmark pod in one pod-template
#: annotation, and the apiserver allows 256 KiB of annotations per object (4 bytes a character at worst, plus
#: the JSON around each prompt). More prompts go in a ConfigMap (spec.prompts.configMap) or on a claim
#: (spec.prompts.persistentVolumeClaim).
INLINE_PROMPT_CHARACTERS = 50_000
#: The longest prompts.persistentVolumeClaim.path: a file inside the claim, mounted under a short directory, well
#: within the kernel's 4096-byte PATH_MAX.
CLAIM_PATH_MAX = 1024
#: A '..' segment of a relative path: it would climb out of the claim's mount.
PARENT_SEGMENT_PATTERN = r"(^|/)[.][.](/|$)"
CLAIM_PATH_EXAMPLE = '"data/held-out-prompts.json"'


class CategorizedPrompt(ApiModel):
    """One prompt and the kind of traffic it stands for."""

    text: PromptText
    """The prompt itself."""
    category: TrafficCategory | None = None
    """Its traffic category (spec.acceptanceByCategory measures each category's prompts on their own); unset: none."""


class ClaimPrompts(ApiModel):
    """A file of prompts on a PersistentVolumeClaim in the same namespace. The benchmark pod mounts the claim
    read-only (at /etc/drafter/prompts-claim) and reads the file there: one prompt per line, or a JSON list whose
    items are strings or {"text": ..., "category": ...} objects (categories, for acceptanceByCategory), as a
    ConfigMap key's: for sets larger than a ConfigMap holds, or written by a Job. A ReadWriteOnce claim that a pod
    on another node has mounted keeps the benchmark pod waiting to mount it (until the run's timeout)."""

    rules = (
        Rule(
            cel="size(self.path) > 0 && !self.path.endsWith('/')",
            message="prompts.persistentVolumeClaim.path must name a file inside the claim (not empty, no trailing '/'), "
                    f"e.g. {CLAIM_PATH_EXAMPLE}",
            check=lambda c: bool(c.path) and not c.path.endswith("/"),
            field_path=".path",
        ),
        Rule(
            cel="!self.path.startsWith('/')",
            message="prompts.persistentVolumeClaim.path must be relative to the claim's root (no leading '/'): write "
                    f"the file's path inside the claim, e.g. {CLAIM_PATH_EXAMPLE}",
            check=lambda c: not c.path.startswith("/"),
            field_path=".path",
        ),
        Rule(
            cel=f"!self.path.matches('{PARENT_SEGMENT_PATTERN}')",
            message="prompts.persistentVolumeClaim.path must not have a '..' segment (it would climb out of the "
                    f"claim): write the file's path from the claim's root, e.g. {CLAIM_PATH_EXAMPLE}",
            check=lambda c: re.search(PARENT_SEGMENT_PATTERN, c.path) is None,
            field_path=".path",
        ),
    )

    claim_name: ObjectName
    """The PersistentVolumeClaim holding the file, in this namespace; mounted read-only."""
    path: Annotated[str, StringConstraints(max_length=CLAIM_PATH_MAX)]
    """The file's path inside the claim, relative to its root (no leading '/', no '..' segment), e.g. "data/held-out-prompts.json". It holds one prompt per line, or a JSON list of strings and {"text": ..., "category": ...} objects."""


def _aware_time(value: str) -> str:
    if timestamps.parse_aware(value) is None:
        raise ValueError(f"prompts.capture.capturedBefore {value!r} is not an RFC 3339 time with a zone: write one "
                         "such as 2026-12-07T10:00:00Z")
    return value


class CapturedPromptsSource(ApiModel):
    """The prompts a retraining held out of a serving's capture (spec.data.capture of a DrafterTraining), read by the
    benchmark pod from the capture's claim, mounted read-only: the captured prompts de-duplicated and split by a
    hash of each, exactly as the training's Generate stage split them, keeping the held-out side (prompts no
    drafter trained from this claim has seen), each tagged with its traffic category by the operator's classifier
    (acceptanceByCategory measures each category on its own). The operator never reads them: the benchmark pod
    does. A training's Evaluate benchmark and its promotion gate use this source with the same capturedBefore, so
    both drafters are measured on the same prompts."""

    rules = (
        decimal_range_rule(
            "heldOutFraction", RATIO_PATTERN,
            'prompts.capture.heldOutFraction must be above 0 and below 1 (the held-out share the training used, its '
            'spec.data.capture.heldOutFraction), e.g. "0.1"',
            minimum=0.0, maximum=0.9999, exclusive_minimum=True,
        ),
    )

    claim_name: ObjectName
    """The PersistentVolumeClaim the serving's capture writes to (its spec.capture.claimName), in this namespace."""
    held_out_fraction: Ratio
    """The held-out share the training split the capture with (its spec.data.capture.heldOutFraction), above 0 and below 1, e.g. "0.1": the same share keeps the same prompts out."""
    captured_before: Annotated[str, StringConstraints(max_length=64), AfterValidator(_aware_time),
                               Field(json_schema_extra={"format": "date-time"})] | None = None
    """Only prompts captured before this time (RFC 3339), so that runs at different times send the same set while the serving keeps capturing; unset: everything on the claim."""
    per_category: Annotated[int, Field(ge=1, le=1000)] = CAPTURED_PER_CATEGORY
    """At most this many prompts of each traffic category, the first captured (a measurement by category sends each once, one at a time)."""


class PromptsSpec(ApiModel):
    """Where the prompts come from: exactly one of inline, categorized, configMap, persistentVolumeClaim or capture."""

    rules = (
        exactly_one_rule(
            ("inline", "categorized", "configMap", "persistentVolumeClaim", "capture"),
            "prompts needs exactly one of prompts.inline (a list of prompts), prompts.categorized "
            "(a list of {text, category}), prompts.configMap (a ConfigMap key), prompts.persistentVolumeClaim "
            "(a file on a claim: {claimName, path}) or prompts.capture (a serving's held-out captured prompts: "
            "{claimName, heldOutFraction})",
        ),
        Rule(
            cel=f"(!has(self.inline) || self.inline.map(p, size(p)).sum() <= {INLINE_PROMPT_CHARACTERS}) && "
                f"(!has(self.categorized) || self.categorized.map(p, size(p.text)).sum() <= {INLINE_PROMPT_CHARACTERS})",
            message=f"prompts.inline and prompts.categorized hold at most {INLINE_PROMPT_CHARACTERS} characters "
                    "in all (they ride to the benchmark pod in an annotation): put a larger set in a ConfigMap and name "
                    "it in prompts.configMap, or in a file on a claim named in prompts.persistentVolumeClaim",
            check=lambda s: sum(map(len, s.inline or ())) <= INLINE_PROMPT_CHARACTERS
            and sum(len(p.text) for p in s.categorized or ()) <= INLINE_PROMPT_CHARACTERS,
        ),
    )

    def as_file(self) -> str | None:
        """The inline or categorized prompts as the bench client's --prompts-file reads them (a JSON list of
        strings and {text, category} objects); None for a ConfigMap's, a claim's or a capture's (the pod mounts
        those)."""
        if self.inline:
            return json.dumps(list(self.inline), ensure_ascii=False)
        if self.categorized:
            return json.dumps([{"text": p.text, "category": p.category} if p.category else p.text
                               for p in self.categorized], ensure_ascii=False)
        return None

    inline: Annotated[list[PromptText], Field(min_length=1, max_length=1000)] | None = None
    """The prompts themselves, as plain strings (no category)."""
    categorized: Annotated[list[CategorizedPrompt], Field(min_length=1, max_length=1000)] | None = None
    """The prompts as objects carrying their traffic category, e.g. {text: "Write a function that ...", category: code}. A field of its own rather than objects mixed into inline: a CRD schema cannot type one list's items as a string or an object."""
    config_map: ConfigMapKeyReference | None = None
    """A ConfigMap key holding the prompts: one per line, or a JSON list whose items are strings or {"text": ..., "category": ...} objects."""
    persistent_volume_claim: ClaimPrompts | None = None
    """A file on a PersistentVolumeClaim holding the prompts, e.g. {claimName: kimi-ft-work, path: data/held-out-prompts.json}: one per line, or a JSON list whose items are strings or {"text": ..., "category": ...} objects, as a ConfigMap key's. For sets larger than a ConfigMap holds (1 MiB), or written by a Job. The benchmark pod mounts the claim read-only."""
    capture: CapturedPromptsSource | None = None
    """The held-out prompts of a serving's capture, each with its traffic category, e.g. {claimName: kimi-capture, heldOutFraction: "0.1"}: what a retraining from that capture never trained on (see CapturedPromptsSource). A DrafterTraining fed from a capture sets it on its Evaluate benchmark and promotion gate by itself."""


def prompt_count_rules(owner: str) -> tuple[Rule, ...]:
    """The rules a model holding ``prompts``, ``numPrompts`` and ``acceptanceByCategory`` keeps on them (a
    DrafterBenchmark's spec, ``owner`` "spec"; a gate, "gate"): numPrompts within the inline or categorized count,
    and no measurement by category of plain inline prompts. The messages name the fields under ``owner``."""
    return (
        Rule(
            cel="!has(self.prompts) || !has(self.prompts.inline) || size(self.prompts.inline) >= self.numPrompts",
            message=f"{owner}.numPrompts exceeds the number of {owner}.prompts.inline prompts: add prompts or lower "
                    "numPrompts",
            check=lambda m: m.prompts is None or m.prompts.inline is None or len(m.prompts.inline) >= m.num_prompts,
            field_path=".numPrompts",
        ),
        Rule(
            cel="!has(self.prompts) || !has(self.prompts.categorized) || size(self.prompts.categorized) >= self.numPrompts",
            message=f"{owner}.numPrompts exceeds the number of {owner}.prompts.categorized prompts: add prompts or "
                    "lower numPrompts",
            check=lambda m: m.prompts is None or m.prompts.categorized is None
            or len(m.prompts.categorized) >= m.num_prompts,
            field_path=".numPrompts",
        ),
        Rule(
            cel="!has(self.acceptanceByCategory) || !self.acceptanceByCategory || !has(self.prompts) "
                "|| !has(self.prompts.inline)",
            message=f"{owner}.acceptanceByCategory needs prompts that carry a category, and {owner}.prompts.inline are "
                    f"plain strings: give them as {owner}.prompts.categorized ({{text, category}}), or use the built-in set",
            check=lambda m: not m.acceptance_by_category or m.prompts is None or m.prompts.inline is None,
            field_path=".prompts.inline",
        ),
    )
