"""While spec.capture is set, spec.target.extraArgs may not reach the engine's request logging: capture sets it,
and an item there would turn it off, cut the lines it reads or send them elsewhere."""

from __future__ import annotations

import pytest
import yaml

from drafter_operator.api import DrafterServingSpec
from drafter_operator.api.serving.problems import serving_problems
from tests.support.servings import REPO, SEED

SGLANG_SEED = yaml.safe_load((REPO / "examples" / "serving-sglang-kimi-k25-eagle3.yaml").read_text())
CAPTURE = {"sampleRate": "0.05", "claimName": "captured"}


def spec(seed: dict, extra_args: list[str], capture: dict | None) -> DrafterServingSpec:
    body = {**seed["spec"], "target": {**seed["spec"]["target"], "extraArgs": extra_args}}
    if capture:
        body["capture"] = capture
    return DrafterServingSpec.model_validate(body)


@pytest.mark.parametrize("seed, items, canonical", [
    (SEED, ["--enable-log-requests"], "--enable-log-requests"),
    (SEED, ["--no-enable-log-requests"], "--enable-log-requests"),
    (SEED, ["--enable-log-outputs"], "--enable-log-outputs"),
    (SEED, ["--enable-log-deltas"], "--enable-log-deltas"),
    (SEED, ["--max-log-len", "100"], "--max-log-len"),
    (SEED, ["--log-config-file", "/etc/log.json"], "--log-config-file"),
    (SGLANG_SEED, ["--log-requests"], "--log-requests"),
    (SGLANG_SEED, ["--log-requests-level", "1"], "--log-requests-level"),
    (SGLANG_SEED, ["--log-requests-target", "stdout"], "--log-requests-target"),
    (SGLANG_SEED, ["--log-requests-format", "text"], "--log-requests-format"),
])
def test_capture_owns_the_request_logging_and_the_message_names_the_field_and_the_fix(seed, items, canonical):
    problems = serving_problems(spec(seed, items, CAPTURE))
    (problem,) = [p for p in problems if items[0] in p]
    assert problem.startswith(f"spec.target.extraArgs item {items[0]!r}")
    assert "which the operator owns" in problem and "spec.capture" in problem
    # Without capture the same items are the user's to set.
    assert not [p for p in serving_problems(spec(seed, items, None)) if items[0] in p]


def test_responses_are_asked_for_through_the_spec_field():
    (problem,) = [p for p in serving_problems(spec(SEED, ["--enable-log-outputs"], CAPTURE)) if "log-outputs" in p]
    assert problem.endswith("use spec.capture.responses")


def test_other_logging_flags_stay_the_users_with_capture():
    assert serving_problems(spec(SEED, ["--uvicorn-log-level", "warning"], CAPTURE)) == []
    assert serving_problems(spec(SGLANG_SEED, ["--log-level", "debug"], CAPTURE)) == []


def test_capture_owns_no_destination_the_operator_already_owns():
    """A capture-owned destination is refused only with spec.capture: one owned anyway would be listed twice."""
    from drafter_operator import engines

    for name in engines.ENGINES:
        module = engines.engine(name)
        assert not set(module.CAPTURE_OWNED_DESTINATIONS) & set(module.OWNED_DESTINATIONS), name


@pytest.mark.parametrize("name", ["VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_CONFIG_PATH", "VLLM_REQUEST_BODY_LOG_LEVEL"])
def test_capture_owns_the_variables_vllms_request_logging_depends_on(name):
    """VLLM_CONFIGURE_LOGGING=0 would make vllm serve skip the configuration that sends requests to the spool, and
    the other two are capture's own: with spec.capture each is refused in spec.env, naming the entry and the fix;
    without capture they are the user's."""
    def with_env(capture):
        body = {**SEED["spec"], "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": name, "value": "0"}]}
        if capture:
            body["capture"] = capture
        return serving_problems(DrafterServingSpec.model_validate(body))

    (problem,) = [p for p in with_env(CAPTURE) if name in p]
    assert problem.startswith(f"spec.env[1] {name}: ") and "remove it from spec.env" in problem
    assert not [p for p in with_env(None) if name in p]
    # SGLang's capture reads its flags only: the same variable there is not capture's.
    sglang = {**SGLANG_SEED["spec"], "env": [{"name": name, "value": "0"}], "capture": CAPTURE}
    assert not [p for p in serving_problems(DrafterServingSpec.model_validate(sglang)) if name in p]
