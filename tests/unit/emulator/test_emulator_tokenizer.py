"""The emulator's shipped tokenizer, its chat template, and the request shapes that count with it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drafter_testbed.emulator import build_tokenizer
from drafter_testbed.emulator.engine import VOCABULARY
from drafter_testbed.emulator.native import NativeResponseBuilder, parse_generate
from drafter_testbed.emulator.openai import RequestError, detokenize, parse_request, tokenize
from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR, shipped

NAMES = ("served",)


def test_the_shipped_files_are_what_the_build_script_produces():
    assert build_tokenizer.differences(TOKENIZER_DIR) == []
    size = sum((TOKENIZER_DIR / name).stat().st_size for name in build_tokenizer.FILES)
    assert size < 300 * 1024


def test_every_generated_word_is_one_token_so_retokenizing_counts_what_usage_says():
    tok = shipped()
    for word in VOCABULARY:
        assert len(tok.encode(" " + word)) == 1, word
    text = "".join(" " + w for w in VOCABULARY * 3)
    assert len(tok.encode(text)) == 3 * len(VOCABULARY)


def test_counts_are_tokens_not_words():
    tok = shipped()
    # one word, many tokens: a word outside the training lists falls back to sub-word pieces
    assert tok.count("Kubernetes") > 1
    tokens = tok.tokens(tok.encode("Hello there, how are you?"))
    assert tokens[-1] == "?" and "," in tokens and "Ġhow" in tokens  # punctuation marks are tokens of their own
    assert tok.count("") == 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_byte_level_round_trip_for_any_text(text):
    tok = shipped()
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_chat_template_is_chatml_with_the_generation_prompt():
    tok = shipped()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    rendered = tok.apply_chat_template(messages)
    assert rendered == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    assert not tok.apply_chat_template(messages, add_generation_prompt=False).endswith("assistant\n")
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi!"}, {"type": "image_url", "image_url": {}}]}]
    assert tok.apply_chat_template(parts) == "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    # the markers are single special tokens
    ids = tok.encode(rendered, add_special_tokens=False)
    assert tok.tokens(ids).count("<|im_start|>") == 3 and tok.tokens(ids).count("<|im_end|>") == 2


def test_tokenizer_config_names_the_class_clients_load_and_the_template():
    config = json.loads((TOKENIZER_DIR / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["chat_template"] == build_tokenizer.CHAT_TEMPLATE and config["eos_token"] == "<|im_end|>"


# --------------------------------------------------------------------------- requests that count

def test_usage_counts_come_from_the_tokenizer():
    tok = shipped()
    completion = parse_request({"prompt": "Kubernetes operators", "max_tokens": 4}, chat=False,
                               served_names=NAMES, context_length=1000, strict_model=True)
    assert completion.prompt_tokens == tok.count("Kubernetes operators")
    messages = [{"role": "user", "content": "Kubernetes operators"}]
    chat = parse_request({"messages": messages}, chat=True, served_names=NAMES, context_length=1000,
                         strict_model=True)
    assert chat.prompt_tokens == len(tok.encode(tok.apply_chat_template(messages), add_special_tokens=False))
    ids = parse_request({"prompt": [5, 6, 7]}, chat=False, served_names=NAMES, context_length=1000, strict_model=True)
    assert ids.prompt_tokens == 3
    with pytest.raises(RequestError, match="out of vocabulary"):
        parse_request({"prompt": [tok.vocab_size]}, chat=False, served_names=NAMES, context_length=1000,
                      strict_model=True)


def test_tokenize_and_detokenize_shapes():
    tok = shipped()
    out = tokenize({"model": "served", "prompt": "the model drafts", "return_token_strs": True},
                   served_names=NAMES, context_length=4096)
    assert out == {"count": 3, "max_model_len": 4096, "tokens": tok.encode("the model drafts"),
                   "token_strs": ["the", "Ġmodel", "Ġdrafts"]}
    chat = tokenize({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": False},
                    served_names=NAMES, context_length=4096)
    assert chat["count"] == len(tok.encode("<|im_start|>user\nx<|im_end|>\n")) and chat["token_strs"] is None
    assert detokenize({"tokens": out["tokens"]}, served_names=NAMES) == {"prompt": "the model drafts"}
    for bad in ({"prompt": 3}, {"model": "other", "prompt": "x"}, {"prompt": "x", "add_special_tokens": "yes"}):
        with pytest.raises(RequestError):
            tokenize(bad, served_names=NAMES, context_length=4096)
    for bad in ({"tokens": [-1]}, {"tokens": "1 2"}, {"tokens": [True]}):
        with pytest.raises(RequestError):
            detokenize(bad, served_names=NAMES)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=100))
def test_tokenize_then_detokenize_gives_the_prompt_back(text):
    ids = tokenize({"prompt": text}, served_names=NAMES, context_length=10)["tokens"]
    assert detokenize({"tokens": ids}, served_names=NAMES)["prompt"] == text


# ------------------------------------------------------------------------------ SGLang /generate

def test_parse_generate_defaults_and_refusals():
    req = parse_generate({"text": "the model", "rid": "r1"}, context_length=1000)
    assert (req.rid, req.prompt_tokens, req.max_new_tokens, req.stream) == ("r1", 2, 128, False)
    ids = parse_generate({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5}, "stream": True},
                         context_length=1000)
    assert (ids.prompt_tokens, ids.max_new_tokens, ids.stream) == (3, 5, True)
    assert parse_generate({"text": "x", "sampling_params": {"max_new_tokens": None}}, context_length=50).max_new_tokens == 49
    for bad in ({}, {"text": "x", "input_ids": [1]}, {"text": ["a", "b"]}, {"input_ids": [[1], [2]]},
                {"text": "x", "sampling_params": {"max_new_tokens": 0}}, {"text": "x", "sampling_params": []},
                {"text": "x", "sampling_params": {"max_new_tokens": 2000}}):
        with pytest.raises(RequestError):
            parse_generate(bad, context_length=1000)


def test_native_body_is_cumulative_and_reports_sglangs_spec_fields():
    req = parse_generate({"text": "x", "rid": "r"}, context_length=1000)
    builder = NativeResponseBuilder(req, draft_per_round=5)  # e.g. topk 2, 6 draft tokens
    builder.add_step([" the"])  # prefill
    first = builder.body(finished=False)
    assert first["text"] == " the" and first["meta_info"]["finish_reason"] is None
    assert first["meta_info"]["completion_tokens"] == 1 and "spec_verify_ct" not in first["meta_info"]
    builder.add_step([" model", " drafts", " tokens"])  # a verification accepting 2
    builder.add_step([" and"])  # a verification accepting none
    done = builder.body(finished=True, e2e_latency=0.5)
    meta = done["meta_info"]
    assert done["text"] == " the model drafts tokens and" and len(done["output_ids"]) == 5
    assert shipped().decode(done["output_ids"]) == done["text"]
    assert meta["finish_reason"] == {"type": "length", "length": 5} and meta["e2e_latency"] == 0.5
    assert meta["spec_verify_ct"] == 2 and meta["spec_num_correct_drafts"] == 2
    assert meta["spec_num_proposed_drafts"] == 10 and meta["spec_accept_rate"] == pytest.approx(0.2)
    assert meta["spec_accept_length"] == pytest.approx(2.5)  # completion tokens / verify calls
    plain = NativeResponseBuilder(req, draft_per_round=0)
    plain.add_step([" the"])
    plain.add_step([" model"])
    assert "spec_verify_ct" not in plain.body(finished=True, e2e_latency=0.1)["meta_info"]
