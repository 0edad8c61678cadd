"""The training renderers' inputs: the seed example's spec, the target and base drafter configs, the options."""
from __future__ import annotations

from pathlib import Path

import yaml

from drafter_operator.api.training import DrafterTraining, DrafterTrainingSpec
from drafter_operator.training import RenderOptions, TrainingPaths, render

SEED = Path(__file__).resolve().parents[2] / "examples" / "training-kimi-k25-eagle3.yaml"
KIMI = {"architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 64,
                        "num_key_value_heads": 64, "intermediate_size": 18432, "vocab_size": 163840,
                        "rms_norm_eps": 1e-6, "kv_lora_rank": 512}}
BASE = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 7168,
        "draft_vocab_size": 32000, "vocab_size": 163840,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}}
ENDPOINT = "http://kimi-k25-eagle3-ft-gen-g1.team.svc.cluster.local:30000/v1"
OPTIONS = RenderOptions(chat_template="kimi-k2-instruct", target_config=KIMI, base_drafter_config=BASE,
                        generation_endpoint=ENDPOINT)


def seed(framework: str = "specforge", **spec_updates) -> DrafterTrainingSpec:
    raw = yaml.safe_load(SEED.read_text())
    raw["spec"]["framework"] = framework
    raw["spec"].update(spec_updates)
    return DrafterTraining.model_validate(raw).spec


def stages(spec: DrafterTrainingSpec, options: RenderOptions = OPTIONS, paths: TrainingPaths = TrainingPaths()):
    return {stage.name: stage for stage in render(spec, paths, options)}


def flag(argv, name: str):
    argv = list(argv)
    return argv[argv.index(name) + 1]
