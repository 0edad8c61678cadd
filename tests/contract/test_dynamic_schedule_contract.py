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

HERE = Path(__file__).resolve().parent
MAX_NUM_SEQS = 256  # the scheduler expands the schedule up to --max-num-seqs

# Run in the engine environment: parse, build SpeculativeConfig from the parsed JSON (field types checked),
# read the schedule back, validate it and expand it the way vLLM's scheduler does.
SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from engine_parsers import Vllm
from vllm.config import SpeculativeConfig
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup, validate_and_normalize_dynamic_sd_schedule
argv, max_num_seqs = json.loads(sys.argv[2]), int(sys.argv[3])
helper = Vllm()
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
print(json.dumps({"schedule": [list(e) for e in schedule], "normalized": [list(e) for e in normalized],
                  "uses_dynamic": config.uses_dynamic_speculative_decoding(), "lookup": lookup}))
"""

SWEEPS = {
    "crossover at 32": [{"concurrency": 1, "speedup": 1.67}, {"concurrency": 8, "speedup": 1.27},
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


@pytest.mark.parametrize("sweep", list(SWEEPS), ids=list(SWEEPS))
@pytest.mark.parametrize("method,model", [("eagle3", "/models/drafters/kimi-eagle3"), ("ngram", None)])
def test_rendered_schedule_is_accepted_and_survives(parsers, engine_python, sweep, method, model):
    spec = serving(method, model)
    schedule = dynamic.schedule_from_levels(SWEEPS[sweep], 4)
    argv = vllm.render_command(spec, schedule=schedule)
    rendered = json.loads(argv[argv.index("--speculative-config") + 1])

    # the shared helper: parser, SpeculativeConfig fields, and the real SpeculativeConfig (__post_init__)
    (result,) = parsers["vllm"].check([{"id": "dynamic", "argv": argv, "full": True}])
    assert result["status"] == "ok", result
    assert result["speculative"]["json"] == rendered
    assert "ok" in result["speculative"]["fields"], result["speculative"]["fields"]
    assert "ok" in result["speculative"]["full"], result["speculative"]["full"]
    assert result["speculative"]["full"]["ok"]["num_speculative_tokens"] == 4

    # the schedule read back from SpeculativeConfig, validated and expanded by vLLM's own functions
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([engine_python, "-c", SCRIPT, str(HERE), json.dumps(argv), str(MAX_NUM_SEQS)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["uses_dynamic"] is True
    assert [tuple(e) for e in out["schedule"]] == schedule == [tuple(e) for e in out["normalized"]]
    lookup = out["lookup"]
    assert len(lookup) == MAX_NUM_SEQS + 1
    for batch in range(1, MAX_NUM_SEQS + 1):
        assert lookup[batch] == dynamic.k_for_batch(schedule, batch, 4), batch
    at = dynamic.crossover(SWEEPS[sweep])
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
