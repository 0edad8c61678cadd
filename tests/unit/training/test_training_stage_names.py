"""training.stages.job_stages (what the operator schedules) agrees with what the renderers render."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from tests.api_strategies import training_specs
from drafter_operator.api.training import DrafterTrainingSpec
from drafter_operator.training import RenderOptions, TrainingPaths, render
from drafter_operator.training.stages import job_stages

TARGET = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 4096,
          "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6}
BASE = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 4096,
        "draft_vocab_size": 256, "num_attention_heads": 2, "intermediate_size": 128}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_specs())
def test_job_stages_are_the_rendered_stages(raw):
    spec = DrafterTrainingSpec.model_validate(raw)
    if spec.hidden_states.layers and max(spec.hidden_states.layers) >= TARGET["num_hidden_layers"]:
        spec = spec.model_copy(update={"hidden_states": spec.hidden_states.model_copy(update={"layers": [1, 2, 3]})})
    options = RenderOptions(chat_template="qwen", target_config=TARGET,
                            base_drafter_config=BASE if spec.base_drafter else None,
                            generation_endpoint="http://engine.ns.svc:8000/v1")
    try:
        rendered = [stage.name for stage in render(spec, TrainingPaths(), options)]
    except ValueError:
        return  # a spec the renderer refuses (the run-stage Job fails with RenderFailed): no stages to agree on
    assert tuple(rendered) == job_stages(spec)


def test_the_seed_example_renders_every_stage_in_both_frameworks():
    from pathlib import Path

    import yaml

    from drafter_operator.api import DrafterTraining

    body = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "training-kimi-k25-eagle3.yaml").read_text())
    for framework, local_dataset in (("specforge", True), ("speculators", True), ("specforge", False)):
        body["spec"].update(framework=framework, baseDrafter=None)
        body["spec"]["data"]["dataset"] = "/models/datasets/prompts.jsonl" if local_dataset else "sharegpt"
        spec = DrafterTraining.model_validate(body).spec
        options = RenderOptions(chat_template="kimi-k2-instruct", target_config=TARGET,
                                generation_endpoint="http://engine.ns.svc:8000/v1")
        spec = spec.model_copy(update={"hidden_states": spec.hidden_states.model_copy(update={"layers": [1, 2, 3]})})
        rendered = tuple(stage.name for stage in render(spec, TrainingPaths(), options))
        assert rendered == job_stages(spec) == ("Generate", "Extract", "Train", "Export")
