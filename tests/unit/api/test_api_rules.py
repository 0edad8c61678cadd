"""Round trips and validation rules on the models (the apiserver side is tests/e2e/test_api_crds.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drafter_operator.api import (
    KINDS,
    DrafterBenchmarkSpec,
    DrafterServingSpec,
    DrafterTrainingSpec,
    parse_object,
)
from tests.api_strategies import benchmark_specs, serving_specs, training_specs
from tests.structures import contains

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE = sorted((ROOT / "tests" / "e2e" / "invalid").glob("*.yaml"))
ALL_RULE_MESSAGES = [rule.message for kind in KINDS for rule in kind.rules]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _error_text(error: ValidationError) -> str:
    return "\n".join(".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in error.errors())


# --- round trips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, strategy", [
    (DrafterServingSpec, serving_specs()), (DrafterBenchmarkSpec, benchmark_specs()), (DrafterTrainingSpec, training_specs()),
], ids=["serving", "benchmark", "training"])
def test_round_trip_model_json_model(model, strategy):
    @FAST
    @given(strategy)
    def run(data):
        parsed = model.model_validate(data)
        emitted = parsed.to_json()
        assert contains(data, emitted)  # nothing lost, only defaults added
        assert model.model_validate(emitted) == parsed
        assert model.model_validate(emitted).to_json() == emitted

    run()


# --- the invalid catalogue: the models reject what the apiserver rejects ----------------------------------


def _case(path: Path) -> tuple[str, str, dict]:
    text = path.read_text()
    field = re.search(r"^# field: (.+)$", text, re.M).group(1).strip()
    message = re.search(r"^# message: (.+)$", text, re.M).group(1).strip()
    return field, message, yaml.safe_load(text)


def test_catalogue_is_large_enough_and_covers_every_kind():
    assert len(CATALOGUE) >= 20
    kinds = {yaml.safe_load(p.read_text())["kind"] for p in CATALOGUE}
    assert kinds == {"DrafterServing", "DrafterBenchmark", "DrafterTraining"}


@pytest.mark.parametrize("path", CATALOGUE, ids=lambda p: p.stem)
def test_models_reject_every_catalogue_case(path):
    field, message, manifest = _case(path)
    with pytest.raises(ValidationError) as info:
        parse_object(manifest)
    text = _error_text(info.value)
    leaf = field.split(".")[-1].split("[")[0]
    assert leaf in text, f"{field} not named in:\n{text}"
    ours = any(message in rule_message for rule_message in _all_messages())
    # Our rules' messages name fields ("spec.endpoint"); the apiserver's own ("at least 3 items") do not. A case that
    # expects one of ours must find it in a rule, or the e2e run would look for a message nobody writes.
    assert ours or "spec." not in message, f"{path.name}: {message!r} is in no rule's message"
    if ours:
        assert message in text, f"rule message {message!r} not in:\n{text}"


def _all_messages() -> list[str]:
    from drafter_operator.api import benchmark, benchmark_gate, common, serving, training

    out = []
    for module in (common, benchmark_gate, serving, benchmark, training):
        for value in vars(module).values():
            rules = getattr(value, "rules", None)
            if isinstance(rules, tuple):
                out += [r.message for r in rules]
    return out


def test_catalogue_cases_are_otherwise_valid():
    """Each case breaks exactly one thing, so its expected message is the only error."""
    for path in CATALOGUE:
        field, _, manifest = _case(path)
        with pytest.raises(ValidationError) as info:
            parse_object(manifest)
        assert len(info.value.errors()) == 1, f"{path.name}: {_error_text(info.value)}"


# --- rules against an independent statement of them ---------------------------------------------------------


def _drafter_oracle(engine, method, model, k, steps, topk, draft, target="/models/T") -> bool:
    if method == "none":
        return all(v is None for v in (model, k, steps, topk, draft))
    if engine == "sglang" and method in ("suffix", "ngramGpu"):  # SGLang 0.5.23 has neither
        return False
    if method in ("eagle3", "eagle", "draftModel", "dflash") and model is None:
        return False
    if method in ("ngram", "ngramGpu", "suffix") and model is not None:
        return False
    if method not in ("mtp", "dspark") and model == target:
        return False
    if engine == "vllm":
        if steps is not None or topk is not None or draft is not None:
            return False
        # vLLM reads k from the model for dspark, from the tree depth for suffix; the renderer fills mtp's.
        if method not in ("mtp", "dspark", "suffix") and k is None:
            return False
        if method == "dspark" and model is None and k is None:  # the target's bundled weights need k
            return False
    if engine == "sglang":
        if method in ("dflash", "dspark"):  # one block: k is the block size, SGLang sets the rest
            if steps is not None or topk is not None or draft is not None:
                return False
        elif k is not None:
            return False
    if topk == 1 and steps is not None and draft is not None and draft != steps + 1:
        return False
    return True


_opt = lambda s: st.one_of(st.none(), s)  # noqa: E731


@FAST
@given(engine=st.sampled_from(["vllm", "sglang"]),
       method=st.sampled_from(["eagle3", "eagle", "mtp", "ngram", "ngramGpu", "suffix", "dflash", "dspark",
                               "draftModel", "none"]),
       model=_opt(st.sampled_from(["/models/T", "/models/D", "org/drafter"])),
       k=_opt(st.integers(1, 16)), steps=_opt(st.integers(1, 6)), topk=_opt(st.integers(1, 3)), draft=_opt(st.integers(1, 8)))
def test_drafter_rules_match_the_table(engine, method, model, k, steps, topk, draft):
    drafter = {"method": method, "model": model, "numSpeculativeTokens": k, "numSteps": steps, "eagleTopk": topk, "numDraftTokens": draft}
    spec = {"engine": engine, "target": {"model": "/models/T"}, "drafter": {a: b for a, b in drafter.items() if b is not None}}
    try:
        DrafterServingSpec.model_validate(spec)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == _drafter_oracle(engine, method, model, k, steps, topk, draft)


@FAST
@given(tp=st.integers(1, 64), gpus=st.integers(1, 64))
def test_tensor_parallelism_must_divide_the_gpus(tp, gpus):
    spec = {"engine": "vllm", "target": {"model": "m/x", "tensorParallelSize": tp}, "drafter": {"method": "none"},
            "resources": {"gpusPerReplica": gpus}}
    try:
        DrafterServingSpec.model_validate(spec)
        accepted = True
    except ValidationError as error:
        accepted = False
        assert "spec.target.tensorParallelSize must divide" in str(error)
    assert accepted == (gpus % tp == 0)


def _go_seconds(text: str) -> float | None:
    """Independent reading of a duration: None when malformed."""
    if not re.fullmatch(r"([0-9]{1,5}(ms|s|m|h)){1,4}", text):
        return None
    total = 0.0
    for number, unit in re.findall(r"([0-9]+)(ms|h|m|s)", text):
        total += int(number) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total


@FAST
@given(st.one_of(
    st.builds(lambda n, u: f"{n}{u}", st.integers(0, 200000), st.sampled_from(["ms", "s", "m", "h", "d", "", " m"])),
    st.builds(lambda a, b: f"{a}h{b}m", st.integers(0, 60), st.integers(0, 90)),
))
def test_duration_rules(text):
    seconds = _go_seconds(text)
    for field, low, high, build in [
        ("startup.timeout", 60, 48 * 3600, lambda t: {"startup": {"timeout": t}}),
        ("acceptance.window", 30, 86400, lambda t: {"acceptance": {"minAcceptanceRate": "0.5", "window": t}}),
        ("acceptance.for", 0, 86400, lambda t: {"acceptance": {"minAcceptanceRate": "0.5", "for": t}}),
    ]:
        spec = {"engine": "vllm", "target": {"model": "m/x"}, "drafter": {"method": "ngram", "numSpeculativeTokens": 3}, **build(text)}
        try:
            DrafterServingSpec.model_validate(spec)
            accepted = True
        except ValidationError:
            accepted = False
        assert accepted == (seconds is not None and low <= seconds <= high), field


@FAST
@given(st.one_of(st.from_regex(r"[0-9]{1,2}(\.[0-9]{1,5})?", fullmatch=True), st.sampled_from(["", ".5", "1.", "-0.5", "0.5 "])))
def test_ratio_rules(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    well_formed = re.fullmatch(r"0(\.[0-9]{1,4})?|1(\.0{1,4})?", text) is not None
    base = {"engine": "vllm", "target": {"model": "m/x"}, "drafter": {"method": "ngram", "numSpeculativeTokens": 3}}
    for spec, expected in [
        ({**base, "target": {"model": "m/x", "gpuMemoryUtilization": text}}, well_formed and value > 0),
        ({**base, "acceptance": {"minAcceptanceRate": text}}, well_formed),
    ]:
        try:
            DrafterServingSpec.model_validate(spec)
            accepted = True
        except ValidationError:
            accepted = False
        assert accepted == expected, spec


@FAST
@given(st.lists(st.integers(0, 1023), min_size=3, max_size=3))
def test_hidden_state_layers_must_be_three_distinct_ascending(layers):
    spec = {"target": {"model": "/models/T"}, "storage": {"modelClaim": "models"},
            "data": {"dataset": "d/x", "numSamples": 1, "chatTemplate": "qwen"}, "hiddenStates": {"layers": layers, "storage": {"size": "1Ti"}},
            "output": {"path": "/models/drafters/out"}}
    try:
        DrafterTrainingSpec.model_validate(spec)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == (layers[0] < layers[1] < layers[2])
