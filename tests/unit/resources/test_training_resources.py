"""Builders of what a DrafterTraining owns besides its Jobs (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drafter_operator.api import DrafterTraining
from drafter_operator.resources.training import (
    hidden_states_claim,
    hidden_states_claim_name,
    owns_hidden_states_claim,
)
from drafter_operator.training.hidden_state_size import estimate_hidden_state_bytes

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3.yaml"


def seed(**storage) -> DrafterTraining:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["hiddenStates"]["storage"] = storage or body["spec"]["hiddenStates"]["storage"]
    return DrafterTraining.model_validate(body)


def test_the_operator_creates_a_sized_claim_only_when_the_spec_names_none():
    spec = seed().spec
    claim = hidden_states_claim("team", "kimi-ft", spec)
    assert claim["metadata"]["name"] == "kimi-ft-hidden-states" == hidden_states_claim_name("kimi-ft", spec)
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Ti"
    assert claim["metadata"]["labels"]["drafter.dev/training"] == "kimi-ft" and owns_hidden_states_claim(spec)
    mine = seed(claimName="scratch").spec
    assert hidden_states_claim("team", "kimi-ft", mine) is None and hidden_states_claim_name("kimi-ft", mine) == "scratch"
    assert not owns_hidden_states_claim(mine)
    fast = hidden_states_claim("team", "kimi-ft", seed(size="2Ti", storageClassName="nvme").spec)
    assert fast["spec"]["storageClassName"] == "nvme"


def test_the_estimate_reproduces_the_seeds_828_gb():
    # Kimi-K2.5 is 7168 wide; 10k regenerated samples of about 1,440 tokens each, three aux layers
    estimate = estimate_hidden_state_bytes(10_000, 1_440, 7168, layers=3)
    assert estimate == 10_000 * 1_440 * (4 * 7168 * 2 + 16)
    assert 820e9 < estimate < 830e9
    with pytest.raises(ValueError):
        estimate_hidden_state_bytes(0, 1, 1)


def test_the_extract_estimate_reads_the_hidden_size_from_the_text_config_or_gives_none():
    from types import SimpleNamespace

    from drafter_operator.training.hidden_state_size import hidden_states_estimate

    spec = SimpleNamespace(data=SimpleNamespace(num_samples=10), train=SimpleNamespace(max_length=100),
                           hidden_states=SimpleNamespace(layers=None))
    expected = estimate_hidden_state_bytes(10, 100, 64)
    assert hidden_states_estimate(spec, {"text_config": {"hidden_size": 64}}) == expected
    assert hidden_states_estimate(spec, {"hidden_size": 64}) == expected
    assert hidden_states_estimate(spec, {"hidden_size": "64"}) is None
    # A DFlash drafter fusing five layers stores five auxiliary states per token (and the last one).
    spec.hidden_states.layers = [1, 9, 17, 25, 33]
    assert hidden_states_estimate(spec, {"hidden_size": 64}) == estimate_hidden_state_bytes(10, 100, 64, layers=5)
    assert hidden_states_estimate(spec, {"hidden_size": 64}) > expected
