"""The prompts a DrafterBenchmark names reach its pod: a ConfigMap key mounted, inline and categorized prompts carried
in the Job's pod template and projected by the downward API, read back by the bench client as the same set."""

from __future__ import annotations

import pydantic
import pytest
from hypothesis import given, strategies as st

from drafter_operator.api.prompts import INLINE_PROMPT_CHARACTERS, PromptsSpec
from drafter_operator.benchmark_client import prompts as prompt_sets
from drafter_operator.constants import FILE_ANNOTATION_PREFIX
from drafter_operator.controllers.benchmark.decide import decide
from drafter_operator.resources.benchmark_job import INLINE_PROMPTS_FILE, PROMPTS_DIR
from drafter_operator.traffic_categories import TRAFFIC_CATEGORIES
from tests.support.benchmarks import benchmark, created_job, serving, state


def job_with(prompts: dict) -> dict:
    body = benchmark()
    body["spec"]["prompts"] = prompts
    body["spec"]["numPrompts"] = 2
    return created_job(decide(state(body, serving())))


def pod_file(job: dict) -> str:
    """What the pod reads at INLINE_PROMPTS_FILE: the annotation its projected downward API item names."""
    template = job["spec"]["template"]
    (volume,) = template["spec"]["volumes"]
    (item,) = volume["projected"]["sources"][0]["downwardAPI"]["items"]
    assert item["path"] == "prompts.json"
    key = item["fieldRef"]["fieldPath"].split("['", 1)[1].rstrip("']")
    (mount,) = template["spec"]["containers"][0]["volumeMounts"]
    assert mount == {"name": volume["name"], "mountPath": PROMPTS_DIR, "readOnly": True}
    return template["metadata"]["annotations"][key]


def argv_of(job: dict) -> list[str]:
    return job["spec"]["template"]["spec"]["containers"][0]["command"]


def test_inline_prompts_reach_the_pod_and_the_client_reads_them_as_given():
    job = job_with({"inline": ["def fib(n):", "¿Qué hora es?"]})
    argv = argv_of(job)
    assert argv[argv.index("--prompts-file") + 1] == INLINE_PROMPTS_FILE
    assert INLINE_PROMPTS_FILE.endswith("/prompts.json")
    assert [p.text for p in prompt_sets.parse_set(pod_file(job))] == ["def fib(n):", "¿Qué hora es?"]
    assert any(k.startswith(FILE_ANNOTATION_PREFIX) for k in job["spec"]["template"]["metadata"]["annotations"])


@given(st.lists(st.tuples(st.text(min_size=1, max_size=40).filter(str.strip),
                          st.sampled_from([None, *TRAFFIC_CATEGORIES])), min_size=1, max_size=12))
def test_categorized_prompts_keep_their_text_and_category(entries):
    spec = PromptsSpec.model_validate({"categorized": [{"text": t, **({"category": c} if c else {})}
                                                       for t, c in entries]})
    read = prompt_sets.parse_set(spec.as_file())
    assert [(p.text, p.category) for p in read] == [(t, c) for t, c in entries]


def test_a_config_maps_prompts_are_mounted_and_nothing_rides_in_the_template():
    job = job_with({"configMap": {"name": "prompts", "key": "set.json"}})
    argv = argv_of(job)
    assert argv[argv.index("--prompts-file") + 1] == f"{PROMPTS_DIR}/set.json"
    (volume,) = job["spec"]["template"]["spec"]["volumes"]
    assert volume["configMap"]["name"] == "prompts"
    assert not any(k.startswith(FILE_ANNOTATION_PREFIX)
                   for k in (job["spec"]["template"]["metadata"].get("annotations") or {}))


def test_no_prompts_named_is_the_built_in_set():
    job = created_job(decide(state(benchmark(), serving())))
    assert "--prompts-file" not in argv_of(job) and "volumes" not in job["spec"]["template"]["spec"]


def test_more_inline_characters_than_an_annotation_carries_are_refused_with_the_fix():
    half = INLINE_PROMPT_CHARACTERS // 2
    PromptsSpec.model_validate({"inline": ["x" * half, "y" * half]})
    with pytest.raises(pydantic.ValidationError, match="put a larger set in a ConfigMap"):
        PromptsSpec.model_validate({"inline": ["x" * half, "y" * (half + 1)]})
    with pytest.raises(pydantic.ValidationError, match="prompts.inline and prompts.categorized hold at most"):
        PromptsSpec.model_validate({"categorized": [{"text": "z" * (INLINE_PROMPT_CHARACTERS + 1)}]})
    # At the limit, the worst case (4 bytes a character, a JSON quote pair per prompt) fits the apiserver's 256 KiB.
    worst = PromptsSpec.model_validate({"inline": ["\U0001F600" * 49_001, *["\U0001F600"] * 999]})
    assert len(worst.as_file().encode()) < 256 * 1024
