"""The training renderers (drafter_operator.training): golden values for the seed example and the rules.

The seed (examples/training-kimi-k25-eagle3.yaml) fine-tunes AQ-MedAI/Kimi-K2-Instruct-eagle3 on
Kimi-K2.5 with SpecForge: 10k regenerated samples, layers 2, 30, 58 (vLLM's ids; SpecForge's 1, 29,
57), 5 epochs at 1e-4, max length 4096, 8 GPUs at TP 8. The frameworks' own parsers check the same
renders in tests/contract/test_training_contract.py.
"""

from __future__ import annotations

import json

import pytest
import yaml

from drafter_operator.api.training import DrafterTraining
from drafter_operator.training import (
    Command,
    ConfigFile,
    Publish,
    RenderOptions,
    TrainingPaths,
    render,
    specforge_layer_ids,
)
from drafter_operator.training import speculators as speculators_render
from drafter_operator.training.adapters import ADAPTERS_DIR
from drafter_operator.training.specforge import DRAFT_CONFIG, TRAIN_CONFIG, draft_config
from tests.support.training_renders import BASE, ENDPOINT, KIMI, OPTIONS, SEED, flag, seed, stages


def files(stage) -> dict[str, ConfigFile]:
    return {f.name: f for f in stage.files}


# ------------------------------------------------------------------------------------------------
# SpecForge, the seed example


def test_layer_ids_convert_from_vllm_to_specforge() -> None:
    assert specforge_layer_ids([2, 30, 58]) == [1, 29, 57]
    with pytest.raises(ValueError, match="embeddings"):
        specforge_layer_ids([0, 30, 58])


def test_specforge_seed_stages() -> None:
    got = stages(seed())
    assert list(got) == ["Generate", "Extract", "Train", "Export"]

    (regenerate,) = got["Generate"].commands  # the target answers from its engine pod: no server in the Job
    assert regenerate == Command((
        "drafter-operator", "regenerate", "--endpoint", ENDPOINT, "--model", "target",
        "--input", "/models/datasets/prompts.jsonl", "--output", "/work/data/regenerated.jsonl",
        "--num-samples", "10000", "--max-tokens", "2048"))
    assert got["Generate"].outputs == {"conversations": "/work/data/regenerated.jsonl"}

    (extract,) = got["Extract"].commands
    assert extract.argv[:6] == ("python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "8")
    assert extract.argv[6] == "/opt/SpecForge/scripts/prepare_hidden_states.py"
    assert flag(extract.argv, "--data-path") == "/work/data/regenerated.jsonl"
    assert flag(extract.argv, "--output-path") == "/work/hidden_states"
    assert flag(extract.argv, "--draft-model-config") == f"/etc/drafter-training/{DRAFT_CONFIG}"
    assert flag(extract.argv, "--chat-template") == "kimi-k2-instruct"
    assert flag(extract.argv, "--max-length") == "4096" and flag(extract.argv, "--tp-size") == "8"
    assert flag(extract.argv, "--num-samples") == "10000"
    assert not extract.env

    vocab, train = got["Train"].commands
    assert vocab.argv == ("python", "/opt/drafter-training/adapters/base_vocab_mapping.py",
                          "AQ-MedAI/Kimi-K2-Instruct-eagle3", "/work/base_vocab_mapping.pt")
    assert train.argv == ("specforge", "train", "--config", f"/etc/drafter-training/{TRAIN_CONFIG}")

    (export,) = got["Export"].commands
    assert export.argv == ("specforge", "export", "--to", "sglang", "--checkpoint", "/work/train/drafter-latest",
                           "--draft-config", f"/etc/drafter-training/{DRAFT_CONFIG}",
                           "--output-dir", "/models/drafters/.kimi-k25-eagle3-ft.tmp-g1",
                           "--vocab-mapping", "/work/base_vocab_mapping.pt")
    assert got["Export"].outputs == {"drafter": "/models/drafters/kimi-k25-eagle3-ft"}


def test_specforge_seed_train_config() -> None:
    config = files(stages(seed())["Train"])[TRAIN_CONFIG]
    assert config.format == "yaml"
    assert yaml.safe_load(config.text()) == {
        "model": {"target_model_path": "/models/Kimi-K2.5", "torch_dtype": "bfloat16",
                  "draft_model_config": "/etc/drafter-training/draft-config.json",
                  "draft_checkpoint_path": "AQ-MedAI/Kimi-K2-Instruct-eagle3",
                  "vocab_mapping_path": "/work/base_vocab_mapping.pt",
                  "aux_hidden_state_layer_ids": [1, 29, 57]},
        "data": {"hidden_states_path": "/work/hidden_states", "max_length": 4096,
                 "chat_template": "kimi-k2-instruct", "cache_dir": "/work/cache"},
        # 10,000 samples a step on each of 8 GPUs: 1,250 steps an epoch, a checkpoint every quarter of it.
        "training": {"strategy": "eagle3", "num_epochs": 5, "batch_size": 1, "learning_rate": 1e-4, "seed": 0,
                     "save_interval": 312, "max_checkpoints": 2},
        "deployment": {"mode": "local_colocated", "trainer": {"nnodes": 1, "nproc_per_node": 8}},
        "run_id": "drafter",
        "output_dir": "/work/train",
    }


def test_specforge_seed_draft_config_is_the_base_drafters_with_the_spec_layers() -> None:
    config = json.loads(files(stages(seed())["Export"])[DRAFT_CONFIG].text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["draft_vocab_size"] == 32000 and config["hidden_size"] == 7168
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}


def test_specforge_from_scratch_derives_the_draft_config_from_the_target() -> None:
    spec = seed(baseDrafter=None, data={"dataset": "sharegpt", "numSamples": 500, "chatTemplate": "kimi-k2-instruct"})
    config = draft_config(spec, OPTIONS)
    assert config == {
        "vocab_size": 163840, "hidden_size": 7168, "num_attention_heads": 64, "num_key_value_heads": 64,
        "intermediate_size": 18432, "rms_norm_eps": 1e-6, "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama", "num_hidden_layers": 1, "tie_word_embeddings": False, "use_cache": True,
        "draft_vocab_size": 32000, "pad_token_id": 0,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
    }
    got = stages(spec)
    (prepare,) = got["Generate"].commands  # a hub preset is converted; no regeneration
    assert prepare.argv == ("python", "/opt/SpecForge/scripts/prepare_data.py", "--dataset", "sharegpt",
                            "--output-path", "/work/data", "--sample-size", "500")
    assert flag(got["Extract"].commands[0].argv, "--data-path") == "/work/data/sharegpt_train.jsonl"
    train = yaml.safe_load(files(got["Train"])[TRAIN_CONFIG].text())
    assert train["model"]["draft_model_config"] == f"/etc/drafter-training/{DRAFT_CONFIG}"
    assert train["model"]["vocab_mapping_path"] == "/work/hidden_states/vocab_mapping/vocab_mapping.pt"
    assert "draft_checkpoint_path" not in train["model"]
    assert [c.argv[0] for c in got["Train"].commands] == ["specforge"]


def test_specforge_local_dataset_needs_no_generate_stage() -> None:
    spec = seed(baseDrafter=None, data={"dataset": "/models/chat.jsonl", "numSamples": 10, "chatTemplate": "kimi-k2-instruct"})
    got = stages(spec)
    assert list(got) == ["Extract", "Train", "Export"]
    assert flag(got["Extract"].commands[0].argv, "--data-path") == "/models/chat.jsonl"


def test_specforge_defaults_leave_the_layers_to_the_framework() -> None:
    raw = yaml.safe_load(SEED.read_text())
    del raw["spec"]["hiddenStates"]["layers"]
    spec = DrafterTraining.model_validate(raw).spec
    train = yaml.safe_load(files(stages(spec)["Train"])[TRAIN_CONFIG].text())
    assert "aux_hidden_state_layer_ids" not in train["model"]


def test_specforge_cpu_substitutions_are_explicit() -> None:
    spec = seed(baseDrafter=None, data={"dataset": "/models/chat.jsonl", "numSamples": 24, "chatTemplate": "kimi-k2-instruct"})
    paths = TrainingPaths(work="/w", files="/f", adapters=str(ADAPTERS_DIR), python="/venv/bin/python")
    got = stages(spec, RenderOptions(**{**OPTIONS.__dict__, "cpu": True, "export_to": "hf"}), paths)
    (extract,) = got["Extract"].commands
    assert extract.argv[:3] == ("/venv/bin/python", f"{ADAPTERS_DIR}/hf_hidden_states.py", "specforge")
    assert flag(extract.argv, "--tp-size") == "1" and flag(extract.argv, "--batch-size") == "1"
    assert extract.env == {"SPECFORGE_DEVICE": "cpu"}
    (train,) = got["Train"].commands
    assert train.argv == ("/venv/bin/python", f"{ADAPTERS_DIR}/eager_loss.py", "train", "--config", f"/f/{TRAIN_CONFIG}")
    assert train.env == {"SPECFORGE_DEVICE": "cpu"}
    config = yaml.safe_load(files(got["Train"])[TRAIN_CONFIG].text())
    assert config["training"]["attention_backend"] == "sdpa" and config["training"]["fsdp_sharding"] == "NO_SHARD"
    assert config["deployment"]["trainer"]["nproc_per_node"] == 1
    (export,) = got["Export"].commands
    assert flag(export.argv, "--to") == "hf" and flag(export.argv, "--embedding-source") == "/models/Kimi-K2.5"
    for name in ("hf_hidden_states.py", "eager_loss.py", "cpu_trainer.py", "base_vocab_mapping.py"):
        assert (ADAPTERS_DIR / name).is_file()


def test_specforge_refusals() -> None:
    with pytest.raises(ValueError, match="chat template"):
        render(seed(), TrainingPaths(), RenderOptions(target_config=KIMI, base_drafter_config=BASE))
    with pytest.raises(ValueError, match="base drafter's config.json"):
        render(seed(), TrainingPaths(), RenderOptions(chat_template="qwen", target_config=KIMI))
    with pytest.raises(ValueError, match="target's config.json"):
        render(seed(baseDrafter=None), TrainingPaths(), RenderOptions(chat_template="qwen"))
    with pytest.raises(ValueError, match="no engine endpoint"):
        render(seed(), TrainingPaths(), RenderOptions(**{**OPTIONS.__dict__, "generation_endpoint": None}))


@pytest.mark.parametrize("framework", ["specforge", "speculators"])
def test_regeneration_is_the_same_client_on_a_cpu(framework: str) -> None:
    """Regeneration is an HTTP client of the engine pod: nothing in it needs a GPU."""
    gpu = stages(seed(framework))["Generate"].commands[0]
    cpu = stages(seed(framework), RenderOptions(**{**OPTIONS.__dict__, "cpu": True}))["Generate"].commands[0]
    assert gpu == cpu and cpu.argv[:2] == ("drafter-operator", "regenerate") and not cpu.server


def test_specforge_regenerates_a_converted_hub_preset() -> None:
    spec = seed(data={"dataset": "sharegpt", "numSamples": 500, "chatTemplate": "kimi-k2-instruct",
                      "generation": {"engine": "vllm"}})
    prepare, regenerate = stages(spec)["Generate"].commands
    assert flag(prepare.argv, "--output-path") == "/work/data"
    assert flag(regenerate.argv, "--input") == "/work/data/sharegpt_train.jsonl"
    assert flag(regenerate.argv, "--output") == "/work/data/regenerated.jsonl"
    assert flag(regenerate.argv, "--num-samples") == "500"


# ------------------------------------------------------------------------------------------------
# speculators, the seed example with framework: speculators


def test_speculators_seed_stages() -> None:
    got = stages(seed("speculators"))
    assert list(got) == ["Generate", "Extract", "Train", "Export"]

    regenerate, render_server, prepare = got["Generate"].commands
    assert regenerate == Command((
        "drafter-operator", "regenerate", "--endpoint", ENDPOINT, "--model", "target",
        "--input", "/models/datasets/prompts.jsonl", "--output", "/work/data/regenerated.jsonl",
        "--num-samples", "10000", "--max-tokens", "2048"))
    assert render_server.server and render_server.argv[2:6] == ("vllm.entrypoints.cli.main", "launch", "render",
                                                                "/models/Kimi-K2.5")
    assert flag(render_server.argv, "--port") == "30000"
    assert prepare.argv[:2] == ("speculators", "prepare-data")
    assert flag(prepare.argv, "--data") == "/work/data/regenerated.jsonl"
    assert flag(prepare.argv, "--output") == "/work/data/prepared"
    assert flag(prepare.argv, "--render-endpoint") == "http://127.0.0.1:30000"
    assert flag(prepare.argv, "--seq-length") == "4096" and "--no-skip-token-freq" in prepare.argv

    server, generate = got["Extract"].commands
    speculative = json.loads(flag(server.argv, "--speculative-config"))
    assert speculative == {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                           "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58, 61]}}}
    transfer = json.loads(flag(server.argv, "--kv-transfer-config"))
    assert transfer["kv_connector"] == "ExampleHiddenStatesConnector" and transfer["kv_role"] == "kv_producer"
    assert flag(server.argv, "--tensor-parallel-size") == "8" and flag(server.argv, "--data-parallel-size") == "1"
    assert generate.argv[:2] == ("speculators", "generate-offline-data")
    assert flag(generate.argv, "--endpoint") == "http://127.0.0.1:30000/v1"
    assert flag(generate.argv, "--output") == "/work/hidden_states"

    convert, train = got["Train"].commands
    assert convert.argv == ("speculators", "convert", "AQ-MedAI/Kimi-K2-Instruct-eagle3", "--algorithm", "eagle3",
                            "--verifier", "/models/Kimi-K2.5", "--output-path", "/work/base_drafter",
                            "--algorithm-kwargs", '{"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}')
    assert train.argv[:8] == ("python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "8",
                              "-m", "speculators.train")
    assert flag(train.argv, "--from-pretrained") == "/work/base_drafter"
    assert "--draft-vocab-size" not in train.argv  # the base drafter's mapping is kept
    assert list(train.argv[train.argv.index("--target-layer-ids") + 1:][:3]) == ["2", "30", "58"]
    assert flag(train.argv, "--epochs") == "5" and flag(train.argv, "--lr") == "1e-4"
    assert flag(train.argv, "--total-seq-len") == "4096" and "--save-best" in train.argv

    # Into the staging directory beside the output; the runner renames it into place (training/export.py).
    (copy,) = got["Export"].commands
    assert copy.argv == ("cp", "-rL", "/work/train/checkpoint_best", "/models/drafters/.kimi-k25-eagle3-ft.tmp-g1")
    assert got["Export"].publish == Publish(path="/models/drafters/kimi-k25-eagle3-ft",
                                            staging="/models/drafters/.kimi-k25-eagle3-ft.tmp-g1", tag="g1")


def test_speculators_from_scratch_and_cpu() -> None:
    spec = seed("speculators", baseDrafter=None, data={"dataset": "/models/chat.jsonl", "numSamples": 24})
    paths = TrainingPaths(work="/w", adapters="/a", python="/venv/bin/python")
    got = stages(spec, RenderOptions(**{**OPTIONS.__dict__, "cpu": True}), paths)
    render_server, prepare = got["Generate"].commands
    assert render_server.env == {"VLLM_TARGET_DEVICE": "cpu"}
    assert flag(prepare.argv, "--render-endpoint") == "http://127.0.0.1:30000"
    assert flag(prepare.argv, "--num-preprocessing-workers") == "1"
    (extract,) = got["Extract"].commands
    assert extract.argv[:3] == ("/venv/bin/python", "/a/hf_hidden_states.py", "speculators")
    assert list(extract.argv[extract.argv.index("--target-layer-ids") + 1:][:3]) == ["2", "30", "58"]
    (train,) = got["Train"].commands
    assert train.argv[:3] == ("/venv/bin/python", "/a/cpu_trainer.py", "train")
    assert flag(train.argv, "--draft-vocab-size") == "32000"
    assert flag(train.argv, "--draft-attn-impl") == "sdpa" and flag(train.argv, "--loss-implementation") == "eager"
    assert flag(train.argv, "--max-anchors") == "32"  # a CPU's DFlash-family step stays seconds
    assert "--from-pretrained" not in train.argv
    (on_gpus,) = stages(spec, OPTIONS, paths)["Train"].commands
    assert "--max-anchors" not in on_gpus.argv  # speculators' default on GPUs


def test_speculators_regenerates_only_a_conversations_file() -> None:
    spec = seed("speculators", data={"dataset": "sharegpt", "numSamples": 500, "generation": {"engine": "vllm"}})
    with pytest.raises(ValueError, match="'sharegpt' is a hub preset"):
        render(spec, TrainingPaths(), OPTIONS)
    with pytest.raises(ValueError, match="no engine endpoint"):
        render(seed("speculators"), TrainingPaths(), RenderOptions(target_config=KIMI))


def test_speculators_extraction_needs_the_target_depth() -> None:
    spec = seed("speculators", baseDrafter=None)
    with pytest.raises(ValueError, match="config.json"):
        render(spec, TrainingPaths(), RenderOptions(generation_endpoint=ENDPOINT))
    raw = yaml.safe_load(SEED.read_text())
    del raw["spec"]["hiddenStates"]["layers"]
    raw["spec"]["framework"] = "speculators"
    default = DrafterTraining.model_validate(raw).spec
    assert speculators_render.extraction_layer_ids(default, OPTIONS) == [2, 30, 58, 61]  # launch_vllm.py's default
