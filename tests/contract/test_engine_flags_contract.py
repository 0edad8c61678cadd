"""Contract tier: the flag tables, the owned-flag check and the emulator's parser against the real engines.

Three claims, each checked against vLLM 0.33.0 and SGLang 0.5.23 themselves (tests/contract/
engine_parsers.py runs their parsers in the engine environment):

1. The packaged flag tables (operator/drafter_operator/engines/flagtables/) are what the installed
   engines' parsers generate today.
2. Every destination the operator owns is refused under every spelling the real parser accepts for
   it: exact, unique prefixes, vLLM's underscores, ``=value``, negations, dotted JSON keys.
3. The emulator parses a corpus of command lines (rendered ones and hostile hand-written ones) with
   the same verdict as the real engine and, where both accept, the same meaning: model, port, tensor
   parallel size, speculative method, k and drafter.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from drafter_operator.api import DrafterServingSpec
from drafter_testbed.emulator.cmdline import CommandLineError, EngineRefused, parse_engine_command_line
from drafter_operator.engines import ENGINES, flags
from drafter_operator.engines.extra_args import owned_rule

# The modules using the session-scoped `parsers` (a vLLM and an SGLang parser process, about 100 s to start under
# CI load) share one worker, so one worker starts them rather than both (tests/contract/conftest.py).
pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("engine-parsers")]

HARNESS = Path(__file__).resolve().parent / "engine_parsers.py"
TABLES = Path(flags.__file__).resolve().parent / "flagtables"
PREFIX = {"vllm": ["vllm", "serve", "/models/target"],
          "sglang": ["python3", "-m", "sglang.launch_server", "--model-path", "/models/target"]}
ENTRY = {"vllm": 2, "sglang": 3}  # where the engine's own arguments start in an argv


# --------------------------------------------------------------------------------------------------
# 1. The tables are the wheels'


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_packaged_flag_table_is_what_the_installed_engine_generates(engine_python, engine):
    proc = subprocess.run([engine_python, str(HARNESS), "table", engine], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    generated = json.loads(proc.stdout)
    packaged = json.loads((TABLES / f"{engine}.json").read_text())
    if generated != packaged:
        gen = {o["dest"]: o for o in generated["parser"]["options"]}
        pkg = {o["dest"]: o for o in packaged["parser"]["options"]}
        changed = sorted(d for d in gen.keys() & pkg.keys() if gen[d] != pkg[d])
        pytest.fail(f"{engine} {generated['version']} differs from the packaged table ({packaged['version']}): "
                    f"new {sorted(gen.keys() - pkg.keys())[:20]}, gone {sorted(pkg.keys() - gen.keys())[:20]}, "
                    f"changed {changed[:20]}; regenerate with `$DRAFTER_ENGINE_PYTHON tests/contract/engine_parsers.py "
                    f"table {engine} > operator/drafter_operator/engines/flagtables/{engine}.json`")


# --------------------------------------------------------------------------------------------------
# 2. Owned destinations under every spelling


def value_for(option: flags.Option) -> str | None:
    """None for flags without a value; otherwise a value the option's type accepts."""
    if option.action in ("store_true", "store_false", "store_const", "boolean_optional", "count", "help",
                         "custom:DeprecatedStoreTrueAction", "custom:DeprecatedStoreConstAction") or option.nargs == 0:
        return None
    if option.choices:
        return option.choices[0]
    kind = option.type or ""
    if kind in ("int", "sglang:human_readable_int", "vllm:human_readable_int_or_auto", "vllm:human_readable_int") \
            or kind.endswith("[int]") or kind.endswith("[human_readable_int]"):
        return "2"
    if kind == "float" or kind.endswith("[float]"):
        return "0.5"
    if "loads" in kind or "parse_dataclass" in kind or "parse_type" in kind:
        return '{"method": "ngram", "num_speculative_tokens": 3}'
    return "/tmp/x"


def spellings(engine: str) -> list[list[str]]:
    """Argument lists that try to reach an owned destination: every prefix of every long spelling, each
    with its value as the next argument; the `--prefix=value` form for the whole flag and every third
    prefix (splitting at `=` does not depend on the prefix's length, and SGLang's parser costs 0.12 s a
    command line: it builds its whole argparse parser each time)."""
    table = flags.table(engine)
    module = ENGINES[engine]
    cases: list[list[str]] = []
    for option in table.options:
        if not owned_rule(module.OWNED_DESTINATIONS, option.dest) or option.action == "help":
            continue
        value = value_for(option)
        for flag in option.flags:
            forms = {flag} if not flag.startswith("--") else {flag[:n] for n in range(4, len(flag) + 1)}
            if engine == "vllm":
                forms |= {"--" + f[2:].replace("-", "_") for f in forms if f.startswith("--")}
            for form in sorted(forms):
                cases.append([form] if value is None else [form, value])
                if value is not None and form.startswith("--") and (form in option.flags or len(form) % 3 == 0):
                    cases.append([f"{form}={value}"])
    if engine == "vllm":  # dotted keys into the speculative config, in both spellings
        for key in ("-sc", "--speculative-config", "--speculative_config", "--speculative-conf"):
            cases += [[f"{key}.method", "ngram"], [f"{key}.num_speculative_tokens=3"], [f"{key}.model", "d"]]
    return cases


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_spelling_the_real_parser_accepts_for_an_owned_destination_is_refused(parsers, engine):
    module = ENGINES[engine]
    cases = spellings(engine)
    results = []
    for start in range(0, len(cases), 400):
        chunk = cases[start:start + 400]
        results += parsers[engine].check([{"id": str(start + i), "argv": [*PREFIX[engine], *args]}
                                          for i, args in enumerate(chunk)])
    reached_owned = 0
    escaped = []
    for args, result in zip(cases, results):
        problems = module.extra_args_problems(args)
        if result["status"] == "ok":
            owned = [d for d in result["changed"] if owned_rule(module.OWNED_DESTINATIONS, d)
                     and d not in ("model_tag", "model_path")]
            if owned:
                reached_owned += 1
                if not problems:
                    escaped.append((args, owned))
        elif not problems:
            escaped.append((args, f"the engine refuses it ({result['status']}) but the check passed it"))
    print(f"\n{engine}: {len(cases)} spellings, {reached_owned} reached an owned destination in the real parser")
    assert not escaped, f"{len(escaped)} spellings got through, e.g. {escaped[:10]}"
    assert reached_owned > 100  # the real parser really accepted many of them: the test is not vacuous


# --------------------------------------------------------------------------------------------------
# 3. The emulator's parser against the real ones

def _rendered() -> list[list[str]]:
    argvs = []
    targets = [{"model": "/models/Kimi-K2.5"},
               {"model": "moonshotai/Kimi-K2.5", "tensorParallelSize": 4, "maxModelLen": 32768,
                "gpuMemoryUtilization": "0.9", "trustRemoteCode": True, "servedModelName": "kimi"}]
    drafters = {
        "vllm": [{"method": "none"}, {"method": "eagle3", "model": "/models/d-eagle3", "numSpeculativeTokens": 5},
                 {"method": "eagle", "model": "/models/d", "numSpeculativeTokens": 3},
                 {"method": "mtp", "numSpeculativeTokens": 1}, {"method": "mtp"},
                 {"method": "ngram", "numSpeculativeTokens": 4},
                 {"method": "draftModel", "model": "/models/small", "numSpeculativeTokens": 4},
                 # issue 27's families, as we render them (block drafters, variable drafters, family settings)
                 {"method": "dflash", "model": "/models/d-dflash", "numSpeculativeTokens": 7},
                 {"method": "dspark", "numSpeculativeTokens": 6},
                 {"method": "dspark", "model": "/models/d-dspark", "numSpeculativeTokens": 6,
                  "dspark": {"adaptiveVerification": False}},
                 # suffix without k: vLLM's __post_init__ defaults k to the tree depth (Vllm.merged runs it for suffix)
                 {"method": "suffix"}, {"method": "suffix", "suffix": {"maxTreeDepth": 16}},
                 {"method": "suffix", "numSpeculativeTokens": 8,
                                        "suffix": {"maxTreeDepth": 24, "maxCachedRequests": 1000,
                                                   "maxSpecFactor": "1.5", "minTokenProb": "0.1"}},
                 {"method": "ngramGpu", "numSpeculativeTokens": 3, "ngram": {"promptLookupMin": 2, "promptLookupMax": 5}}],
        "sglang": [{"method": "none"}, {"method": "eagle3", "model": "/models/d-eagle3"},
                   {"method": "eagle3", "model": "/models/d-eagle3", "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4},
                   {"method": "eagle", "model": "/models/d", "numSteps": 5, "eagleTopk": 4, "numDraftTokens": 8},
                   {"method": "mtp"}, {"method": "ngram"}, {"method": "ngram", "numDraftTokens": 24},
                   {"method": "draftModel", "model": "/models/small", "numSteps": 3},
                   {"method": "dflash", "model": "/models/d-dflash", "numSpeculativeTokens": 7},
                   {"method": "dspark", "numSpeculativeTokens": 6},
                   {"method": "dspark", "model": "/models/d-dspark", "numSpeculativeTokens": 6}],
    }
    extras = {"vllm": [[], ["--max-num-seqs", "16", "--enforce-eager"]],
              "sglang": [[], ["--max-running-requests", "16", "--disable-cuda-graph"]]}
    for engine, module in ENGINES.items():
        for target in targets:
            for drafter in drafters[engine]:
                for extra in extras[engine]:
                    spec = DrafterServingSpec.model_validate(
                        {"engine": engine, "target": {**target, **({"extraArgs": extra} if extra else {})},
                         "drafter": drafter, "resources": {"gpusPerReplica": 8}})
                    argvs.append(module.render_command(spec))
    return argvs


SC = "--speculative-config"
HOSTILE_VLLM = [
    ["--tensor-parallel", "4"], ["--tensor_parallel_size=2"], ["-tp", "4"], ["-tp=4"], ["--max-model-len", "32k"],
    ["--max-model-len", "32K"], ["--max-model-len", "auto"], ["--max-model-len", "-1"], ["--max-model-len", "1.5K"],
    ["--max_model_len=4096"], ["--max-model", "4096"], ["--po", "9000"], ["--port", "eighty"], ["--port", "9000"],
    ["--host", "127.0.0.1"], ["--gpu-memory-util", "0.8"], ["--device-memory-utilization", "0.7"],
    ["--no-trust-remote-code"], ["--trust-remote"], ["--trust-remote-code=yes"],
    ["--enable-auto-tool-choice"], ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    ["--disable-auto-tool-choice"], ["--served-model-name", "a", "b"], ["--served-model-name"],
    ["--served_model_name", "kimi"], ["--max-num-seqs", "x"], ["--max-num-seqs", "8"], ["--max_num_seqs=8"],
    ["--enforce-eager"], ["--no-enforce-eager"], ["--enforce-eager", "3"], ["--dtype", "bf16"], ["--dtype", "bfloat16"],
    ["--kv-cache-dtype", "fp8"], ["--kv-cache-dtype", "fp9"], ["--no-such-flag"], ["--max-running-requests", "8"],
    ["--config", "/nonexistent.yaml"], ["-O3"], ["-O", "2"], ["--uds", "/tmp/s"], ["--disable-log-stats"],
    ["--enable-log-outputs"], ["--sse-keep-alive-interval", "-1"], ["--grpc-port", "5000"],
    ["--reasoning-effort-map", '{"low": 1}'], ["--reasoning-parser", "none"], ["--reasoning-parser", "kimi_k2"],
    [SC, '{"method":"eagle3","model":"d","num_speculative_tokens":5}'],
    [SC, '{"method":"eagle3","model":"d","num_speculative_tokens":0}'],
    [SC, '{"method":"eagle3","model":"d","num_speculative_tokens":-1}'],
    [SC, '{"method":"eagle3","model":"d","num_speculative_tokens":"3"}'],
    [SC, '{"method":"eagle3","model":"d","num_speculative_tokens":3.0}'],
    [SC, '{"method":"eagle3","model":"d"}'], [SC, '{"method":"deepseek_mtp"}'],
    [SC, '{"method":"deepseek_mtp","num_speculative_tokens":2}'], [SC, '{"method":"kimi_k3_mtp","num_speculative_tokens":1}'],
    [SC, '{"method":"medusa","model":"d","num_speculative_tokens":2}'], [SC, '{"method":"bogus","num_speculative_tokens":2}'],
    [SC, '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'],
    [SC, '{"method":"ngram","num_speculative_tokens":3,"not_a_field":1}'],
    [SC, '{"method":"eagle3","model":"d","num_speculative_tokens":2,"tensor_parallel_size":8}'],
    [SC, '{"method":"eagle3","model":"d","num_speculative_tokens":2,"draft_tensor_parallel_size":1}'],
    [SC, '{"model":"x/Some-EAGLE3-drafter","num_speculative_tokens":2}'], [SC, '{"num-speculative-tokens":2,"method":"ngram"}'],
    [SC, "[1, 2]"], [SC, "{not json"], [SC, "None"], ["-sc", '{"method":"ngram","num_speculative_tokens":2}'],
    ["-sc.method", "ngram", "-sc.num_speculative_tokens", "3"], ["-sc.method=ngram", "-sc.num_speculative_tokens=3"],
    ["--speculative-config.method", "eagle3", "--speculative-config.model", "d", "--speculative-config.num_speculative_tokens", "4"],
    ["--speculative_config.method", "ngram", "--speculative_config.num_speculative_tokens", "2"],
    ["--speculative-conf.method", "ngram", "--speculative-conf.num_speculative_tokens", "2"],
    ["-sc.method", "ngram"], ["--spec-method", "ngram", "--spec-tokens", "3"],
    ["--spec-method", "eagle3", "--spec-model", "d", "--spec-tokens", "5"], ["--spec-tokens", "three"],
    ["--spec-model", "d", SC, '{"model":"e","num_speculative_tokens":2}'],
    ["--spec-tokens", "2", "-sc.method", "ngram"], ["--spec-meth", "ngram", "--spec-tok", "2"],
    ["--tensor-parallel-size", "2", "--tensor-parallel-size", "4"], ["--help"], ["-h"],
    # One line or more per drafter family vLLM 0.33.0 accepts (issue 27).
    # (suffix without k: k is the tree depth, set in __post_init__, which the merged check runs for suffix)
    [SC, '{"method":"suffix"}'], [SC, '{"method":"suffix","suffix_decoding_max_tree_depth":12}'],
    [SC, '{"method":"suffix","num_speculative_tokens":8}'],
    [SC, '{"method":"suffix","num_speculative_tokens":8,"suffix_decoding_max_tree_depth":16,'
         '"suffix_decoding_max_spec_factor":2.0,"suffix_decoding_min_token_prob":0.2,'
         '"suffix_decoding_max_cached_requests":0}'],
    [SC, '{"method":"suffix","suffix_decoding_bogus":1}'],
    [SC, '{"method":"dflash","model":"/models/d-dflash","num_speculative_tokens":15}'],
    [SC, '{"model":"z-lab/Kimi-K2.5-DFlash-b16","num_speculative_tokens":15}'],
    [SC, '{"method":"dspark","num_speculative_tokens":7}'],
    [SC, '{"method":"dspark","num_speculative_tokens":5,"enable_adaptive_verification":true}'],
    [SC, '{"method":"dspark","model":"/models/d-dspark","num_speculative_tokens":7,"dspark_draft_topk":2}'],
    [SC, '{"method":"ngram_gpu","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":5}'],
    [SC, '{"method":"draft_model","model":"/models/small","num_speculative_tokens":3}'],
    [SC, '{"method":"mtp","num_speculative_tokens":2}'], [SC, '{"method":"qwen3_5_mtp","num_speculative_tokens":1}'],
    [SC, '{"method":"dflash","num_speculative_tokens":0,"model":"d"}'],
    ["--spec-method", "suffix", "--spec-tokens", "6"], ["--spec-method", "dspark", "--spec-tokens", "7"],
]
HOSTILE_SGLANG = [
    ["--tp", "4"], ["--tp-size", "2"], ["--tensor-parallel-size", "2"], ["--tp_size", "2"], ["--tp-size=2"],
    ["--context-length", "32Ki"], ["--context-length", "32k"], ["--context-length", "1.5Ki"], ["--context-len", "4096"],
    ["--mem-fraction-static", "0.8"], ["--mem-frac", "0.8"], ["--trust-remote-code"], ["--no-trust-remote-code"],
    ["--enable-metrics"], ["--enable-met"], ["--served-model-name", "kimi"], ["--served-model-name", "a", "b"],
    ["--port", "31000"], ["--port", "x"], ["--host", "127.0.0.1"], ["--cuda-graph-max-bs", "8"],
    ["--cuda-graph-max-bs-decode", "8"], ["--max-running-requests", "16"], ["--max-num-seqs", "16"],
    ["--disable-cuda-graph"], ["--disable-radix-cache"], ["--attention-backend", "fa3"], ["--attention-backend", "nope"],
    ["--tool-call-parser", "kimi_k2"], ["--tool-call-parser", "llama3_json"], ["--tool-call-parser", "llama3"],
    ["--reasoning-parser", "deepseek-r1"], ["--reasoning-parser", "deepseek_r1"], ["--no-such-flag"],
    ["--config", "/nonexistent.yaml"], ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"],
    ["--speculative-algorithm", "eagle3", "--speculative-draft-model-path", "d"],
    ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model", "d", "--speculative-num-steps", "3",
     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
    ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "d", "--speculative-num-steps", "5",
     "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
    ["--speculative-algorithm", "NEXTN"], ["--speculative-algorithm", "nextn", "--speculative-num-steps", "2"],
    ["--speculative-algorithm", "MTP"], ["--speculative-algorithm", "NGRAM"],
    ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "24"],
    ["--speculative-algorithm", "NGRAM", "--speculative-ngram-max-bfs-breadth", "4", "--speculative-num-draft-tokens", "16"],
    ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "d", "--speculative-num-steps", "3"],
    ["--speculative-algorithm", "DFLASH"], ["--speculative-alg", "EAGLE3", "--speculative-draft", "d"],
    ["--speculative-num-steps", "3"], ["--speculative-num-steps", "three"], ["--speculative-eagle-topk"],
    ["--speculative-attention-mode", "decode"], ["--speculative-attention-mode", "sideways"],
    ["--dp-size", "2"], ["--dp", "2"], ["--pp-size", "2"], ["--nnodes", "2"], ["--help"],
    # One line or more per drafter family SGLang 0.5.23 accepts (issue 27); its parse refuses none of
    # them, whatever its resolution hooks later say (the emulator reports those at load).
    ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d"],
    ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d", "--speculative-dflash-block-size", "8"],
    ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d", "--speculative-dflash-block-size", "8",
     "--speculative-num-draft-tokens", "6"],
    ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d", "--speculative-num-draft-tokens", "10"],
    ["--speculative-algorithm", "dflash", "--speculative-dflash-block-size", "x"],
    ["--speculative-algorithm", "DSPARK"], ["--speculative-algorithm", "dspark", "--speculative-dspark-block-size", "5"],
    ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", "d", "--speculative-dspark-block-size", "7",
     "--speculative-num-draft-tokens", "8"],
    ["--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", "6"],
    ["--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5", "--speculative-num-draft-tokens", "5"],
    ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "d"],
    ["--speculative-algorithm", "FROZEN_KV_MTP", "--speculative-num-steps", "2"],
    ["--speculative-algorithm", "FROZEN_KV_MTP"],
]


def config_files(directory: Path) -> dict[str, str]:
    """Config files for --config cases: the engines read them before parsing."""
    files = {"vllm": "tensor-parallel-size: 4\nmax-num-seqs: 8\nenforce-eager: true\n",
             "sglang": "tp-size: 4\nmax-running-requests: 8\ndisable-cuda-graph: true\n",
             "bad": "- not\n- a mapping\n"}
    paths = {}
    for name, text in files.items():
        path = directory / f"{name}.yaml"
        path.write_text(text)
        paths[name] = str(path)
    (directory / "config.json").write_text("{}")
    paths["json"] = str(directory / "config.json")
    return paths


def corpus(directory: Path) -> list[list[str]]:
    files = config_files(directory)
    lines = _rendered()
    for engine in ("vllm", "sglang"):
        lines += [[*PREFIX[engine], "--config", files[engine]], [*PREFIX[engine], "--config", files["json"]],
                  [*PREFIX[engine], "--config", files["bad"]], [*PREFIX[engine], "--config", files[engine], "--port", "9100"]]
    lines += [[*PREFIX["vllm"], *args] for args in HOSTILE_VLLM]
    lines += [["vllm", "serve", *args] for args in (["--model", "/m"], ["--model=/m", "-tp", "2"], [])]
    lines += [[*PREFIX["sglang"], *args] for args in HOSTILE_SGLANG]
    lines += [["python3", "-m", "sglang.launch_server", "--tp-size", "8"],
              ["python3", "-m", "sglang.launch_server", "--model", "/m"]]
    return lines


def real_verdict(engine: str, result: dict) -> tuple[bool, dict]:
    """(accepted, what it means) from the real parser's answer."""
    if result["status"] != "ok":
        return False, {}
    args = result["args"]
    if engine == "vllm":
        merged = result.get("merged")
        if merged is not None and "ok" not in merged:
            return False, {}
        spec = merged["ok"] if merged else None
        method = spec["method"] if spec else None
        meaning = {"model": args.get("model_tag") or args.get("model"), "port": args["port"],
                   "tp": args["tensor_parallel_size"],
                   "method": ("mtp" if method and method.endswith("_mtp") else method) if spec else "none",
                   # __post_init__ (run for suffix) names a model-less drafter after its method (speculative.py 1277-1281)
                   "drafter": spec["model"] if spec and spec["model"] != spec["method"] else None,
                   "k": spec["num_speculative_tokens"] if spec else 0}
        return True, meaning
    if "ok" not in result["algorithm"]:
        return False, {}
    algorithm = result["algorithm"]["ok"]
    meaning = {"model": args["model_path"], "port": args["port"], "tp": args["tp_size"],
               "method": algorithm if algorithm != "NONE" else "none",
               "drafter": args["speculative_draft_model_path"] if algorithm != "NONE" else None}
    # steps are resolved only by resolve_once (needs the model config): compare them where given.
    if algorithm not in ("NONE", "NGRAM", "DFLASH", "DSPARK") and args["speculative_num_steps"] is not None:
        meaning["k"] = args["speculative_num_steps"]
    # The block drafters' k is their block, whatever the steps (forced to 1 at resolution): DFLASH's
    # verify window is the block (k = block - 1), DSPARK's gamma is k.
    if algorithm == "DFLASH" and args["speculative_dflash_block_size"] is not None:
        meaning["k"] = args["speculative_dflash_block_size"] - 1
    if algorithm == "DSPARK" and args["speculative_dspark_block_size"] is not None:
        meaning["k"] = args["speculative_dspark_block_size"]
    if algorithm == "NGRAM":
        meaning["topk"] = args["speculative_ngram_max_bfs_breadth"]
    return True, meaning


def emulator_verdict(engine: str, argv: list[str]) -> tuple[bool, dict]:
    try:
        config = parse_engine_command_line(argv)
    except (EngineRefused, CommandLineError):
        return False, {}
    spec = config.speculation
    method = spec.method if spec else "none"
    if engine == "sglang" and spec:
        method = flags.table("sglang").extras["speculative_algorithms"]["aliases"].get(method, method)
    meaning = {"model": config.model, "port": config.port, "tp": config.tensor_parallel_size, "method": method,
               "drafter": spec.draft_model if spec else None, "k": config.k}
    if engine == "sglang" and spec and spec.method == "NGRAM":
        meaning["topk"] = spec.eagle_topk
    return True, meaning


def test_the_emulator_parses_the_corpus_as_the_real_engines_do(parsers, tmp_path):
    lines = corpus(tmp_path)
    assert len(lines) >= 150, len(lines)
    disagreements = []
    tally = {"accepted": 0, "refused": 0}
    for engine in ("vllm", "sglang"):
        mine = [argv for argv in lines if argv[0] == PREFIX[engine][0]]
        results = parsers[engine].check([{"id": str(i), "argv": argv} for i, argv in enumerate(mine)])
        for argv, result in zip(mine, results):
            real_ok, real_meaning = real_verdict(engine, result)
            emu_ok, emu_meaning = emulator_verdict(engine, argv)
            tally["accepted" if real_ok else "refused"] += 1
            if real_ok != emu_ok:
                disagreements.append((argv[ENTRY[engine]:], f"real {'accepts' if real_ok else 'refuses'}",
                                      result.get("error") or result.get("stderr", "")[-200:] or result.get("merged")))
                continue
            if real_ok:
                if real_meaning.get("method") is None:  # vLLM infers it from the drafter's config later
                    real_meaning.pop("method")
                differs = {k: (v, emu_meaning.get(k)) for k, v in real_meaning.items() if emu_meaning.get(k) != v}
                if differs:
                    disagreements.append((argv[ENTRY[engine]:], "meaning", differs))
    print(f"\ncorpus: {len(lines)} command lines, real engines accept {tally['accepted']} and refuse {tally['refused']}; "
          f"{len(disagreements)} disagreements")
    assert not disagreements, "\n".join(map(str, disagreements))


# --------------------------------------------------------------------------------------------------
# 2b. Secret-carrying destinations: the real parsers have them, and the env variables named instead exist


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_destination_named_secret_is_a_value_flag_of_the_real_parser(parsers, engine):
    module = ENGINES[engine]
    table = flags.table(engine)
    cases = [[table.by_dest(dest).canonical, "s3cret"] for dest in module.SECRET_DESTINATIONS]
    results = parsers[engine].check([{"id": str(i), "argv": [*PREFIX[engine], *args]} for i, args in enumerate(cases)])
    for dest, args, result in zip(module.SECRET_DESTINATIONS, cases, results):
        assert result["status"] == "ok" and dest in result["changed"], (args, result)
        assert module.extra_args_problems(args), f"{args} passed the operator's check"


def test_the_env_variables_named_instead_of_secret_flags_are_read_by_the_real_packages(engine_python):
    from drafter_operator.engines import vllm
    named = {s.env for s in vllm.SECRET_DESTINATIONS.values() if s.env}
    assert named == {"HF_TOKEN", "VLLM_API_KEY"}
    # VLLM_API_KEY is one of vLLM's own variables; HF_TOKEN is read by huggingface_hub, which vLLM loads through.
    script = ("import os, vllm.envs as e, huggingface_hub.utils._auth as a; os.environ['HF_TOKEN'] = 'hf_probe'; "
              "print('VLLM_API_KEY' in e.environment_variables, a.get_token())")
    proc = subprocess.run([engine_python, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "hf_probe"], proc.stdout


SUFFIX_CASES = [{"method": "suffix"}, {"method": "suffix", "suffix_decoding_max_tree_depth": 8},
                {"method": "suffix", "num_speculative_tokens": 5, "suffix_decoding_max_tree_depth": 8},
                {"method": "suffix", "suffix_decoding_min_token_prob": 1.5},
                {"method": "suffix", "suffix_decoding_max_spec_factor": -1.0},
                {"method": "suffix", "suffix_decoding_max_tree_depth": 0},
                {"method": "suffix", "suffix_decoding_max_cached_requests": -1},
                {"method": "suffix", "suffix_decoding_max_cached_requests": 0, "suffix_decoding_min_token_prob": 1.0}]
SUFFIX_SCRIPT = """
import json, sys
import vllm.config.speculative as sp
# arctic-inference is not in the contract environment; __post_init__ only checks that it imports
# (vllm/config/speculative.py:1727-1731) before it defaults k and checks the ranges.
sp.has_arctic_inference = lambda: True
out = []
for case in json.loads(sys.argv[1]):
    try:
        out.append({"k": sp.SpeculativeConfig(**case).num_speculative_tokens})
    except Exception as exc:
        out.append({"error": str(exc)[:300]})
print(json.dumps(out))
"""


def test_suffix_defaults_and_ranges_are_vllms(engine_python):
    """Suffix decoding's k default (its tree depth) and its settings' ranges live in __post_init__: the
    real SpeculativeConfig, run in full, against the emulator's parse and load checks."""
    from drafter_testbed.emulator.families import startup_problems

    proc = subprocess.run([engine_python, "-c", SUFFIX_SCRIPT, json.dumps(SUFFIX_CASES)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sum("error" in r for r in real) == 4 and {r.get("k") for r in real} >= {24, 8, 5}
    for case, result in zip(SUFFIX_CASES, real):
        try:
            config = parse_engine_command_line([*PREFIX["vllm"], "--speculative-config", json.dumps(case)])
        except EngineRefused:  # refused before loading (a tree depth of 0 gives k = 0)
            assert "error" in result, (case, result)
            continue
        problems = startup_problems(config)
        if "error" in result:
            assert problems, (case, result)
        else:
            assert (problems, config.k) == ([], result["k"]), case



SCHEDULE_SCRIPT = """
import ast, inspect, json, textwrap
from vllm.config.vllm import VllmConfig

def method_tuples(function):
    # Every tuple of strings compared with `speculative_config.method in (...)` in the function's source.
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In) and ast.unparse(node.left).endswith(".method"):
            value = node.comparators[0]
            if isinstance(value, ast.Tuple) and all(isinstance(e, ast.Constant) for e in value.elts):
                found.append(sorted(e.value for e in value.elts))
    return found

print(json.dumps({"v1": method_tuples(VllmConfig._maybe_disable_dynamic_sd_for_v1),
                  "v2_unsupported": method_tuples(VllmConfig._get_v2_model_runner_unsupported_features)}))
"""


def test_the_schedule_drop_follows_vllms_own_method_lists(engine_python):
    """The methods whose per-batch-size k survives Model Runner V1, and those V2 sends back to V1, are read
    from vLLM's own code (vllm/config/vllm.py): the emulator drops the schedule for exactly the others."""
    from drafter_testbed.emulator import families

    proc = subprocess.run([engine_python, "-c", SCHEDULE_SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    assert real["v1"] == [sorted(families.VLLM_V1_SCHEDULE_METHODS)]
    assert sorted(families.VLLM_V1_ONLY_METHODS) in real["v2_unsupported"]


DEFAULTS_SCRIPT = """
import ast, importlib.util, json, os
from vllm.config import SpeculativeConfig

# SGLang's hooks import its model stack (torchvision...): read their source instead of importing them.
root = importlib.util.find_spec("sglang").submodule_search_locations[0]
def source(path):
    with open(os.path.join(root, "srt", path), encoding="utf-8") as fh:
        return fh.read()
gamma = next(node.value.value for node in ast.parse(source("speculative/dspark_components/dspark_config.py")).body
             if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DEFAULT_DSPARK_GAMMA")
hook = source("arg_groups/speculative_hook.py")
start = hook.index("def _handle_dflash(")
print(json.dumps({"suffix_depth": SpeculativeConfig.__dataclass_fields__["suffix_decoding_max_tree_depth"].default,
                  "dspark_gamma": gamma, "dflash_source": hook[start:hook.index(chr(10) + "def ", start + 1)]}))
"""


def test_the_family_defaults_are_the_engines(engine_python):
    """vLLM's suffix tree depth (k when unset), SGLang's DSpark gamma and DFlash block when nothing sets
    them: read from the installed engines."""
    from drafter_testbed.emulator import families

    proc = subprocess.run([engine_python, "-c", DEFAULTS_SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    assert real["suffix_depth"] == families.VLLM_SUFFIX_MAX_TREE_DEPTH
    assert real["dspark_gamma"] == families.SGLANG_DSPARK_DEFAULT_GAMMA
    assert f"inferred_block_size = {families.SGLANG_DFLASH_DEFAULT_BLOCK}\n" in real["dflash_source"]
