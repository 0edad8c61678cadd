"""Preflight (operator/drafter_operator/preflight): tiny real checkpoints, each fault its own case.

The checkpoints are written in the frameworks' layouts (drafter_testbed/tiny_checkpoints.py): a 4-layer, hidden-64 Llama
target with a 4096-token tokenizer; SpecForge's HF/SGLang export and a speculators checkpoint for it.
tests/contract/test_preflight_contract.py loads the same checkpoints with the real engines.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator import cli as top_cli
from drafter_operator import engines
from drafter_operator.engines import sglang_loading
from drafter_operator.preflight import cli as pf_cli
from drafter_operator.preflight import engines as eng
from drafter_operator.preflight import preflight
from drafter_testbed import tiny_checkpoints as tiny
from drafter_operator.preflight.safetensors import (
    DTYPE_SIZES,
    SafetensorsError,
    checkpoint_tensors,
    pack_integers,
    read_header,
    read_integers,
    write_safetensors,
)
from tests.support.preflight import cli_args

ROOT = Path(__file__).resolve().parents[3]


def reasons(verdict) -> set[str]:
    return {f.reason for f in verdict.problems}


def warning_reasons(verdict) -> set[str]:
    return {f.reason for f in verdict.warnings}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("preflight")
    target = tiny.make_target(root / "target")
    out = {"target": target}
    # SpecForge's export as it comes: eagle_config ids in SGLang's convention ([0, 1, 2] = positions 1..3).
    out["specforge"] = tiny.make_specforge(root / "specforge")
    # The same export with the top-level list vLLM reads first (positions as written): served right by both.
    out["specforge_both"] = tiny.make_specforge(root / "specforge_both",
                                                eagle_aux_hidden_state_layer_ids=list(tiny.TRAINED_POSITIONS))
    out["speculators"] = tiny.make_speculators(root / "speculators", verifier=str(target))
    return out


def run(drafter, target, engine, method="eagle3", **kw):
    return preflight(str(drafter) if drafter is not None else None, str(target), engine, method, **kw)


# ---------------------------------------------------------------------------------------------------
# The good checkpoints pass where the engines accept them


@pytest.mark.parametrize("name,engine", [("specforge", "sglang"), ("specforge_both", "sglang"),
                                         ("specforge_both", "vllm"), ("speculators", "vllm")])
def test_good_checkpoints_pass(ckpts, name, engine):
    verdict = run(ckpts[name], ckpts["target"], engine)
    assert verdict.ok, [f.line() for f in verdict.problems]
    assert not verdict.warnings, [f.line() for f in verdict.warnings]
    assert {f.check for f in verdict.passed} >= {"architecture", "hidden-size", "vocab-size", "draft-vocab",
                                                 "vocab-mapping", "aux-layers"}
    assert verdict.condition() == {"type": "DrafterCompatible", "status": "True", "reason": "PreflightPassed",
                                   "message": verdict.message}
    assert verdict.facts["aux_layers"]["engine_captured"] == list(tiny.TRAINED_POSITIONS)


def test_specforge_export_alone_is_wrong_on_vllm(ckpts):
    """vLLM 0.33.0's default (v2) runner ignores eagle_config's ids: on 4 layers its default (2, 2, 1)
    collapses to 2 states; the v1 runner reads them as positions, one layer short."""
    v2 = run(ckpts["specforge"], ckpts["target"], "vllm")
    assert reasons(v2) == {"AuxLayerCount"}
    assert v2.facts["aux_layers"]["engine_captured"] == [1, 2]
    assert '"eagle_aux_hidden_state_layer_ids": [1, 2, 3]' in v2.problems[0].fix
    v1 = run(ckpts["specforge"], ckpts["target"], "vllm", vllm_runner="v1")
    assert reasons(v1) == {"AuxLayerMismatch"}
    assert v1.facts["aux_layers"]["engine_captured"] == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------
# Each fault


def test_missing_d2t(ckpts, tmp_path):
    drafter = tiny.make_specforge(tmp_path / "d", drop=("d2t",), eagle_aux_hidden_state_layer_ids=[1, 2, 3])
    for engine in ("vllm", "sglang"):
        verdict = run(drafter, ckpts["target"], engine)
        assert reasons(verdict) == {"DraftVocabMappingMissing"}
        assert "silently" in verdict.problems[0].message
        assert verdict.condition()["status"] == "False"
        assert verdict.condition()["reason"] == "DraftVocabMappingMissing"


def test_wrong_draft_vocab_shape_lm_head(ckpts, tmp_path):
    tensors = tiny.eagle3_tensors()
    tensors["lm_head.weight"] = ("BF16", (512, tiny.HIDDEN), None)
    drafter = tiny.make_specforge(tmp_path / "d", tensors=tensors)
    assert reasons(run(drafter, ckpts["target"], "sglang")) == {"LmHeadShape"}


def test_wrong_d2t_shape(ckpts, tmp_path):
    tensors = tiny.eagle3_tensors()
    tensors["d2t"] = tiny.mapping_tensors(draft_vocab=512)["d2t"]
    drafter = tiny.make_specforge(tmp_path / "d", tensors=tensors)
    verdict = run(drafter, ckpts["target"], "sglang")
    assert reasons(verdict) == {"DraftVocabMappingShape"}
    assert "I64[512]" in verdict.problems[0].message


def test_draft_vocab_size_missing_with_a_small_head(ckpts, tmp_path):
    drafter = tiny.make_specforge(tmp_path / "d", draft_vocab=None)
    assert "DraftVocabSizeMissing" in reasons(run(drafter, ckpts["target"], "sglang"))


def test_hidden_mismatch(tmp_path):
    target = tiny.make_target(tmp_path / "t", hidden=128)
    drafter = tiny.make_specforge(tmp_path / "d")
    for engine in ("vllm", "sglang"):
        verdict = run(drafter, target, engine)
        assert "HiddenSizeMismatch" in reasons(verdict)


def test_target_hidden_size_lets_a_narrower_drafter_pass(tmp_path):
    target = tiny.make_target(tmp_path / "t", hidden=128)
    tensors = tiny.eagle3_tensors(target_hidden=128)
    tensors["embed_tokens.weight"] = ("BF16", (tiny.VOCAB, tiny.HIDDEN), None)
    drafter = tiny.make_specforge(tmp_path / "d", tensors=tensors, target_hidden_size=128)
    verdict = run(drafter, target, "sglang")
    assert verdict.ok, [f.line() for f in verdict.problems]


def test_fc_in_features_wrong(ckpts, tmp_path):
    tensors = tiny.eagle3_tensors()
    tensors["fc.weight"] = ("BF16", (tiny.HIDDEN, 2 * tiny.HIDDEN), None)
    drafter = tiny.make_specforge(tmp_path / "d", tensors=tensors)  # d2t present: still an EAGLE-3 head
    verdict = run(drafter, ckpts["target"], "sglang")
    assert reasons(verdict) == {"FcShape"}
    assert "[64, 192]" in verdict.problems[0].message


def test_layer_ids_out_of_range(ckpts, tmp_path):
    sglang_side = tiny.make_specforge(tmp_path / "s", layer_ids=[2, 3, 4])  # SGLang captures 3, 4, 5 of 0..3
    verdict = run(sglang_side, ckpts["target"], "sglang")
    assert reasons(verdict) == {"AuxLayerOutOfRange"}
    assert verdict.facts["aux_layers"]["engine_captured"] == [3]
    vllm_side = tiny.make_speculators(tmp_path / "v", verifier=str(ckpts["target"]), layer_ids=[3, 5, 6])
    verdict = run(vllm_side, ckpts["target"], "vllm")
    assert reasons(verdict) == {"AuxLayerOutOfRange"}
    assert "deeper target" in verdict.problems[0].fix


def test_layer_ids_in_the_other_engines_convention(ckpts, tmp_path):
    # A speculators-trained drafter (vLLM convention: positions 1..3) converted to SpecForge's layout with
    # its ids copied verbatim: SGLang adds 1 and reads positions 2..4 -- 4 does not exist.
    copied = tiny.make_specforge(tmp_path / "c", layer_ids=[1, 2, 3])
    verdict = run(copied, ckpts["target"], "sglang", trained_convention="vllm")
    assert reasons(verdict) == {"AuxLayerOutOfRange"}
    assert "[0, 1, 2]" in verdict.problems[0].fix
    # Trained on positions 0..2 (vLLM ids [0, 1, 2]) but served by SGLang: silently one layer deeper.
    shallow = tiny.make_specforge(tmp_path / "s", layer_ids=[0, 1, 2])
    verdict = run(shallow, ckpts["target"], "sglang", trained_convention="vllm")
    assert reasons(verdict) == {"AuxLayerMismatch"}
    assert verdict.facts["aux_layers"]["engine_captured"] == [1, 2, 3]
    assert verdict.facts["aux_layers"]["trained_positions"] == [0, 1, 2]
    assert "[-1, 0, 1]" in verdict.problems[0].fix  # SGLang's llama adds 1 to each id
    # SpecForge's ids copied to the top level for vLLM without converting them: vLLM reads them as written.
    top = tiny.make_specforge(tmp_path / "t", eagle_aux_hidden_state_layer_ids=[0, 1, 2])
    verdict = run(top, ckpts["target"], "vllm")
    assert reasons(verdict) == {"AuxLayerMismatch"}
    assert warning_reasons(verdict) == {"AuxLayerListsDisagree"}


def test_seed_shape_deepseek_target(tmp_path):
    """A 61-layer DeepSeek-V3/Kimi-style target with a SpecForge drafter trained on [1, 29, 57]: SGLang adds 1
    because the first id is 1; vLLM's v1 runner reads [1, 29, 57] as positions (one layer short); the v2
    runner ignores eagle_config and uses its default (2, 30, 58), which happens to be right."""
    config = tiny.target_config(layers=61, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3")
    target = tiny.write_checkpoint(tmp_path / "t", config, {}, tokenizer=True)
    drafter = tiny.make_specforge(tmp_path / "d", layer_ids=[1, 29, 57])
    assert run(drafter, target, "sglang").ok
    assert run(drafter, target, "vllm").ok
    v1 = run(drafter, target, "vllm", vllm_runner="v1")
    assert reasons(v1) == {"AuxLayerMismatch"}
    assert v1.facts["aux_layers"]["engine_captured"] == [1, 29, 57]
    assert v1.facts["aux_layers"]["trained_positions"] == [2, 30, 58]
    # On the v2 runner the v1 difference is a warning.
    assert "VllmRunnerDiffers" in warning_reasons(run(drafter, target, "vllm"))
    # ids not starting at 1 are used as written by SGLang's DeepSeek class: SpecForge [2, 30, 58] is off by one.
    other = tiny.make_specforge(tmp_path / "o", layer_ids=[2, 30, 58])
    verdict = run(other, target, "sglang")
    assert reasons(verdict) == {"AuxLayerMismatch"}
    assert verdict.facts["aux_layers"]["engine_captured"] == [2, 30, 58]


def test_speculators_format_on_sglang(ckpts):
    verdict = run(ckpts["speculators"], ckpts["target"], "sglang")
    assert reasons(verdict) == {"SpeculatorsFormatOnSglang"}
    assert "model_type" in verdict.problems[0].message


def test_eagle_architecture_with_method_eagle3(ckpts, tmp_path):
    drafter = tiny.make_eagle1(tmp_path / "e")
    for engine in ("vllm", "sglang"):
        verdict = run(drafter, ckpts["target"], engine)
        assert reasons(verdict) == {"EagleDrafterAsEagle3"}  # and nothing after it: the head is the wrong kind
    assert run(drafter, ckpts["target"], "vllm", method="eagle").ok
    assert reasons(run(drafter, ckpts["target"], "sglang", method="eagle")) == {"ArchitectureUnsupported"}
    sglang_eagle = tiny.make_eagle1(tmp_path / "s", architecture="LlamaForCausalLMEagle")
    assert run(sglang_eagle, ckpts["target"], "sglang", method="eagle").ok


def test_eagle3_drafter_with_method_eagle(ckpts):
    for name in ("specforge_both", "speculators"):
        verdict = run(ckpts[name], ckpts["target"], "vllm", method="eagle")
        assert reasons(verdict) == {"Eagle3DrafterAsEagle"}


def test_tokenizer_vocab_mismatch(ckpts, tmp_path):
    drafter = tiny.make_specforge(tmp_path / "d", vocab=5000, eagle_aux_hidden_state_layer_ids=[1, 2, 3])
    assert "VocabSizeMismatch" in reasons(run(drafter, ckpts["target"], "vllm"))
    # Same sizes, but the drafter ships a tokenizer with other token ids.
    other = tiny.make_specforge(tmp_path / "o", eagle_aux_hidden_state_layer_ids=[1, 2, 3])
    tiny.copy_tokenizer(other)
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = list(vocab)[10], list(vocab)[11]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(data))
    verdict = run(other, ckpts["target"], "sglang")
    assert reasons(verdict) == {"TokenizerMismatch"}
    same = tiny.make_specforge(tmp_path / "same", eagle_aux_hidden_state_layer_ids=[1, 2, 3])
    tiny.copy_tokenizer(same)
    assert run(same, ckpts["target"], "sglang").ok


# ---------------------------------------------------------------------------------------------------
# More of the mapping and format rules


def test_d2t_out_of_range_duplicates_identity(ckpts, tmp_path):
    def with_d2t(name, values, dtype="I64"):
        tensors = tiny.eagle3_tensors()
        tensors["d2t"] = (dtype, (len(values),), pack_integers(values, dtype) if dtype != "F32"
                          else struct.pack(f"<{len(values)}f", *values))
        return tiny.make_specforge(tmp_path / name, tensors=tensors, eagle_aux_hidden_state_layer_ids=[1, 2, 3])

    dv = tiny.DRAFT_VOCAB
    assert reasons(run(with_d2t("far", [tiny.VOCAB] * dv), ckpts["target"], "vllm")) == {"DraftVocabMappingOutOfRange"}
    assert reasons(run(with_d2t("dup", [-i for i in range(dv)]), ckpts["target"], "vllm")) == {
        "DraftVocabMappingDuplicates"}
    identity = run(with_d2t("zero", [0] * dv), ckpts["target"], "vllm")
    assert identity.ok and {"DraftVocabMappingIdentity", "TargetToDraftDisagrees"} <= warning_reasons(identity)
    assert reasons(run(with_d2t("float", [0.0] * dv, "F32"), ckpts["target"], "vllm")) == {"DraftVocabMappingDtype"}


def test_full_vocab_drafter_with_d2t_is_refused_by_vllm_only(ckpts, tmp_path):
    tensors = tiny.eagle3_tensors()
    tensors["lm_head.weight"] = ("BF16", (tiny.VOCAB, tiny.HIDDEN), None)
    tensors["d2t"] = ("I64", (tiny.VOCAB,), None)
    drafter = tiny.make_specforge(tmp_path / "d", tensors=tensors, draft_vocab=tiny.VOCAB,
                                  eagle_aux_hidden_state_layer_ids=[1, 2, 3])
    assert reasons(run(drafter, ckpts["target"], "vllm")) == {"DraftVocabMappingUnexpected"}
    assert run(drafter, ckpts["target"], "sglang").ok


def test_tied_embeddings_ignore_the_draft_head_on_sglang(ckpts, tmp_path):
    drafter = tiny.make_specforge(tmp_path / "d", tie_word_embeddings=True)
    assert reasons(run(drafter, ckpts["target"], "sglang")) == {"TiedHeadIgnoresDraftVocab"}


def test_sharded_checkpoints_and_broken_files(tmp_path):
    target = tiny.make_target(tmp_path / "t", shards=3)
    tensors, files = checkpoint_tensors(target)
    assert len(files) == 3 and "model.layers.3.mlp.down_proj.weight" in tensors
    drafter = tiny.write_checkpoint(tmp_path / "d", tiny.specforge_config(eagle_aux_hidden_state_layer_ids=[1, 2, 3]),
                                    tiny.eagle3_tensors(), shards=2)
    assert run(drafter, target, "vllm").ok
    os.remove(drafter / "model-00002-of-00002.safetensors")
    verdict = run(drafter, target, "vllm")
    assert reasons(verdict) == {"CheckpointUnreadable"} and "missing" in verdict.problems[0].message
    broken = tiny.make_specforge(tmp_path / "b")
    (broken / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    assert "CheckpointUnreadable" in reasons(run(broken, target, "sglang"))


def test_no_config(tmp_path, ckpts):
    (tmp_path / "empty").mkdir()
    verdict = run(tmp_path / "empty", ckpts["target"], "vllm")
    assert reasons(verdict) == {"CheckpointUnreadable"}


def test_mtp_head(tmp_path):
    config = tiny.target_config(num_nextn_predict_layers=1, architectures=["DeepseekV3ForCausalLM"],
                                model_type="deepseek_v3")
    with_mtp = tiny.write_checkpoint(tmp_path / "m", config, tiny.target_tensors(mtp_layers=1), tokenizer=True)
    stripped = tiny.write_checkpoint(tmp_path / "s", config, tiny.target_tensors(), tokenizer=True)
    plain = tiny.make_target(tmp_path / "p")
    for engine in ("vllm", "sglang"):
        assert run(None, with_mtp, engine, method="mtp").ok
        assert reasons(run(None, stripped, engine, method="mtp")) == {"MtpWeightsMissing"}
    # A Llama target: vLLM has no MTP variant for model_type llama (it stops there); SGLang reads its config.
    assert reasons(run(None, plain, "vllm", method="mtp")) == {"MtpVariantMissing"}
    assert reasons(run(None, plain, "sglang", method="mtp")) == {"TargetHasNoMtpHead"}
    ignored = run(plain, with_mtp, "vllm", method="mtp")
    assert ignored.ok and warning_reasons(ignored) == {"DrafterIgnored"}


def test_methods_without_rules_pass_with_a_warning(ckpts):
    verdict = run(None, ckpts["target"], "vllm", method="ngram")
    assert verdict.ok and warning_reasons(verdict) == {"MethodNotChecked"}
    assert verdict.condition()["reason"] == "PreflightPassedWithWarnings"


def test_bad_arguments(ckpts):
    with pytest.raises(ValueError):
        run(ckpts["specforge"], ckpts["target"], "tgi")
    with pytest.raises(ValueError):
        run(ckpts["specforge"], ckpts["target"], "vllm", trained_convention="hf")
    assert reasons(run(None, ckpts["target"], "vllm")) == {"DrafterMissing"}


def test_condition_message_is_bounded_and_names_every_problem(ckpts, tmp_path):
    drafter = tiny.make_specforge(tmp_path / "d", drop=("d2t", "fc.weight"), layer_ids=[7, 8, 9])
    verdict = run(drafter, ckpts["target"], "sglang")
    cond = verdict.condition()
    assert cond["status"] == "False" and cond["reason"] == verdict.problems[0].reason
    assert len(cond["message"]) <= 4096
    for p in verdict.problems:
        assert f"[{p.check}]" in cond["message"]


# ---------------------------------------------------------------------------------------------------
# The CLI


def test_cli_exit_codes_table_and_json(ckpts):
    out, err = io.StringIO(), io.StringIO()
    good = cli_args(drafter=str(ckpts["speculators"]), target=str(ckpts["target"]))
    assert pf_cli.main(good, out, err) == 0
    assert "COMPATIBLE" in out.getvalue() and "aux-layers" in out.getvalue()
    out = io.StringIO()
    bad = cli_args(drafter=str(ckpts["speculators"]), target=str(ckpts["target"]), engine="sglang", json=True)
    assert pf_cli.main(bad, out, err) == 1
    data = json.loads(out.getvalue())
    assert data["ok"] is False and data["problems"][0]["reason"] == "SpeculatorsFormatOnSglang"
    assert data["condition"]["status"] == "False"
    assert pf_cli.main(cli_args(drafter="/nonexistent", target=str(ckpts["target"])), out, err) == 2
    assert pf_cli.main(cli_args(target=str(ckpts["target"])), out, err) == 2


def test_cli_is_registered_and_argparse_errors_exit_2(ckpts, capsys):
    argv = ["preflight", "--drafter", str(ckpts["specforge"]), "--target", str(ckpts["target"]), "--engine", "sglang",
            "--method", "eagle3"]
    assert top_cli.main(argv) == 0
    assert "PROBLEM" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        top_cli.main(["preflight", "--target", str(ckpts["target"]), "--engine", "tgi", "--method", "eagle3"])
    assert exc.value.code == 2


def test_cli_termination_message_is_the_compact_record_the_operator_reads(ckpts, tmp_path):
    from drafter_operator.preflight.verdict import TERMINATION_MESSAGE_BYTES, parse_termination_record

    message = tmp_path / "termination-log"
    broken = tiny.make_specforge(tmp_path / "broken", drop=("d2t",))
    args = cli_args(drafter=str(broken), target=str(ckpts["target"]), engine="sglang",
                    termination_message=str(message))
    started = time.monotonic()
    assert pf_cli.main(args, io.StringIO(), io.StringIO()) == 1
    call_seconds = time.monotonic() - started
    record = parse_termination_record(message.read_text())
    verdict = run(broken, ckpts["target"], "sglang")
    assert record["ok"] is False and record["checked"] is True
    assert (record["status"], record["reason"], record["message"]) == (verdict.status, verdict.reason, verdict.message)
    assert (record["problems"], record["passed"]) == (len(verdict.problems), len(verdict.passed))
    # The record keeps milliseconds (round(seconds, 3)); rounding is monotone, so the check's own time, inside
    # the call's, stays inside it only when both sides are rounded alike (0.00798 s of call once recorded 0.008).
    assert 0 <= record["seconds"] <= round(call_seconds, 3)
    assert len(message.read_bytes()) <= TERMINATION_MESSAGE_BYTES and "\n" not in message.read_text()


def test_cli_skip_missing_reports_a_checkpoint_that_is_not_there_as_not_checked(ckpts, tmp_path):
    from drafter_operator.preflight.verdict import parse_termination_record

    message = tmp_path / "termination-log"
    args = cli_args(drafter=str(tmp_path / "nowhere"), target=str(ckpts["target"]), skip_missing=True,
                    termination_message=str(message))
    out = io.StringIO()
    assert pf_cli.main(args, out, io.StringIO()) == 0
    record = parse_termination_record(message.read_text())
    assert record["ok"] is True and record["checked"] is False and record["passed"] == 0
    assert "preflight checked nothing" in record["message"] and "nowhere is not a directory here" in record["message"]
    shown = " ".join(out.getvalue().split())  # the table wraps its detail column where the (tmp) path is long
    assert "NOT CHECKED" in shown and "is not a directory here" in shown
    # Without the flag it stays a usage error, and writes no record.
    message.unlink()
    assert pf_cli.main(Namespace(**{**vars(args), "skip_missing": False}), io.StringIO(), io.StringIO()) == 2
    assert not message.exists()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=400), min_size=1, max_size=40))
def test_termination_record_fits_the_kubelets_4096_bytes_whatever_the_findings(texts):
    from drafter_operator.preflight.verdict import (TERMINATION_MESSAGE_BYTES, Finding, PreflightVerdict,
                                                    parse_termination_record, termination_record)

    verdict = PreflightVerdict(engine="vllm", method="eagle3", drafter="/d", target="/t",
                      findings=[Finding("vocab-mapping", "problem", "DraftVocabMappingMissing", t, fix=t) for t in texts])
    text = termination_record(verdict, seconds=0.25)
    assert len(text.encode()) <= TERMINATION_MESSAGE_BYTES
    record = parse_termination_record(text)
    assert record["reason"] == "DraftVocabMappingMissing" and record["problems"] == len(texts)
    assert verdict.message.startswith(record["message"].removesuffix(" ...(truncated)"))


def test_termination_record_parser_refuses_what_is_not_a_record():
    from drafter_operator.preflight.verdict import parse_termination_record

    for text in (None, "", "Traceback (most recent call last):", "[]", '{"ok": false}',
                 '{"kind": "drafter.dev/preflight/v1", "ok": "no", "status": "False", "reason": "R", "message": "m"}'):
        assert parse_termination_record(text) is None, text


@pytest.mark.parametrize("value,runner", [(None, "v2"), ("1", "v2"), ("0", "v1"), ("00", "v1"), ("yes", "v2")])
def test_vllm_model_runner_from_its_variable(value, runner):
    assert eng.vllm_runner_from_env(value) == runner


def test_package_imports_no_engine_and_no_weights_library():
    code = ("import sys, drafter_operator.preflight, drafter_operator.preflight.cli; "
            "bad = [m for m in ('torch', 'vllm', 'sglang', 'transformers', 'safetensors', 'numpy') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------------
# Properties

dtypes = st.sampled_from(sorted(k for k in DTYPE_SIZES if k != "F4"))
shapes = st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=3).map(tuple)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12),
                       st.tuples(dtypes, shapes), max_size=6))
def test_safetensors_header_round_trip(tmp_path, spec):
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {n: (d, s, None) for n, (d, s) in spec.items()})
    tensors, _ = read_header(path)
    assert {n: (t.dtype, t.shape) for n, t in tensors.items()} == spec
    assert (path.stat().st_size - 8 - struct.unpack("<Q", path.read_bytes()[:8])[0]) == sum(
        t.end - t.begin for t in tensors.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(min_value=-(2 ** 40), max_value=2 ** 40), min_size=1, max_size=50),
       st.sampled_from(["I64"]))
def test_integer_tensor_values_round_trip(tmp_path, values, dtype):
    path = tmp_path / "i.safetensors"
    write_safetensors(path, {"d2t": (dtype, (len(values),), pack_integers(values, dtype))})
    tensors, _ = read_header(path)
    assert read_integers(tensors["d2t"]) == values


def test_truncated_header_is_an_error(tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(SafetensorsError):
        read_header(path)
    write_safetensors(path, {"a": ("F32", (4,), None)})
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(SafetensorsError):
        read_header(path)


@given(rule=st.sampled_from([sglang_loading.PLUS_ONE, sglang_loading.PLUS_ONE_IF_FIRST_IS_ONE, sglang_loading.AS_WRITTEN_IF_MAX_IS_N]),
       n=st.integers(min_value=4, max_value=96), data=st.data())
def test_sglang_fix_ids_capture_the_positions(rule, n, data):
    positions = data.draw(st.lists(st.integers(min_value=0, max_value=n - 1), min_size=1, max_size=4, unique=True))
    ids = sglang_loading.layer_ids_for_positions(positions, rule, n)
    if ids is not None:
        assert sorted(set(sglang_loading.layers_to_capture(rule, ids, n))) == sorted(positions)
    if rule == sglang_loading.PLUS_ONE:
        assert ids == [p - 1 for p in positions]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(engine=st.sampled_from(["vllm", "sglang"]), convention=st.sampled_from(["vllm", "sglang"]),
       ids=st.lists(st.integers(min_value=-1, max_value=6), min_size=3, max_size=3))
def test_layer_verdict_and_its_fix(tmp_path_factory, engine, convention, ids):
    """ok exactly when the engine captures the trained positions (all of them, distinct, in range); and when
    a fix is suggested, applying it makes the layer check pass."""
    root = tmp_path_factory.mktemp("prop")
    target = tiny.make_target(root / "t")
    drafter = tiny.make_specforge(root / "d", layer_ids=ids)
    verdict = run(drafter, target, engine, trained_convention=convention)
    trained = eng.trained_positions(ids, convention)
    capture = engines.engine(engine).CHECKPOINT_LOADING.capture(tiny.specforge_config(layer_ids=ids), tiny.LAYERS,
                                                             "LlamaForCausalLM", "v2")
    expected_ok = tuple(sorted(set(trained))) == capture.captured and len(set(trained)) == 3 and \
        not capture.out_of_range
    assert verdict.ok == expected_ok, [f.line() for f in verdict.problems]
    fixable = len(set(trained)) == 3 and all(0 <= p <= (tiny.LAYERS if engine == "vllm" else tiny.LAYERS - 1)
                                             for p in trained)
    if not verdict.ok and fixable:
        config = json.loads((drafter / "config.json").read_text())
        fixed = engines.engine(engine).CHECKPOINT_LOADING.layer_ids_for_positions(trained, sglang_loading.PLUS_ONE,
                                                                                  tiny.LAYERS)
        if engine == "vllm":
            config["eagle_aux_hidden_state_layer_ids"] = fixed
        else:
            config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = fixed
        (drafter / "config.json").write_text(json.dumps(config))
        assert str(fixed) in " ".join(f.fix for f in verdict.problems)
        # The rewritten list is in the serving engine's terms (vLLM's top-level list sits beside eagle_config's).
        again = run(drafter, target, engine, trained_convention=convention if engine == "vllm" else "sglang")
        assert not [f for f in again.problems if f.check == "aux-layers"], [f.line() for f in again.problems]
