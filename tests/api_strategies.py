"""Hypothesis strategies for valid drafter.dev specs, and mutations that may make them invalid.

Test-only, hence under tests/ and not in the package: it imports hypothesis, which the operator does not
need at run time. Valid specs are built by construction (every rule satisfied), so they exercise the
whole API surface without filtering.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from drafter_operator.api.serving import SGLANG_BLOCK_METHODS
from drafter_operator.engines.vllm import METHODS_NEEDING_K
from drafter_operator.constants import (
    DRAFTER_METHODS,
    ENGINES,
    METHODS_IN_TARGET,
    METHODS_WITH_MODEL,
)
from drafter_operator.engines import METHODS_REFUSED_BY_ENGINE

_SEGMENT = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
_NAME = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
_SAFE_FLAGS = ("--max-num-seqs", "--enforce-eager", "--kv-cache-dtype", "--seed", "--dtype")


def durations(min_seconds: int, max_seconds: int) -> st.SearchStrategy[str]:
    """Duration strings within a range, in varied spellings ("90s", "1m30s", "2h")."""

    def spell(seconds: int, style: int) -> str:
        if style == 0 or seconds == 0:
            return f"{seconds}s"
        hours, rest = divmod(seconds, 3600)
        minutes, secs = divmod(rest, 60)
        out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
        return out

    return st.builds(spell, st.integers(min_seconds, min(max_seconds, 99999)), st.integers(0, 1))


def ratios(positive: bool = False) -> st.SearchStrategy[str]:
    low = 1 if positive else 0
    return st.integers(low, 10000).map(lambda n: "1" if n == 10000 else f"0.{n:04d}".rstrip("0").rstrip(".") or "0")


def decimals(low: float, high: float) -> st.SearchStrategy[str]:
    return st.integers(int(low * 100), int(high * 100)).map(lambda n: f"{n // 100}.{n % 100:02d}")


def model_refs(mount: str, absolute: bool | None = None) -> st.SearchStrategy[str]:
    hub = st.builds(lambda org, name: f"{org}/{name}", _SEGMENT, _SEGMENT)
    path = st.builds(lambda parts: mount + "/" + "/".join(parts), st.lists(_SEGMENT, min_size=1, max_size=3))
    if absolute is None:
        return st.one_of(hub, path)
    return path if absolute else hub


@st.composite
def tolerations(draw) -> dict[str, Any]:
    operator = draw(st.sampled_from(["Exists", "Equal"]))
    out: dict[str, Any] = {"operator": operator}
    if draw(st.booleans()):
        out["key"] = draw(st.sampled_from(["nvidia.com/gpu", "dedicated", "example.com/pool"]))
    if operator == "Equal" and draw(st.booleans()):
        out["value"] = draw(_SEGMENT.filter(lambda s: s[-1].isalnum()))
    effect = draw(st.sampled_from([None, "NoSchedule", "PreferNoSchedule", "NoExecute"]))
    if effect:
        out["effect"] = effect
    if effect == "NoExecute" and draw(st.booleans()):
        out["tolerationSeconds"] = draw(st.integers(0, 86400))
    return out


@st.composite
def placements(draw) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["gpuProduct"] = draw(st.sampled_from(["NVIDIA-B200", "NVIDIA-H100-80GB-HBM3", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"]))
    if draw(st.booleans()):
        keys = ["example.com/pool", "topology.kubernetes.io/zone", "node-role"]
        if "gpuProduct" not in out:
            keys.append("nvidia.com/gpu.product")
        out["nodeSelector"] = draw(st.dictionaries(st.sampled_from(keys), st.sampled_from(["a", "gpu-pool-1", "eu-west.1"]), max_size=3))
    if draw(st.booleans()):
        out["tolerations"] = draw(st.lists(tolerations(), max_size=3))
    return out


@st.composite
def gates(draw, *, allow_acceptance: bool = True, benchmark_gate: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    choices = ["minSpeedup", "minTokensPerSecond"] + (["minAcceptanceRate"] if allow_acceptance else [])
    chosen = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=len(choices), unique=True))
    for key in chosen:
        out[key] = draw(ratios(positive=True) if key == "minAcceptanceRate" else decimals(0.01, 999))
    if benchmark_gate:
        if "minSpeedup" in out or draw(st.booleans()):
            out["baseline"] = draw(baselines())
        if draw(st.booleans()):
            out["numPrompts"] = draw(st.integers(1, 1000))
            out["maxTokens"] = draw(st.integers(1, 65536))
        if draw(st.booleans()):  # a gate's own prompts: a file on a claim (any count), maybe by category
            out["prompts"] = {"persistentVolumeClaim": draw(claim_prompts())}
            if draw(st.booleans()):
                out["acceptanceByCategory"] = draw(st.booleans())
    return out


@st.composite
def claim_prompts(draw) -> dict[str, Any]:
    """spec.prompts.persistentVolumeClaim: a claim and a relative path inside it (no '..' segment)."""
    segment = st.from_regex(r"[a-z0-9_][a-z0-9._-]{0,12}", fullmatch=True).filter(lambda s: s not in (".", ".."))
    return {"claimName": draw(_NAME), "path": "/".join(draw(st.lists(segment, min_size=1, max_size=4)))}


@st.composite
def captured_prompts(draw) -> dict[str, Any]:
    """spec.prompts.capture: a capture's claim, a held-out share above 0, maybe a time bound and a cap."""
    out: dict[str, Any] = {"claimName": draw(_NAME),
                           "heldOutFraction": draw(st.sampled_from(["0.1", "0.25", "0.5", "0.0001", "0.9999"]))}
    if draw(st.booleans()):
        out["capturedBefore"] = draw(st.sampled_from(["2026-12-07T10:00:00Z", "2027-01-01T00:00:00+02:00"]))
    if draw(st.booleans()):
        out["perCategory"] = draw(st.integers(1, 1000))
    return out


@st.composite
def baselines(draw) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"servingRef": {"name": draw(_NAME)}}
    return {"tokensPerSecond": draw(decimals(0.01, 99999))}


def _some(draw, fields: dict[str, Any]) -> dict[str, Any]:
    """A random subset of ``fields`` (name -> strategy), drawn."""
    return {name: draw(strategy) for name, strategy in fields.items() if draw(st.booleans())}


@st.composite
def family_settings(draw, method: str) -> dict[str, Any]:
    """spec.drafter's per-family settings object for a vLLM ``method`` (maybe none), as JSON."""
    if method == "suffix":
        fields = {"maxTreeDepth": st.integers(1, 1024), "maxCachedRequests": st.integers(0, 100000),
                  "maxSpecFactor": decimals(0, 8), "minTokenProb": ratios()}
        return {"suffix": _some(draw, fields)} if draw(st.booleans()) else {}
    if method in ("ngram", "ngramGpu") and draw(st.booleans()):
        low = draw(st.integers(1, 64))
        return {"ngram": _some(draw, {"promptLookupMin": st.just(low), "promptLookupMax": st.integers(low, 64)})}
    if method == "dspark" and draw(st.booleans()):  # draftTopk only with a draft model (the caller drops it)
        return {"dspark": _some(draw, {"draftTopk": st.integers(1, 64), "adaptiveVerification": st.booleans()})}
    return {}


@st.composite
def parallel_layout(draw, spec: dict[str, Any], gpus: int) -> int | None:
    """Sometimes pipeline stages, data-parallel ranks or expert parallelism in spec["target"], each only where the
    engine runs the drafter with it (api/serving/parallel_rules.py); and the nodes the replica then spans (None:
    unset, one node). ``gpus``: the pod's GPUs, which the layout fills on every node it spans."""
    target, engine, method = spec["target"], spec["engine"], spec["drafter"]["method"]
    if draw(st.booleans()):
        target["expertParallel"] = draw(st.booleans())
    if not draw(st.booleans()):
        return None
    adaptive = bool((spec["drafter"].get("dspark") or {}).get("adaptiveVerification"))
    stages_allowed = not adaptive if engine == "vllm" else method in ("none", "eagle", "mtp")
    pp = draw(st.sampled_from([1, 2])) if stages_allowed else 1
    ranks_allowed = engine == "vllm" or (method not in ("ngram", "draftModel") and (pp == 1 or method == "none"))
    dp = draw(st.sampled_from([1, 2])) if ranks_allowed else 1
    for field, size in (("pipelineParallelSize", pp), ("dataParallelSize", dp)):
        if size > 1 or draw(st.booleans()):
            target[field] = size
    world = target["tensorParallelSize"] * pp * dp  # gpus is tensorParallelSize or twice it: a multiple or a divisor
    if world > gpus:
        return world // gpus
    return 1 if draw(st.booleans()) else None


@st.composite
def serving_specs(draw) -> dict[str, Any]:
    """A valid DrafterServing spec, as JSON (camelCase)."""
    engine = draw(st.sampled_from(ENGINES))
    method = draw(st.sampled_from([m for m in DRAFTER_METHODS if m not in METHODS_REFUSED_BY_ENGINE[engine]]))
    mount = draw(st.sampled_from(["/models", "/mnt/weights", "/data/ckpt"]))
    claim = draw(st.booleans())
    target_model = draw(model_refs(mount))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    gpus = tp * draw(st.sampled_from([1, 2]))

    target: dict[str, Any] = {"model": target_model, "tensorParallelSize": tp}
    if draw(st.booleans()):
        target["maxModelLen"] = draw(st.integers(128, 262144))
    if draw(st.booleans()):
        target["gpuMemoryUtilization"] = draw(ratios(positive=True))
    if draw(st.booleans()):
        target["trustRemoteCode"] = draw(st.booleans())
    if draw(st.booleans()):
        target["servedModelName"] = draw(st.sampled_from(["kimi-k2.5", "moonshotai/Kimi-K2.5", "m:v1"]))
    if draw(st.booleans()):
        target["toolCallParser"] = draw(st.sampled_from(["kimi_k2", "hermes", "llama3_json"]))
    if draw(st.booleans()):
        target["reasoningParser"] = draw(st.sampled_from(["kimi_k2", "deepseek_r1", "qwen3"]))
    if draw(st.booleans()):
        flags = draw(st.lists(st.sampled_from(_SAFE_FLAGS), max_size=3, unique=True))
        args: list[str] = []
        for flag in flags:
            args += [flag, str(draw(st.integers(1, 512)))]
        target["extraArgs"] = args

    drafter: dict[str, Any] = {"method": method}
    if method in METHODS_WITH_MODEL or (method in METHODS_IN_TARGET and draw(st.booleans())):
        drafter["model"] = draw(model_refs(mount).filter(lambda m: m != target_model))
    if method != "none":
        if engine == "vllm":
            bundled_dspark = method == "dspark" and "model" not in drafter  # vLLM needs k for the target's weights
            if method in METHODS_NEEDING_K or bundled_dspark or draw(st.booleans()):
                drafter["numSpeculativeTokens"] = draw(st.integers(1, 16))
            drafter.update(draw(family_settings(method)))
            if "model" not in drafter and "dspark" in drafter:
                drafter["dspark"].pop("draftTopk", None)
        elif method in SGLANG_BLOCK_METHODS:
            if draw(st.booleans()):
                drafter["numSpeculativeTokens"] = draw(st.integers(1, 16))
        elif draw(st.booleans()):
            steps = draw(st.integers(1, 32))
            topk = draw(st.integers(1, 64))
            drafter["numSteps"] = steps
            drafter["eagleTopk"] = topk
            drafter["numDraftTokens"] = steps + 1 if topk == 1 else draw(st.integers(1, 256))
    if draw(st.booleans()):
        drafter["allowKnownBad"] = draw(st.booleans())

    spec: dict[str, Any] = {"engine": engine, "target": target, "drafter": drafter}
    nodes = draw(parallel_layout(spec, gpus))
    if draw(st.booleans()):
        spec["image"] = draw(st.sampled_from(["vllm/vllm-openai:v0.33.0", "lmsysorg/sglang:v0.5.23", "registry.example.com/llm/engine@sha256:" + "a" * 64]))
    if draw(st.booleans()):
        spec["replicas"] = draw(st.integers(0, 64))
    if gpus != 8 or draw(st.booleans()):
        spec["resources"] = {"gpusPerReplica": gpus}
    if nodes is not None:
        spec["resources"] = {"gpusPerReplica": gpus, "nodesPerReplica": nodes}
    if draw(st.booleans()):
        spec["placement"] = draw(placements())
    if claim or draw(st.booleans()):
        storage: dict[str, Any] = {"mountPath": mount}
        if claim:
            storage["modelClaim"] = draw(_NAME)
        if draw(st.booleans()):
            storage["shmSize"] = draw(st.sampled_from(["64Gi", "512Mi", "1Ti", "100G"]))
        spec["storage"] = storage
    if draw(st.booleans()):
        spec["startup"] = {"timeout": draw(durations(60, 48 * 3600))}
    if draw(st.booleans()):
        strategy = draw(st.sampled_from(["Recreate", "BlueGreen"]))
        swap: dict[str, Any] = {"strategy": strategy}
        if strategy == "BlueGreen" and draw(st.booleans()):
            swap["gate"] = draw(gates(allow_acceptance=method != "none"))
        spec["swap"] = swap
    if method != "none" and draw(st.booleans()):
        acceptance: dict[str, Any] = {}
        limit = drafter.get("numSpeculativeTokens", drafter.get("numSteps", 64)) + 1
        kinds = draw(st.lists(st.sampled_from(["minAcceptanceRate", "minAcceptanceLength"]), min_size=1, max_size=2, unique=True))
        if "minAcceptanceRate" in kinds:
            acceptance["minAcceptanceRate"] = draw(ratios())
        if "minAcceptanceLength" in kinds:
            acceptance["minAcceptanceLength"] = draw(decimals(1, limit))
        if draw(st.booleans()):
            acceptance["window"] = draw(durations(30, 86400))
        if draw(st.booleans()):
            acceptance["for"] = draw(durations(0, 86400))
        if draw(st.booleans()):
            acceptance["minDraftTokens"] = draw(st.integers(0, 10**9))
        if draw(st.booleans()):
            acceptance["source"] = "prometheus"
            acceptance["prometheus"] = draw(st.sampled_from(["default", "team-a"]))
        acceptance["onDegraded"] = draw(st.sampled_from(["Alert", "Rollback", "DisableSpeculation"]))
        spec["acceptance"] = acceptance
    return spec


@st.composite
def benchmark_specs(draw) -> dict[str, Any]:
    """A valid DrafterBenchmark spec, as JSON."""
    num_prompts = draw(st.integers(1, 50))
    spec: dict[str, Any] = {"numPrompts": num_prompts}
    serving = draw(_NAME)
    if draw(st.booleans()):
        spec["servingRef"] = {"name": serving}
    else:
        spec["endpoint"] = draw(st.sampled_from(["http://my-vllm.serving.svc:8000", "https://llm.example.com/v1"]))
        if draw(st.booleans()):
            spec["model"] = draw(st.sampled_from(["kimi-k2.5", "moonshotai/Kimi-K2.5"]))
    if draw(st.booleans()):
        if draw(st.booleans()):
            spec["prompts"] = {"inline": draw(st.lists(st.text(min_size=1, max_size=40), min_size=num_prompts, max_size=num_prompts + 3))}
        elif draw(st.booleans()):
            spec["prompts"] = {"configMap": {"name": draw(_NAME), "key": draw(st.sampled_from(["prompts", "prompts.txt"]))}}
        elif draw(st.booleans()):
            spec["prompts"] = {"persistentVolumeClaim": draw(claim_prompts())}
            if draw(st.booleans()):
                spec["acceptanceByCategory"] = True
        else:
            spec["prompts"] = {"capture": draw(captured_prompts())}
            if draw(st.booleans()):
                spec["acceptanceByCategory"] = True
    spec["maxTokens"] = draw(st.integers(1, 65536))
    spec["concurrency"] = draw(st.integers(1, num_prompts))
    if draw(st.booleans()):
        spec["temperature"] = draw(st.sampled_from(["0", "0.7", "1", "1.5", "2"]))
    if draw(st.booleans()):
        spec["repetitions"] = draw(st.integers(1, 100))
    if draw(st.booleans()):
        baseline = draw(baselines())
        if "servingRef" in baseline and baseline["servingRef"]["name"] == serving:
            baseline["servingRef"]["name"] = serving + "-baseline"
        spec["baseline"] = baseline
    if draw(st.booleans()):
        gate = draw(gates(benchmark_gate=False))
        if "baseline" not in spec:
            gate.pop("minSpeedup", None)
            if not gate:
                gate = {"minTokensPerSecond": "10.00"}
        spec["gate"] = gate
    if draw(st.booleans()):
        spec["timeout"] = draw(durations(60, 86400))
    return spec


@st.composite
def training_specs(draw) -> dict[str, Any]:
    """A valid DrafterTraining spec, as JSON."""
    mount = draw(st.sampled_from(["/models", "/mnt/weights"]))
    output = mount + "/drafters/" + draw(_SEGMENT)
    # The output must neither be, contain nor lie under a model or dataset path (api/training/spec.py).
    apart = model_refs(mount).filter(lambda ref: not (ref == output or ref.startswith(output + "/")
                                                      or output.startswith(ref + "/")))
    target_model = draw(apart)
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    spec: dict[str, Any] = {
        "target": {"model": target_model, "tensorParallelSize": tp},
        "storage": {"modelClaim": draw(_NAME), "mountPath": mount},
        "data": {"dataset": draw(apart), "numSamples": draw(st.integers(1, 10**8))},
        "hiddenStates": {"storage": {"size": draw(st.sampled_from(["1Ti", "900Gi", "2Ti"]))}},
        "output": {"path": output},
        "resources": {"gpus": tp * draw(st.sampled_from([1, 2]))},
    }
    if draw(st.booleans()):
        spec["target"]["architecture"] = draw(st.sampled_from(["DeepseekV3ForCausalLM", "LlamaForCausalLM"]))
    if draw(st.booleans()):
        spec["baseDrafter"] = draw(apart)
    if draw(st.booleans()):
        spec["framework"] = draw(st.sampled_from(["specforge", "speculators"]))
    if spec.get("framework", "specforge") == "specforge" or draw(st.booleans()):
        spec["data"]["chatTemplate"] = draw(st.sampled_from(["kimi-k2-instruct", "deepseek-v3", "qwen", "llama3"]))
    if draw(st.booleans()):
        spec["output"]["format"] = draw(st.sampled_from(["sglang", "hf"]))
    if draw(st.booleans()):
        spec["output"]["overwrite"] = draw(st.booleans())
    if draw(st.booleans()):
        spec["data"]["maxTokens"] = draw(st.integers(1, 131072))
    if draw(st.booleans()):
        spec["data"]["generation"] = {"engine": draw(st.sampled_from(ENGINES))}
        if draw(st.booleans()):  # a serving's captured prompts instead of the dataset (they need generation)
            del spec["data"]["dataset"]
            spec["data"]["capture"] = {"claimName": draw(_NAME)}
            if draw(st.booleans()):
                spec["data"]["capture"]["heldOutFraction"] = draw(st.sampled_from(["0", "0.1", "0.25", "0.9999"]))
    if draw(st.booleans()):
        spec["hiddenStates"]["layers"] = sorted(draw(st.lists(st.integers(0, 1023), min_size=3, max_size=3, unique=True)))
    if draw(st.booleans()):
        spec["hiddenStates"]["storage"] = {"claimName": draw(_NAME)}
    if draw(st.booleans()):
        spec["train"] = {
            "epochs": draw(st.integers(1, 100)),
            "learningRate": draw(st.sampled_from(["1e-4", "2e-5", "0.0003", "1", "5E-6"])),
            "batchSize": draw(st.integers(1, 1024)),
            "maxLength": draw(st.integers(128, 131072)),
            "draftVocabSize": draw(st.integers(16, 1048576)),
        }
    if draw(st.booleans()):
        promote: dict[str, Any] = {"servingRef": {"name": draw(_NAME)}}
        if draw(st.booleans()):
            promote["gate"] = draw(gates())
        spec["promote"] = promote
    if draw(st.booleans()):
        spec["placement"] = draw(placements())
    return spec


# ---------------------------------------------------------------------------------------------------
# Mutations: small edits that may or may not break a rule. The apiserver and the models must agree.

_SERVING_MUTATIONS: tuple[tuple[str, Any], ...] = (
    ("target.tensorParallelSize", st.integers(-1, 70)),
    ("resources.gpusPerReplica", st.integers(0, 70)),
    ("resources.nodesPerReplica", st.sampled_from([None, 0, 1, 2, 3, 17])),
    ("target.pipelineParallelSize", st.sampled_from([None, 0, 1, 2, 4])),
    ("target.dataParallelSize", st.sampled_from([None, 0, 1, 2, 4, 65])),
    ("target.expertParallel", st.sampled_from([None, True, False])),
    ("drafter.numSpeculativeTokens", st.integers(0, 17)),
    ("drafter.numSteps", st.integers(0, 33)),
    ("drafter.eagleTopk", st.integers(0, 2)),
    ("drafter.numDraftTokens", st.integers(0, 6)),
    ("drafter.method", st.sampled_from(list(DRAFTER_METHODS) + ["medusa"])),
    ("drafter.model", st.sampled_from(["/models/drafters/x", "org/drafter", "-x", "/elsewhere/d"])),
    ("drafter.suffix", st.sampled_from([None, {}, {"maxTreeDepth": 0}, {"maxTreeDepth": 8, "minTokenProb": "1.5"},
                                        {"maxSpecFactor": "2", "maxCachedRequests": 0}])),
    ("drafter.ngram", st.sampled_from([None, {"promptLookupMin": 5, "promptLookupMax": 2}, {"promptLookupMax": 3}])),
    ("drafter.dspark", st.sampled_from([None, {"draftTopk": 0}, {"draftTopk": 4, "adaptiveVerification": True}])),
    ("drafter.dynamic", st.sampled_from([None, "fromBenchmark"])),
    ("engine", st.sampled_from(["vllm", "sglang", "tgi"])),
    ("target.gpuMemoryUtilization", st.sampled_from(["0", "0.0", "0.5", "1", "1.0", "1.5", ".5", "0.12345"])),
    ("target.extraArgs", st.sampled_from([["--port", "1"], ["--max-num-seqs", "4"], ["--speculative-num-steps=3"], ["-tp", "2"], ["--tp-size=2"]])),
    ("startup.timeout", st.sampled_from(["30s", "1m", "59s", "45m", "48h", "48h1s", "2d", "1h30m", "0ms"])),
    ("acceptance", st.sampled_from([None, {}, {"minAcceptanceRate": "0.5"}, {"minAcceptanceLength": "3"},
                                    {"minAcceptanceLength": "0.9"}, {"minAcceptanceRate": "0.5", "source": "prometheus"},
                                    {"minAcceptanceRate": "0.5", "window": "29s"}, {"minAcceptanceRate": "0.5", "for": "25h"}])),
    ("swap", st.sampled_from([{"strategy": "Recreate", "gate": {"minTokensPerSecond": "1"}},
                              {"strategy": "BlueGreen", "gate": {"minSpeedup": "1.2"}},
                              {"strategy": "BlueGreen", "gate": {"minAcceptanceRate": "0.5"}},
                              {"strategy": "BlueGreen", "gate": {"minSpeedup": "0", "baseline": {"tokensPerSecond": "80"}}},
                              {"strategy": "BlueGreen", "gate": {}}])),
    ("storage", st.sampled_from([{"modelClaim": "models"}, {"modelClaim": "models", "mountPath": "/dev/x"},
                                 {"mountPath": "/models/"}, {"modelClaim": "m", "mountPath": "/weights"}])),
)


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        obj = obj.setdefault(key, {})
    if value is None:
        obj.pop(keys[-1], None)
    else:
        obj[keys[-1]] = value


@st.composite
def mutated_serving_specs(draw) -> dict[str, Any]:
    """A valid serving spec with one to three random edits: valid or not, the verdicts must agree."""
    spec = copy.deepcopy(draw(serving_specs()))
    for path, values in draw(st.lists(st.sampled_from(_SERVING_MUTATIONS), min_size=1, max_size=3)):
        _set(spec, path, copy.deepcopy(draw(values)))
    return spec
