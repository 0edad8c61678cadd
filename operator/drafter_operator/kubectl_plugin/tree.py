"""`kubectl drafter get NAME`: a DrafterServing as a tree (serving -> revisions -> pods), pure.

The look is `kubectl argo rollouts get rollout`'s: a header of what matters now (what serves, where, the
acceptance now and at promotion, the last benchmark, the action the operator took, the conditions), then
the objects as a tree with a status icon, age and one line of detail each. Everything comes from the
objects the apiserver returns: the serving, its engine pods and its DrafterBenchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from drafter_operator import figures, timestamps
from drafter_operator.constants import REVISION_LABEL

OK, PROGRESS, BAD, STOPPED = "✔", "◌", "✖", "•"


@dataclass
class Node:
    name: str
    kind: str
    icon: str
    status: str
    created: str | None = None
    info: str = ""
    children: list[Node] = field(default_factory=list)


@dataclass
class View:
    """What `get` prints: the header lines and the tree."""

    header: list[tuple[str, str]]
    conditions: list[dict]
    root: Node


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return timestamps.parse(text)


def age(created: str | None, now: datetime) -> str:
    """kubectl's short age: 45s, 12m, 3h, 5d."""
    when = _parse_time(created)
    if when is None:
        return ""
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def serving_health(status: dict) -> tuple[str, str]:
    """(icon, word) of the serving: Degraded and not Ready are bad, a swap under way is progress."""
    ready, progressing, degraded = (condition(status, t) for t in ("Ready", "Progressing", "Degraded"))
    if degraded.get("status") == "True":
        return BAD, "Degraded"
    if ready.get("status") != "True":
        return (PROGRESS, "Progressing") if progressing.get("status") == "True" else (BAD, "NotReady")
    if progressing.get("status") == "True":
        return PROGRESS, "Progressing"
    return OK, "Healthy"


def revision_state(record: dict, status: dict) -> tuple[str, str]:
    """(icon, word) of one revision record of status.revisions."""
    name = record.get("name")
    if record.get("good") is False:
        return BAD, "Failed"
    if name == status.get("activeRevision"):
        return (BAD, "Degraded") if record.get("degraded") else (OK, "Serving")
    if name == (status.get("gating") or {}).get("revision"):
        return PROGRESS, "Gating"
    if record.get("degraded"):
        return BAD, "Degraded"
    if record.get("good") is None:
        return PROGRESS, "Starting"
    return STOPPED, "Previous" if name == status.get("previousRevision") else "Superseded"


def pod_state(pod: dict) -> tuple[str, str, str]:
    """(icon, word, info) of an engine pod, as kubectl get pods would say it."""
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in containers)
    waiting = next((c["state"]["waiting"].get("reason") for c in containers
                    if (c.get("state") or {}).get("waiting")), None)
    info = f"ready:{ready}/{len(containers) or len((pod.get('spec') or {}).get('containers') or [])}"
    if restarts:
        info += f",restarts:{restarts}"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return PROGRESS, "Terminating", info
    phase = status.get("phase") or "Pending"
    if waiting:
        return (BAD if waiting in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull") else PROGRESS), waiting, info
    if phase == "Running":
        return (OK if containers and ready == len(containers) else PROGRESS), "Running", info
    if phase in ("Failed", "Unknown"):
        return BAD, phase, info
    return (OK if phase == "Succeeded" else PROGRESS), phase, info


def _benchmarks_of(name: str, benchmarks: list[dict]) -> list[dict]:
    """The serving's DrafterBenchmarks (spec.servingRef), oldest first."""
    mine = [b for b in benchmarks if ((b.get("spec") or {}).get("servingRef") or {}).get("name") == name]
    return sorted(mine, key=lambda b: ((b.get("metadata") or {}).get("creationTimestamp") or "",
                                       (b.get("metadata") or {}).get("name") or ""))


def _acceptance(rate: float | None, length: float | None) -> str:
    parts = []
    if rate is not None:
        parts.append(f"rate {figures.percent(rate)}")
    if length is not None:
        parts.append(f"mean length {length:.2f}")
    return ", ".join(parts)


def _benchmark_summary(result: dict) -> str:
    parts = []
    if result.get("tokensPerSecond") is not None:
        parts.append(f"{figures.throughput(result['tokensPerSecond'])} tok/s")
    if result.get("speedup") is not None:
        parts.append(figures.speedup(result["speedup"]))
    if acceptance := _acceptance(result.get("acceptanceRate"), result.get("acceptanceLength")):
        parts.append(f"acceptance {acceptance}")
    return ", ".join(parts)


def build(serving: dict, pods: list[dict], benchmarks: list[dict], now: datetime) -> View:
    """The view of ``serving`` with its engine ``pods`` and the namespace's ``benchmarks``."""
    status = serving.get("status") or {}
    name = (serving.get("metadata") or {}).get("name", "")
    header = [*identity_rows(serving), *acceptance_rows(status), *benchmark_rows(name, status, benchmarks),
              action_row(status)]
    return View(header, list(status.get("conditions") or []), revision_tree(serving, pods))


Row = tuple[str, str]


def identity_rows(serving: dict) -> list[Row]:
    """Name, namespace, health, what serves now (revision, engine, drafter, image) and where."""
    meta, status = serving.get("metadata") or {}, serving.get("status") or {}
    icon, word = serving_health(status)
    rows: list[Row] = [("Name", meta.get("name", "")), ("Namespace", meta.get("namespace", "")),
                       ("Status", f"{icon} {word}")]
    now_serving = status.get("serving") or {}
    if now_serving.get("revision"):
        rows.append(("Serving", f"revision {now_serving['revision']}: {now_serving.get('engine', '?')}, "
                                f"drafter {now_serving.get('drafter', '?')}"))
        if now_serving.get("image"):
            rows.append(("Image", now_serving["image"]))
    else:
        rows.append(("Serving", "nothing yet"))
    if (status.get("endpoint") or {}).get("url"):
        rows.append(("Endpoint", status["endpoint"]["url"]))
    return rows


def acceptance_rows(status: dict) -> list[Row]:
    """The acceptance of the active revision over the last window (none measured on another revision)."""
    acceptance = status.get("acceptance") or {}
    if acceptance and acceptance.get("revision") in (None, status.get("activeRevision")):
        window = f" over {acceptance['windowSeconds']}s" if acceptance.get("windowSeconds") else ""
        return [("Acceptance now", (_acceptance(acceptance.get("rate"), acceptance.get("meanLength")) or "-") + window)]
    return [("Acceptance now", "-")]


def benchmark_rows(name: str, status: dict, benchmarks: list[dict]) -> list[Row]:
    """The acceptance at promotion and the last benchmark, from the serving's benchmarks."""
    mine = _benchmarks_of(name, benchmarks)
    # "At promotion": the first finished benchmark of the active revision, which is its gate when one ran
    # before traffic moved to it, else the first measurement after.
    of_active = [b for b in mine if (b.get("status") or {}).get("revision") == status.get("activeRevision")
                 and (b.get("status") or {}).get("state") == "Succeeded"]
    if of_active:
        first = of_active[0]
        result = first["status"].get("result") or {}
        rows = [("Acceptance at promotion",
                 f"{_acceptance(result.get('acceptanceRate'), result.get('acceptanceLength')) or '-'} "
                 f"(benchmark {first['metadata']['name']})")]
    else:
        rows = [("Acceptance at promotion", "- (no finished benchmark of the serving revision)")]
    last = status.get("lastBenchmark") or {}
    if last.get("name"):
        figures = _benchmark_summary({"tokensPerSecond": last.get("tokensPerSecond"), "speedup": last.get("speedup"),
                                      "acceptanceLength": last.get("acceptanceLength")})
        rows.append(("Last benchmark", f"{last['name']}: {figures or 'no figures'}"))
    elif mine:
        newest = mine[-1]
        state = (newest.get("status") or {}).get("state") or "Pending"
        rows.append(("Last benchmark", f"{newest['metadata']['name']}: {state}"))
    else:
        rows.append(("Last benchmark", "none (kubectl drafter benchmark " + name + ")"))
    return rows


def action_row(status: dict) -> Row:
    """The onDegraded action in force, if any."""
    action = status.get("degradedAction")
    if action:
        return ("Action", f"{action.get('action')}: serving revision {action.get('revision')} instead of "
                          f"{action.get('degradedRevision')} since {action.get('since')}: {action.get('message')}")
    if status.get("speculationDisabled"):
        return ("Action", f"speculation disabled: {status['speculationDisabled']}")
    return ("Action", "none")


def revision_tree(serving: dict, pods: list[dict]) -> Node:
    """The serving, its revisions newest first (and any revision only its pods know yet), each with its pods."""
    meta, status = serving.get("metadata") or {}, serving.get("status") or {}
    icon, word = serving_health(status)
    root = Node(meta.get("name", ""), "DrafterServing", icon, word, meta.get("creationTimestamp"),
                info=f"replicas:{(serving.get('spec') or {}).get('replicas', 1)}")
    by_revision: dict[str, list[dict]] = {}
    for pod in pods:
        revision = ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL)
        by_revision.setdefault(revision, []).append(pod)
    records = list(status.get("revisions") or [])
    known = {r.get("name") for r in records}
    # Pods of a revision the status does not list yet (a swap's first moments): shown, not dropped.
    records += [{"name": r} for r in sorted(by_revision, key=str) if r is not None and r not in known]
    for record in reversed(records):  # newest first, as argo rollouts lists revisions
        root.children.append(revision_node(record, status, by_revision.get(record.get("name"), [])))
    return root


def revision_node(record: dict, status: dict, pods: list[dict]) -> Node:
    """One revision (marked active or previous, with its engine, drafter and why it failed) and its pods."""
    r_icon, r_word = revision_state(record, status)
    marks = [m for m, on in (("active", record.get("name") == status.get("activeRevision")),
                             ("previous", record.get("name") == status.get("previousRevision"))) if on]
    info = ", ".join(x for x in (record.get("engine"), record.get("drafter")) if x)
    if record.get("failedReason"):
        info = (info + ": " if info else "") + record["failedReason"]
    label = f"revision {record.get('name')}" + (f" ({', '.join(marks)})" if marks else "")
    node = Node(label, "Revision", r_icon, r_word, record.get("since"), info)
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        p_icon, p_word, p_info = pod_state(pod)
        node.children.append(Node(pod["metadata"]["name"], "Pod", p_icon, p_word,
                                  pod["metadata"].get("creationTimestamp"), p_info))
    return node


def _rows(node: Node, prefix: str, last: bool, top: bool, now: datetime) -> list[tuple[str, str, str, str, str]]:
    glyph = {"DrafterServing": "⟳", "Revision": "#", "Pod": "□"}.get(node.kind, "-")
    branch = "" if top else prefix + ("└──" if last else "├──")
    rows = [(f"{branch}{glyph} {node.name}", node.kind, f"{node.icon} {node.status}", age(node.created, now), node.info)]
    child_prefix = "" if top else prefix + ("   " if last else "│  ")
    for i, child in enumerate(node.children):
        rows += _rows(child, child_prefix, i == len(node.children) - 1, False, now)
    return rows


def render(view: View, now: datetime) -> str:
    """The text `kubectl drafter get` prints."""
    width = max(len(key) for key, _ in view.header) + 2
    lines = [f"{key + ':':<{width}}{value}" for key, value in view.header]
    if view.conditions:
        lines.append("Conditions:")
        for c in view.conditions:
            text = f"  {c.get('type', ''):<18}{c.get('status', ''):<8}{c.get('reason', '')}"
            lines.append(text + (f": {c['message']}" if c.get("message") else ""))
    lines.append("")
    rows = [("NAME", "KIND", "STATUS", "AGE", "INFO")] + _rows(view.root, "", True, True, now)
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    return "\n".join(line.rstrip() for line in lines) + "\n"
