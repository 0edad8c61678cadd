"""Names fit (resources/names.py): every name derived from a custom resource's name fits its kind's
limit, is a valid name of its kind, stays unique, and is today's name whenever today's fits."""

from __future__ import annotations

import datetime as dt
import re
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.api import DrafterServing, DrafterTraining
from drafter_operator.api.benchmark import DrafterBenchmark
from drafter_operator.api.common import DNS1035_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, LABEL_VALUE_PATTERN
from drafter_operator.api.kind import NAME_MAX_LENGTH
from drafter_operator.controllers.serving.revisions import REVISION_HASH_LENGTH
from drafter_operator.controllers.training.promotion import evaluate_benchmark
from drafter_operator.resources.benchmark_job import BenchPod, benchmark_job, job_name, result_config_map_name
from drafter_operator.resources.gate import GatedPod, gate_benchmark, gate_name
from drafter_operator.resources.labels import deployment_name
from drafter_operator.resources.names import HASH_LENGTH, child_name
from drafter_operator.resources.training import evaluate_benchmark_name, hidden_states_claim, hidden_states_claim_name
from drafter_operator.resources.training_engine import engine_name, generation_engine
from drafter_operator.resources.training_job import StageCommand, StageRun, spec_config_map, spec_config_map_name, stage_job, stage_job_name
from drafter_operator.training.stages import job_stages

NOW = dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SERVING = DrafterServing.model_validate(yaml.safe_load((EXAMPLES / "serving-sglang-kimi-k25-eagle3.yaml").read_text()))
TRAINING = DrafterTraining.model_validate(yaml.safe_load((EXAMPLES / "training-kimi-k25-eagle3.yaml").read_text()))
LONGEST = "k" + "imi-k25-sglang-eagle3-" * 2 + "x" * 7  # a valid name of exactly 52 characters
STAGES = ("Generate", "Extract", "Train", "Export")

DNS1035 = re.compile(DNS1035_LABEL_PATTERN)
SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)

LETTERS = string.ascii_lowercase
ALNUM = LETTERS + string.digits
ALPHABET = ALNUM + "-"


@st.composite
def parents(draw) -> str:
    """A custom resource name: a DNS-1035 label of 1..52 characters, often right at the cuts."""
    size = draw(st.one_of(st.integers(1, NAME_MAX_LENGTH), st.sampled_from([36, 37, 40, 41, 46, 47, 51, 52])))
    if size == 1:
        return draw(st.sampled_from(LETTERS))
    middle = draw(st.text(alphabet=ALPHABET, min_size=size - 2, max_size=size - 2))
    return draw(st.sampled_from(LETTERS)) + middle + draw(st.sampled_from(ALNUM))


@st.composite
def siblings(draw, parent: str) -> str:
    """A name that differs from ``parent`` only in its last few characters (the part a cut drops)."""
    if len(parent) == 1:
        return draw(st.sampled_from(LETTERS).filter(lambda c: c != parent))
    at = draw(st.integers(max(1, len(parent) - 3), len(parent) - 1))
    other = draw(st.sampled_from(ALNUM).filter(lambda c: c != parent[at]))
    return parent[:at] + other + parent[at + 1:]


revisions = st.text(alphabet="0123456789abcdef", min_size=REVISION_HASH_LENGTH, max_size=REVISION_HASH_LENGTH)
generations = st.one_of(st.integers(1, 99), st.integers(1, 10**9))
stage_generations = st.tuples(st.sampled_from(STAGES), generations)

# kind: (builder(parent, variant), today's format, limit, the kind's name rule, variants)
KINDS = {
    "gate DrafterBenchmark": (gate_name, lambda p, r: f"{p}-gate-{r}", 52, DNS1035, revisions),
    "serving Deployment": (deployment_name, lambda p, r: f"{p}-{r}", 63, DNS1035, revisions),
    "benchmark Job": (job_name, lambda p, g: f"{p}-bench-g{g}", 63, DNS1035, generations),
    "benchmark result ConfigMap": (lambda p, _: result_config_map_name(p), lambda p, _: f"{p}-result", 253,
                                   SUBDOMAIN, st.just(None)),
    "training stage Job": (lambda p, v: stage_job_name(p, *v), lambda p, v: f"{p}-{v[0].lower()}-g{v[1]}", 63,
                           DNS1035, stage_generations),
    "training spec ConfigMap": (spec_config_map_name, lambda p, g: f"{p}-spec-g{g}", 253, SUBDOMAIN, generations),
    "generation engine Deployment and Service": (engine_name, lambda p, g: f"{p}-gen-g{g}", 63, DNS1035, generations),
    "Evaluate DrafterBenchmark": (evaluate_benchmark_name, lambda p, g: f"{p}-evaluate-g{g}", 52, DNS1035, generations),
    "hidden-states claim": (lambda p, _: hidden_states_claim_name(p, TRAINING.spec), lambda p, _: f"{p}-hidden-states",
                            253, SUBDOMAIN, st.just(None)),
}


@st.composite
def two_children(draw, kind: str):
    """Two (parent, variant) pairs of ``kind``: often the same parent or a sibling, or the same variant."""
    variants = KINDS[kind][4]
    parent, variant = draw(parents()), draw(variants)
    other_parent = draw(st.one_of(st.just(parent), siblings(parent), parents()))
    other_variant = draw(st.one_of(st.just(variant), variants))
    return (parent, variant), (other_parent, other_variant)


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_a_child_name_fits_is_valid_and_is_todays_when_todays_fits(kind, data):
    build, today, limit, rule, variants = KINDS[kind]
    parent, variant = data.draw(parents()), data.draw(variants)
    name, old = build(parent, variant), today(parent, variant)
    assert len(name) <= limit and rule.match(name), name
    if len(old) <= limit:
        assert name == old
    else:
        # Shortened: the parent's head, then the hash, then the whole suffix (the part a reader looks for).
        suffix = old[len(parent) + 1:]
        assert name.endswith(f"-{suffix}")
        head, digest = name[:-len(suffix) - 1].rsplit("-", 1)
        assert head and parent.startswith(head) and len(digest) == HASH_LENGTH and set(digest) <= set(string.hexdigits)


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_distinct_parents_or_variants_get_distinct_names(kind, data):
    build = KINDS[kind][0]
    first, second = data.draw(two_children(kind))
    if first != second:
        assert build(*first) != build(*second), (first, second)


@pytest.mark.parametrize(("kind", "variant", "longest_kept"), [
    ("gate DrafterBenchmark", "0123456789", 36),
    ("Evaluate DrafterBenchmark", 1, 40),
    ("Evaluate DrafterBenchmark", 10, 39),
    ("training stage Job", ("Generate", 1), 51),
    ("training stage Job", ("Extract", 10), 51),
    ("benchmark Job", 999, 52),
    ("benchmark Job", 1000, 51),
    ("generation engine Deployment and Service", 99999, 52),
    ("generation engine Deployment and Service", 100000, 51),
    ("serving Deployment", "0123456789", 52),
])
def test_the_cut_falls_where_todays_name_stops_fitting(kind, variant, longest_kept):
    build, today, limit, _, _ = KINDS[kind]
    kept = LONGEST[:longest_kept]
    assert build(kept, variant) == today(kept, variant)
    if longest_kept < NAME_MAX_LENGTH:
        longer = LONGEST[:longest_kept + 1]
        assert len(today(longer, variant)) > limit and len(build(longer, variant)) <= limit


def test_a_shortened_name_keeps_a_valid_end_where_the_cut_falls_on_a_dash():
    # The gate cut keeps 52 - 15 (suffix) - 8 (hash) - 2 ('-') = 27 characters of the serving name: here they end in '-'.
    serving = "a" * 26 + "-" + "b" * 25
    name = gate_name(serving, "0123456789")
    assert name.startswith("a" * 26 + "-") and "--" not in name and DNS1035.match(name) and len(name) == 51


def test_a_suffix_that_leaves_no_room_is_refused():
    with pytest.raises(ValueError, match="no room"):
        child_name("kimi", "x" * 60, 63)


def test_the_gate_benchmark_of_a_52_character_serving_is_a_valid_drafter_benchmark():
    assert len(LONGEST) == NAME_MAX_LENGTH and DNS1035.match(LONGEST)
    manifest = gate_benchmark("team", LONGEST, SERVING.spec, GatedPod("0123456789", "10.0.0.7", 30000))
    benchmark = DrafterBenchmark.model_validate(manifest)  # NAME_RULE: at most 52 characters, DNS-1035
    assert benchmark.name == manifest["metadata"]["name"] != f"{LONGEST}-gate-0123456789"
    assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in manifest["metadata"]["labels"].values())
    # Its own Job, even after many spec changes, still fits the job-name label on its pods.
    _assert_job_fits(benchmark_job("team", benchmark.name, 10**6, BenchPod("operator:1", []), 600))


def test_the_evaluate_benchmark_of_a_52_character_training_is_a_valid_drafter_benchmark():
    manifest = evaluate_benchmark("team", LONGEST, TRAINING.spec, 12345, NOW)
    benchmark = DrafterBenchmark.model_validate(manifest)
    assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in manifest["metadata"]["labels"].values())
    _assert_job_fits(benchmark_job("team", benchmark.name, 10**6, BenchPod("operator:1", []), 600))


@pytest.mark.parametrize("generation", [1, 99, 123456])
def test_the_jobs_and_engine_of_a_52_character_training_fit(generation):
    for stage in job_stages(TRAINING.spec):
        _assert_job_fits(stage_job("team", LONGEST, TRAINING.spec, StageRun(stage, generation), StageCommand("trainer:1")))
    for obj in generation_engine("team", LONGEST, TRAINING.spec, generation, "lmsysorg/sglang:v0.5.23"):
        name = obj["metadata"]["name"]
        assert len(name) <= 63 and DNS1035.match(name), (obj["kind"], name)
    assert job_stages(TRAINING.spec) == STAGES  # every stage was checked


def test_a_52_character_benchmark_gets_a_job_at_any_generation():
    for generation in (1, 999, 1000, 10**9):
        _assert_job_fits(benchmark_job("team", LONGEST, generation, BenchPod("operator:1", []), 600))


def _assert_job_fits(job: dict) -> None:
    """The Job controller labels the Job's pods job-name=<the Job's name>: a label value, so 63 at most."""
    name = job["metadata"]["name"]
    assert len(name) <= 63 and DNS1035.match(name), name
    labels = {**job["metadata"]["labels"], **job["spec"]["template"]["metadata"]["labels"], "job-name": name}
    assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in labels.values()), labels


KIND_LIMITS = {"Job": (63, DNS1035), "ConfigMap": (253, SUBDOMAIN), "PersistentVolumeClaim": (253, SUBDOMAIN),
               "Deployment": (63, DNS1035), "Service": (63, DNS1035), "DrafterBenchmark": (NAME_MAX_LENGTH, DNS1035)}


def _labels_fit(labels: dict) -> None:
    assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in labels.values()), labels


@given(parents(), generations)
def test_every_child_of_a_training_of_any_valid_name_fits_its_kind(parent, generation):
    """Every object a DrafterTraining creates (stage Jobs, the spec ConfigMap, the hidden-state claim,
    Generate's engine, the Evaluate benchmark), for any valid training name up to the maximum length
    and any generation: its name fits its kind's limit and rule, every label value and selector fits a
    label, and the names its pods refer to (claim, ConfigMap) are the ones created."""
    created = [stage_job("team", parent, TRAINING.spec, StageRun(stage, generation), StageCommand("trainer:1")) for stage in STAGES]
    created.append(spec_config_map("team", parent, TRAINING.spec, generation))
    created.append(hidden_states_claim("team", parent, TRAINING.spec.model_copy(update={
        "hidden_states": TRAINING.spec.hidden_states.model_copy(update={
            "storage": TRAINING.spec.hidden_states.storage.model_copy(update={"claim_name": None, "size": "1Ti"})})})))
    created += generation_engine("team", parent, TRAINING.spec, generation, "lmsysorg/sglang:v0.5.23")
    created.append(evaluate_benchmark("team", parent, TRAINING.spec, generation, NOW))
    names = {}
    for obj in created:
        limit, rule = KIND_LIMITS[obj["kind"]]
        name = obj["metadata"]["name"]
        assert len(name) <= limit and rule.match(name), (obj["kind"], name)
        names.setdefault(obj["kind"], set()).add(name)
        _labels_fit(obj["metadata"].get("labels") or {})
        template = (obj.get("spec") or {}).get("template") or {}
        _labels_fit((template.get("metadata") or {}).get("labels") or {})
        _labels_fit(((obj.get("spec") or {}).get("selector") or {}).get("matchLabels")
                    or ((obj.get("spec") or {}).get("selector") if obj["kind"] == "Service" else {}) or {})
        if obj["kind"] == "Job":
            _assert_job_fits(obj)
    assert len(names["Job"]) == len(STAGES)  # one Job per stage, none shortened into another
    for job in (o for o in created if o["kind"] == "Job"):
        volumes = job["spec"]["template"]["spec"]["volumes"]
        assert {v["configMap"]["name"] for v in volumes if "configMap" in v} <= names["ConfigMap"]
        work = next(v for v in volumes if v["name"] == "work")["persistentVolumeClaim"]["claimName"]
        assert work == hidden_states_claim_name(parent, TRAINING.spec)
    DrafterBenchmark.model_validate(next(o for o in created if o["kind"] == "DrafterBenchmark"))
