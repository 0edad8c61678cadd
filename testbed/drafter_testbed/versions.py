"""Pinned versions of everything the embedded local cluster is built from, and where they are cached.

One place to bump a version: the cache directory name is derived from all of them, so a bump builds a
fresh toolchain beside the old one instead of mixing binaries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pins:
    kubernetes: str = "v1.35.4"  # k8s.io/kubernetes; its staging modules are published as v0.35.4
    etcd: str = "v3.6.16"  # go.etcd.io/etcd/server/v3
    kwok: str = "v0.8.0"  # sigs.k8s.io/kwok
    helm: str = "v3.22.0"  # helm.sh/helm/v3
    prometheus: str = "v0.316.0"  # github.com/prometheus/prometheus: Prometheus 3.16.0 (module tags are v0.3xx)
    # Release tooling (images/publish, the release workflow's lint): small, and kept out of `key` like
    # prometheus, so adding or bumping them builds only them (a stamp per version marks the build).
    crane: str = "v0.22.1"  # github.com/google/go-containerregistry/cmd/crane: push, pull and serve OCI images
    actionlint: str = "v1.7.12"  # github.com/rhysd/actionlint/cmd/actionlint: GitHub Actions workflow linter
    helm_docs: str = "v1.14.2"  # github.com/norwoodj/helm-docs/cmd/helm-docs: the chart README from values.yaml comments
    krew: str = "v0.4.4"  # sigs.k8s.io/krew: kubectl-krew and validate-krew-manifest (the kubectl plugin's archives)
    # The cluster's DNS server (pod and Service names): a component added after the cache key was fixed, kept
    # out of `key` like prometheus so that adding or bumping it builds only it (a stamp marks its build).
    kueue: str = "v0.17.0"  # sigs.k8s.io/kueue: gang admission, installed on demand (`cluster kueue`, kueue.py)
    lws: str = "v0.9.0"  # sigs.k8s.io/lws: LeaderWorkerSet, installed on demand (`cluster lws`, lws.py)
    coredns: str = "v1.14.7"  # github.com/coredns/coredns: a custom main with only the plugins the cluster uses

    @property
    def staging_version(self) -> str:
        """k8s.io/<staging> modules are tagged v0.<minor>.<patch> for Kubernetes v1.<minor>.<patch>."""
        return "v0." + self.kubernetes.removeprefix("v1.")

    @property
    def kubernetes_minor(self) -> str:
        return self.kubernetes.removeprefix("v").split(".")[1]

    @property
    def key(self) -> str:
        return f"k8s-{self.kubernetes}_etcd-{self.etcd}_kwok-{self.kwok}_helm-{self.helm}"


PINS = Pins()


def cache_root() -> Path:
    """Build cache outside the repository (survives clean clones, shared by CI and developers)."""
    base = os.environ.get("DRAFTER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "drafter-operator"
    )
    return Path(base)


def toolchain_dir(pins: Pins = PINS) -> Path:
    return cache_root() / pins.key


def bin_dir(pins: Pins = PINS) -> Path:
    return toolchain_dir(pins) / "bin"


def state_root() -> Path:
    """Where a running local cluster keeps its certificates, data, logs and pids."""
    base = os.environ.get("DRAFTER_STATE_DIR") or os.path.join(cache_root(), "cluster")
    return Path(base)
