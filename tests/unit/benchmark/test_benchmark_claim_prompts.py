"""Prompts from a file on a PersistentVolumeClaim (spec.prompts.persistentVolumeClaim): the path the API accepts, the
claim mounted read-only into the benchmark pod with --prompts-file pointing into the mount, and a gate's own prompts
and acceptanceByCategory reaching the DrafterBenchmark it creates (as its spec's fields, not as thresholds)."""

from __future__ import annotations

import copy
import posixpath

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterBenchmark, DrafterBenchmarkSpec, DrafterServing
from drafter_operator.api.benchmark_gate import BenchmarkGate, Gate
from drafter_operator.api.prompts import CLAIM_PATH_MAX, PromptsSpec
from drafter_operator.benchmark_client import prompts as prompt_sets
from drafter_operator.benchmark_client.run import Options, category_members
from drafter_operator.benchmark_client.stream import BenchError
from drafter_operator.controllers.benchmark.decide import bench_argv, decide
from drafter_operator.resources.benchmark_job import (
    PROMPTS_CLAIM_DIR,
    PROMPTS_CLAIM_VOLUME,
    PROMPTS_DIR,
    BenchPod,
    benchmark_job,
)
from drafter_operator.resources.gate import GatedPod, gate_benchmark
from tests.support.benchmarks import FAST, SERVING, benchmark, created_job, serving, state

CLAIM = {"claimName": "kimi-ft-work", "path": "data/held-out-prompts.json"}
ONE_TARGET = {"servingRef": {"name": "kimi"}}

segment = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,15}", fullmatch=True).filter(lambda s: s not in (".", ".."))
good_paths = st.lists(segment, min_size=1, max_size=6).map("/".join)


def claim(path: str, name: str = "kimi-ft-work") -> dict:
    return {"persistentVolumeClaim": {"claimName": name, "path": path}}


def refusal(prompts: dict) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        DrafterBenchmarkSpec.model_validate({**ONE_TARGET, "prompts": prompts})
    return str(caught.value)


# --- the API ------------------------------------------------------------------------------------------------


@FAST
@given(good_paths)
def test_a_relative_path_inside_the_claim_is_accepted_and_kept(path):
    spec = DrafterBenchmarkSpec.model_validate({**ONE_TARGET, "prompts": claim(path), "acceptanceByCategory": True})
    assert spec.prompts.persistent_volume_claim.path == path
    assert spec.to_json()["prompts"] == claim(path)
    assert spec.prompts.as_file() is None  # nothing rides in the pod template: the pod mounts the claim


@FAST
@given(st.lists(segment, max_size=3), st.lists(segment, max_size=3))
def test_a_path_with_a_parent_segment_is_refused_naming_the_field_and_the_fix(before, after):
    text = refusal(claim("/".join([*before, "..", *after])))
    assert "prompts.persistentVolumeClaim.path must not have a '..' segment" in text
    assert "from the claim's root" in text


@FAST
@given(good_paths)
def test_an_absolute_path_is_refused_naming_the_field_and_the_fix(path):
    text = refusal(claim("/" + path))
    assert "prompts.persistentVolumeClaim.path must be relative to the claim's root (no leading '/')" in text


@pytest.mark.parametrize("path", ["", "data/", "/"])
def test_an_empty_path_or_a_directory_is_refused_naming_the_field(path):
    assert "prompts.persistentVolumeClaim.path must name a file inside the claim" in refusal(claim(path))


def test_a_path_longer_than_the_limit_is_refused():
    DrafterBenchmarkSpec.model_validate({**ONE_TARGET, "prompts": claim("a" * CLAIM_PATH_MAX)})
    assert "persistentVolumeClaim" in refusal(claim("a" * (CLAIM_PATH_MAX + 1)))


def test_dots_inside_names_are_not_parent_segments():
    for path in ("data/..hidden", "data/prompts..json", "a/.../b", "./data/prompts.json"):
        DrafterBenchmarkSpec.model_validate({**ONE_TARGET, "prompts": claim(path)})


def test_a_claim_name_must_be_an_object_name():
    text = refusal(claim("p.json", name="Not_A_Name"))
    assert "claimName" in text


SOURCES = {"inline": ["a"], "categorized": [{"text": "b", "category": "code"}],
           "configMap": {"name": "prompts", "key": "set.json"}, "persistentVolumeClaim": CLAIM,
           "capture": {"claimName": "kimi-capture", "heldOutFraction": "0.1"}}


@given(st.sets(st.sampled_from(sorted(SOURCES))).filter(lambda s: len(s) != 1))
def test_exactly_one_prompt_source_with_the_claim_and_the_capture_among_them(chosen):
    with pytest.raises(pydantic.ValidationError,
                       match=r"prompts needs exactly one of .*prompts\.persistentVolumeClaim .*prompts\.capture"):
        PromptsSpec.model_validate({name: SOURCES[name] for name in chosen})


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_source_alone_is_accepted(name):
    assert PromptsSpec.model_validate({name: SOURCES[name]}).to_json()[name]


def test_the_client_says_clearly_when_a_claims_file_tags_no_category(tmp_path):
    """acceptanceByCategory is allowed with a claim (the categories are in the file): a file of plain lines fails the
    run before anything is sent, naming the fix."""
    plain = tmp_path / "prompts.txt"
    plain.write_text("first prompt\nsecond prompt\n")
    claim_file = f"{PROMPTS_CLAIM_DIR}/prompts.txt"  # where the pod would read it; the test reads it here
    options = Options(url="http://t", prompts_file=claim_file, acceptance_by_category=True)
    with pytest.raises(BenchError, match=r"--acceptance-by-category needs prompts tagged with a traffic category"):
        category_members(options, prompt_sets.load_set(str(plain)))
    tagged = tmp_path / "tagged.json"
    tagged.write_text('[{"text": "def f():", "category": "code"}, "untagged"]')
    texts, members = category_members(options, prompt_sets.load_set(str(tagged)))
    assert texts == ["def f():", "untagged"] and members == {"code": [0]}


# --- the Job ------------------------------------------------------------------------------------------------


def job_with(prompts: dict, **spec) -> dict:
    body = benchmark(prompts=prompts, **spec)
    return created_job(decide(state(body, serving())))


@FAST
@given(good_paths)
def test_the_claim_is_mounted_read_only_and_the_argv_reads_the_file_inside_the_mount(path):
    job = job_with(claim(path), acceptanceByCategory=True)
    pod = job["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume == {"name": PROMPTS_CLAIM_VOLUME,
                      "persistentVolumeClaim": {"claimName": "kimi-ft-work", "readOnly": True}}
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": PROMPTS_CLAIM_VOLUME, "mountPath": PROMPTS_CLAIM_DIR,
                                          "readOnly": True}]
    argv = container["command"]
    prompts_file = argv[argv.index("--prompts-file") + 1]
    assert prompts_file == f"{PROMPTS_CLAIM_DIR}/{path}"
    # whatever the API accepts stays inside the mount, and apart from the ConfigMap's directory
    assert posixpath.normpath(prompts_file).startswith(PROMPTS_CLAIM_DIR + "/")
    assert not PROMPTS_CLAIM_DIR.startswith(PROMPTS_DIR + "/")
    assert "--acceptance-by-category" in argv
    assert not (job["spec"]["template"]["metadata"].get("annotations") or {})  # nothing carried in the template


def test_the_builder_mounts_nothing_without_a_claim_and_is_pure():
    pod = BenchPod("img:1", ["--url", "http://x"], prompts_claim="work")
    first = benchmark_job("team", "seed", 1, pod, 600)
    assert first == benchmark_job("team", "seed", 1, pod, 600)
    assert first["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    bare = benchmark_job("team", "seed", 1, BenchPod("img:1", ["--url", "http://x"]), 600)
    assert "volumes" not in bare["spec"]["template"]["spec"]
    assert "volumeMounts" not in bare["spec"]["template"]["spec"]["containers"][0]


def test_bench_argv_points_into_the_claim_only_for_a_claim():
    spec = DrafterBenchmarkSpec.model_validate({**ONE_TARGET, "prompts": claim("sets/a.json")})
    argv = bench_argv(spec, "http://t", "vllm", [], None, None, [])
    assert argv[argv.index("--prompts-file") + 1] == f"{PROMPTS_CLAIM_DIR}/sets/a.json"
    other = DrafterBenchmarkSpec.model_validate({**ONE_TARGET, "prompts": {"configMap": {"name": "p", "key": "k"}}})
    other_argv = bench_argv(other, "http://t", "vllm", [], None, None, [])
    assert other_argv[other_argv.index("--prompts-file") + 1] == f"{PROMPTS_DIR}/k"


# --- a gate's prompts and acceptanceByCategory ---------------------------------------------------------------


def serving_with_gate(gate: dict):
    body = copy.deepcopy(SERVING)
    body["spec"]["swap"] = {"strategy": "BlueGreen", "gate": gate}
    return DrafterServing.model_validate(body).spec


GATE_PROMPTS = [
    claim("data/held-out-prompts.json"),
    {"categorized": [{"text": "def f():", "category": "code"}, {"text": "Bonjour", "category": "nonEnglish"}]},
    {"configMap": {"name": "prompts", "key": "set.json"}},
    {"inline": ["a", "b"]},
]


# (inline prompts with acceptanceByCategory: true are refused: test_a_gates_prompts_follow_the_benchmarks_rules)
@pytest.mark.parametrize("prompts, by_category", [(p, c) for p in GATE_PROMPTS for c in (None, True, False)
                                                  if not (c and "inline" in p)],
                         ids=lambda v: next(iter(v)) if isinstance(v, dict) else str(v))
def test_the_gate_benchmark_carries_the_gates_prompts_and_acceptance_by_category_not_as_thresholds(prompts, by_category):
    gate = {"minTokensPerSecond": "50", "numPrompts": 2, "prompts": prompts,
            **({"acceptanceByCategory": by_category} if by_category is not None else {})}
    spec = serving_with_gate(gate)
    manifest = gate_benchmark("team", "kimi", spec, GatedPod("r2", "10.1.0.9", 8000))
    body_spec = manifest["spec"]
    assert body_spec["prompts"] == prompts
    assert body_spec.get("acceptanceByCategory") == by_category
    assert body_spec["gate"] == {"minTokensPerSecond": "50"}
    assert set(body_spec["gate"]) <= {field.alias for field in Gate.model_fields.values()}
    parsed = DrafterBenchmark.model_validate(manifest)  # a valid DrafterBenchmark, its thresholds a valid Gate
    assert parsed.spec.prompts == spec.swap.gate.prompts


def test_a_gate_without_prompts_leaves_the_built_in_set():
    manifest = gate_benchmark("team", "kimi", serving_with_gate({"minTokensPerSecond": "50"}),
                              GatedPod("r2", "10.1.0.9", 8000))
    assert "prompts" not in manifest["spec"] and "acceptanceByCategory" not in manifest["spec"]


def test_the_gate_benchmarks_job_mounts_the_gates_claim():
    manifest = gate_benchmark("team", "kimi", serving_with_gate(
        {"minTokensPerSecond": "50", "prompts": claim("data/held-out-prompts.json"), "acceptanceByCategory": True}),
        GatedPod("r2", "10.1.0.9", 8000))
    manifest["metadata"].update(uid="g-1", generation=1, creationTimestamp="2026-11-30T12:00:00Z")
    pod = created_job(decide(state(manifest, None)))["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": PROMPTS_CLAIM_VOLUME,
                               "persistentVolumeClaim": {"claimName": "kimi-ft-work", "readOnly": True}}]
    argv = pod["containers"][0]["command"]
    assert argv[argv.index("--prompts-file") + 1] == f"{PROMPTS_CLAIM_DIR}/data/held-out-prompts.json"
    assert "--acceptance-by-category" in argv


@FAST
@given(st.integers(1, 6), st.integers(1, 6), st.sampled_from(["inline", "categorized"]))
def test_a_gates_num_prompts_counts_its_inline_or_categorized_prompts(count, num_prompts, kind):
    items = [f"p{i}" for i in range(count)] if kind == "inline" else [{"text": f"p{i}"} for i in range(count)]
    gate = {"minTokensPerSecond": "50", "numPrompts": num_prompts, "prompts": {kind: items}}
    if count >= num_prompts:
        assert BenchmarkGate.model_validate(gate).prompts is not None
        return
    with pytest.raises(pydantic.ValidationError,
                       match=f"gate.numPrompts exceeds the number of gate.prompts.{kind} prompts"):
        BenchmarkGate.model_validate(gate)


def test_a_gates_prompts_follow_the_benchmarks_rules():
    with pytest.raises(pydantic.ValidationError, match="gate.acceptanceByCategory needs prompts that carry a category, "
                                                       "and gate.prompts.inline are plain strings"):
        serving_with_gate({"minTokensPerSecond": "50", "numPrompts": 1, "prompts": {"inline": ["a"]},
                           "acceptanceByCategory": True})
    # a claim, a ConfigMap or categorized prompts may carry categories; numPrompts is not checked against a file
    for prompts in GATE_PROMPTS[:3]:
        BenchmarkGate.model_validate({"minTokensPerSecond": "50", "numPrompts": 1000, "prompts": prompts,
                                      "acceptanceByCategory": True} if "categorized" not in prompts else
                                     {"minTokensPerSecond": "50", "numPrompts": 2, "prompts": prompts,
                                      "acceptanceByCategory": True})
    # the shared PromptsSpec rules apply inside a gate too, naming the path relative to the gate
    with pytest.raises(pydantic.ValidationError) as caught:
        serving_with_gate({"minTokensPerSecond": "50", "prompts": claim("../etc/passwd")})
    assert "swap.gate.prompts.persistentVolumeClaim" in str(caught.value)
    assert "prompts.persistentVolumeClaim.path must not have a '..' segment" in str(caught.value)
