"""spec.drafter.dynamic against vLLM 0.33.0's own code: the rendered --speculative-config with a batch-size
schedule parses (`vllm serve`'s parser), builds the real SpeculativeConfig (__post_init__ included, against
the fake checkpoints of engine_parsers.py), and the schedule that survives passes vLLM's dynamic-SD validator
and expands, batch size by batch size, to the k our schedule means."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from drafter_operator.api import DrafterServingSpec
from drafter_operator.engines import dynamic, vllm

# One worker runs the module, so its module-scoped fixture (the costly part) is built once, not once per worker.
pytestmark = pytest.mark.xdist_group("engine-parsers")  # and it uses `parsers` (see test_engine_parsers.py)

HERE = Path(__file__).resolve().parent
MAX_NUM_SEQS = 256  # the scheduler expands the schedule up to --max-num-seqs

# Run in the engine environment, once for all cases (importing vLLM is most of the cost): parse, build
# SpeculativeConfig from the parsed JSON (field types checked), read the schedule back, validate it and
# expand it the way vLLM's scheduler does.
SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from engine_parsers import Vllm
from vllm.config import SpeculativeConfig
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup, validate_and_normalize_dynamic_sd_schedule
argvs, max_num_seqs = json.loads(sys.argv[2]), int(sys.argv[3])
helper = Vllm()
out = {}
for case, argv in argvs.items():
    ns = helper.parse(argv[2:])
    helper.validate(ns)
    original = SpeculativeConfig.__post_init__
    SpeculativeConfig.__post_init__ = lambda self: None
    try:
        config = SpeculativeConfig(**ns.speculative_config)
    finally:
        SpeculativeConfig.__post_init__ = original
    schedule = config.num_speculative_tokens_per_batch_size
    normalized = validate_and_normalize_dynamic_sd_schedule(schedule)
    lookup = build_dynamic_sd_schedule_lookup(schedule, vllm_max_batch_size=max_num_seqs,
                                              vllm_num_speculative_tokens=config.num_speculative_tokens)
    out[case] = {"schedule": [list(e) for e in schedule], "normalized": [list(e) for e in normalized],
                 "uses_dynamic": config.uses_dynamic_speculative_decoding(), "lookup": lookup}
print(json.dumps(out))
"""

SWEEPS = {
    "break-even between 8 and 32": [{"concurrency": 1, "speedup": 1.67}, {"concurrency": 8, "speedup": 1.27},
                        {"concurrency": 32, "speedup": 0.69}],
    "pays everywhere": [{"concurrency": 1, "speedup": 1.4}, {"concurrency": 64, "speedup": 1.05}],
    "never pays": [{"concurrency": 1, "speedup": 0.8}, {"concurrency": 4, "speedup": 0.6}],
}


def serving(method: str, model: str | None) -> DrafterServingSpec:
    drafter = {"method": method, "numSpeculativeTokens": 4, "dynamic": "fromBenchmark"}
    if model:
        drafter["model"] = model
    return DrafterServingSpec.model_validate({"engine": "vllm", "target": {"model": "/models/Kimi-K2.5"},
                                              "drafter": drafter})


# Every method the API lets carry a schedule on vLLM (not suffix: test_engine_parsers shows vLLM drops it there).
METHODS = [("eagle3", "/models/drafters/kimi-eagle3"), ("ngram", None), ("ngramGpu", None),
           ("dflash", "/models/drafters/kimi-dflash"), ("dspark", None)]


def rendered_argv(method: str, model: str | None, sweep: str) -> list[str]:
    return vllm.render_command(serving(method, model), schedule=dynamic.schedule_from_levels(SWEEPS[sweep], 4))


@pytest.fixture(scope="module")
def vllm_reads(parsers, engine_python) -> dict[str, dict]:
    """Every case's rendered command through the shared helper and through SCRIPT (one engine process for all)."""
    argvs = {f"{method}-{sweep}": rendered_argv(method, model, sweep) for method, model in METHODS for sweep in SWEEPS}
    checked = parsers["vllm"].check([{"id": case, "argv": argv, "full": True} for case, argv in argvs.items()])
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([engine_python, "-c", SCRIPT, str(HERE), json.dumps(argvs), str(MAX_NUM_SEQS)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    expanded = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(checked) == len(argvs) == len(expanded)
    return {case: {"checked": result, "expanded": expanded[case]} for case, result in zip(argvs, checked)}


@pytest.mark.parametrize("sweep", list(SWEEPS), ids=list(SWEEPS))
@pytest.mark.parametrize("method,model", METHODS)
def test_rendered_schedule_is_accepted_and_survives(vllm_reads, sweep, method, model):
    argv = rendered_argv(method, model, sweep)
    schedule = dynamic.schedule_from_levels(SWEEPS[sweep], 4)
    rendered = json.loads(argv[argv.index("--speculative-config") + 1])
    read = vllm_reads[f"{method}-{sweep}"]

    # the shared helper: parser, SpeculativeConfig fields, and the real SpeculativeConfig (__post_init__)
    result = read["checked"]
    assert result["status"] == "ok", result
    assert result["speculative"]["json"] == rendered
    assert "ok" in result["speculative"]["fields"], result["speculative"]["fields"]
    assert "ok" in result["speculative"]["full"], result["speculative"]["full"]
    assert result["speculative"]["full"]["ok"]["num_speculative_tokens"] == 4

    # the schedule read back from SpeculativeConfig, validated and expanded by vLLM's own functions
    out = read["expanded"]
    assert out["uses_dynamic"] is True
    assert [tuple(e) for e in out["schedule"]] == schedule == [tuple(e) for e in out["normalized"]]
    lookup = out["lookup"]
    assert len(lookup) == MAX_NUM_SEQS + 1
    for batch in range(1, MAX_NUM_SEQS + 1):
        assert lookup[batch] == dynamic.k_for_batch(schedule, batch, 4), batch
    at = dynamic.off_from(SWEEPS[sweep])  # the first batch size at or above the break-even
    assert lookup[1] == (0 if at == 1 else 4)
    if at is not None and at <= MAX_NUM_SEQS:
        assert lookup[at] == 0 and (at == 1 or lookup[at - 1] == 4)


# The emulator refuses what vLLM's scheduler refuses at start-up: engines/dynamic.validate_schedule against
# validate_and_normalize_dynamic_sd_schedule on good and bad schedules (verdict, message, normal form).
VALIDATOR_SCRIPT = r"""
import json, sys
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

out = []
for raw in json.loads(sys.argv[1]):
    try:
        out.append({"ok": [list(e) for e in validate_and_normalize_dynamic_sd_schedule(raw)]})
    except (TypeError, ValueError) as exc:
        out.append({"error": f"{type(exc).__name__}: {exc}"})
print(json.dumps(out))
"""

SCHEDULE_CORPUS = [
    [[1, 31, 4], [32, 65536, 0]], [[32, 64, 0], [1, 16, 3]], [[1, 16, 3], [32, 128, 2]], [[1, 1, 0]],
    [[2, 8, 3]], [[1, 8, 3], [8, 16, 0]], [[1, 0, 3]], [[0, 4, 3]], [[4, 2, 3]], [[1, 8, -1]], [], None,
    [[1, 8]], [[1, 8, 3, 4]], "1-8:3", [[1, "8", 3]], [[1, 8, "x"]], [[1, 8.0, 3]], {"1": 3},
]


def test_the_emulator_validates_schedules_like_vllm(engine_python):
    done = subprocess.run([engine_python, "-c", VALIDATOR_SCRIPT, json.dumps(SCHEDULE_CORPUS)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    for raw, verdict in zip(SCHEDULE_CORPUS, theirs, strict=True):
        try:
            ours = {"ok": [list(e) for e in dynamic.validate_schedule(raw)]}
        except (TypeError, ValueError) as exc:
            ours = {"error": f"{type(exc).__name__}: {exc}"}
        assert ours == verdict, raw
    assert sum("error" in v for v in theirs) >= 10 and sum("ok" in v for v in theirs) >= 4
