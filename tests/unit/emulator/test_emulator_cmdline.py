"""The emulator accepts the engines' real command lines and refuses what their parsers refuse."""

from __future__ import annotations

import json

import pytest

from drafter_testbed.emulator import batching
from drafter_testbed.emulator import server
from drafter_testbed.emulator.cmdline import CommandLineError, parse_command_line
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import ProfileError, load_profile, parse_profile

SEED_SPEC = json.dumps({"method": "eagle3", "model": "/models/kimi-k2.5-eagle3", "num_speculative_tokens": 5})
SEED_VLLM = [
    "vllm", "serve", "/models/kimi-k2.5-int4", "--tensor-parallel-size", "8", "--max-model-len", "32768",
    "--gpu-memory-utilization", "0.95", "--trust-remote-code", "--tool-call-parser", "kimi_k2",
    "--reasoning-parser", "kimi_k2", "--enable-auto-tool-choice", "--port", "8000",
    "--speculative-config", SEED_SPEC,
]
SGLANG = [
    "python3", "-m", "sglang.launch_server", "--model-path", "/models/kimi-k2.5-int4", "--tp-size", "8",
    "--host", "0.0.0.0", "--port", "30000", "--trust-remote-code", "--enable-metrics",
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "AQ-MedAI/Kimi-K2-Instruct-eagle3",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]


def test_seed_vllm_command_line():
    c = parse_command_line(SEED_VLLM)
    assert c.engine == "vllm" and c.model == "/models/kimi-k2.5-int4" and c.model_name == c.model
    assert (c.tensor_parallel_size, c.max_model_len, c.memory_fraction, c.port) == (8, 32768, 0.95, 8000)
    assert c.trust_remote_code and c.enable_auto_tool_choice
    assert c.tool_call_parser == c.reasoning_parser == "kimi_k2"
    assert c.host == "0.0.0.0" and c.enable_metrics
    spec = c.speculation
    assert spec is not None and spec.method == "eagle3" and spec.num_speculative_tokens == 5
    assert spec.drafter_key == "/models/kimi-k2.5-eagle3" and c.k == 5


def test_vllm_variants():
    old = parse_command_line(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m",
                              "--served-model-name", "kimi", "alias", "-tp", "2", "--max_model_len=4096"])
    assert old.model == "m" and old.served_model_names == ("kimi", "alias") and old.model_name == "kimi"
    assert old.tensor_parallel_size == 2 and old.max_model_len == 4096 and old.speculation is None
    assert old.port == 8000
    short = parse_command_line(["vllm", "serve", "m", "-sc", '{"method":"ngram","num_speculative_tokens":3,'
                                                          '"prompt_lookup_max":4}'])
    assert short.speculation.drafter_key == "ngram" and short.speculation.options == {"prompt_lookup_max": 4}
    inferred = parse_command_line(["vllm", "serve", "--model", "m", "--speculative-config",
                                   '{"model":"x/Some-EAGLE3-drafter","num_speculative_tokens":2}'])
    assert inferred.speculation.method == "eagle3"
    mtp = parse_command_line(["vllm", "serve", "m", "--speculative-config",
                              '{"method":"deepseek_mtp","num_speculative_tokens":1}'])
    assert mtp.speculation.method == "mtp" and mtp.k == 1 and mtp.speculation.drafter_key == "mtp"
    # vLLM's own matching rules: unique prefixes, underscores, dotted keys and the --spec-* shorthands
    spelled = parse_command_line(["vllm", "serve", "m", "--tensor-parallel", "4", "--max_model_len=32k",
                                  "-sc.method", "eagle3", "-sc.model=d", "--spec-tokens", "3"])
    assert spelled.tensor_parallel_size == 4 and spelled.max_model_len == 32000
    assert (spelled.speculation.method, spelled.speculation.draft_model, spelled.k) == ("eagle3", "d", 3)
    # without a model vllm serve falls back to --model's default, as the real CLI does
    assert parse_command_line(["vllm", "serve"]).model == "Qwen/Qwen3-0.6B"


def test_sglang_resolves_ngram_and_algorithm_names_as_sglang_does():
    ngram = parse_command_line(["sglang", "--model-path", "m", "--speculative-algorithm", "ngram"])
    spec = ngram.speculation
    # topk from --speculative-ngram-max-bfs-breadth (10), 12 draft tokens, steps = 12 // 10
    assert (spec.method, spec.eagle_topk, spec.num_draft_tokens, spec.num_speculative_tokens) == ("NGRAM", 10, 12, 1)
    tuned = parse_command_line(["sglang", "--model-path", "m", "--speculative-algorithm", "NGRAM",
                                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "24"])
    assert (tuned.speculation.eagle_topk, tuned.speculation.num_speculative_tokens) == (10, 2)
    # fewer draft tokens than the breadth: SGLang resolves 0 steps and serves (its worker drafts the tree anyway)
    short = parse_command_line(["sglang", "--model-path", "m", "--speculative-algorithm", "NGRAM",
                                "--speculative-num-draft-tokens", "4"]).speculation
    assert (short.num_steps, short.num_draft_tokens, short.num_speculative_tokens) == (0, 4, 1)
    nextn = parse_command_line(["sglang", "--model-path", "m", "--speculative-algorithm", "nextn"])
    assert nextn.speculation.method == "NEXTN" and nextn.k == 3


def test_sglang_command_line_and_shorthand():
    c = parse_command_line(SGLANG)
    assert c.engine == "sglang" and c.tensor_parallel_size == 8 and c.enable_metrics and c.port == 30000
    spec = c.speculation
    assert (spec.method, spec.num_speculative_tokens, spec.eagle_topk, spec.num_draft_tokens) == ("EAGLE3", 3, 1, 4)
    assert spec.draft_model == "AQ-MedAI/Kimi-K2-Instruct-eagle3"
    short = parse_command_line(["sglang", "serve", "--model-path", "m", "--tensor-parallel-size", "2",
                                "--context-length", "8192", "--mem-fraction-static", "0.9",
                                "--speculative-algorithm", "EAGLE", "--speculative-draft-model", "d",
                                "--served-model-name", "kimi"])
    assert short.tensor_parallel_size == 2 and short.max_model_len == 8192 and short.memory_fraction == 0.9
    assert short.speculation.num_speculative_tokens == 3 and short.speculation.num_draft_tokens == 4
    assert short.model_name == "kimi" and not short.enable_metrics and short.host == "127.0.0.1"
    plain = parse_command_line(["/usr/bin/python3.11", "-m", "sglang.launch_server", "--model-path", "m"])
    assert plain.speculation is None and plain.port == 30000


def test_real_flags_we_do_not_model_are_recorded_and_ignored():
    c = parse_command_line([*SEED_VLLM, "--enforce-eager", "--max-num-seqs", "8", "--no-enable-prefix-caching",
                            "--kv-cache-dtype", "fp8"])
    assert c.ignored == {"--enforce-eager": True, "--max-num-seqs": 8, "--enable-prefix-caching": False,
                         "--kv-cache-dtype": "fp8"}
    s = parse_command_line([*SGLANG, "--disable-cuda-graph", "--chunked-prefill-size", "4096"])
    assert s.ignored == {"--disable-cuda-graph": True, "--chunked-prefill-size": 4096}


PARSER_REFUSALS = [  # the engine's argparse exits with status 2
    [*SEED_VLLM, "--no-such-flag"],
    [*SEED_VLLM[:-1], "{not json"],
    ["vllm", "serve", "m", "--port", "eighty"],
    ["vllm", "serve", "m", "--po", "8000"],  # ambiguous prefix: --port, --pooler-config
    [*SGLANG, "--speculative-num-steps"],
    [*SGLANG, "--no-such-flag"],
    [*SGLANG, "--cuda-graph-max-bs", "8"],  # not an SGLang 0.5.23 flag: ambiguous prefix of two that are
    [*SGLANG, "--tool-call-parser", "llama3_json"],  # SGLang calls it llama3
    ["python3", "-m", "sglang.launch_server", "--tp-size", "8"],  # no model
]
PRE_LOAD_REFUSALS = [  # parsed, then refused by the engine's own checks before loading (a traceback, status 1)
    ["vllm", "serve", "m", "--speculative-config", '{"method":"eagle3","model":"d","num_speculative_tokens":0}'],
    ["vllm", "serve", "m", "--speculative-config", '{"method":"bogus","model":"d","num_speculative_tokens":2}'],
    ["vllm", "serve", "m", "--speculative-config",
     '{"method":"eagle3","model":"d","num_speculative_tokens":2,"tensor_parallel_size":8}'],
    ["vllm", "serve", "m", "--speculative-config", '{"method":"deepseek_mtp"}'],  # vLLM 0.33.0 needs k for MTP
    ["vllm", "serve", "m", "--speculative-config", '{"method":"medusa","model":"d","num_speculative_tokens":2}'],
    ["vllm", "serve", "m", "--enable-auto-tool-choice"],  # needs --tool-call-parser
    ["vllm", "serve", "m", "--spec-model", "d", "-sc", '{"model":"e","num_speculative_tokens":2}'],
    ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--speculative-algorithm", "MTP"],
]
LOAD_REFUSALS = [  # accepted by parser and checks; the engine fails once it reads the model (emulator: status 2)
    ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--speculative-algorithm", "eagle3"],
]


@pytest.mark.parametrize("argv, status", [*((a, 2) for a in PARSER_REFUSALS), *((a, 1) for a in PRE_LOAD_REFUSALS),
                                          *((a, 2) for a in LOAD_REFUSALS)])
def test_refused_command_lines_exit_like_the_engine(argv, status, capsys):
    assert server.main(argv) == status
    assert "rror" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["vllm", "bench", "serve"], ["python", "-m", "other.module"], ["tgi", "serve"], []])
def test_unknown_programs(argv, capsys):
    with pytest.raises(CommandLineError):
        parse_command_line(argv)
    assert server.main(argv) == 2


def test_help_exits_0(capsys):
    assert server.main(["vllm", "serve", "--help"]) == 0
    assert "--speculative-config" in capsys.readouterr().out


def test_prompt_lookup_drafting_costs_no_draft_forward():
    ngram = server.build_engine(["vllm", "serve", "m", "-sc", '{"method":"ngram","num_speculative_tokens":3}'], {})
    eagle = server.build_engine(SEED_VLLM, {})
    sglang_ngram = server.build_engine(["sglang", "--model-path", "m", "--speculative-algorithm", "NGRAM"], {})
    for lookup in (ngram, sglang_ngram):
        assert lookup.decoder.speculation.forwards == 0
        assert batching.draft_ms(8, lookup.decoder.speculation, lookup.decoder.costs) == 0.0
    assert eagle.decoder.speculation.forwards == eagle.decoder.k == 5
    assert eagle.decoder.draft_cost == load_profile().draft_cost > 0


def test_settings_from_env_and_bind_host():
    s = Settings.from_env({"DRAFTER_EMULATOR_HOST": "127.0.1.5", "DRAFTER_EMULATOR_STARTUP_SECONDS": "2.5",
                           "DRAFTER_EMULATOR_FAIL_STARTUP": "1", "DRAFTER_EMULATOR_TIME_SCALE": "0.1",
                           "DRAFTER_EMULATOR_SEED": "42", "DRAFTER_EMULATOR_ACCEPTANCE": "0.2"})
    assert (s.host, s.startup_seconds, s.fail_startup, s.time_scale, s.seed, s.acceptance) == \
        ("127.0.1.5", 2.5, True, 0.1, 42, 0.2)
    assert Settings.from_env({}) == Settings()
    engine = server.build_engine(SEED_VLLM, {"DRAFTER_EMULATOR_HOST": "127.0.1.5"})
    assert server.bind_host(engine) == "127.0.1.5"
    assert server.bind_host(server.build_engine(SEED_VLLM, {})) == "0.0.0.0"
    for bad in ({"DRAFTER_EMULATOR_TIME_SCALE": "fast"}, {"DRAFTER_EMULATOR_ACCEPTANCE": "1.5"},
                {"DRAFTER_EMULATOR_FAIL_STARTUP": "maybe"}, {"DRAFTER_EMULATOR_SEED": "x"}):
        with pytest.raises(ValueError):
            Settings.from_env(bad)


def test_packaged_profile_lookup():
    p = load_profile()
    assert p.target_step_ms == 12.12 and p.draft_cost == 0.33
    assert p.lookup("vllm", "/models/kimi-k2.5-eagle3").acceptance == 0.432
    assert p.lookup("vllm", "/models/Kimi-K2.5-EAGLE3/").source == "profile:seed-kimi-k2.5-eagle3"
    # the seed example's path, also after the process runner remaps the volume, and its fine-tuned successor
    for path in ("/models/drafters/kimi-k25-eagle3", "/tmp/pods/ns/p/volumes/models/drafters/kimi-k25-eagle3",
                 "/models/drafters/kimi-k25-eagle3-ft"):
        assert p.lookup("vllm", path).source == "profile:seed-kimi-k2.5-eagle3", path
    assert p.lookup("sglang", "AQ-MedAI/Kimi-K2-Instruct-eagle3").acceptance == 0.89
    assert p.lookup("sglang", "/mnt/models/kimi-k2-instruct-eagle3").acceptance == 0.89
    assert p.lookup("vllm", "ngram").acceptance == 0.3
    assert p.lookup("vllm", "something/else").source == "profile:default"


def test_profile_override_and_errors(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("default: {vllm: 0.5, sglang: 0.6}\ndrafters:\n- {name: x, match: '*x*', acceptance: {vllm: 0.1}}\n")
    p = load_profile(path)
    assert p.lookup("vllm", "/a/x-drafter").acceptance == 0.1
    assert p.lookup("sglang", "/a/x-drafter").acceptance == 0.6  # no sglang figure: default
    engine = server.build_engine(SEED_VLLM, {"DRAFTER_EMULATOR_PROFILE": str(path)})
    assert engine.decoder.acceptance == 0.5 and engine.acceptance_source == "profile:default"
    for bad in ({"default": {"vllm": 0.5}}, {"default": {"vllm": 2, "sglang": 0.5}},
                {"default": {"vllm": 0.5, "sglang": 0.5, "tgi": 0.1}}, ["not", "a", "mapping"]):
        with pytest.raises(ProfileError):
            parse_profile(bad, "test")


def test_bad_profile_path_exits_2(monkeypatch, capsys):
    monkeypatch.setenv("DRAFTER_EMULATOR_PROFILE", "/nonexistent/profile.yaml")
    assert server.main(SEED_VLLM) == 2
    assert "profile" in capsys.readouterr().err
