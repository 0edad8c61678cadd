"""The operations a scenario draws: user edits, deletes and re-creates, operator crashes, node loss,
acceptance drops, metric faults, admission refusals, foreign objects (labelled or not), API faults, one
kind's watch lagging or stalling, hands on the children (deletes, scales, restarts, labels stripped),
administrators changing the operator's settings or upgrading it, long streams, unreadable in-flight
counts, tenants' benchmarks, scale-downs to zero and back, retries, time.

One scenario in four (`draw_groups`) runs its revisions as LeaderWorkerSets of two-node groups on twice the nodes.

An operation is plain data (a dict), drawn in advance from the seed, so that a recorded list replays
exactly and a shrinker can drop any of them. Spec edits set one field of a small configuration
(`Config`), rendered into a full, valid spec by `render`: what the user writes with kubectl apply.
"""

from __future__ import annotations

import copy
import random
import string
from collections.abc import Callable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
SEED_SPEC = yaml.safe_load((REPO / "examples" / "serving-vllm-kimi-k25-eagle3.yaml").read_text())["spec"]
DAY = 86400.0

DRAFTERS = {
    "vllm": [{"method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "numSpeculativeTokens": 5},
             {"method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "numSpeculativeTokens": 3},
             {"method": "mtp", "numSpeculativeTokens": 1},
             {"method": "ngram", "numSpeculativeTokens": 4},
             {"method": "none"},
             {"method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "numSpeculativeTokens": 3,
              "dynamic": "fromBenchmark"}],
    "sglang": [{"method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3", "numSteps": 3, "eagleTopk": 1,
                "numDraftTokens": 4},
               {"method": "mtp", "numSteps": 2, "eagleTopk": 1, "numDraftTokens": 3},
               {"method": "none"}],
}
IMAGES = {"vllm": [None, "vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.33.1"],
          "sglang": [None, "lmsysorg/sglang:v0.5.23"]}
ENVS = [None, [{"name": "NCCL_DEBUG", "value": "INFO"}], [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]]
GATES = [{"minSpeedup": "1.1", "baseline": {"tokensPerSecond": "80"}}, {"minTokensPerSecond": "60"}]
ACCEPTANCE = [{"minAcceptanceRate": "0.4", "window": "5m", "for": "5m"},
              {"minAcceptanceRate": "0.6", "window": "2m", "for": "10m"},
              {"minAcceptanceLength": "2.0", "window": "5m", "for": "0s"},
              # through the administrator's Prometheus endpoint (chart value prometheus.endpoints)
              {"minAcceptanceRate": "0.4", "window": "5m", "for": "5m", "source": "prometheus", "prometheus": "main"}]
ON_DEGRADED = ["Alert", "Rollback", "DisableSpeculation"]
STARTUP = ["10m", "20m", "45m"]
DRAIN_TIMEOUTS = [None, None, "2m", "10m"]  # spec.swap.drainTimeout (None: the default, 5m)

FIELDS = {  # field -> the values an edit may set it to
    "engine": ["vllm", "sglang"], "drafter": list(range(6)), "image": list(range(3)), "replicas": [0, 1, 1, 2, 2, 3],
    "env": list(range(len(ENVS))), "strategy": ["Recreate", "BlueGreen", "BlueGreen"],
    "gate": [None, 0, 1], "acceptance": [None, 0, 1, 2, 3], "onDegraded": ON_DEGRADED, "startup": STARTUP,
    "drainTimeout": DRAIN_TIMEOUTS,
}
#: Fields a configuration has without drawing them: a stored spec an older CRD accepted (`legacy`: a field the
#: operator now refuses, set by an upgrade operation); the nodes a replica spans and how its ranks spread over them
#: (drawn per scenario, `draw_groups`).
DEFAULT_CONFIG = {"legacy": False, "drainTimeout": None, "nodesPerReplica": 1, "layout": "data"}
#: One scenario in this many runs its revisions as LeaderWorkerSets of two-node groups.
GROUP_SCENARIOS = 4


def initial_config(rng: random.Random) -> dict:
    """A random configuration; one scenario in three starts fully guarded (BlueGreen with a gate, acceptance
    watched with an onDegraded action), where the swap, gate and action paths meet: drawn field by field,
    that combination is too rare for the budget."""
    config = {f: rng.choice(v) for f, v in FIELDS.items() if f not in DEFAULT_CONFIG}
    if rng.random() < 1 / 3:
        config.update(engine="vllm", drafter=rng.choice([0, 1]), strategy="BlueGreen", gate=rng.choice([0, 1]),
                      acceptance=rng.choice([0, 1, 2]), onDegraded=rng.choice(["Rollback", "DisableSpeculation"]))
    return config


def render(config: dict) -> dict:
    """The spec a configuration stands for (valid by construction)."""
    spec = copy.deepcopy(SEED_SPEC)
    engine = config["engine"]
    drafters = DRAFTERS[engine]
    drafter = copy.deepcopy(drafters[config["drafter"] % len(drafters)])
    images = IMAGES[engine]
    spec.update(engine=engine, drafter=drafter, replicas=config["replicas"], startup={"timeout": config["startup"]})
    image = images[config["image"] % len(images)]
    if image:
        spec["image"] = image
    else:
        spec.pop("image", None)
    env = ENVS[config["env"]]
    if env:
        spec["env"] = copy.deepcopy(env)
    swap = {"strategy": config["strategy"]}
    if config.get("drainTimeout"):
        swap["drainTimeout"] = config["drainTimeout"]
    if config["strategy"] == "BlueGreen" and config["gate"] is not None:
        gate = copy.deepcopy(GATES[config["gate"]])
        swap["gate"] = gate
    spec["swap"] = swap
    spec.pop("acceptance", None)
    if config["acceptance"] is not None and drafter["method"] != "none":
        spec["acceptance"] = {**ACCEPTANCE[config["acceptance"]], "minDraftTokens": 1000,
                              "onDegraded": config["onDegraded"]}
    nodes = config.get("nodesPerReplica", 1)
    if nodes > 1:
        spec["resources"] = {**spec["resources"], "nodesPerReplica": nodes}
        spec["target"] = {**spec["target"], group_layout(config, drafter): nodes}
    if config.get("legacy"):  # kept from an older CRD; the operator refuses it now
        spec.setdefault("acceptance", {"minAcceptanceRate": "0.4", "window": "5m", "for": "5m",
                                       "minDraftTokens": 1000, "onDegraded": "Alert"})
        spec["acceptance"]["prometheusUrl"] = "http://prometheus.monitoring:9090"
    return spec


def group_layout(config: dict, drafter: dict) -> str:
    """The spec.target field that spreads a replica's ranks over its nodes (tensorParallelSize 8 fills one node):
    the drawn layout where the engine allows it with this drafter (api/serving/parallel_rules.py). SGLang 0.5.23 runs
    its EAGLE drafters across pipeline stages only with SGLANG_ENABLE_PP_SPEC, so it always spreads by data; vLLM
    0.33.0 drops a dynamic schedule with data parallelism, so a dynamic drafter spreads by pipeline."""
    if config["engine"] == "sglang":
        return "dataParallelSize"
    if drafter.get("dynamic"):
        return "pipelineParallelSize"
    return "pipelineParallelSize" if config.get("layout") == "pipeline" else "dataParallelSize"


def draw_groups(seed: int, setup: dict) -> None:
    """One scenario in GROUP_SCENARIOS runs each revision as a LeaderWorkerSet of two-node groups, on twice the nodes
    (two revisions side by side, as BlueGreen needs, at the same pressure as a one-node scenario). Drawn from a
    stream of its own, after everything else: every other draw of every seed stays as it was."""
    rng = random.Random(f"{seed}/groups")
    if rng.randrange(GROUP_SCENARIOS):
        return
    setup["nodes"] *= 2
    setup["config"].update(nodesPerReplica=2, layout=rng.choice(["data", "pipeline"]))


def serving_name(rng: random.Random) -> str:
    """A DNS-1035 name of 1 to 52 characters, often at or near the maximum."""
    length = rng.choice([rng.randint(1, 52), rng.randint(40, 52), 52])
    alphabet = string.ascii_lowercase + string.digits + "-"
    if length == 1:
        return rng.choice(string.ascii_lowercase)
    middle = "".join(rng.choice(alphabet) for _ in range(length - 2))
    return rng.choice(string.ascii_lowercase) + middle + rng.choice(string.ascii_lowercase + string.digits)


KINDS = [("set", 34), ("wait", 10), ("crash", 8), ("node_loss", 3), ("acceptance", 10), ("metrics", 5),
         ("admission", 4), ("foreign", 3), ("recreate", 3), ("api_faults", 4), ("watch_lag", 6), ("hands", 6),
         ("admin", 4), ("long_streams", 3), ("in_flight_fault", 2), ("tenant_benchmark", 3), ("scale_cycle", 2),
         ("retry", 2), ("swap_twice", 3)]
WATCHED_KINDS = ["drafterservings", "deployments", "pods", "services", "drafterbenchmarks"]
HANDS = ["delete_active", "delete_active", "delete_other", "scale", "restart", "strip_labels", "delete_service",
         "delete_pod"]


def draw(rng: random.Random, kind: str) -> dict:
    if kind == "set":
        field = rng.choice(list(FIELDS))
        return {"kind": "set", "field": field, "value": rng.choice(FIELDS[field])}
    if kind == "wait":
        return {"kind": "wait"}
    if kind == "crash":
        return {"kind": "crash", "after": rng.randint(1, 8), "restart": rng.choice([5.0, 30.0, rng.uniform(5, 900)])}
    if kind == "node_loss":
        return {"kind": "node_loss", "node": rng.randint(0, 3), "back": rng.uniform(300, 7200)}
    if kind == "acceptance":
        rate = rng.choice([None, round(rng.uniform(0.02, 0.35), 3)])
        # About one drop in nine loses the drafter (vLLM after sleep level 2: acceptance 0, Degraded DrafterLost after
        # one window), chosen from the drawn rate itself so that the random stream, and every other seed's ops, stay.
        lost = rate is not None and round(rate * 1000) % 9 == 0
        return {"kind": "acceptance", "rate": 0.0 if lost else rate}
    if kind == "metrics":
        return {"kind": "metrics", "mode": rng.choice(["missing", "unknown"]), "for": rng.uniform(60, 3600)}
    if kind == "admission":
        return {"kind": "admission", "rule": rng.choice(["deployments", "drafterbenchmarks", "services", "status"]),
                "code": rng.choice([403, 422]), "for": rng.uniform(60, 1200)}
    if kind == "foreign":
        return {"kind": "foreign", "what": rng.choice(["service", "deployment"]),
                "labels": rng.choice(["none", "serving", "managed"]), "desired": rng.random() < 0.5,
                "for": rng.uniform(600, 7200)}
    if kind == "recreate":
        return {"kind": "recreate", "gap": rng.choice([0.0, rng.uniform(1, 120), rng.uniform(120, 1800)]),
                "operator_down": rng.random() < 0.5}
    if kind == "api_faults":
        return {"kind": "api_faults", "rate": rng.uniform(0.05, 0.4), "for": rng.uniform(60, 3600)}
    if kind == "watch_lag":
        return {"kind": "watch_lag", "watch": rng.choice(WATCHED_KINDS + ["all"]), "lag": rng.choice([1.0, 10.0, 60.0]),
                "stall": rng.random() < 0.4, "for": rng.uniform(30, 1800)}
    if kind == "hands":
        return {"kind": "hands", "what": rng.choice(HANDS), "replicas": rng.choice([0, 1, 3])}
    if kind == "admin":
        what = rng.choice(["allow_list", "allow_list", "prometheus", "drain", "upgrade", "legacy"])
        value = {"allow_list": lambda: rng.randrange(5), "prometheus": lambda: rng.random() < 0.5,
                 "drain": lambda: rng.choice([5.0, 15.0, 60.0, 120.0]), "upgrade": lambda: rng.random() < 0.7,
                 "legacy": lambda: rng.random() < 0.6}[what]()
        return {"kind": "admin", "what": what, "value": value, "down": rng.uniform(5, 60)}
    if kind == "swap_twice":
        return {"kind": "swap_twice", "first": rng.randint(0, 4), "second": rng.randint(0, 4),
                "seconds": rng.choice([240.0, 290.0])}
    if kind == "long_streams":
        return {"kind": "long_streams", "seconds": rng.choice([90.0, 240.0, 290.0, 900.0]), "for": rng.uniform(600, 7200)}
    if kind == "in_flight_fault":
        return {"kind": "in_flight_fault", "for": rng.uniform(60, 1800)}
    if kind == "tenant_benchmark":
        return {"kind": "tenant_benchmark", "variant": rng.choice(["endpoint", "endpoint_gate", "other_serving", "by_hand"]),
                "seconds": rng.uniform(60, 900), "speedup": rng.choice([0.4, 0.8, 2.5])}
    if kind == "scale_cycle":
        return {"kind": "scale_cycle", "gap": rng.choice([60.0, rng.uniform(1800, 7200)]), "replicas": rng.choice([1, 2])}
    if kind == "retry":
        return {"kind": "retry"}
    raise ValueError(kind)


def generate(seed: int, count: int, days: float = 1.0) -> tuple[dict, list[dict]]:
    """(the scenario's setup, its operations): the first operation creates the serving; the time the
    operations leave the world to run adds up to at least `days` simulated days."""
    rng = random.Random(seed)
    setup = {"name": serving_name(rng), "nodes": rng.choice([1, 2, 3, 4, 6, 8]), "config": initial_config(rng)}
    ops = timeline(rng, [{"kind": "create"}], KINDS, draw, count, split=600, at_least=days * DAY)
    draw_groups(seed, setup)
    return setup, ops


def timeline(rng: random.Random, first: list[dict], kinds: list[tuple[str, int]],
             draw: Callable[[random.Random, str], dict], count: int, split: float, at_least: float) -> list[dict]:
    """A scenario's operations: `first`, then operations drawn by weight from `kinds` up to `count`. Each
    leaves the world a pause `dt`: seven in ten short (5 s to `split`), the rest long (`split` to 12 x
    `split`), all stretched alike until they add up to `at_least` seconds; `salt` is each one's index."""
    ops = list(first)
    names, weights = zip(*kinds)
    while len(ops) < count:
        ops.append(draw(rng, rng.choices(names, weights)[0]))
    for op in ops:
        op["dt"] = rng.uniform(5, split) if rng.random() < 0.7 else rng.uniform(split, 12 * split)
    total = sum(op["dt"] for op in ops)
    if total < at_least:
        scale = at_least / total
        for op in ops:
            op["dt"] *= scale
    for i, op in enumerate(ops):
        op["salt"] = i
        op["dt"] = round(op["dt"], 1)
    return ops


def describe(op: dict) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in op.items() if k not in ("kind", "salt", "dt"))
    return f"#{op['salt']} {op['kind']}({args}) then {op['dt']:.0f}s"
