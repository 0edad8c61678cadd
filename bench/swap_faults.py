"""Faults during DrafterServing swaps: SIGKILL the operator, restart the kube-apiserver or etcd, at chosen
phases of BlueGreen and Recreate swaps (with and without a gate, and while an onDegraded action is in
flight), then check that the swap finishes with the invariants of drafter_testbed/swap_faults.py holding.

Runs on its OWN local cluster (DRAFTER_STATE_DIR=/tmp/fault-cluster, DRAFTER_PORT_BASE=19440 unless
already set), with two 8-GPU process nodes whose engine pods really run (the emulator). Each trial:

1. a fresh namespace, a DrafterServing of one 1-GPU replica (the seed example, time scale 0.1, engines
   start in --startup-seconds); wait until it is Ready;
2. a client sends streamed completions through the Service's ClusterIP the whole time (the local
   process runner plays kube-proxy), counting failed requests;
3. the swap: a spec change (kinds bluegreen, recreate, gate), or an emulator's acceptance lowered at run
   time so spec.acceptance.onDegraded acts (kinds rollback: after a first swap, back to the revision
   before; disable: to a revision without a drafter);
4. the fault is aimed at a phase picked by a seeded RNG: the harness watches the namespace's objects
   (one `kubectl get` of every kind per look), and when the swap is in that phase waits a random
   0-1 s and injects it: SIGKILL of the operator's process group, then a new operator (a new Lease
   holder: it acts once the dead holder's Lease expired), or `drafter-operator cluster restart
   kube-apiserver|etcd`. If the swap passed the phase between two looks, the fault hits the phase it is in
   then, and the table says which;
5. wait (bounded) until every invariant holds: exactly one active revision, the Service on a Ready
   revision, no duplicated and no orphaned Deployment, ReplicaSet, pod, Job, Service or gate benchmark,
   the revisions history intact (what was there before the fault is a prefix, previousRevision the
   revision traffic left, the active one good), and for the acceptance kinds the action's revision
   serving; print the checks, the finish time and the failed requests.

The operator is this script's subprocess, restarted the way a kubelet restarts a pod when it exits on
its own (the leader election ends a leader that cannot renew its Lease for 10 s, as during a long
control-plane outage): such exits are counted per trial. BlueGreen trials must fail no request;
Recreate stops the old revision before the new one starts, so its failures are its downtime.

Usage: python bench/swap_faults.py [--kills 20] [--apiserver-restarts 2] [--etcd-restarts 2] [--seed N]
                                   [--kinds bluegreen,recreate,gate,rollback,disable] [--keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

os.environ.setdefault("DRAFTER_STATE_DIR", "/tmp/fault-cluster")
os.environ.setdefault("DRAFTER_PORT_BASE", "19440")
# The operator (a subprocess) inherits these: acceptance measured every 2 s, old revisions drained 6 s.
os.environ.setdefault("DRAFTER_ACCEPTANCE_INTERVAL_SECONDS", "2")
os.environ.setdefault("DRAFTER_DRAIN_SECONDS", "6")

import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_scale import BenchError, Cluster, Operator, drafter_operator, exit_with, log, run_on_own_cluster  # noqa: E402
from drafter_testbed import harness  # noqa: E402

from drafter_testbed import swap_faults as sf  # noqa: E402
from drafter_testbed.serving_client import ClientLoop, set_acceptance  # noqa: E402

SEED = REPO / "examples" / "serving-vllm-kimi-k25-eagle3.yaml"
GPU_PRODUCT = "NVIDIA-H200"  # only this benchmark's process nodes carry it
NODE_PREFIX = "fault-gpu"
GOOD_DRAFTER = "/models/drafters/emulator-good-drafter"  # ~71 % acceptance at k = 5
TARGET_MODEL = "/models/Kimi-K2.5"
LOW_ACCEPTANCE = 0.3  # per token: ~8 % at k = 5, far below the 40 % threshold
NAME = "kimi"
KILL, APISERVER, ETCD = "operator SIGKILL", "kube-apiserver restart", "etcd restart"
COMPONENT = {APISERVER: "kube-apiserver", ETCD: "etcd"}

#: The phases each kind of swap passes, in order: the faults are aimed at these.
PHASES = {
    "bluegreen": [sf.CREATED, sf.LOADING, sf.SWITCH, sf.DELETION],
    "recreate": [sf.STOPPING, sf.CREATED, sf.LOADING, sf.SWITCH, sf.DELETION],
    "gate": [sf.CREATED, sf.LOADING, sf.GATING, sf.SWITCH, sf.DELETION],
    "rollback": [sf.DEGRADING] + [f"{sf.IN_FLIGHT}: {p}" for p in (sf.LOADING, sf.SWITCH, sf.DELETION)],
    "disable": [sf.DEGRADING] + [f"{sf.IN_FLIGHT}: {p}" for p in (sf.LOADING, sf.SWITCH, sf.DELETION)],
}


# ---------------------------------------------------------------- manifests
def serving_manifest(kind: str) -> dict:
    serving = copy.deepcopy(yaml.safe_load(SEED.read_text()))
    serving["metadata"] = {"name": NAME}
    spec = serving["spec"]
    spec["drafter"]["model"] = GOOD_DRAFTER
    spec["target"]["tensorParallelSize"] = 1
    spec["resources"]["gpusPerReplica"] = 1  # both revisions and a gate benchmark fit on the nodes
    spec["placement"]["gpuProduct"] = GPU_PRODUCT
    spec["placement"]["nodeSelector"] = {"drafter.dev/node-runtime": "process"}
    spec["startup"] = {"timeout": "3m"}
    spec["swap"] = {"strategy": "Recreate" if kind == "recreate" else "BlueGreen"}
    if kind == "gate":
        spec["swap"]["gate"] = {"minAcceptanceRate": "0.5", "numPrompts": 2, "maxTokens": 64}
    if kind in ("rollback", "disable"):
        spec["acceptance"] = {"minAcceptanceRate": "0.4", "window": "30s", "for": "2s", "minDraftTokens": 100,
                              "onDegraded": "Rollback" if kind == "rollback" else "DisableSpeculation"}
    else:
        spec.pop("acceptance", None)
    return serving


def swapped(serving: dict) -> dict:
    """The same serving with a different drafter setting: a new revision (still a good drafter)."""
    changed = copy.deepcopy(serving)
    changed["spec"]["drafter"]["numSpeculativeTokens"] = 4
    return changed


def namespace_objects(namespace: str, startup_seconds: float) -> list[dict]:
    from drafter_testbed.launch import EMULATOR_CONFIGMAP, EMULATOR_ENV_PREFIX
    from drafter_testbed.volumes import static_claim

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": EMULATOR_CONFIGMAP, "namespace": namespace},
          "data": {f"{EMULATOR_ENV_PREFIX}TIME_SCALE": "0.1", f"{EMULATOR_ENV_PREFIX}STARTUP_SECONDS": str(startup_seconds)}}
    return [*static_claim(namespace, "models", f"/tmp/drafter-swap-faults/{namespace}"), cm]


# ---------------------------------------------------------------- the operator, restarted like a pod
# ---------------------------------------------------------------- one trial
@dataclass
class Trial:
    index: int
    kind: str
    fault: str
    target: str
    delay: float
    namespace: str = ""
    phase_hit: str = ""
    checks: list[dict] = field(default_factory=list)
    held: bool = False
    requests_ok: int = 0
    requests_failed: int = 0
    failures: list[str] = field(default_factory=list)
    swap_seconds: float | None = None  # swap started -> every invariant held
    after_fault_seconds: float | None = None  # fault injected -> every invariant held
    component_restart_seconds: float | None = None
    operator_exits: int = 0
    error: str = ""


def plan_trials(args: argparse.Namespace, rng: random.Random) -> list[Trial]:
    kinds = args.kinds.split(",")
    faults = [KILL] * args.kills + [APISERVER] * args.apiserver_restarts + [ETCD] * args.etcd_restarts
    rng.shuffle(faults)  # control-plane restarts among the kills, not all at the end
    trials, kills, restarts = [], 0, 0
    for i, fault in enumerate(faults):
        # Operator kills go round the kinds; control-plane restarts hit BlueGreen swaps, gated every other one.
        if fault == KILL:
            kind, kills = kinds[kills % len(kinds)], kills + 1
        else:
            kind, restarts = ("bluegreen", "gate")[restarts % 2], restarts + 1
        target = rng.choice(PHASES[kind])
        # Right after the lowering the monitor has no verdict yet; detection takes up to window + for (32 s).
        delay = rng.uniform(2, 20) if target == sf.DEGRADING else rng.uniform(0, 1)
        trials.append(Trial(i + 1, kind, fault, target, round(delay, 2)))
    return trials


class Harness:
    def __init__(self, cluster: Cluster, operator: Operator, args: argparse.Namespace, run_id: str):
        self.cluster, self.operator, self.args, self.run_id = cluster, operator, args, run_id

    def get_json(self, *args: str) -> dict:
        return json.loads(self.cluster.kubectl("get", *args, "-o", "json", timeout=60))

    def snapshot(self, namespace: str) -> sf.Snapshot:
        return sf.take_snapshot(self.get_json, namespace)

    def serving_status(self, namespace: str) -> dict:
        return (sf.serving_of(self.snapshot(namespace), NAME) or {}).get("status") or {}

    def wait(self, what: str, predicate, timeout: float, interval: float = 0.5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := predicate():
                return value
            time.sleep(interval)
        raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")

    def ready_on(self, namespace: str, revision: str | None = None, not_revision: str | None = None) -> dict:
        def ready():
            status = self.serving_status(namespace)
            active = status.get("activeRevision")
            ok = sf.condition(status, "Ready").get("status") == "True" and active and (
                revision is None or active == revision) and active != not_revision
            return ok and status
        return self.wait(f"{NAME} in {namespace} Ready", ready, self.args.timeout)

    def apply(self, namespace: str, obj: dict | list[dict]) -> None:
        docs = obj if isinstance(obj, list) else [obj]
        self.cluster.kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def lower_acceptance(self, namespace: str, revision: str) -> None:
        pods = [p for p in self.snapshot(namespace).get("Pod", [])
                if (p["metadata"].get("labels") or {}).get(sf.REVISION_LABEL) == revision and p["status"].get("podIP")]
        for pod in pods:
            set_acceptance(pod, LOW_ACCEPTANCE)

    def aim(self, trial: Trial, namespace: str, old: str, started: float) -> str:
        """Watch the swap until it is in the trial's target phase (or past it), wait the trial's delay;
        returns the phase the swap is in then."""
        order = PHASES[trial.kind]
        target_index = order.index(trial.target)
        deadline = started + self.args.timeout
        while time.monotonic() < deadline:
            snapshot = self.snapshot(namespace)
            phase = self.phase(snapshot, trial, old)
            if phase == trial.target or (phase in order and order.index(phase) > target_index):
                if trial.delay:
                    time.sleep(trial.delay)
                return self.phase(self.snapshot(namespace), trial, old)
            status = (sf.serving_of(snapshot, NAME) or {}).get("status") or {}
            if phase == sf.SETTLED and (status.get("activeRevision") != old):
                return phase  # the whole swap passed between two looks
            time.sleep(0.2)
        raise BenchError(f"the swap in {namespace} never reached {trial.target}")

    @staticmethod
    def phase(snapshot: sf.Snapshot, trial: Trial, old: str) -> str:
        phase = sf.swap_phase(snapshot, NAME, old)
        status = (sf.serving_of(snapshot, NAME) or {}).get("status") or {}
        if phase == sf.SETTLED and trial.kind in ("rollback", "disable") and not status.get("degradedAction"):
            return sf.DEGRADING  # acceptance lowered, the operator has not acted yet
        return phase

    def inject(self, trial: Trial) -> None:
        if trial.fault == KILL:
            self.operator.kill_and_restart()
        else:
            out = drafter_operator("cluster", "restart", COMPONENT[trial.fault], timeout=180)
            trial.component_restart_seconds = float(out.rsplit("after", 1)[1].strip().rstrip("s"))

    def run(self, trial: Trial) -> Trial:
        ns = trial.namespace = f"swapfault-{self.run_id}-{trial.index}"
        self.cluster.kubectl("create", "namespace", ns)
        self.wait("the default service account", lambda: self.cluster.kubectl(
            "-n", ns, "get", "serviceaccount", "default", check=False, timeout=30), 60)
        self.apply(ns, namespace_objects(ns, self.args.startup_seconds))
        serving = serving_manifest(trial.kind)
        self.apply(ns, serving)
        first = self.ready_on(ns)["activeRevision"]
        ip = self.get_json("-n", ns, "service", NAME)["spec"]["clusterIP"]
        client = ClientLoop(ip, 8000, TARGET_MODEL, limit_seconds=4 * self.args.timeout, max_tokens=16)
        client.start()
        exits_before = len(self.operator.exit_codes)
        try:
            expected_active = None
            if trial.kind == "rollback":
                self.apply(ns, swapped(serving))
                old = self.ready_on(ns, not_revision=first)["activeRevision"]
                # Settled on the second revision (the first drained and gone) before its acceptance drops.
                sf.wait_for_invariants(self.get_json, ns, NAME, self.args.timeout)
                expected_active, expected_previous = first, old
            else:
                old, expected_previous = first, first
            history = [r["name"] for r in self.serving_status(ns).get("revisions") or []]
            started = time.monotonic()
            if trial.kind in ("rollback", "disable"):
                self.lower_acceptance(ns, old)
            else:
                self.apply(ns, swapped(serving))
            trial.phase_hit = self.aim(trial, ns, old, started)
            injected = time.monotonic()
            log(f"  inject {trial.fault} at '{trial.phase_hit}' (aimed at '{trial.target}', +{trial.delay}s)")
            self.inject(trial)
            if trial.kind == "disable":
                action = self.wait("the DisableSpeculation action", lambda: self.serving_status(ns).get(
                    "degradedAction"), self.args.timeout)
                expected_active = action["revision"]
            elif trial.kind not in ("rollback",):
                expected_active = self.wait("the new revision", lambda: next(
                    (r["name"] for r in self.serving_status(ns).get("revisions") or [] if r["name"] != old), None),
                    self.args.timeout)
            checks, _ = sf.wait_for_invariants(self.get_json, ns, NAME, self.args.timeout, history_before=history,
                                               expected_active=expected_active, expected_previous=expected_previous)
            finished = time.monotonic()
            time.sleep(1)  # requests keep flowing against the swapped revision alone
        finally:
            client.stop()
        trial.checks = [asdict(c) for c in checks]
        trial.held = all(c.held for c in checks)
        trial.swap_seconds = round(finished - started, 1)
        trial.after_fault_seconds = round(finished - injected, 1)
        trial.requests_ok, trial.failures = client.ok, client.failures
        trial.requests_failed = len(client.failures)
        trial.operator_exits = len(self.operator.exit_codes) - exits_before
        return trial

    def cleanup(self, trial: Trial) -> None:
        if trial.namespace:
            self.cluster.kubectl("delete", "namespace", trial.namespace, "--wait=false", check=False)
            self.cluster.kubectl("delete", "pv", f"{trial.namespace}-models", "--wait=false", check=False)


def print_trial(trial: Trial) -> None:
    for c in trial.checks:
        log(f"    [{'ok' if c['held'] else 'BROKEN'}] {c['name']}: {c['detail']}")
    log(f"  trial {trial.index}: invariants {'held' if trial.held else 'BROKEN'}; requests {trial.requests_ok} ok, "
        f"{trial.requests_failed} failed; swap finished {trial.swap_seconds}s after it began, "
        f"{trial.after_fault_seconds}s after the fault; operator exits by itself: {trial.operator_exits}"
        + (f"; {COMPONENT.get(trial.fault)} healthy after {trial.component_restart_seconds}s"
           if trial.component_restart_seconds else "")
        + (f"; failures: {trial.failures[:3]}" if trial.failures else ""))


def bench(args: argparse.Namespace, cluster: Cluster, holder: list, result: dict) -> None:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    log(f"seed {seed} (repeat this run with --seed {seed})")
    result.update(seed=seed, args=vars(args), trials=[])
    rng = random.Random(seed)
    trials = plan_trials(args, rng)
    cluster.up()
    nodes = cluster.get_json("nodes", "-l", f"nvidia.com/gpu.product={GPU_PRODUCT},drafter.dev/node-runtime=process")
    if len(nodes["items"]) < 2:
        drafter_operator("cluster", "add-nodes", "--count", str(2 - len(nodes["items"])), "--runtime", "process",
                         "--gpus", "8", "--gpu-product", GPU_PRODUCT, "--name-prefix", NODE_PREFIX, timeout=120)
    harness.install_crds(cluster.kubectl)
    log_path = Path(args.operator_log or f"/tmp/swap-faults-operator-{seed}.log")
    # Kept running as the kubelet restarts a pod: its exits on its own are counted (Operator.exit_codes).
    operator = Operator(cluster, log_path, None)
    holder.append(operator)
    operator.start(keep_running=True)
    log(f"operator log: {log_path}")
    harness = Harness(cluster, operator, args, time.strftime("%H%M%S"))
    bench_deadline = time.monotonic() + args.max_minutes * 60
    for trial in trials:
        if time.monotonic() > bench_deadline:
            log(f"--max-minutes {args.max_minutes} reached: {len(trials) - len(result['trials'])} trials not run")
            break
        log(f"trial {trial.index}/{len(trials)}: {trial.kind} swap, {trial.fault} aimed at '{trial.target}'")
        try:
            harness.run(trial)
        except Exception as exc:  # noqa: BLE001 - one trial's failure is a result; the next trial still runs
            trial.error = f"{type(exc).__name__}: {exc}"
            log(f"  trial {trial.index} FAILED: {exc}")
        finally:
            harness.cleanup(trial)
        print_trial(trial)
        result["trials"].append(asdict(trial))


def failing_span(failures: list[str]) -> int:
    """Seconds from the first failed request to the last (each failure starts with its HH:MM:SS): with a
    client that retries at once, Recreate's downtime, not its count of refused connections."""
    if not failures:
        return 0
    stamps = [sum(int(x) * 60 ** i for i, x in enumerate(reversed(f.split()[0].split(":")))) for f in failures]
    return (stamps[-1] - stamps[0]) % 86400 + 1


def report(result: dict) -> None:
    trials = result.get("trials") or []
    print(f"seed {result.get('seed')}: {len(trials)} faults injected")
    print("| # | swap | fault | aimed at | phase hit | invariants held | requests failed / sent | finish after fault "
          "| swap start -> finish | operator exits by itself |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in trials:
        broken = [c["name"] for c in t["checks"] if not c["held"]]
        held = f"all {len(t['checks'])}" if t["held"] else (t["error"] or "BROKEN: " + ", ".join(broken))
        print(f"| {t['index']} | {t['kind']} | {t['fault']}"
              + (f" ({t['component_restart_seconds']} s)" if t.get("component_restart_seconds") else "")
              + f" | {t['target']} | {t['phase_hit'] or '-'} | {held} | {t['requests_failed']} / "
                f"{t['requests_ok'] + t['requests_failed']}"
              + (f" (failing for {failing_span(t['failures'])} s)" if t["failures"] else "")
              + f" | {t['after_fault_seconds']} s | {t['swap_seconds']} s "
                f"| {t['operator_exits']} |")
    bluegreen_failed = sum(t["requests_failed"] for t in trials if t["kind"] != "recreate")
    print(f"invariants held in {sum(t['held'] for t in trials)}/{len(trials)} trials; failed requests in BlueGreen "
          f"trials: {bluegreen_failed}; in Recreate trials (downtime by design): "
          f"{sum(t['requests_failed'] for t in trials if t['kind'] == 'recreate')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="operator SIGKILLs, one per trial (default 20)")
    parser.add_argument("--apiserver-restarts", type=int, default=2, help="kube-apiserver restarts (default 2)")
    parser.add_argument("--etcd-restarts", type=int, default=2, help="etcd restarts (default 2)")
    parser.add_argument("--kinds", default="bluegreen,recreate,gate,rollback,disable",
                        help="swap kinds the operator kills go round (default all five)")
    parser.add_argument("--seed", type=int, default=None, help="the RNG seed (default: a random one, printed)")
    parser.add_argument("--startup-seconds", type=float, default=4, help="engine start-up time (default 4)")
    parser.add_argument("--timeout", type=float, default=240, help="bound of every single wait (default 240)")
    parser.add_argument("--max-minutes", type=float, default=90, help="stop starting trials after this (default 90)")
    parser.add_argument("--operator-log", default=None)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (default: down --wipe)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    unknown = set(args.kinds.split(",")) - set(PHASES)
    if unknown:
        parser.error(f"unknown --kinds {sorted(unknown)}: choose from {sorted(PHASES)}")
    return run_on_own_cluster(args, lambda cluster, holder, result: bench(args, cluster, holder, result), report)


if __name__ == "__main__":
    exit_with(main)
