"""`drafter-operator demo`: the seed's story on the embedded local cluster, end to end.

Brings the local cluster up, installs the CRDs, installs the operator with its Helm chart (its pod runs
as the chart's ServiceAccount, so the whole story runs with the chart's RBAC), declares three DrafterServings
(the no-speculation baseline, the seed's vLLM + EAGLE-3 drafter, SGLang with the public drafter) on
GPU nodes whose engine pods really run (as the engine emulator), waits for them to be Ready, measures
each through its Service and prints what the seed's operators found by hand: the vLLM drafter accepts
about 15% of its tokens and makes serving slower than no speculation at all. Then the operator's
acceptance watch does what the seed's operators did by hand, under traffic: the vLLM drafter goes
Degraded and, with `onDegraded: DisableSpeculation`, is replaced by the no-speculation baseline
(about 1.0x instead of 0.66x) while the SGLang drafter stays healthy at about 1.7x; a timeline and
the final table follow. Then a DrafterTraining trains a new drafter with the real speculators code in
Jobs (on a tiny stand-in target: no GPU here), measures what it must beat (Evaluate) and promotes it
through the serving's gate: benchmarked on its own pod against the baseline and swapped in only because
it beats 1.2x and the current throughput. Last, a
DrafterBenchmark load sweep finds where the retrained drafter stops paying, the serving (drafter.dynamic
fromBenchmark) turns it into vLLM's per-batch-size schedule in a new, gated revision, two more drafter
families on the same target (suffix decoding, DSpark) are swept the same way and `kubectl drafter compare`
picks the family to serve at 1, 8 and 32 streams (demo_sweeps.py), the baseline
takes a hub token from a Secret and a pod label in place (same revision; the token never in the
resource), and a hand-tuned speculative flag is refused before any pod. Throughout, a real Prometheus
evaluates the chart's alert rules (`for` shortened to seconds) against the operator and the engine pods,
and the demo prints when each alert went pending, firing and resolved (drafter_testbed/demo_alerts.py).
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request

import yaml
from rich.console import Console
from rich.table import Table

from drafter_operator.constants import REVISION_LABEL
from drafter_testbed import demo_client as bench
from drafter_testbed import chart
from drafter_testbed import cluster as local
from drafter_testbed import demo_acceptance as watch
from drafter_testbed import demo_alerts
from drafter_testbed import demo_sweeps as sweeps
from drafter_testbed import demo_training
from drafter_testbed import harness
from drafter_testbed import late_build
from drafter_testbed import processes
from drafter_testbed.nodes import PROCESS, RUNTIME_LABEL
from drafter_testbed.volumes import static_claim

# Wide enough for the report table when the output is a file or a CI log, not a terminal.
console = Console(width=None if Console().is_terminal else 140)
NAMESPACE = "drafter-demo"
DEMO_GPU_PRODUCT = "NVIDIA-B200"
OPERATOR_RELEASE = "drafter-operator"
OPERATOR_NAMESPACE = "drafter-system"
OPERATOR_LOGS = f"kubectl -n {OPERATOR_NAMESPACE} logs deploy/{OPERATOR_RELEASE}"
LEGACY_OPERATOR_PROCESS = "demo-operator"

BASE_SPEC = {
    "target": {"model": "/models/Kimi-K2.5", "tensorParallelSize": 8, "maxModelLen": 32768,
               "gpuMemoryUtilization": "0.95", "trustRemoteCode": True, "toolCallParser": "kimi_k2",
               "reasoningParser": "kimi_k2"},
    "placement": {"gpuProduct": DEMO_GPU_PRODUCT, "nodeSelector": {RUNTIME_LABEL: PROCESS}},
    "storage": {"modelClaim": "models", "mountPath": "/models", "shmSize": "64Gi"},
    # The replacement starts beside the degraded revision, which serves until it is Ready: no outage.
    "swap": {"strategy": "BlueGreen"},
}
SERVINGS = {
    "kimi-baseline": {"engine": "vllm", "drafter": {"method": "none"}},
    "kimi-vllm-eagle3": {"engine": "vllm", "drafter": {"method": "eagle3", "model": "/models/drafters/kimi-k25-eagle3",
                                                       "numSpeculativeTokens": 5},
                         "acceptance": {**watch.DEMO_ACCEPTANCE, "onDegraded": "DisableSpeculation"}},
    "kimi-sglang-eagle3": {"engine": "sglang", "drafter": {"method": "eagle3", "model": "AQ-MedAI/Kimi-K2-Instruct-eagle3",
                                                           "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4},
                           "acceptance": {**watch.DEMO_ACCEPTANCE, "onDegraded": "DisableSpeculation"}},
}
WATCHED = [name for name, spec in SERVINGS.items() if "acceptance" in spec]
DEGRADING = "kimi-vllm-eagle3"


def kubectl(*args: str, input: str | None = None, check: bool = True):
    return local.kubectl(local.Layout(), *args, input=input, check=check)


def serving_manifest(name: str, spec: dict) -> dict:
    full = copy.deepcopy(BASE_SPEC)
    if spec["engine"] == "sglang":
        full["target"]["gpuMemoryUtilization"] = "0.9"
    full.update(copy.deepcopy(spec))
    return {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": full}


def ensure_engine_nodes(count: int) -> None:
    nodes = json.loads(kubectl("get", "nodes", "-l", f"{RUNTIME_LABEL}={PROCESS},nvidia.com/gpu.product={DEMO_GPU_PRODUCT}",
                               "-o", "json").stdout)["items"]
    if len(nodes) < count:
        local.add_nodes(count - len(nodes), PROCESS, 8, DEMO_GPU_PRODUCT, "gpu-demo")


def start_operator(layout: local.Layout) -> float:
    """The operator as users install it: `helm install` of charts/drafter-operator, its pod on a process
    node as the chart's ServiceAccount (drafter_testbed/chart.py). Returns seconds from install to the pod Ready."""
    # An operator process an earlier version of the demo started beside the cluster would act too.
    processes.stop(LEGACY_OPERATOR_PROCESS, layout.run)
    started = time.monotonic()
    with console.status(f"helm install {OPERATOR_RELEASE} charts/drafter-operator -n {OPERATOR_NAMESPACE}"):
        chart.install_or_upgrade(layout, OPERATOR_RELEASE, OPERATOR_NAMESPACE, **{
            "operator.acceptanceIntervalSeconds": str(watch.DEMO_ACCEPTANCE_INTERVAL_SECONDS)})
        pod = chart.wait_operator_ready(layout, OPERATOR_NAMESPACE, OPERATOR_RELEASE)
    seconds = time.monotonic() - started
    console.print(f"Installed the operator with Helm: release {OPERATOR_RELEASE} in {OPERATOR_NAMESPACE}, pod "
                  f"{pod['metadata']['name']} Ready {seconds:.1f} s after `helm upgrade --install`, running as "
                  f"ServiceAccount {pod['spec']['serviceAccountName']} with the chart's RBAC.")
    return seconds


def start_prometheus(layout: local.Layout):
    """The demo's Prometheus with the chart's alert rules, announced; scraping the operator once this returns."""
    prometheus, fors = demo_alerts.start(layout, OPERATOR_RELEASE, OPERATOR_NAMESPACE, NAMESPACE)
    demo_alerts.announce(console, prometheus, fors)
    return prometheus


def _joined(components: list[str]) -> None:
    if components:
        console.print(f"{', '.join(components)} joined the cluster (built in the background).")


def wait_ready(names: list[str], timeout: float = 240) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    with console.status("waiting for the engines to load and become Ready"):
        while time.monotonic() < deadline:
            items = json.loads(kubectl("-n", NAMESPACE, "get", "drafterservings", "-o", "json").stdout)["items"]
            by_name = {i["metadata"]["name"]: i for i in items}
            ready = {n for n, i in by_name.items() for c in (i.get("status") or {}).get("conditions") or []
                     if c["type"] == "Ready" and c["status"] == "True"}
            if set(names) <= ready:
                return by_name
            time.sleep(1)
    raise local.ClusterError(f"DrafterServings not Ready within {timeout:.0f}s; see `kubectl -n {NAMESPACE} describe drafterservings` "
                       f"and `{OPERATOR_LOGS}`")


def main(max_tokens: int = 256, prompts: int = 3) -> int:
    layout = local.Layout()
    # A cold machine: the cluster starts without what its first scenes do not run, built meanwhile (late_build.py).
    late = late_build.LateBuild(layout.logs / "late-build.log", console)
    building = late.start_build()
    if building:
        console.print(f"Building {', '.join(building)} in the background (niced; log {late.log}): the story starts "
                      "without them and each joins once built.")
    harness.start_local(layout, join_later=True)
    for component in local.LATE_COMPONENTS.values():
        late.when_built(component, lambda: _joined(local.join_late(layout)))
    ensure_engine_nodes(len(SERVINGS) + 1)  # one spare 8-GPU node for a BlueGreen replacement
    harness.install_crds(kubectl)
    kubectl("create", "namespace", NAMESPACE, check=False)
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(static_claim(NAMESPACE, "models", "/tmp/drafter-demo-models")))
    start_operator(layout)
    # Each run tells the story from the start: a serving left from an earlier run may already be acted on.
    # Foreground: returns once their Deployments and Services are gone too, not just the servings. Then
    # whatever an interrupted run left to a garbage collector that had not yet mapped the CRD.
    kubectl("-n", NAMESPACE, "delete", "drafterservings", "--all", "--cascade=foreground", "--wait=true",
            "--timeout=120s")
    # An earlier run's benchmarks would teach the new servings their thresholds and schedules at once.
    kubectl("-n", NAMESPACE, "delete", "drafterbenchmarks", "--all", "--wait=true", "--timeout=120s")
    kubectl("-n", NAMESPACE, "delete", "deployments,services", "-l", "drafter.dev/serving", "--wait=true",
            "--timeout=120s")
    timeline = watch.Timeline(started=time.monotonic())
    alerts = demo_alerts.AlertWatch(timeline.started)
    alerts.start()
    # After the clean-up: an earlier run's servings would raise alerts about this story's names. Before the story
    # where Prometheus is built; where it is being built, from the moment it is (its alerts on the same clock).
    late.when_built("prometheus", lambda: alerts.attach(start_prometheus(layout)))
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all([serving_manifest(n, s) for n, s in SERVINGS.items()]))
    for name in SERVINGS:
        timeline.mark(name, "kubectl apply", SERVINGS[name]["drafter"]["method"])
    console.print(f"Declared {len(SERVINGS)} DrafterServings in namespace {NAMESPACE}: {', '.join(SERVINGS)}")
    servings = wait_ready(list(SERVINGS))
    for item in servings.values():
        timeline.observe(item)
    console.print(kubectl("-n", NAMESPACE, "get", "drafterservings", "-o", "wide").stdout)

    results = {name: measure(name, servings[name], max_tokens, prompts) for name in SERVINGS}
    print_report(servings, results, "Single-stream decode through each DrafterServing's Service")

    rule = watch.DEMO_ACCEPTANCE
    console.print(f"\nThe operator watches {', '.join(WATCHED)}: acceptance below {float(rule['minAcceptanceRate']):.0%} "
                  f"over {rule['window']} for {rule['for']} is Degraded; onDegraded DisableSpeculation.")
    watched = watch.watch_until_acted(console, lambda: {n: i for n, i in _servings().items() if n in WATCHED},
                                      {n: service_url(n, servings[n]) for n in WATCHED}, BASE_SPEC["target"]["model"],
                                      DEGRADING, timeline)
    watch.print_timeline(console, timeline)
    console.print(f"{DEGRADING} status.degradedAction:\n{watch.describe_action(watched[DEGRADING])}")
    servings = wait_ready(list(SERVINGS))
    results[DEGRADING] = measure(DEGRADING, servings[DEGRADING], max_tokens, prompts)
    print_report(servings, results, f"After the operator acted: {DEGRADING} serves without speculation")
    console.print(kubectl("-n", NAMESPACE, "get", "drafterservings", "-o", "wide").stdout)
    shown = alerts.changes_since(0)
    if alerts.prometheus is None:
        console.print("Prometheus is still being built in the background: the alerts it raises are shown at the end.")
    else:
        demo_alerts.print_changes(console, shown, "Alerts the chart's rules raised so far (seconds since kubectl apply)")
    python = demo_training.training_python(console)
    if python:
        # The training's torchrun pods meet by pod name: the cluster DNS must have joined.
        late.wait("coredns", "the training's pods find each other by name through the cluster DNS")
        servings = show_trained_promotion(layout, python, max_tokens, prompts, results)
    else:
        console.print("\nNo training environment (`./dev demo` builds it in the background; DRAFTER_TRAINING_PYTHON "
                      "names one): the retrained drafter is declared by hand instead of trained by a DrafterTraining.")
        servings = show_gated_promotion(max_tokens, prompts, results)
    # Once, after whichever promotion ran: the serving, its revisions, pods and gate benchmarks as one tree.
    show_plugin_tree(DEGRADING)
    swept = show_load_sweep(max_tokens)
    show_family_comparison(swept, max_tokens)
    show_engine_pod_settings()
    show_refused_spelling()
    late.wait("prometheus", "the alerts of the whole story")
    demo_alerts.print_changes(console, alerts.changes_since(len(shown)),
                              "\nAlerts since then (seconds since kubectl apply)")
    alerts.stop()
    prometheus = alerts.prometheus
    missed = f" ({alerts.failed_polls} of the demo's polls of it failed)" if alerts.failed_polls else ""
    console.print(f"\nPrometheus keeps running too: {prometheus.url}/alerts (its API: {prometheus.url}/api/v1/alerts)"
                  f"{missed}.")
    late.finish()  # kwok last: the cluster left running runs everything `cluster up` starts
    console.print(f"\nThe operator keeps running (log: `{OPERATOR_LOGS}`); "
                  f"`eval \"$(drafter-operator cluster env)\"` then `kubectl -n {NAMESPACE} get drafter`. "
                  "`drafter-operator cluster down` stops everything.")
    return 0


def _servings() -> dict[str, dict]:
    items = json.loads(kubectl("-n", NAMESPACE, "get", "drafterservings", "-o", "json").stdout)["items"]
    return {i["metadata"]["name"]: i for i in items}


def service_url(name: str, serving: dict) -> str:
    ip = json.loads(kubectl("-n", NAMESPACE, "get", "service", name, "-o", "json").stdout)["spec"]["clusterIP"]
    return f"http://{ip}:{serving['status']['endpoint']['port']}"


def running_drafter(serving: dict) -> dict:
    """The drafter the active revision runs (after DisableSpeculation it is not the spec's)."""
    status = serving.get("status") or {}
    record = next((r for r in status.get("revisions") or [] if r["name"] == status.get("activeRevision")), {})
    return record.get("drafterSpec") or serving["spec"]["drafter"]


def routed_revisions(service: dict, pods: list[dict]) -> set[str]:
    """The revisions of the pods a Service sends requests to: those its selector matches that are Ready and not being
    deleted (what the process runner's proxy, like kube-proxy, routes to). Pure."""
    selector = service["spec"].get("selector") or {}
    routed = set()
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])
        if ready and not pod["metadata"].get("deletionTimestamp") and all(labels.get(k) == v for k, v in selector.items()):
            routed.add(labels.get(REVISION_LABEL, ""))
    return routed


def wait_routed(name: str, serving: dict, timeout: float = 120) -> None:
    """Until the Service sends requests to the active revision's pods alone. Right after the operator acts, the old
    revision's pod may stay Ready and selected a little longer (more so on a busy machine), and a measurement then
    would mix its drafter's figures into the new revision's. Twice in a row, a proxy sync apart."""
    revision = (serving.get("status") or {}).get("activeRevision")
    deadline, agreed = time.monotonic() + timeout, 0
    while agreed < 2:
        service = json.loads(kubectl("-n", NAMESPACE, "get", "service", name, "-o", "json").stdout)
        pods = json.loads(kubectl("-n", NAMESPACE, "get", "pods", "-o", "json").stdout)["items"]
        routed = routed_revisions(service, pods)
        agreed = agreed + 1 if revision and routed == {revision} else 0
        if agreed < 2:
            if time.monotonic() > deadline:
                raise local.ClusterError(f"Service {name} still routes to revisions {sorted(routed)}, not {revision} "
                                         f"alone, after {timeout:.0f} s: see `kubectl -n {NAMESPACE} get pods -L "
                                         f"{REVISION_LABEL}`")
            time.sleep(1.5)


def measure(name: str, serving: dict, max_tokens: int, prompts: int) -> bench.RunResult:
    drafter = running_drafter(serving)
    k = drafter.get("numSpeculativeTokens") or drafter.get("numSteps")
    with console.status(f"waiting until {name}'s Service routes to its active revision alone"):
        wait_routed(name, serving)
    with console.status(f"measuring {name}: {prompts} prompts x {max_tokens} tokens, one stream"):
        return bench.run(service_url(name, serving), serving["spec"]["engine"], BASE_SPEC["target"]["model"],
                         bench.DEFAULT_PROMPTS[:prompts], max_tokens, num_speculative_tokens=k)


RETRAINED_DRAFTER = "/models/drafters/kimi-k25-eagle3-regenerated"
GATE = {"minSpeedup": "1.2", "baseline": {"servingRef": {"name": "kimi-baseline"}}, "numPrompts": 3, "maxTokens": 256}


def retrained_spec() -> dict:
    """The retrained drafter behind a gate, drafting only at the loads a sweep says pay (vLLM schedule)."""
    spec = copy.deepcopy(SERVINGS[DEGRADING])
    spec["drafter"].update(model=RETRAINED_DRAFTER, dynamic="fromBenchmark")
    spec["swap"] = {"strategy": "BlueGreen", "gate": GATE}
    return spec


def show_trained_promotion(layout: local.Layout, python: str, max_tokens: int, prompts: int,
                           results: dict[str, bench.RunResult]) -> dict[str, dict]:
    """A DrafterTraining trains the new drafter (real speculators code in Jobs), benchmarks what it must
    beat and promotes it into the degraded serving through the gate (drafter_testbed/demo_training.py)."""
    name = DEGRADING
    target = BASE_SPEC["target"]["model"]
    console.print(f"\nA DrafterTraining trains the replacement for {name}'s drafter: speculators 0.9.0 on the CPU "
                  f"(a tiny stand-in for {target} on the model volume), then Evaluate (the serving as it runs now) "
                  f"and Promote through a one-shot gate minSpeedup {GATE['minSpeedup']} against kimi-baseline.")
    demo_training.prepare(layout, NAMESPACE, target, python, kubectl)
    body = demo_training.manifest(NAMESPACE, target, RETRAINED_DRAFTER, name, GATE, BASE_SPEC["placement"])
    item = demo_training.run(console, kubectl, NAMESPACE, body)
    console.print(kubectl("-n", NAMESPACE, "get", "draftertrainings").stdout)
    demo_training.report(console, item, kubectl, NAMESPACE)
    servings = wait_ready(list(SERVINGS))
    results[name] = measure(name, servings[name], max_tokens, prompts)
    print_report(servings, results, f"After the trained drafter's promotion: {name} serves it")
    return servings


def show_gated_promotion(max_tokens: int, prompts: int, results: dict[str, bench.RunResult]) -> dict[str, dict]:
    """The retrained drafter replaces the disabled one only after its own benchmark beats the gate."""
    name = DEGRADING
    before = _servings()[name]["status"]["activeRevision"]
    spec = retrained_spec()
    kubectl("apply", "-f", "-", input=yaml.safe_dump(serving_manifest(name, spec)))
    console.print(f"\n{name}: drafter -> {RETRAINED_DRAFTER}, spec.swap.gate minSpeedup {GATE['minSpeedup']} "
                  f"against kimi-baseline (the spec change also ends DisableSpeculation)")
    deadline = time.monotonic() + 300
    with console.status("") as status:
        while time.monotonic() < deadline:
            item = _servings()[name]
            progressing = watch.condition(item, "Progressing")
            status.update(f"{name}: {progressing.get('reason')}: {progressing.get('message', '')[:100]}")
            active = item["status"].get("activeRevision")
            if active != before and watch.condition(item, "Ready").get("status") == "True":
                break
            if progressing.get("reason") == "RevisionFailed":
                raise local.ClusterError(f"{name}: the gate refused the retrained drafter: {progressing.get('message')}")
            time.sleep(1)
        else:
            raise local.ClusterError(f"{name}: no promotion within 300 s; see `kubectl describe drafterserving {name}`")
    console.print(kubectl("-n", NAMESPACE, "get", "drafterbenchmarks", "-l", "drafter.dev/gate=true").stdout)
    gate = json.loads(kubectl("-n", NAMESPACE, "get", "drafterbenchmarks", "-l", "drafter.dev/gate=true", "-o", "json").stdout)
    verdicts = [(g["metadata"]["name"], (g.get("status") or {}).get("result", {}).get("verdictMessage")) for g in gate["items"]]
    console.print(f"gate: {verdicts}; traffic moved from revision {before} to {active}")
    servings = wait_ready(list(SERVINGS))
    results[name] = measure(name, servings[name], max_tokens, prompts)
    print_report(servings, results, f"After the gated swap: {name} serves the retrained drafter")
    return servings


def show_plugin_tree(name: str) -> None:
    """What `kubectl drafter get NAME` prints (the kubectl plugin's own builder, on the objects it reads)."""
    from datetime import datetime, timezone

    from drafter_operator.kubectl_plugin import tree

    serving = json.loads(kubectl("-n", NAMESPACE, "get", "drafterserving", name, "-o", "json").stdout)
    pods = json.loads(kubectl("-n", NAMESPACE, "get", "pods", "-l", f"drafter.dev/serving={name}", "-o", "json").stdout)
    benchmarks = json.loads(kubectl("-n", NAMESPACE, "get", "drafterbenchmarks", "-o", "json").stdout)
    now = datetime.now(timezone.utc)
    console.print(f"\n$ kubectl drafter get {name} -n {NAMESPACE}   (the kubectl plugin, docs/kubectl-plugin.md)")
    console.print(tree.render(tree.build(serving, pods["items"], benchmarks["items"], now), now),
                  markup=False, highlight=False)


def show_load_sweep(max_tokens: int) -> dict:
    """A DrafterBenchmark sweep: aggregate throughput at growing concurrency, where speculation stops paying;
    the serving (drafter.dynamic fromBenchmark) then drafts only below that load. Returns the sweep."""
    name, swept = "vllm-load-sweep", DEGRADING
    if not _servings()[swept]["spec"]["drafter"].get("dynamic"):
        # A promoted drafter keeps the serving's drafter settings; the schedule is asked for here. That
        # is a new revision (through the gate): the sweep measures it once it serves.
        kubectl("-n", NAMESPACE, "patch", "drafterserving", swept, "--type", "merge",
                "-p", json.dumps({"spec": {"drafter": {"dynamic": "fromBenchmark"}}}))
        settled(swept)
    before = _servings()[swept]["status"]["activeRevision"]
    item = sweeps.run_sweep(kubectl, console, NAMESPACE, name, swept, max_tokens)
    status = item["status"]
    result = status["result"]
    table = Table(title=f"DrafterBenchmark {name}: {swept} (revision {status.get('revision')}) against kimi-baseline, "
                        "output tok/s")
    for column in ("streams", "kimi-baseline", swept, "speedup"):
        table.add_column(column)
    for level in result.get("levels") or []:
        table.add_row(str(level["concurrency"]), f"{level.get('baselineTokensPerSecond') or 0:.0f}",
                      f"{level['tokensPerSecond']:.0f}", f"{level.get('speedup') or 0:.2f}x")
    console.print(table)
    bracket = result.get("crossover")
    if bracket and bracket.get("aboveConcurrency") is not None:
        # The sweep measured levels between the last one above 1.0x and the first below (the refined rows
        # at the end of the table), so the break-even is measured, not the first level of 1, 8, 32 below 1.0x.
        console.print(f"break-even: between {bracket['aboveConcurrency']} and {bracket['belowConcurrency']} streams "
                      f"(interpolated {bracket.get('estimate')}; the sweep refined {sweeps.SWEEP_LEVELS} until its levels "
                      "bracket it within 10%). Verification multiplies the tokens each step computes, so under load "
                      "speculation costs throughput.")
    elif bracket:
        console.print(f"Speculation is slower already at {bracket['belowConcurrency']} stream(s).")
    else:
        console.print(f"No crossover up to {sweeps.SWEEP_LEVELS[-1]} streams.")
    show_learned_schedule(swept, before)
    return item


def show_family_comparison(retrained_sweep: dict, max_tokens: int) -> None:
    """Suffix decoding and a DSpark drafter on the same target beside the retrained EAGLE-3 drafter, compared in
    one DrafterBenchmark (spec.candidates): which family to serve at 1, 8 and 32 streams. Each family runs its
    own static configuration: the swept serving now runs its load schedule, and a schedule beside static
    families would compare a schedule with a family, so the EAGLE-3 column is a static serving of its drafter."""
    swept = _servings()[retrained_sweep["spec"]["servingRef"]["name"]]
    static = {key: value for key, value in swept["spec"]["drafter"].items() if key != "dynamic"}
    families = {"kimi-vllm-eagle3": {"engine": "vllm", "drafter": static}, **sweeps.FAMILIES}
    ensure_engine_nodes(len(SERVINGS) + 1 + len(families))
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all([serving_manifest(n, s) for n, s in families.items()]))
    console.print(f"\nDeclared {', '.join(families)} on the same target: the retrained EAGLE-3 drafter at its static "
                  "k, and two more drafter families to compare.")
    wait_ready(list(families))
    name = "kimi-families"
    candidates = list(families)
    item = sweeps.run_comparison(kubectl, console, NAMESPACE, name, candidates, max_tokens)
    console.print(f"DrafterBenchmark {name}: {watch.condition(item, 'Complete').get('message')}")
    sweeps.show_comparison(kubectl, console, NAMESPACE, [name])
    console.print("Suffix decoding drafts without a model forward and DSpark drafts its block in one forward; under load "
                  "every verified draft token is compute, and where no family beats its baseline the pick is no "
                  "speculation.")


def settled(name: str, timeout: float = 300) -> dict:
    """The serving once it reflects its latest spec and its active revision serves (no swap under way)."""
    deadline = time.monotonic() + timeout
    with console.status(f"{name}: waiting for its new revision to serve"):
        while time.monotonic() < deadline:
            item = _servings()[name]
            status = item.get("status") or {}
            if status.get("observedGeneration") == item["metadata"]["generation"] and \
                    watch.condition(item, "Progressing").get("reason") == "RevisionActive" and \
                    watch.condition(item, "Ready").get("status") == "True":
                return item
            time.sleep(1)
    raise local.ClusterError(f"{name}: no settled revision within {timeout:.0f} s; see `kubectl describe drafterserving {name}`")


def show_learned_schedule(name: str, before: str) -> None:
    """spec.drafter.dynamic fromBenchmark: the sweep becomes vLLM's per-batch-size schedule, in a new
    revision that goes through the same gate before it takes traffic."""
    deadline = time.monotonic() + 300
    with console.status(f"{name}: learning the batch-size schedule from the sweep"):
        while time.monotonic() < deadline:
            item = _servings()[name]
            schedule = item["status"].get("speculationSchedule") or {}
            active = item["status"].get("activeRevision")
            if schedule.get("scheduledRevision") == active != before and \
                    watch.condition(item, "Ready").get("status") == "True":
                break
            time.sleep(1)
        else:
            raise local.ClusterError(f"{name}: the learned schedule did not take traffic within 300 s: {schedule}")
    ranges = ", ".join(f"batch {r['start']}-{r['end']}: k={r['numSpeculativeTokens']}" for r in schedule["ranges"])
    console.print(f"{name} status.speculationSchedule: {schedule['message']}\n  rendered into --speculative-config "
                  f"num_speculative_tokens_per_batch_size ({ranges}); revision {before} -> {active}, "
                  "through the gate")


DEMO_HUB_TOKEN = "hf_demoTokenThatMustNeverBePrinted"


def show_engine_pod_settings() -> None:
    """A hub token from a Secret and cluster pod policy, applied to the running baseline in place: the
    same revision and Deployment, the engine sees the variable by name, the token is nowhere in the resource."""
    name = "kimi-baseline"
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "hf-token", f"--from-literal=HF_TOKEN={DEMO_HUB_TOKEN}",
            check=False)
    before = _servings()[name]["status"]["activeRevision"]
    spec = {**copy.deepcopy(SERVINGS[name]), "envFrom": [{"secretRef": {"name": "hf-token"}}],
            "env": [{"name": "NCCL_DEBUG", "value": "WARN"}], "pod": {"labels": {"example.com/team": "inference"}}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(serving_manifest(name, spec)))
    selector = f"drafter.dev/serving={name},example.com/team=inference"
    deadline, pod = time.monotonic() + 180, None
    with console.status(f"{name}: envFrom Secret hf-token, env NCCL_DEBUG, pod label example.com/team (in place)"):
        while time.monotonic() < deadline and pod is None:
            items = json.loads(kubectl("-n", NAMESPACE, "get", "pods", "-l", selector, "-o", "json").stdout)["items"]
            pod = next((p for p in items if any(c["type"] == "Ready" and c["status"] == "True"
                                                for c in p.get("status", {}).get("conditions") or [])), None)
            time.sleep(1)
    if pod is None:
        raise local.ClusterError(f"{name}: the changed pod template did not become Ready within 180 s")
    item = _servings()[name]
    port = item["status"]["endpoint"]["port"]
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/emulator/state", timeout=10) as response:
        names = json.loads(response.read())["environment"]["names"]
    shown = kubectl("-n", NAMESPACE, "get", "drafterserving,deployment", "-l", f"drafter.dev/serving={name}",
                    "-o", "yaml").stdout + kubectl("-n", NAMESPACE, "get", "drafterserving", name, "-o", "yaml").stdout
    console.print(f"\n{name}: revision {before} -> {item['status']['activeRevision']} (pod settings never make a new "
                  f"revision); the engine sees {[n for n in names if n in ('HF_TOKEN', 'NCCL_DEBUG', 'HF_HUB_OFFLINE')]} "
                  f"by name; the token in the DrafterServing or its Deployment: {DEMO_HUB_TOKEN in shown}")


def show_refused_spelling() -> None:
    """Hand-tuned flags that would silently change the drafter: refused at apply, or before any pod."""
    name = "kimi-vllm-hand-tuned"
    spec = copy.deepcopy(SERVINGS["kimi-vllm-eagle3"])
    # An exact spelling of an owned flag: the CRD's CEL rule refuses it at kubectl apply.
    spec["target"] = {**BASE_SPEC["target"], "extraArgs": ["--speculative-config.num_speculative_tokens", "3"]}
    proc = kubectl("apply", "-f", "-", input=yaml.safe_dump(serving_manifest(name, spec)), check=False)
    console.print(f"\n{name}: extraArgs {spec['target']['extraArgs']} -> kubectl apply exit {proc.returncode}:\n"
                  f"  {proc.stderr.strip()[:200]}")
    # vLLM's own abbreviation of --spec-tokens: only the engine's matching rules see it; InvalidSpec, no pod.
    spec["target"]["extraArgs"] = ["--spec-tok", "3"]
    kubectl("apply", "-f", "-", input=yaml.safe_dump(serving_manifest(name, spec)))
    deadline = time.monotonic() + 60
    ready: dict = {}
    while time.monotonic() < deadline and ready.get("reason") != "InvalidSpec":
        item = json.loads(kubectl("-n", NAMESPACE, "get", "drafterserving", name, "-o", "json").stdout)
        ready = next((c for c in (item.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})
        time.sleep(0.5)
    pods = kubectl("-n", NAMESPACE, "get", "pods", "-l", f"drafter.dev/serving={name}", "-o", "name").stdout.split()
    console.print(f"{name}: extraArgs {spec['target']['extraArgs']} -> Ready={ready.get('status')} "
                  f"({ready.get('reason')}), {len(pods)} pods:\n  {ready.get('message')}")
    kubectl("-n", NAMESPACE, "delete", "drafterserving", name, "--wait=false")


def print_report(servings: dict[str, dict], results: dict[str, bench.RunResult], title: str) -> None:
    baseline = results["kimi-baseline"].tokens_per_second
    table = Table(title=title)
    for column in ("serving", "engine", "drafter", "tok/s", "ms/token", "acceptance", "accept length", "speedup",
                   "DrafterCompatible"):
        table.add_column(column)
    for name, result in results.items():
        spec = servings[name]["spec"]
        acceptance = result.acceptance
        compatible = next((c for c in servings[name]["status"]["conditions"] if c["type"] == "DrafterCompatible"), {})
        speedup = result.tokens_per_second / baseline if baseline else 0.0
        table.add_row(name, spec["engine"], running_drafter(servings[name])["method"], f"{result.tokens_per_second:.1f}",
                      f"{result.ms_per_token:.1f}",
                      f"{acceptance.acceptance_rate:.1%}" if acceptance and acceptance.acceptance_rate is not None else "-",
                      f"{acceptance.mean_acceptance_length:.2f}" if acceptance and acceptance.mean_acceptance_length else "-",
                      f"{speedup:.2f}x", f"{compatible.get('status', '?')} ({compatible.get('reason', '')})")
    console.print(table)
    for name, result in results.items():
        if name != "kimi-baseline" and baseline and result.tokens_per_second < baseline:
            console.print(f"[bold red]{name}[/]: speculation is slower than no speculation "
                          f"({result.tokens_per_second / baseline:.2f}x); its drafter should not serve.")
