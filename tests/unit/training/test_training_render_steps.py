"""The renderers' named steps, one stage each (training/specforge.py, training/speculators.py): every step
is what render puts in its stage, and each varies with the spec the way its stage must."""

from __future__ import annotations

import pytest

from drafter_operator.training import Command, RenderOptions, TrainingPaths
from drafter_operator.training import specforge as sf
from drafter_operator.training import speculators as sp
from tests.support.training_renders import KIMI, OPTIONS, seed, stages

PATHS = TrainingPaths(work="/w", files="/f", adapters="/a", python="/venv/bin/python")
CPU = RenderOptions(**{**OPTIONS.__dict__, "cpu": True})
LOCAL = {"dataset": "/models/chat.jsonl", "numSamples": 24, "chatTemplate": "kimi-k2-instruct"}


@pytest.mark.parametrize("options", [OPTIONS, CPU], ids=["gpu", "cpu"])
@pytest.mark.parametrize("updates", [{}, {"baseDrafter": None, "data": LOCAL}], ids=["seed", "local"])
def test_specforge_steps_are_the_stages(options, updates):
    spec = seed(**updates)
    got = stages(spec, options, PATHS)
    assert got.get("Generate") is None or got["Generate"].commands == sf.generate_commands(spec, PATHS, options)
    assert got["Extract"].commands == (sf.extract_command(spec, PATHS, options),)
    assert got["Train"].commands == sf.train_commands(spec, PATHS, options)
    assert got["Export"].commands == (sf.export_command(spec, PATHS, options, got["Export"].publish.staging),)


def test_specforge_generate_converts_a_preset_and_regenerates_only_when_asked():
    assert sf.generate_commands(seed(baseDrafter=None, data=LOCAL), PATHS, OPTIONS) == ()
    preset = seed(data={"dataset": "sharegpt", "numSamples": 7, "chatTemplate": "kimi-k2-instruct"})
    (convert,) = sf.generate_commands(preset, PATHS, OPTIONS)
    assert convert.argv[:2] == ("/venv/bin/python", f"{PATHS.specforge_scripts}/prepare_data.py")
    assert convert.argv[convert.argv.index("--sample-size") + 1] == "7"


def test_specforge_extract_runs_on_every_gpu_or_the_adapter_on_a_cpu():
    spec = seed()
    gpu, cpu = sf.extract_command(spec, PATHS, OPTIONS), sf.extract_command(spec, PATHS, CPU)
    assert gpu.argv[gpu.argv.index("--nproc_per_node") + 1] == str(spec.resources.gpus) and gpu.env == {}
    assert cpu.argv[1] == "/a/hf_hidden_states.py" and cpu.env == {"SPECFORGE_DEVICE": "cpu"}
    assert gpu.argv[gpu.argv.index("--data-path") + 1] == cpu.argv[cpu.argv.index("--data-path") + 1]


def test_specforge_train_maps_the_base_vocabulary_first_only_with_a_base_drafter():
    with_base = sf.train_commands(seed(), PATHS, OPTIONS)
    assert [c.argv[1] if c.argv[0] == "/venv/bin/python" else c.argv[0] for c in with_base] == \
        ["/a/base_vocab_mapping.py", "specforge"]
    (scratch,) = sf.train_commands(seed(baseDrafter=None, data=LOCAL), PATHS, CPU)
    assert scratch.argv[1] == "/a/eager_loss.py"


def test_specforge_export_takes_the_vocabulary_it_trained_with():
    def vocab(spec) -> str:
        argv = sf.export_command(spec, PATHS, OPTIONS, "/out/.staging").argv
        assert argv[argv.index("--output-dir") + 1] == "/out/.staging"
        return argv[argv.index("--vocab-mapping") + 1]

    assert vocab(seed()) != vocab(seed(baseDrafter=None, data=LOCAL))
    hf = sf.export_command(seed(), PATHS, RenderOptions(**{**OPTIONS.__dict__, "export_to": "hf"}), "/s")
    assert "--embedding-source" in hf.argv


@pytest.mark.parametrize("options", [OPTIONS, CPU], ids=["gpu", "cpu"])
@pytest.mark.parametrize("updates", [{}, {"baseDrafter": None, "data": LOCAL}], ids=["seed", "local"])
def test_speculators_steps_are_the_stages(options, updates):
    spec = seed("speculators", **updates)
    got = stages(spec, options, PATHS)
    assert got["Generate"].commands == sp.generate_commands(spec, PATHS, options)
    assert got["Extract"].commands == sp.extract_commands(spec, PATHS, options)
    assert got["Train"].commands == sp.train_commands(spec, PATHS, options)


def test_speculators_generate_starts_a_render_server_before_prepare_data():
    *_, server, prepare = sp.generate_commands(seed("speculators", baseDrafter=None, data=LOCAL), PATHS, OPTIONS)
    assert server.server and server.ready_url == "http://127.0.0.1:30000/health"
    assert prepare.argv[:2] == ("speculators", "prepare-data")


def test_speculators_generate_refuses_to_regenerate_a_hub_preset():
    spec = seed("speculators", data={"dataset": "sharegpt", "numSamples": 5, "generation": {"engine": "vllm"}})
    with pytest.raises(ValueError, match="hub preset"):
        sp.generate_commands(spec, PATHS, OPTIONS)


def test_speculators_extract_is_a_server_and_its_client_or_one_adapter_on_a_cpu():
    spec = seed("speculators")
    server, client = sp.extract_commands(spec, PATHS, OPTIONS)
    assert server.server and client.argv[:2] == ("speculators", "generate-offline-data")
    (adapter,) = sp.extract_commands(spec, PATHS, CPU)
    assert adapter.argv[1:3] == ("/a/hf_hidden_states.py", "speculators") and not adapter.server


def test_speculators_train_converts_the_base_drafter_first():
    convert, train = sp.train_commands(seed("speculators"), PATHS, OPTIONS)
    assert convert.argv[:2] == ("speculators", "convert") and "speculators.train" in train.argv
    (only,) = sp.train_commands(seed("speculators", baseDrafter=None, data=LOCAL),
                                PATHS, RenderOptions(target_config=KIMI, cpu=True))
    assert isinstance(only, Command) and only.argv[1] == "/a/cpu_trainer.py"
