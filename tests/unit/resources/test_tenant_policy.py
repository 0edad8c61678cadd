"""What an administrator allows tenants (resources/pod_policy.py TenantPolicy, prometheus_source's endpoints):
images by prefix, ServiceAccounts per namespace, Prometheus endpoints by name. Refused before any child
exists, with a message naming the field and the allowed values; no answer body ever reaches a message."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_operator.controllers.benchmark.decide import decide as benchmark_decide
from drafter_operator.controllers.training.state import TrainingState
from drafter_operator.controllers.training.decide import decide as training_decide
from drafter_operator.acceptance import prometheus_source as prom
from drafter_operator.resources.pod_policy import TenantPolicy, admits
from tests.support import benchmarks as bench, trainings as training
from tests.support.servings import World, seed_body

ENDPOINTS_JSON = '{"default": "http://prometheus.monitoring:9090", "team-a": "https://user:pw@prom.team-a:9091"}'


# --------------------------------------------------------------------------------------------------
# The pure policy


def test_an_empty_policy_allows_everything():
    assert TenantPolicy().problems("team", [("spec.image", "anything:1")], ("spec.pod.serviceAccountName", "root-ish")) == []
    assert TenantPolicy.from_env({}) == TenantPolicy()


#: Parts of image references: registry hosts (with ports, and `localhost`), path components (with `.`, `_`, `-`
#: inside), tags and digests.
HOSTS = st.one_of(st.none(), st.just("localhost:5000"), st.builds(
    lambda labels, port: ".".join(labels) + (f":{port}" if port is not None else ""),
    st.lists(st.from_regex(r"[a-z0-9]{1,5}", fullmatch=True), min_size=2, max_size=3),
    st.one_of(st.none(), st.integers(1, 65535))))
COMPONENTS = st.from_regex(r"[a-z0-9]{1,5}([._-][a-z0-9]{1,3})?", fullmatch=True)
TAGS = st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,6}", fullmatch=True))
DIGESTS = st.one_of(st.none(), st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True))


@st.composite
def references(draw) -> tuple[str, set[int]]:
    """An image reference and the lengths of its prefixes that end at a reference boundary, from how it was
    built: the registry host or a repository path (with or without the `/` after it), the repository
    (alone, or with the `:` or `@` that follows it), and the whole image."""
    host, path, tag, digest = draw(HOSTS), draw(st.lists(COMPONENTS, min_size=1, max_size=3)), draw(TAGS), draw(DIGESTS)
    name = "/".join(([host] if host else []) + path)
    image = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    boundaries = {len(image), len(name)} | ({len(name) + 1} if tag or digest else set())
    boundaries |= {i + extra for i, c in enumerate(name) if c == "/" for extra in (0, 1)}
    return image, boundaries


@settings(max_examples=300, deadline=None)
@given(references())
def test_a_prefix_admits_an_image_only_at_a_reference_boundary(reference):
    image, boundaries = reference
    for length in range(1, len(image) + 1):
        prefix = image[:length]
        assert admits(prefix, image) == (length in boundaries), (prefix, image)


@pytest.mark.parametrize(("prefix", "image", "allowed"), [
    ("registry.internal", "registry.internal.evil.com/vllm:1", False),  # issue 38: another registry
    ("registry.internal", "registry.internal:5000/vllm:1", False),  # the same host on another port is another registry
    ("registry.internal", "registry.internal/team/vllm:1", True),
    ("registry.internal/", "registry.internal/team/vllm:1", True),
    ("registry.internal/team", "registry.internal/team-evil/vllm:1", False),
    ("vllm/vllm-openai", "vllm/vllm-openai-evil:1", False),
    ("vllm/vllm-openai", "vllm/vllm-openai@sha256:" + "a" * 64, True),
    ("vllm/vllm-openai:", "vllm/vllm-openai:v0.33.0", True),
    ("vllm/vllm-openai:v0.33", "vllm/vllm-openai:v0.33.1", False),  # a tag is whole or not at all
    ("vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.33.0", True),
    ("ubuntu:", "ubuntu:5000/evil/engine", False),  # `ubuntu:5000` is a registry host, not a tag of ubuntu
    ("ubuntu", "ubuntu:5000/evil/engine", False),
])
def test_known_references(prefix, image, allowed):
    assert admits(prefix, image) is allowed


@settings(max_examples=200, deadline=None)
@given(prefixes=st.lists(st.sampled_from(["registry.internal", "registry.internal/", "vllm/vllm-openai:", "ghcr.io/org/"]),
                         min_size=1, max_size=3, unique=True),
       image=st.sampled_from(["registry.internal/vllm:1", "vllm/vllm-openai:v0.33.0", "vllm/vllm-openai-evil:1",
                              "ghcr.io/org/x@sha256:" + "a" * 64, "ghcr.io/other/x:1", "docker.io/registry.internal/x",
                              "registry.internal.evil.com/vllm:1", "ghcr.io/org-evil/x:1"]))
def test_an_image_is_refused_unless_an_allowed_prefix_admits_it_naming_them_all(prefixes, image):
    problems = TenantPolicy(image_prefixes=tuple(prefixes)).problems("team", [("spec.image", image)], ("f", None))
    admitted_by = {"registry.internal/vllm:1": {"registry.internal", "registry.internal/"},
                   "vllm/vllm-openai:v0.33.0": {"vllm/vllm-openai:"}, "ghcr.io/org/x@sha256:" + "a" * 64: {"ghcr.io/org/"}}
    allowed = bool(admitted_by.get(image, set()) & set(prefixes))
    assert (problems == []) == allowed
    if not allowed:
        assert problems[0].startswith(f"spec.image {image!r} is not an image the operator may run")
        assert all(repr(p) in problems[0] for p in prefixes) and "tenancy.allowedImagePrefixes" in problems[0]


def test_service_accounts_per_namespace_and_everywhere_and_the_default_always():
    policy = TenantPolicy(service_accounts={"*": ("inference",), "team-a": ("team-a-engines",)})
    field = "spec.pod.serviceAccountName"
    assert policy.problems("team-a", (), (field, "team-a-engines")) == []
    assert policy.problems("team-a", (), (field, "inference")) == []
    assert policy.problems("team-b", (), (field, None)) == []  # the namespace's default
    (refused,) = policy.problems("team-b", (), (field, "team-a-engines"))
    assert refused.startswith(f"{field} 'team-a-engines' is not a ServiceAccount") and "team-b" in refused
    assert "use one of inference" in refused and "tenancy.allowedServiceAccounts" in refused
    (none,) = TenantPolicy(service_accounts={"team-a": ("x",)}).problems("team-b", (), (field, "y"))
    assert "none besides the default" in none


@pytest.mark.parametrize(("prefixes", "accounts", "names"), [
    ("registry.internal/", None, "DRAFTER_ALLOWED_IMAGE_PREFIXES is not JSON"),
    ('["ok/", ""]', None, "DRAFTER_ALLOWED_IMAGE_PREFIXES must be a JSON list"),
    (None, '["inference"]', "DRAFTER_ALLOWED_SERVICE_ACCOUNTS must be a JSON object"),
    (None, '{"*": "inference"}', "DRAFTER_ALLOWED_SERVICE_ACCOUNTS must be a JSON object"),
])
def test_malformed_settings_name_the_variable(prefixes, accounts, names):
    with pytest.raises(ValueError, match=names):
        TenantPolicy.parse(prefixes, accounts)


# --------------------------------------------------------------------------------------------------
# Prometheus endpoints


def test_endpoints_parse_and_an_unknown_name_names_the_field_and_the_configured_names():
    endpoints = prom.endpoints_from_env({prom.ENDPOINTS_ENV: ENDPOINTS_JSON})
    assert set(endpoints) == {"default", "team-a"}
    assert prom.endpoint_problem("default", endpoints) is None
    problem = prom.endpoint_problem("team-b", endpoints)
    assert problem.startswith("spec.acceptance.prometheus 'team-b' names no Prometheus endpoint")
    assert "use one of default, team-a" in problem and "prometheus.endpoints" in problem
    assert "http" not in problem  # the URLs (and credentials in them) stay the administrator's
    assert "configured with none" in prom.endpoint_problem("default", {})


@pytest.mark.parametrize("raw", ['{"Default": "http://p:9090"}', '{"default": "prometheus:9090"}', '["http://p"]',
                                 "not json"])
def test_malformed_endpoints_name_the_variable(raw):
    with pytest.raises(ValueError, match=prom.ENDPOINTS_ENV):
        prom.parse_endpoints(raw)


MARKER = "SECRET-BODY-MARKER"


@settings(max_examples=200, deadline=None)
@given(status=st.sampled_from([200, 302, 400, 401, 403, 404, 418, 422, 500, 502, 503, 599]),
       shape=st.sampled_from(["text", "error", "error-type", "status", "result-type", "element", "html"]),
       filler=st.text(max_size=50))
def test_no_part_of_an_answer_body_reaches_a_message(status, shape, filler):
    secret = MARKER + filler
    body = {
        "text": secret,
        "error": json.dumps({"status": "error", "errorType": "bad_data", "error": secret}),
        "error-type": json.dumps({"status": "error", "errorType": secret, "error": "x"}),
        "status": json.dumps({"status": secret, "data": {}}),
        "result-type": json.dumps({"status": "success", "data": {"resultType": secret, "result": []}}),
        "element": json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": secret}]}}),
        "html": f"<html><body>{secret}</body></html>",
    }[shape].encode()
    try:
        prom.parse_query_response(status, body)
    except (prom.MetricsUnavailable, prom.MetricsInvalid) as exc:
        assert MARKER not in str(exc) and MARKER not in getattr(exc, "message", "")
        assert len(str(exc)) <= 200
        if status != 200:
            assert f"HTTP {status}" in str(exc)
    else:
        pytest.fail(f"an answer holding only a marker parsed: {body!r}")


# --------------------------------------------------------------------------------------------------
# The decisions: refused before anything is created


def serving_world(policy: TenantPolicy, endpoints: dict[str, str] | None = None, **spec) -> World:
    world = World(seed_body(**spec))
    plain = world.state

    def state():
        return dataclasses.replace(plain(), tenant_policy=policy, prometheus_endpoints=endpoints or {})
    world.state = state
    return world


def invalid_message(plan) -> str:
    assert plan.writes == [] and plan.deletes == [] and not plan.record_first
    (ready,) = [c for c in plan.status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    return ready["message"]


def test_a_serving_with_a_refused_image_or_service_account_creates_nothing():
    policy = TenantPolicy(image_prefixes=("registry.internal/",), service_accounts={"*": ("inference",)})
    message = invalid_message(serving_world(policy).decide())
    assert message.startswith("spec.image 'vllm/vllm-openai:v0.33.0' is not an image the operator may run")
    defaulted = serving_world(policy)
    del defaulted.body["spec"]["image"]
    message = invalid_message(defaulted.decide())
    assert message.startswith("spec.image (default for vllm) 'vllm/vllm-openai:v0.33.0' is not an image")
    message = invalid_message(serving_world(policy, image="registry.internal/vllm:1",
                                            pod={"serviceAccountName": "cluster-admin-ish"}).decide())
    assert "spec.image" not in message and "spec.pod.serviceAccountName 'cluster-admin-ish'" in message
    allowed = serving_world(policy, image="registry.internal/vllm:1", pod={"serviceAccountName": "inference"}).decide()
    assert [w.plural for w in allowed.writes][:1] == ["deployments"]


def test_a_serving_naming_an_unconfigured_prometheus_endpoint_creates_nothing():
    acceptance = {"minAcceptanceRate": "0.5", "source": "prometheus", "prometheus": "team-b"}
    endpoints = prom.parse_endpoints(ENDPOINTS_JSON)
    message = invalid_message(serving_world(TenantPolicy(), endpoints, acceptance=acceptance).decide())
    assert "spec.acceptance.prometheus 'team-b'" in message and "use one of default, team-a" in message
    fine = serving_world(TenantPolicy(), endpoints, acceptance={**acceptance, "prometheus": "team-a"}).decide()
    assert fine.writes


def test_a_serving_still_holding_prometheus_url_is_refused_naming_the_fix():
    acceptance = {"minAcceptanceRate": "0.5", "source": "prometheus", "prometheus": "default",
                  "prometheusUrl": "http://169.254.169.254/latest/meta-data"}
    message = invalid_message(serving_world(TenantPolicy(), {"default": "http://p:9090"}, acceptance=acceptance).decide())
    assert "spec.acceptance.prometheusUrl is no longer accepted" in message and "spec.acceptance.prometheus" in message


def test_a_training_with_a_refused_image_or_service_account_creates_nothing():
    body = training.training(image="ghcr.io/elsewhere/trainer:1", pod={"serviceAccountName": "x"})
    state = TrainingState(training=body, jobs=(), job_pods=(), claim=None, config_maps=frozenset(), now=training.T0,
                          image="trainer:1", tenant_policy=TenantPolicy(("trainer:",), {"*": ("trainers",)}))
    # The example regenerates its data with SGLang's default image, which this policy does not allow either.
    plan = training_decide(state)
    assert training.creates(plan) == [] and plan.status["stage"] == "Failed"
    message = plan.status["conditions"][0]["message"]
    assert "spec.image 'ghcr.io/elsewhere/trainer:1' is not an image" in message
    assert "spec.pod.serviceAccountName 'x'" in message and "use one of trainers" in message
    assert "spec.data.generation.image (default for sglang) 'lmsysorg/sglang:v0.5.23'" in message
    del body["spec"]["image"], body["spec"]["pod"]
    allowed = TenantPolicy(("trainer:", "lmsysorg/sglang:"), {"*": ("trainers",)})
    assert training.creates(training_decide(dataclasses.replace(state, training=body, tenant_policy=allowed)))


def test_a_benchmark_with_a_refused_service_account_creates_no_job():
    body = bench.benchmark(pod={"serviceAccountName": "x"})
    state = dataclasses.replace(bench.state(body, bench.serving()),
                                tenant_policy=TenantPolicy(service_accounts={"team": ("bench",)}))
    plan = benchmark_decide(state)
    assert bench.created_job(plan) is None and plan.status["state"] == "Failed"
    failed = bench.condition(plan, "Failed")
    assert failed["reason"] == "InvalidSpec" and "spec.pod.serviceAccountName 'x'" in failed["message"]
    allowed = benchmark_decide(dataclasses.replace(state, benchmark=bench.benchmark(pod={"serviceAccountName": "bench"})))
    assert bench.created_job(allowed) is not None
