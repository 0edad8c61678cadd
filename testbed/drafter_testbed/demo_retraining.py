"""`drafter-operator demo --story retraining`: a drafter trained for code meets traffic in other languages, and the
serving retrains it from what it was asked.

The story, on the embedded local cluster with the operator installed by its chart:

1. `kimi-adaptive` serves Kimi-K2.5 on vLLM with the seed's EAGLE-3 drafter, captures every request to a claim in its
   namespace (`spec.capture`), and has a retraining policy (`spec.retraining`: on drift, at least
   `MIN_NEW_SAMPLES` new captured prompts, promoted through a gate).
2. A DrafterTraining trains an EAGLE-3 drafter "for code" and promotes it through its gate: the serving records
   what the gate measured (`status.acceptance.atPromotion`).
3. Code traffic: the live acceptance is at or above the gate's figure.
4. The traffic shifts to chat in other languages: the live acceptance length falls below the gate's figure by
   more than `driftTolerance`, `DriftDetected` turns True, and the serving starts its retraining: a
   DrafterTraining from its captured prompts (de-duplicated, split, answered by the target), warm-started from
   the code drafter.
5. The retrained drafter passes Evaluate and the gate and is swapped in; the live acceptance on the same traffic
   comes back.

It prints the live acceptance before the shift, after it and after the promotion.

What is real: the operator, the chart, the capture sidecar and the claim, the drift verdict, the retraining
controller, every training stage's framework code (speculators 0.9.0 on the CPU, on a tiny stand-in target at the
Kimi path), the gates and the BlueGreen swaps. What is modelled: the engine (the emulator) gives each drafter the
acceptance its profile entry states per kind of traffic (emulator-profiles.yaml: `code-trained-kimi-k2.5-eagle3`,
`retrained-from-traffic`), since no 1T target can train or serve here.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import dataclass, field

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from drafter_operator import timestamps
from drafter_testbed import cluster as local
from drafter_testbed import demo, demo_training, harness
from drafter_testbed import demo_acceptance as watch
from drafter_testbed import demo_client as bench
from drafter_testbed.volumes import static_claim

console = demo.console
NAMESPACE = "drafter-retraining"
SERVING = "kimi-adaptive"
TARGET = demo.BASE_SPEC["target"]["model"]
SEED_DRAFTER = "/models/drafters/kimi-k25-eagle3"
CODE_TRAINING = "kimi-k25-eagle3-code"
CODE_DRAFTER = f"/models/drafters/{CODE_TRAINING}"
#: Each retraining exports to <this>-r<N> (the profile's `*from-traffic-r*` entry).
RETRAINED_PREFIX = "/models/drafters/kimi-k25-eagle3-from-traffic"
CAPTURE_CLAIM = "kimi-capture"
MIN_NEW_SAMPLES = 24
#: Gate of both promotions: the new drafter's own pods, benchmarked before traffic moves, on the whole built-in set
#: (Evaluate measures the drafter serving on the same prompts, and the new one must beat it).
GATE = {"minAcceptanceRate": "0.5", "numPrompts": 6, "maxTokens": 192}
#: Short windows so the story takes minutes: the verdict needs 200 drafted tokens in a 30 s window, held 30 s.
ACCEPTANCE = {"minAcceptanceRate": "0.05", "window": "30s", "for": "30s", "minDraftTokens": 200,
              "driftTolerance": "0.25"}
TRAFFIC_STREAMS = 2
TRAFFIC_MAX_TOKENS = 96

CODE_PROMPTS = (
    "Write a Python function that merges two sorted lists.\n```python\ndef merge(a, b):\n```",
    "Fix this:\n```js\nconst total = items.reduce((a, b) => a + b.price);\n```\nIt returns NaN on an empty list.",
    "Refactor this to use asyncio:\n```python\nfor url in urls:\n    results.append(fetch(url))\n```",
    "Write a SQL query:\n```sql\nSELECT customer_id, SUM(amount) FROM orders GROUP BY customer_id;\n```\n"
    "Add the top 5 only.",
    "Add type hints and a docstring:\n```python\ndef parse(line):\n    key, value = line.split('=')\n"
    "    return key, value\n```",
    "Explain this Rust error:\n```rust\nlet s = String::from(\"x\");\nlet t = s;\nprintln!(\"{}\", s);\n```",
)
NON_ENGLISH_PROMPTS = (
    "Wie erkläre ich meinen Kindern, warum der Himmel blau ist, und was sage ich über den Sonnenuntergang?",
    "¿Qué me recomiendas visitar en Sevilla en dos días, y dónde se come bien por la noche?",
    "Pourquoi les feuilles changent-elles de couleur en automne, et est-ce que cela dépend du froid ?",
    "请用简单的语言解释一下光合作用，以及它为什么对地球上的生命很重要。",
    "日本で初めて温泉に行くときのマナーを教えてください。",
    "Quali sono le differenze tra il caffè espresso e il caffè americano, e quale ha più caffeina?",
    "Объясни, пожалуйста, как работает двигатель внутреннего сгорания.",
    "Ik wil een fiets kopen voor de stad: is het beter om een fiets met of zonder versnellingen te nemen, en wat "
    "kost dat van een goede winkel?",
)


def retraining_template() -> dict:
    """The DrafterTraining each retraining runs: the story's first training, trained on the serving's capture
    instead of a dataset, without promote (the serving promotes each run itself)."""
    placement = demo.BASE_SPEC["placement"]
    spec = demo_training.manifest(NAMESPACE, TARGET, RETRAINED_PREFIX, SERVING, GATE, placement)["spec"]
    spec.pop("promote")
    spec["output"] = {"path": RETRAINED_PREFIX}
    spec["data"] = {"capture": {"claimName": CAPTURE_CLAIM, "heldOutFraction": "0.2"}, "generation": {"engine": "vllm"},
                    "numSamples": 64, "maxTokens": 128}
    return spec


def serving_manifest() -> dict:
    spec = {
        "engine": "vllm",
        # The seed's drafter (15 % acceptance, 0.66x) until one is trained for this traffic.
        "drafter": {"method": "eagle3", "model": SEED_DRAFTER, "numSpeculativeTokens": 5},
        "capture": {"sampleRate": "1", "claimName": CAPTURE_CLAIM},
        "acceptance": ACCEPTANCE,
        "retraining": {"template": {"spec": retraining_template()}, "onDrift": True, "minNewSamples": MIN_NEW_SAMPLES,
                       "gate": GATE},
    }
    return {**demo.serving_manifest(SERVING, spec), "metadata": {"name": SERVING, "namespace": NAMESPACE}}


class Traffic:
    """Streams of completions back to back through the Service, from one prompt list, switchable at any time."""

    def __init__(self, base_url: str, prompts: tuple[str, ...]):
        self.base_url, self.prompts = base_url, prompts
        self.stop_event = threading.Event()
        self.sent = 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(TRAFFIC_STREAMS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _run(self, offset: int) -> None:
        n = offset
        while not self.stop_event.is_set():
            prompts = self.prompts
            # A connection per request, as many clients behind a load balancer: a kept-alive one stays with the pod
            # it was opened to, and would keep a swapped-out revision busy (and measured) until its drain timeout.
            try:
                with httpx.Client(timeout=60) as client:
                    bench.stream_completion(client, self.base_url, TARGET, prompts[n % len(prompts)],
                                            TRAFFIC_MAX_TOKENS)
                self.sent += 1
            except httpx.HTTPError:
                self.stop_event.wait(0.5)  # a swap moving the Service; the next request finds the new pods
            n += TRAFFIC_STREAMS

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=70)


@dataclass
class Reading:
    """What the serving's status said of the live window at one point of the story."""

    phase: str
    traffic: str
    drafter: str
    rate: float | None
    length: float | None
    at_promotion: float | None
    drift: str


@dataclass
class Story:
    readings: list[Reading] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def say(self, text: str) -> None:
        console.print(f"[{time.monotonic() - self.started:5.0f} s] {text}")


def serving() -> dict:
    return json.loads(demo.kubectl("-n", NAMESPACE, "get", "drafterserving", SERVING, "-o", "json").stdout)


def ready(item: dict) -> bool:
    return watch.condition(item, "Ready").get("status") == "True"


def serving_when(predicate):
    """A poll for wait_for: the serving as read, once ``predicate`` holds of it; None before."""
    def poll():
        item = serving()
        return item if predicate(item) else None
    return poll


def active_drafter(item: dict) -> str:
    drafter = demo.running_drafter(item)
    return drafter.get("model") or drafter.get("method", "-")


def wait_for(what: str, predicate, timeout: float, show=None):
    deadline = time.monotonic() + timeout
    with console.status(what) as status:
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            if show is not None:
                status.update(f"{what}: {show()}")
            time.sleep(2)
    raise local.ClusterError(f"{what}: not within {timeout:.0f} s; see `kubectl -n {NAMESPACE} describe "
                             f"drafterserving {SERVING}` and `{demo.OPERATOR_LOGS}`")


def live_window(revision: str, since: float):
    """The serving's live acceptance once it describes ``revision`` and a window that ended after ``since`` (a
    wall-clock time); None before."""
    item = serving()
    acceptance = (item.get("status") or {}).get("acceptance") or {}
    end = acceptance.get("windowEnd")
    if acceptance.get("revision") != revision or acceptance.get("meanLength") is None or not end:
        return None
    return item if timestamps.parse(end).timestamp() > since else None


def read(item: dict, phase: str, traffic: str) -> Reading:
    status = item.get("status") or {}
    acceptance = status.get("acceptance") or {}
    drift = watch.condition(item, "DriftDetected")
    return Reading(phase, traffic, active_drafter(item), acceptance.get("rate"), acceptance.get("meanLength"),
                   (acceptance.get("atPromotion") or {}).get("acceptanceLength"),
                   f"{drift.get('status', '-')} ({drift.get('reason', '-')})")


def settle_and_read(story: Story, phase: str, traffic: str, window_s: float = 35) -> Reading:
    """A full window of this traffic on the active revision, then its figures from the serving's status."""
    revision = serving()["status"]["activeRevision"]
    since = time.time() + window_s  # a window that began after this traffic did
    item = wait_for(f"a full {ACCEPTANCE['window']} window of {traffic} traffic on revision {revision}",
                    lambda: live_window(revision, since), window_s + 120)
    reading = read(item, phase, traffic)
    story.readings.append(reading)
    story.say(f"{phase}: acceptance rate {reading.rate:.1%}, mean length {reading.length:.2f} "
              f"(at promotion {reading.at_promotion}); DriftDetected {reading.drift}")
    return reading


def print_readings(story: Story) -> None:
    table = Table(title=f"{SERVING}: live acceptance (status.acceptance, {ACCEPTANCE['window']} windows, k = 5)")
    for column in ("when", "traffic", "drafter serving", "acceptance rate", "mean length", "gate's length",
                   "DriftDetected"):
        table.add_column(column)
    for r in story.readings:
        table.add_row(r.phase, r.traffic, r.drafter.rsplit("/", 1)[-1],
                      "-" if r.rate is None else f"{r.rate:.1%}", "-" if r.length is None else f"{r.length:.2f}",
                      "-" if r.at_promotion is None else f"{r.at_promotion:.2f}", r.drift)
    console.print(table)


def prepare(layout: local.Layout, python: str) -> None:
    """The namespace with its model volume (the tiny stand-in target at the Kimi path), an empty capture claim,
    the emulator's acceptance by traffic category on, and nothing of an earlier run."""
    demo.kubectl("create", "namespace", NAMESPACE, check=False)
    demo.kubectl("-n", NAMESPACE, "delete", "drafterservings", "--all", "--cascade=foreground", "--wait=true",
                 "--timeout=180s")
    demo.kubectl("-n", NAMESPACE, "delete", "draftertrainings,drafterbenchmarks", "--all", "--wait=true",
                 "--timeout=180s")
    demo.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        static_claim(NAMESPACE, "models", "/tmp/drafter-retraining-models")
        + static_claim(NAMESPACE, CAPTURE_CLAIM, "/tmp/drafter-retraining-capture")))
    shutil.rmtree(layout.root / "claims" / NAMESPACE / CAPTURE_CLAIM, ignore_errors=True)  # a fresh sample
    # An earlier run's retrained drafters: this run's retrainings count from r1 again (the serving is new), and
    # Generate refuses to export over a path that exists.
    drafters = layout.root / "claims" / NAMESPACE / "models" / "drafters"
    for earlier in drafters.glob(RETRAINED_PREFIX.rsplit("/", 1)[-1] + "-r*"):
        shutil.rmtree(earlier, ignore_errors=True)
    demo.kubectl("-n", NAMESPACE, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "drafter-emulator"},
        "data": {"DRAFTER_EMULATOR_CATEGORIES": "1"}}))
    demo_training.prepare(layout, NAMESPACE, TARGET, python, demo.kubectl, name=CODE_TRAINING)
    for run in range(1, 4):  # the retrainings' hidden-state claims (the local cluster has no provisioner)
        demo_training.hidden_states_volume(NAMESPACE, f"{SERVING}-r{run}", demo.kubectl)


def main() -> int:
    layout = local.Layout()
    harness.start_local(layout)
    demo.ensure_engine_nodes(3)  # the serving, a BlueGreen replacement beside it, the training's GPU stages
    harness.install_crds(demo.kubectl)
    demo.start_operator(layout)
    python = demo_training.training_python(console)
    if not python:
        console.print("[red]The retraining story needs the training environment[/] (`./dev demo` builds it in the "
                      "background; DRAFTER_TRAINING_PYTHON names one).")
        return 1
    story = Story()
    with console.status("preparing the namespace, the stand-in target and the capture claim"):
        prepare(layout, python)
    demo.kubectl("-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(serving_manifest()))
    story.say(f"{SERVING}: vLLM, the seed's drafter, capturing every request to claim {CAPTURE_CLAIM}; "
              f"spec.retraining: on drift, at least {MIN_NEW_SAMPLES} new prompts, gate {GATE}")
    wait_for(f"{SERVING} Ready", serving_when(ready), 300)
    item = serving()
    ip = json.loads(demo.kubectl("-n", NAMESPACE, "get", "service", SERVING, "-o", "json").stdout)["spec"]["clusterIP"]
    url = f"http://{ip}:{item['status']['endpoint']['port']}"

    story.say(f"A DrafterTraining trains {CODE_DRAFTER} (speculators on the CPU, a tiny stand-in target) and "
              "promotes it through its gate")
    body = demo_training.manifest(NAMESPACE, TARGET, CODE_DRAFTER, SERVING, GATE, demo.BASE_SPEC["placement"],
                                  name=CODE_TRAINING)
    demo_training.run(console, demo.kubectl, NAMESPACE, body)
    item = wait_for("the code drafter serving", serving_when(lambda i: active_drafter(i) == CODE_DRAFTER and ready(i)),
                    300)
    at_promotion = (item["status"].get("acceptance") or {}).get("atPromotion") or {}
    story.say(f"{CODE_DRAFTER} serves; its gate measured acceptance length {at_promotion.get('acceptanceLength')} "
              f"(status.acceptance.atPromotion, benchmark {at_promotion.get('benchmark')})")

    traffic = Traffic(url, CODE_PROMPTS)
    traffic.start()
    try:
        settle_and_read(story, "before the shift", "code")
        traffic.prompts = NON_ENGLISH_PROMPTS
        shifted = time.time()
        story.say("The traffic shifts to chat in other languages")
        item = wait_for("DriftDetected", serving_when(
            lambda i: watch.condition(i, "DriftDetected").get("status") == "True"), 240,
                        show=lambda: watch.condition(serving(), "DriftDetected").get("message", "")[:100])
        drift = watch.condition(item, "DriftDetected")
        story.say(f"DriftDetected {drift['reason']}: {drift.get('message')}")
        # status.acceptance is rewritten at most once a minute when only its figures move (docs/monitoring.md): the
        # reading waits for one whose window began after the shift.
        revision = item["status"]["activeRevision"]
        item = wait_for("status.acceptance of a window of the shifted traffic",
                        lambda: live_window(revision, shifted + float(ACCEPTANCE["window"].rstrip("s"))), 150)
        story.readings.append(read(item, "after the shift", "other languages"))

        def started() -> str | None:
            history = ((serving().get("status") or {}).get("retraining") or {}).get("history") or []
            return history[0]["name"] if history else None

        def retraining_state() -> str:
            return ((serving().get("status") or {}).get("retraining") or {}).get("waiting") or "starting"
        run = wait_for("the serving to start its retraining", started, 300, show=retraining_state)
        retraining = serving()["status"]["retraining"]
        story.say(f"{SERVING} started DrafterTraining {run} ({retraining['history'][0]['trigger']}) from its "
                  "captured prompts, warm-started from the code drafter")
        finished = demo_training.follow(console, demo.kubectl, NAMESPACE, run, timeout=1200)
        demo_training.report(console, finished, demo.kubectl, NAMESPACE)
        item = wait_for(f"{run}'s drafter serving", serving_when(
            lambda i: active_drafter(i).startswith(RETRAINED_PREFIX) and ready(i)), 300)
        settle_and_read(story, "after the promotion", "other languages")
    finally:
        traffic.stop()
    print_readings(story)
    console.print(demo.kubectl("-n", NAMESPACE, "get", "drafterserving,draftertrainings").stdout)
    console.print(f"Requests sent: {traffic.sent}. The operator keeps running; `kubectl -n {NAMESPACE} get "
                  f"drafterserving {SERVING} -o jsonpath='{{.status.retraining}}'` shows the retraining's record.")
    return 0
