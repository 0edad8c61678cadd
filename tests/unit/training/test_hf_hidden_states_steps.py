"""The CPU hidden-state adapter's named steps that need no torch (training/adapters/hf_hidden_states.py;
the forward pass and the records themselves are checked against SpecForge in tests/contract)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.training.adapters import hf_hidden_states as hf

REQUIRED = ["--target-model-path", "/m/target", "--data-path", "/d/train.jsonl"]


def test_arguments_keep_specforge_names_and_defaults(tmp_path):
    args = hf.specforge_arguments([*REQUIRED, "--draft-model-config", "/c.json"])
    assert (args.tp_size, args.batch_size, args.file_group_size, args.chat_template) == (1, 32, 2000, "llama3")


@pytest.mark.parametrize("extra, message", [
    (["--draft-model-config", "/c.json", "--tp-size", "2"], "--tp-size must be 1"),
    ([], "--draft-model-config is required"),
])
def test_arguments_this_process_cannot_honour_are_refused(extra, message):
    with pytest.raises(SystemExit, match=message):
        hf.specforge_arguments([*REQUIRED, *extra])


def _draft_config(tmp_path, **payload) -> str:
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(payload))
    return str(path)


def test_vocab_sizes_read_the_text_config_and_the_draft_config(tmp_path):
    config = SimpleNamespace(text_config=SimpleNamespace(vocab_size=1000))
    assert hf.vocab_sizes(config, _draft_config(tmp_path, draft_vocab_size=300)) == (1000, 300)
    assert hf.vocab_sizes(SimpleNamespace(vocab_size=500), _draft_config(tmp_path, vocab_size=500)) == (500, 500)


def test_a_draft_vocabulary_larger_than_the_target_is_refused(tmp_path):
    with pytest.raises(ValueError, match="exceeds target vocab_size=10"):
        hf.vocab_sizes(SimpleNamespace(vocab_size=10), _draft_config(tmp_path, draft_vocab_size=11))


def test_the_cache_key_changes_with_every_field_it_is_built_from():
    base = dict(data_path="/d", max_length=2048, chat_template="qwen", target_model_path="/m", num_samples=None,
                is_preformatted=False)
    key = hf.dataset_cache_key(SimpleNamespace(**base))
    assert len(key) == 32
    for field, other in [("data_path", "/e"), ("max_length", 1024), ("chat_template", "llama3"),
                         ("target_model_path", "/n"), ("num_samples", 5), ("is_preformatted", True)]:
        assert hf.dataset_cache_key(SimpleNamespace(**{**base, field: other})) != key, field


@given(st.integers(0, 10**6), st.integers(1, 5000), st.booleans())
def test_records_go_n_to_a_directory_named_after_its_range(index, group_size, compress):
    path = hf.record_path("/out", index, group_size, compress)
    directory, name = os.path.split(path)
    low, high = map(int, os.path.basename(directory).removeprefix("rows_").split("-"))
    assert os.path.dirname(directory) == "/out"
    assert low <= index < high and high - low == group_size and low % group_size == 0
    assert name == f"data_{index}.ckpt" + (".gz" if compress else "")
