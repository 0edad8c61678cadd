"""Every environment variable the operator reads, in one place: its name, its default and its parser.

The chart sets these on the operator's container (and the local cluster on its process); a reader asks
its :class:`Setting` for the value (``WORKERS.read()``) rather than spelling the name, so the name,
the default and the way a value is read live here once. A variable that is unset gives the default;
a value that does not parse raises :class:`SettingError` naming the variable, so `drafter-operator
run` can refuse to start with that sentence instead of a bare traceback.

Settings whose values are documents with rules of their own (the tenant policy's JSON lists, the
Prometheus endpoints) are read here as their raw text (:data:`RAW`); their modules validate them
(resources/pod_policy.py, acceptance/prometheus_source.py), since the rules are about what they mean.

Variables that belong to other programs' protocols (torch's RANK/WORLD_SIZE in a training container,
an engine's own flags in a pod's env) are not operator settings and are not listed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from drafter_operator import __version__
from drafter_operator.images import TRAINER_REPOSITORY

T = TypeVar("T")


class SettingError(ValueError):
    """An environment variable's value does not parse; the message names the variable and the value
    (``name`` and ``raw`` hold them, for a reader that words its own refusal)."""

    def __init__(self, name: str, raw: str, reason: str):
        super().__init__(f"{name}={raw!r} is not valid: {reason}")
        self.name, self.raw = name, raw


def seconds(raw: str) -> float:
    """A number of seconds: "15", "0.5" (float(), so also "1e3"). ValueError otherwise."""
    return float(raw)


def count(raw: str) -> int:
    """A whole number: "8". ValueError otherwise."""
    return int(raw)


def flag(raw: str) -> bool:
    """On for "1", "true" or "yes" in any case; anything else is off (an unknown word never errors)."""
    return raw.lower() in ("1", "true", "yes")


def text(raw: str) -> str:
    """The value as it is (an empty value stays empty: readers that fall back on "" say so)."""
    return raw


#: The parser of settings kept as their raw text (validated by the module that owns their meaning).
RAW = text


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: ``read()`` gives ``default`` when it is unset, else ``parse(value)``."""

    name: str
    default: T
    parse: Callable[[str], T]
    doc: str

    def read(self, environ: Mapping[str, str] | None = None) -> T:
        raw = (os.environ if environ is None else environ).get(self.name)
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise SettingError(self.name, raw, str(exc)) from None


# --------------------------------------------------------------------------------------------------
# The reconcile loops

WORKERS: Setting[int] = Setting(
    "DRAFTER_WORKERS", 8, count,
    "How many objects are reconciled at once (the operator's reconcile thread pool).")
RECHECK_SECONDS: Setting[float] = Setting(
    "DRAFTER_RECHECK_SECONDS", 20.0, seconds,
    "How often a serving is reconciled with no event (the safety net under the watches).")
CATCH_UP_SECONDS: Setting[float] = Setting(
    "DRAFTER_CATCH_UP_SECONDS", 5.0, seconds,
    "How soon a serving whose children are still changing is looked at again.")
ACCEPTANCE_INTERVAL_SECONDS: Setting[float] = Setting(
    "DRAFTER_ACCEPTANCE_INTERVAL_SECONDS", 15.0, seconds,
    "How often each serving's acceptance is measured (engine scrapes or a Prometheus query).")
DRAIN_SECONDS: Setting[float] = Setting(
    "DRAFTER_DRAIN_SECONDS", 15.0, seconds,
    "How long a revision that lost the Service keeps its pods for the requests still on them.")
MEMORY_RELEASE_SECONDS: Setting[float] = Setting(
    "DRAFTER_MEMORY_RELEASE_SECONDS", 60.0, seconds,
    "How often memory a cold start freed is handed back to the kernel (memory_release.py); 0 turns it off.")

# --------------------------------------------------------------------------------------------------
# What the operator's children run

OPERATOR_IMAGE: Setting[str] = Setting(
    "DRAFTER_OPERATOR_IMAGE", f"ghcr.io/drafter-dev/drafter-operator:{__version__}", text,
    "The image benchmark Jobs run (the operator's own: it carries `drafter-operator bench`).")
TRAINER_IMAGE: Setting[str] = Setting(
    "DRAFTER_TRAINER_IMAGE", f"ghcr.io/{TRAINER_REPOSITORY}:{__version__}", text,
    "The image training stage Jobs run when spec.image is unset.")
TRAINING_CPU: Setting[bool] = Setting(
    "DRAFTER_TRAINING_CPU", False, flag,
    "Render training stages for CPU (run-stage --cpu), where no stage has a GPU (the local cluster).")
CONTAINER_PATHS: Setting[str] = Setting(
    "DRAFTER_CONTAINER_PATHS", "", RAW,
    "JSON container path -> host path, set by the local process runner only (container_paths.py).")

# --------------------------------------------------------------------------------------------------
# Policy and measurement sources (JSON documents, validated where their meaning lives)

ALLOWED_IMAGE_PREFIXES: Setting[str | None] = Setting(
    "DRAFTER_ALLOWED_IMAGE_PREFIXES", None, RAW,
    "JSON list of registries, repositories or images a tenant's pods may run, each matched at a reference "
    "boundary (resources/pod_policy.py admits); unset: any.")
ALLOWED_SERVICE_ACCOUNTS: Setting[str | None] = Setting(
    "DRAFTER_ALLOWED_SERVICE_ACCOUNTS", None, RAW,
    "JSON object of namespace (or \"*\") to the ServiceAccounts its pods may use (resources/pod_policy.py).")
PROMETHEUS_ENDPOINTS: Setting[str | None] = Setting(
    "DRAFTER_PROMETHEUS_ENDPOINTS", None, RAW,
    "JSON object of name to Prometheus URL for spec.acceptance.source prometheus "
    "(acceptance/prometheus_source.py).")

# --------------------------------------------------------------------------------------------------
# Where the operator runs (leader election)

POD_NAME: Setting[str | None] = Setting(
    "POD_NAME", None, text,
    "The operator's pod (the chart sets it from the downward API): names the Lease holder; else the host name.")
POD_NAMESPACE: Setting[str | None] = Setting(
    "POD_NAMESPACE", None, text,
    "The operator's namespace (downward API): where its Lease lives.")
POD_IP: Setting[str | None] = Setting(
    "POD_IP", None, text,
    "The capture sidecar's pod IP (downward API): the address it answers the count of captured prompts on.")
KUBECONFIG: Setting[str | None] = Setting(
    "KUBECONFIG", None, text,
    "Outside a cluster: the kubeconfig whose current context's namespace holds the Lease.")

# --------------------------------------------------------------------------------------------------
# The kubectl plugin (kubectl drafter, run on a person's machine)

KUBECTL: Setting[str] = Setting(
    "KUBECTL", "kubectl", text,
    "Which kubectl `kubectl drafter` runs for its reads and writes (default: the one on PATH).")

#: Every setting, for the docs and the tests.
ALL: tuple[Setting, ...] = (
    WORKERS, RECHECK_SECONDS, CATCH_UP_SECONDS, ACCEPTANCE_INTERVAL_SECONDS, DRAIN_SECONDS, MEMORY_RELEASE_SECONDS,
    OPERATOR_IMAGE, TRAINER_IMAGE, TRAINING_CPU, CONTAINER_PATHS,
    ALLOWED_IMAGE_PREFIXES, ALLOWED_SERVICE_ACCOUNTS, PROMETHEUS_ENDPOINTS,
    POD_NAME, POD_NAMESPACE, POD_IP, KUBECONFIG, KUBECTL,
)
