"""Contract tier: DFlash and DSpark drafters trained by the real speculators 0.9.0 (spec.method), on the CPU.

On the tiny target (the same fixture and stage runner as test_training_contract.py): Generate and Extract
once, as the DFlash family shares EAGLE-3's prepared data and hidden states; then, per family, the rendered
Train (speculators' trainer through the CPU adapter) and Export, and what the engines make of the export:
vLLM 0.33.0's SpeculativeConfig builds from it under that method, and the operator's own preflight
accepts it for vLLM and refuses it for SGLang (which cannot read the speculators format), the reason a
speculators drafter is never promoted into an SGLang serving. A DFlash drafter then fine-tunes from its
own export (loaded as it is: speculators' convert takes only research formats), its vocabulary mapping
kept. The rendered Train command also goes through speculators' own TrainConfig, whose per-family
defaults (draft depth, block size) are the ones docs/training.md states.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.preflight import preflight
from drafter_operator.training import render
from tests.support.contract_training import (CHECK_TIMEOUT, PATHS, TINY_DRAFT_VOCAB, TINY_LAYERS, PipelineRun, check,
                                             read_safetensors, report, run_all, run_env, seed_spec, tiny, tiny_options,
                                             tiny_paths, tiny_spec, variants)

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("training-families"), pytest.mark.timeout(1800)]
__all__ = ["tiny"]  # the tiny target fixture, used by name

FAMILIES = ("dflash", "dspark")
#: speculators 0.9.0's per-family defaults (TrainConfig._resolve_derived_defaults).
BLOCK_SIZE = {"dflash": 16, "dspark": 8}
DRAFT_LAYERS = 5


def family_spec(root: Path, method: str, name: str, base_drafter: str | None = None) -> DrafterTrainingSpec:
    raw = tiny_spec(root, "speculators", name, base_drafter).to_json()
    raw["method"] = method
    return DrafterTrainingSpec.model_validate(raw)


def test_the_rendered_train_flags_resolve_to_each_familys_defaults(training_python: str) -> None:
    cases = []
    for method in FAMILIES:
        for name, (spec, options) in variants("speculators").items():
            if spec.base_drafter is not None:
                continue  # the seed fine-tunes an EAGLE-3 base
            spec = spec.model_copy(update={"method": method})
            (train,) = next(s for s in render(spec, PATHS, options) if s.name == "Train").commands
            argv = list(train.argv)
            flags = argv[argv.index("speculators.train") + 1:] if "speculators.train" in argv \
                else argv[argv.index("train") + 1:]
            cases.append({"id": f"{method}/{name}", "kind": "speculators-train", "argv": flags})
    results = check(training_python, cases)
    for method in FAMILIES:
        for name in ("scratch", "cpu"):
            config = results[f"{method}/{name}"]["config"]
            assert config["speculator_type"] == method
            assert config["draft"]["target_layer_ids"] == [2, 30, 58]
            assert config["draft"]["num_layers"] == DRAFT_LAYERS
            assert config["dflash"]["block_size"] == BLOCK_SIZE[method]
    assert seed_spec("speculators").method == "eagle3"


@pytest.fixture(scope="module")
def shared_data(training_python: str, tiny: Path) -> PipelineRun:
    """Generate and Extract once: every family trains from the same prepared data and hidden states."""
    spec = family_spec(tiny, "dflash", "unused")
    paths = tiny_paths(tiny, training_python, "families")
    times = run_all(render(spec, paths, tiny_options(tiny)), training_python, paths, only=("Generate", "Extract"))
    return PipelineRun(Path(paths.work), times)


def train_family(training_python: str, tiny: Path, shared: PipelineRun, method: str, name: str,
                 base_drafter: str | None = None) -> tuple[Path, dict[str, float]]:
    paths = tiny_paths(tiny, training_python, name)
    work = Path(paths.work)
    work.mkdir(parents=True, exist_ok=True)
    for part in ("data", "hidden_states"):
        (work / part).symlink_to(shared.work / part)
    spec = family_spec(tiny, method, name, base_drafter)
    base_config = json.loads((Path(base_drafter) / "config.json").read_text()) if base_drafter else None
    options = tiny_options(tiny, base_drafter_config=base_config)
    times = run_all(render(spec, paths, options), training_python, paths, only=("Train", "Export"))
    return tiny / "drafters" / name, times


VLLM_FAMILY_CHECK = r'''
import contextlib, json, sys
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
target, drafter, method = sys.argv[1], sys.argv[2], sys.argv[3]
with contextlib.redirect_stdout(sys.stderr):
    model = ModelConfig(model=target, tokenizer=target, skip_tokenizer_init=True)
    spec = SpeculativeConfig(method=method, model=drafter, num_speculative_tokens=3, target_model_config=model,
                             target_parallel_config=ParallelConfig(tensor_parallel_size=1))
hf = spec.draft_model_config.hf_config
print(json.dumps({"method": spec.method, "architectures": hf.architectures,
                  "draft_vocab_size": getattr(hf, "draft_vocab_size", None),
                  "layer_ids": getattr(hf, "eagle_aux_hidden_state_layer_ids", None)}))
'''


def vllm_builds(training_python: str, target: Path, drafter: Path, method: str) -> dict:
    python = os.environ.get("DRAFTER_ENGINE_PYTHON") or training_python
    proc = subprocess.run([python, "-c", VLLM_FAMILY_CHECK, str(target), str(drafter), method], capture_output=True,
                          text=True, env=run_env(python), timeout=CHECK_TIMEOUT)
    assert proc.returncode == 0, f"vLLM refused {drafter} as {method}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("method", FAMILIES)
def test_speculators_trains_the_family_and_vllm_serves_its_export(training_python: str, tiny: Path,
                                                                  shared_data: PipelineRun, method: str) -> None:
    out, times = train_family(training_python, tiny, shared_data, method, f"speculators-{method}")
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == method and config["speculators_config"]["algorithm"] == method
    assert config["aux_hidden_state_layer_ids"] == TINY_LAYERS
    assert config["draft_vocab_size"] == TINY_DRAFT_VOCAB and config["block_size"] == BLOCK_SIZE[method]
    assert config["transformer_layer_config"]["num_hidden_layers"] == DRAFT_LAYERS
    shapes = {name: shape for name, (shape, _) in read_safetensors(out / "model.safetensors").items()}
    assert shapes["d2t"] == (TINY_DRAFT_VOCAB,) and shapes["t2d"] == (4096,)
    assert ("confidence_head.proj.weight" in shapes) == (method == "dspark")  # DSpark's own head
    built = vllm_builds(training_python, tiny / "target", out, method)
    assert built["method"] == method and built["draft_vocab_size"] == TINY_DRAFT_VOCAB
    assert built["layer_ids"] == TINY_LAYERS
    # What the serving's preflight will say of it: vLLM serves it; SGLang cannot read the format.
    assert preflight(out, tiny / "target", "vllm", method).ok
    sglang = preflight(out, tiny / "target", "sglang", method)
    assert not sglang.ok and {p.reason for p in sglang.problems} == {"SpeculatorsFormatOnSglang"}
    report(f"speculators {method}", times, {"drafter": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())})


def test_a_dflash_drafter_fine_tunes_from_its_own_export(training_python: str, tiny: Path,
                                                         shared_data: PipelineRun) -> None:
    base = tiny / "drafters" / "speculators-dflash"
    if not (base / "config.json").is_file():  # run alone (-k), the family test has not trained it yet
        train_family(training_python, tiny, shared_data, "dflash", "speculators-dflash")
    out, times = train_family(training_python, tiny, shared_data, "dflash", "speculators-dflash-ft", str(base))
    assert not (Path(tiny_paths(tiny, training_python, "speculators-dflash-ft").work) / "base_drafter").exists()
    before, after = read_safetensors(base / "model.safetensors"), read_safetensors(out / "model.safetensors")
    assert before["d2t"] == after["d2t"] and before["t2d"] == after["t2d"]  # the mapping its lm_head rows follow
    assert before["fc.weight"] != after["fc.weight"]  # trained further
    assert vllm_builds(training_python, tiny / "target", out, "dflash")["method"] == "dflash"
    report("speculators dflash fine-tune", times, {})
