"""Contract tier: our rendered command lines against the real engines' own argument parsers.

vLLM 0.33.0 (`make_arg_parser(FlexibleArgumentParser())` + `validate_parsed_serve_args`, then its
SpeculativeConfig) and SGLang 0.5.23 (`prepare_server_args`, then SpeculativeAlgorithm.from_string),
on CPU, in the environment `.ci/engine-contract-env` builds. Point DRAFTER_ENGINE_PYTHON at that
environment's python; without it every test here is skipped:

    export DRAFTER_ENGINE_PYTHON="$(.ci/engine-contract-env)"
    python -m pytest tests/contract -q

One long-lived helper process per engine (engine_parsers.py) parses every command line; the tests
send it JSON and compare what the engine understood with what the spec says. The expectations below
are written from the engines' documented flags (docs/engines-contract.md), not from the renderers' own tables, so a wrong mapping fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from drafter_operator.api import DrafterServing, DrafterServingSpec
from drafter_operator.api.serving.problems import serving_problems
from tests.api_strategies import serving_specs
from drafter_operator.engines import sglang as sglang_engine
from drafter_operator.engines import group
from drafter_operator.engines import vllm as vllm_engine
from tests.support.kubernetes_env import expand
from tests.contract.family_checks import VLLM_MODEL_LESS, VLLM_TUNED, check_vllm_family, vllm_default_k
from tests.support.contract_parsers import METHODS, PORT, check_sglang, parse

# The modules using the session-scoped `parsers` (a vLLM and an SGLang parser process, about 100 s to start under
# CI load) share one worker, so one worker starts them rather than both (tests/contract/conftest.py).
pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("engine-parsers")]

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "engine_parsers.py"
EXAMPLES = HERE.parents[1] / "examples"
EXIT_TIMEOUT = 180.0  # one process that imports an engine from a possibly cold disk

#: The leader's command line as its container receives it: a replica that spans nodes names its node rank and
#: leader as $(LWS_*) references, which the kubelet expands (tests/contract/test_group_command_contract.py holds
#: the workers too).
LEADER_ENV = {group.LEADER_ADDRESS_ENV: "drafter-kimi-0.drafter-kimi.inference", group.GROUP_SIZE_ENV: "2",
              group.WORKER_INDEX_ENV: "0"}
RENDER = {name: (lambda serving, module=module: expand(module.render_command(serving), LEADER_ENV))
          for name, module in (("vllm", vllm_engine), ("sglang", sglang_engine))}

# The drafter families whose k vLLM may choose itself (the API lets the spec leave it unset).
VLLM_K_FROM_ENGINE = ("mtp", "dspark", "suffix")
# vLLM 0.33.0 needs num_speculative_tokens for MTP as well (see docs/engines-contract.md); a spec
# without numSpeculativeTokens gets one draft token per step, the one MTP layer of DeepSeek-V3/Kimi.
VLLM_MTP_DEFAULT_K = 1

# Flags a user may put in extraArgs that each engine really has (the renderer appends them verbatim).
EXTRA_ARGS = {
    "vllm": (("--max-num-seqs", "16"), ("--enforce-eager",), ("--seed", "7"), ("--kv-cache-dtype", "fp8")),
    "sglang": (("--max-running-requests", "16"), ("--disable-cuda-graph",), ("--random-seed", "7"),
               ("--chunked-prefill-size", "4096")),
}
# Parser names both engines register (SGLang checks them as argparse choices, vLLM at server start).
PARSERS = {"tool": ("kimi_k2", "hermes"), "reasoning": ("kimi_k2", "qwen3")}


# --------------------------------------------------------------------------------------------------
# The helper processes


# --------------------------------------------------------------------------------------------------
# What the engine must have understood


def check_vllm(spec: DrafterServingSpec, result: dict, *, full: bool = True) -> None:
    assert result["status"] == "ok", f"vLLM refused the command line: {result}"
    args, target, drafter = result["args"], spec.target, spec.drafter
    assert args["model_tag"] == target.model
    assert (args["host"], args["port"]) == ("0.0.0.0", PORT["vllm"])
    assert args["tensor_parallel_size"] == target.tensor_parallel_size
    layout = group.Parallelism.of(spec)
    assert (args["pipeline_parallel_size"], args["data_parallel_size"], args["nnodes"], args["node_rank"]) == (
        layout.pipeline, layout.data, layout.nodes, 0)
    assert bool(args["enable_expert_parallel"]) is layout.expert and not args["headless"]
    assert args["served_model_name"] == ([target.served_model_name] if target.served_model_name else None)
    assert args["max_model_len"] == target.max_model_len
    if target.gpu_memory_utilization is not None:
        assert args["gpu_memory_utilization"] == float(target.gpu_memory_utilization)
    assert args["trust_remote_code"] is target.trust_remote_code
    assert args["tool_call_parser"] == target.tool_call_parser
    assert args["enable_auto_tool_choice"] is (target.tool_call_parser is not None)
    assert (args["reasoning_parser"] or None) == target.reasoning_parser
    for kind, name in (("tool_call_parser", target.tool_call_parser), ("reasoning_parser", target.reasoning_parser)):
        if name is not None:
            assert result["parsers"][kind] is True, f"vLLM has no {kind} named {name!r}"

    method, _, _ = METHODS[drafter.method]
    if method is None:
        assert args["speculative_config"] is None and "speculative" not in result
        return
    expected_k = drafter.num_speculative_tokens
    if expected_k is None and drafter.method == "mtp":
        expected_k = VLLM_MTP_DEFAULT_K
    spec_result = result["speculative"]
    assert spec_result["json"].get("method") == method
    fields = spec_result["fields"]
    if expected_k is not None or drafter.method not in VLLM_K_FROM_ENGINE:
        # Without k, SpeculativeConfig's field validator refuses until __post_init__ has filled it (dspark, suffix).
        assert "ok" in fields, f"vLLM's SpeculativeConfig rejects {spec_result['json']}: {fields.get('error')}"
        got = fields["ok"]
        assert {key: got[key] for key in ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size")} == {
            "method": method, "model": drafter.model, "num_speculative_tokens": expected_k,
            "draft_tensor_parallel_size": None}
    if not full:
        return
    real = spec_result["full"]
    assert "ok" in real, f"vLLM's SpeculativeConfig.__post_init__ rejects {spec_result['json']}: {real.get('error')}"
    real = real["ok"]
    draft_model = drafter.model or target.model  # mtp, dspark: the target's own weights
    if drafter.method in VLLM_MODEL_LESS:  # vLLM names the proposer only when k is given (speculative.py 1252)
        draft_model = VLLM_MODEL_LESS[drafter.method] if expected_k is not None else None
    assert real["method"] == method
    assert real["model"] == draft_model
    assert real["num_speculative_tokens"] == (expected_k or vllm_default_k(drafter))
    if drafter.method not in VLLM_MODEL_LESS:
        assert real["draft_tensor_parallel_size"] == target.tensor_parallel_size
    check_vllm_family(drafter, real)


CHECK = {"vllm": check_vllm, "sglang": check_sglang}


def check_extra_args(engine: str, extra: list[str], result: dict) -> None:
    """The verbatim extraArgs reached the engine as the flags they are."""
    args = result["args"]
    flags = {"--max-num-seqs": ("max_num_seqs", int), "--max-running-requests": ("max_running_requests", int),
             "--seed": ("seed", int), "--random-seed": ("random_seed", int),
             "--kv-cache-dtype": ("kv_cache_dtype", str), "--chunked-prefill-size": ("chunked_prefill_size", int)}
    switches = {"--enforce-eager": "enforce_eager", "--disable-cuda-graph": "disable_cuda_graph"}
    for index, item in enumerate(extra):
        if item in switches:
            assert args[switches[item]] is True
        elif item in flags:
            name, kind = flags[item]
            value = extra[index + 1]
            got = args[name]
            assert got == kind(value)


# --------------------------------------------------------------------------------------------------
# Cases


def examples() -> list[tuple[str, DrafterServingSpec]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "DrafterServing":
                found.append((path.name, DrafterServing.model_validate(document).spec))
    return found


def spec(engine: str, method: str, *, target: str, drafter: str) -> DrafterServingSpec:
    """One variation: a minimal or a fully specified target, a bare or a tuned drafter."""
    target_body: dict[str, Any] = {"model": "/models/Kimi-K2.5"}
    if target == "full":
        target_body = {"model": "moonshotai/Kimi-K2.5", "tensorParallelSize": 4, "maxModelLen": 131072,
                       "gpuMemoryUtilization": "0.9", "trustRemoteCode": True, "toolCallParser": "kimi_k2",
                       "reasoningParser": "kimi_k2", "extraArgs": [a for pair in EXTRA_ARGS[engine][:2] for a in pair]}
    body: dict[str, Any] = {"method": method}
    if method in ("eagle3", "eagle", "draftModel", "dflash"):
        body["model"] = {"eagle3": "/models/drafters/kimi-k25-eagle3", "eagle": "org/eagle-head",
                         "draftModel": "org/small-llm", "dflash": "/models/drafters/dflash"}[method]
    if method in ("mtp", "dspark") and drafter == "with-model":
        body["model"] = f"/models/drafters/kimi-k25-{method}"
    if engine == "vllm" and (method in ("eagle3", "eagle", "draftModel", "ngram", "ngramGpu", "dflash")
                             or drafter == "tuned" or (method == "dspark" and "model" not in body)):
        body["numSpeculativeTokens"] = 4 if drafter == "tuned" else 5
    if engine == "vllm" and drafter == "tuned":
        body.update(VLLM_TUNED.get(method, {}))
    if engine == "sglang" and drafter == "tuned":
        body.update({"numSteps": 5, "eagleTopk": 4, "numDraftTokens": 8} if method == "eagle" else
                    {"numSpeculativeTokens": 6} if method in ("dflash", "dspark") else
                    {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4})
    return DrafterServingSpec.model_validate({"engine": engine, "target": target_body, "drafter": body})


VARIATIONS = [
    (engine, method, target, drafter)
    for engine in ("vllm", "sglang")
    for method in METHODS
    if engine == "vllm" or METHODS[method][1] is not None or method == "none"
    for target in ("minimal", "full")
    for drafter in (("bare",) if method == "none" else
                    ("bare", "tuned") + (("with-model",) if method in ("mtp", "dspark") else ()))
]


# --------------------------------------------------------------------------------------------------
# Tests


EXAMPLE_SPECS = examples()


def test_examples_are_found():
    assert {name for name, _ in EXAMPLE_SPECS} >= {"serving-baseline.yaml", "serving-vllm-kimi-k25-eagle3.yaml",
                                                    "serving-sglang-kimi-k25-eagle3.yaml"}


@pytest.mark.parametrize("name,serving", EXAMPLE_SPECS, ids=[name for name, _ in EXAMPLE_SPECS])
def test_example_parses_as_meant(parsers, name, serving):
    result = parse(parsers, serving.engine, RENDER[serving.engine](serving))
    CHECK[serving.engine](serving, result)


@pytest.mark.parametrize("name,serving", EXAMPLE_SPECS, ids=[name for name, _ in EXAMPLE_SPECS])
def test_example_on_the_other_engine_parses_as_meant(parsers, name, serving):
    other = "sglang" if serving.engine == "vllm" else "vllm"
    drafter = serving.drafter.model_copy(update={"num_steps": None, "eagle_topk": None, "num_draft_tokens": None}
                                         if other == "vllm" else {"num_speculative_tokens": None})
    if other == "vllm" and drafter.method != "none" and drafter.method != "mtp":
        drafter = drafter.model_copy(update={"num_speculative_tokens": 3})
    moved = serving.model_copy(update={"engine": other, "drafter": drafter})
    CHECK[other](moved, parse(parsers, other, RENDER[other](moved)))


@pytest.mark.parametrize("engine,method,target,drafter", VARIATIONS,
                         ids=["-".join(v) for v in VARIATIONS])
def test_every_method_on_every_engine(parsers, engine, method, target, drafter):
    serving = spec(engine, method, target=target, drafter=drafter)
    argv = RENDER[engine](serving)
    result = parse(parsers, engine, argv)
    CHECK[engine](serving, result)
    check_extra_args(engine, serving.target.extra_args or [], result)


@st.composite
def engine_valid_specs(draw) -> DrafterServingSpec:
    """Valid specs from the API strategies, with the verbatim user input made engine-valid.

    extraArgs and parser names are passed through untouched by the renderers; the API strategies
    draw them from lists meant for the schema (e.g. `--enforce-eager 3`, `deepseek_r1`), which the
    real engines refuse, so they are replaced here by flags and names both engines have.
    """
    body = draw(serving_specs())
    engine, target = body["engine"], body["target"]
    target.pop("extraArgs", None)
    if draw(st.booleans()):
        pairs = draw(st.lists(st.sampled_from(EXTRA_ARGS[engine]), max_size=3, unique=True))
        if pairs:
            target["extraArgs"] = [a for pair in pairs for a in pair]
    if "toolCallParser" in target:
        target["toolCallParser"] = draw(st.sampled_from(PARSERS["tool"]))
    if "reasoningParser" in target:
        target["reasoningParser"] = draw(st.sampled_from(PARSERS["reasoning"]))
    if (engine == "sglang" and (target.get("dataParallelSize") or 1) > 1
            and body["drafter"]["method"] in sglang_engine.DATA_PARALLEL_LM_HEAD_METHODS):
        # What admission asks of these (serving_problems): SGLang's block drafters borrow a data-parallel LM head.
        target["extraArgs"] = [*target.get("extraArgs", []), "--enable-dp-lm-head"]
    spec = DrafterServingSpec.model_validate(body)
    # The renderers are only ever given what admission lets through.
    assume(not serving_problems(spec))
    return spec


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(serving=engine_valid_specs())
def test_generated_specs_parse_as_meant(parsers, serving):
    result = parse(parsers, serving.engine, RENDER[serving.engine](serving))
    CHECK[serving.engine](serving, result)
    check_extra_args(serving.engine, serving.target.extra_args or [], result)


# Negative cases: the parsers and config classes we rely on do refuse bad input, so the checks above
# can fail.


@pytest.mark.parametrize("engine,argv", [
    ("vllm", ["vllm", "serve", "/models/m", "--no-such-flag", "1"]),
    ("sglang", ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--no-such-flag", "1"]),
], ids=["vllm", "sglang"])
def test_unknown_flag_exits_with_status_2(engine_python, engine, argv):
    """In a process of its own, as the container would run it: the parser's exit status is 2."""
    skip = 2 if engine == "vllm" else 3
    proc = subprocess.run([engine_python, str(HARNESS), "exit", engine, *argv[skip:]], capture_output=True, text=True,
                          timeout=EXIT_TIMEOUT, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "unrecognized arguments: --no-such-flag 1" in proc.stderr


@pytest.mark.parametrize("argv,message", [
    (["--no-such-flag"], "unrecognized arguments"),
    (["--speculative-config", "{not json"], "--speculative-config"),
    (["--enforce-eager", "3"], "unrecognized arguments: 3"),
    (["--dtype", "7"], "invalid choice"),
], ids=["unknown-flag", "bad-json", "switch-with-value", "bad-choice"])
def test_vllm_parser_refuses(parsers, argv, message):
    result = parse(parsers, "vllm", ["vllm", "serve", "/models/m", *argv])
    assert result["status"] == "exit" and result["code"] == 2 and message in result["stderr"]


@pytest.mark.parametrize("config,message", [
    ({"method": "draftModel", "model": "/models/d", "num_speculative_tokens": 3}, "method"),  # the API's spelling
    ({"method": "eagle3", "model": "/models/d", "num_speculative_tokens": 0}, "greater than 0"),
    ({"method": "eagle3", "model": "/models/d", "num_speculative_tokens": 3, "tensor_parallel_size": 8},
     "draft_tensor_parallel_size"),
    ({"method": "eagle3", "model": "/models/d", "num_speculative_tokens": 3, "k": 3}, "Unexpected keyword argument"),
    ({"method": "mtp"}, "num_speculative_tokens must be provided"),
], ids=["api-method-name", "zero-tokens", "tensor-parallel-key", "unknown-key", "mtp-without-tokens"])
def test_vllm_speculative_config_refuses(parsers, config, message):
    result = parse(parsers, "vllm", ["vllm", "serve", "/models/m", "--speculative-config", json.dumps(config)])
    assert result["status"] == "ok"
    assert message in result["speculative"]["fields"].get("error", "")


def test_vllm_mtp_with_a_model_but_no_token_count_crashes_post_init(parsers):
    """Why the renderer always gives MTP a token count on vLLM 0.33.0 (docs/engines-contract.md)."""
    config = {"method": "mtp", "model": "/models/drafters/kimi-k25-mtp"}
    result = parse(parsers, "vllm", ["vllm", "serve", "/models/m", "--speculative-config", json.dumps(config)])
    assert "TypeError" in result["speculative"]["full"].get("error", "")


@pytest.mark.parametrize("argv,status,message", [
    (["--no-such-flag"], "exit", "unrecognized arguments"),
    (["--tool-call-parser", "llama3_json"], "exit", "invalid choice"),
    (["--reasoning-parser", "deepseek_r1"], "exit", "invalid choice"),
    (["--speculative-algorithm", "MTP"], "ok", "Unknown speculative algorithm"),
], ids=["unknown-flag", "tool-parser-name", "reasoning-parser-name", "unknown-algorithm"])
def test_sglang_parser_refuses(parsers, argv, status, message):
    result = parse(parsers, "sglang", ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", *argv])
    assert result["status"] == status
    if status == "exit":
        assert result["code"] == 2 and message in result["stderr"]
    else:
        assert message in result["algorithm"].get("error", "")


def test_a_wrong_mapping_would_be_caught(parsers):
    """The checks compare with the engines' documented flags, not with the renderer: a renderer sending the API's own
    method name would fail them."""
    serving = spec("vllm", "draftModel", target="minimal", drafter="bare")
    argv = RENDER["vllm"](serving)
    index = argv.index("--speculative-config") + 1
    argv[index] = argv[index].replace('"draft_model"', '"draftModel"')
    with pytest.raises(AssertionError):
        check_vllm(serving, parse(parsers, "vllm", argv))
