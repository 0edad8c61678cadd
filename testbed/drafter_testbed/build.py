"""Build the local cluster's binaries (and Prometheus) from pinned Go modules.

Everything lands in a versioned cache directory outside the repository (see versions.py) and is
reused: a warm machine skips every step. Each step stops with a message that names the step and the
fix, because a 20-minute build that dies with a bare Go error teaches nobody anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console

from drafter_testbed.versions import PINS, Pins, bin_dir, toolchain_dir

console = Console(stderr=True)

MIN_GO = (1, 26)  # kwok v0.8 and etcd v3.6.16 both declare go 1.26
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BuildError(RuntimeError):
    """A build step failed; the message names the step and the fix."""


@dataclass(frozen=True)
class Step:
    name: str
    outputs: tuple[str, ...]
    run: Callable[[Pins, Path], None]
    #: What a cold build of the step took here (2 cores, empty Go caches, `cluster build --cluster` alone on the
    #: machine: docs/testbed.md), for the estimate said when it starts. Module downloads are in it. The tests' tools
    #: were measured after the cluster's steps, whose standard library they reuse: the order `cluster build` takes.
    cold_seconds: int


def _go_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOWORK": "off"})
    return env


def check_go() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "step 'toolchain': no `go` on PATH. Fix: install Go >= %d.%d (https://go.dev/dl or your "
            "package manager) and re-run `drafter-operator cluster up`." % MIN_GO
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    match = re.match(r"go(\d+)\.(\d+)", out)
    if not match or (int(match[1]), int(match[2])) < MIN_GO:
        raise BuildError(
            f"step 'toolchain': found {out or 'an unknown Go'}, need >= go{MIN_GO[0]}.{MIN_GO[1]}. "
            "Fix: upgrade Go, or export GOTOOLCHAIN=go1.26.8 to let Go fetch it through the module proxy."
        )
    return out


#: Seconds between the plain progress lines a build prints where its output is not a terminal (a log, a CI job,
#: `./dev demo | tee`): a terminal gets a live status line instead.
PLAIN_PROGRESS_SECONDS = 30


def progress_line(step: str, done: int, total: int, elapsed: float) -> str:
    """One build command's progress: packages compiled (of how many, when known), time spent and, from the rate so
    far, what is left."""
    line = f"{step}: {done}/{total} packages" if total else f"{step}: {done} packages"
    line += f", {elapsed:.0f}s"
    if total and done:
        left = max(0.0, elapsed * (total - done) / done)
        line += f", about {_duration(left)} left"
    return line


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{max(seconds, 1):.0f} s"


def _run(step: str, cmd: list[str], cwd: Path, env: dict[str, str], fix: str, progress_total: int = 0) -> None:
    """Run a command, showing the package it is compiling; on failure raise with the log tail."""
    log_lines: list[str] = []
    started = last_plain = time.monotonic()
    with console.status(f"[bold]{step}[/]: starting") as status:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            log_lines.append(line)
            now = time.monotonic()
            progress = progress_line(step, len(log_lines), progress_total, now - started)
            status.update(f"[bold]{progress}[/]  {line[-60:]}")
            if not console.is_terminal and now - last_plain >= PLAIN_PROGRESS_SECONDS:
                console.print(progress, soft_wrap=True)  # one line per report, however long, in a log
                last_plain = now
        code = proc.wait()
    if code != 0:
        tail = "\n".join(log_lines[-25:])
        raise BuildError(f"step '{step}' failed (exit {code}): {' '.join(cmd[:4])} ...\n{tail}\nFix: {fix}")
    console.print(f"[green]✓[/] {step} ({time.monotonic() - started:.0f}s)")


def _module_dir(module: str, version: str, env: dict[str, str], cwd: Path) -> Path:
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(
            f"step 'download {module}@{version}' failed: {proc.stderr.strip() or proc.stdout.strip()}\n"
            "Fix: check that the Go module proxy is reachable (GOPROXY) and the version exists."
        )
    return Path(json.loads(proc.stdout)["Dir"])


def _module_work(name: str, module: str, version: str, pins: Pins) -> tuple[Path, dict[str, str], str]:
    """A wrapper module's work directory and Go environment, and the `go` line of ``module@version``'s own
    go.mod (the wrapper declares the same, so the toolchain the module needs is the one that builds it)."""
    work = toolchain_dir(pins) / "src" / name
    env = _go_env(work)
    work.mkdir(parents=True, exist_ok=True)
    source = _module_dir(module, version, env, work)
    return work, env, re.search(r"^go (\S+)", (source / "go.mod").read_text(), flags=re.M)[1]


def staging_replaces(kubernetes_go_mod: str, staging_version: str) -> list[str]:
    """`replace` lines that point each `k8s.io/<staging>` module at its published version.

    k8s.io/kubernetes replaces its staging modules with local paths (./staging/src/...), which a
    module consumer cannot follow; the list is derived from that version's own go.mod, not by hand.
    """
    modules = re.findall(r"^\s*(k8s\.io/\S+)\s+=>\s+\./staging/\S+", kubernetes_go_mod, flags=re.M)
    return [f"\t{m} => {m} {staging_version}" for m in sorted(set(modules))]


def version_ldflags(pins: Pins) -> str:
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={pins.kubernetes}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={pins.kubernetes_minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def _wrapper_module(work: Path, name: str, go_line: str, require: str, replaces: list[str], imports: list[str]) -> None:
    work.mkdir(parents=True, exist_ok=True)
    replace_block = "replace (\n" + "\n".join(replaces) + "\n)\n" if replaces else ""
    (work / "go.mod").write_text(f"module {name}\n\ngo {go_line}\n\nrequire {require}\n\n{replace_block}")
    (work / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n" + "".join(f'\t_ "{i}"\n' for i in imports) + ")\n"
    )


def build_kubernetes(pins: Pins, out: Path) -> None:
    work = toolchain_dir(pins) / "src" / "kubernetes"
    env = _go_env(work)
    work.mkdir(parents=True, exist_ok=True)
    source = _module_dir("k8s.io/kubernetes", pins.kubernetes, env, work)
    go_mod = (source / "go.mod").read_text()
    go_line = re.search(r"^go (\S+)", go_mod, flags=re.M)[1]
    replaces = staging_replaces(go_mod, pins.staging_version)
    if not replaces:
        raise BuildError(f"step 'kubernetes wrapper': no staging replaces found in {source}/go.mod; "
                         "Fix: the pinned version's layout changed, pin another k8s.io/kubernetes version.")
    packages = [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]
    _wrapper_module(work, "drafter.dev/build/kubernetes", go_line, f"k8s.io/kubernetes {pins.kubernetes}", replaces, packages)
    _run("kubernetes: resolve modules", ["go", "mod", "tidy"], work, env,
         "check network access to the Go module proxy; delete the cache dir to retry from scratch")
    _run(f"kubernetes {pins.kubernetes}: compile {', '.join(KUBE_COMMANDS)}",
         ["go", "build", "-v", "-trimpath", "-ldflags", version_ldflags(pins), "-o", str(out) + "/", *packages],
         work, env, "read the compiler error above; a newer Kubernetes may need a newer Go (GOTOOLCHAIN)",
         progress_total=2300)


def build_etcd(pins: Pins, out: Path) -> None:
    work, env, go_line = _module_work("etcd", "go.etcd.io/etcd/server/v3", pins.etcd, pins)
    # etcd's server module replaces its siblings with ../api etc.; point them at the same release.
    siblings = ["go.etcd.io/etcd/api/v3", "go.etcd.io/etcd/client/pkg/v3", "go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/pkg/v3"]
    replaces = [f"\t{m} => {m} {pins.etcd}" for m in siblings]
    _wrapper_module(work, "drafter.dev/build/etcd", go_line, f"go.etcd.io/etcd/server/v3 {pins.etcd}", replaces,
                    ["go.etcd.io/etcd/server/v3"])
    _run("etcd: resolve modules", ["go", "mod", "tidy"], work, env, "check network access to the Go module proxy")
    _run(f"etcd {pins.etcd}: compile", ["go", "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o",
         str(out / "etcd"), "go.etcd.io/etcd/server/v3"], work, env,
         "read the compiler error above; if etcd cannot be built, pin another 3.6 patch release")


def _go_install(step: str, package: str, out: Path, ldflags: str = "-s -w") -> None:
    env = dict(os.environ, CGO_ENABLED="0", GOBIN=str(out), GOFLAGS="", GOWORK="off")
    _run(step, ["go", "install", "-v", "-trimpath", "-ldflags", ldflags, package], out, env,
         "check network access to the Go module proxy and the Go version")


def build_kwok(pins: Pins, out: Path) -> None:
    _go_install(f"kwok {pins.kwok}", f"sigs.k8s.io/kwok/cmd/kwok@{pins.kwok}", out)
    # kwok needs stage definitions; ship the upstream "fast" node and pod stages next to the binary.
    env = dict(os.environ, GOFLAGS="", GOWORK="off")
    source = _module_dir("sigs.k8s.io/kwok", pins.kwok, env, out)
    stages = toolchain_dir(pins) / "kwok-stages"
    stages.mkdir(parents=True, exist_ok=True)
    for rel in ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml"):
        shutil.copyfile(source / "kustomize" / "stage" / rel, stages / Path(rel).name)
    # Last: a step counts as built once every output is there, and a cluster waiting on this build in the
    # background (cluster.join_late) starts kwok as soon as it is, stages included.
    (out / kwok_stamp(pins)).write_text(f"{pins.kwok} with its fast stages\n")


def kwok_stamp(pins: Pins) -> str:
    return f".kwok-{pins.kwok}-stages"


def build_helm(pins: Pins, out: Path) -> None:
    """helm with the ldflags of helm's own Makefile, so it behaves as the released binary does. Without the
    Kubernetes version ones, `helm template` and `helm lint` offline assume Kubernetes v1.20 (the source's
    fallback) and refuse any chart whose kubeVersion needs newer; the release assumes the version of the
    client-go it is built with (helm v3.22.0: v0.37 -> Kubernetes 1.37)."""
    env = dict(os.environ, GOFLAGS="", GOWORK="off")
    go_mod = (_module_dir("helm.sh/helm/v3", pins.helm, env, out) / "go.mod").read_text()
    major, minor = helm_default_kube_version(go_mod)
    ldflags = [f"-s -w -X helm.sh/helm/v3/internal/version.version={pins.helm}"]
    for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        ldflags.append(f"-X {package}.k8sVersionMajor={major} -X {package}.k8sVersionMinor={minor}")
    _go_install(f"helm {pins.helm}", f"helm.sh/helm/v3/cmd/helm@{pins.helm}", out, ldflags=" ".join(ldflags))
    (out / helm_stamp(pins)).write_text(f"{pins.helm} offline Kubernetes {major}.{minor}\n")


def helm_default_kube_version(helm_go_mod: str) -> tuple[int, int]:
    """The Kubernetes version helm's Makefile derives from its client-go requirement (v0.37.0 -> 1, 37)."""
    match = re.search(r"^\s*k8s\.io/client-go v(\d+)\.(\d+)\.", helm_go_mod, flags=re.M)
    if not match:
        raise BuildError("step 'helm': its go.mod requires no k8s.io/client-go, so the offline Kubernetes version "
                         "cannot be derived as helm's Makefile does. Fix: pin a helm v3 release")
    return int(match[1]) + 1, int(match[2])


def helm_stamp(pins: Pins) -> str:
    """Marks a bin directory's helm as built with the Makefile's Kubernetes version (an older cache's lacks it)."""
    return f".helm-{pins.helm}-kube-version"


def build_prometheus(pins: Pins, out: Path) -> None:
    """prometheus and promtool from the Go module, with Kubernetes service discovery compiled in and every
    other discovery left out. Debian's package (2.42) is built without Kubernetes discovery, and the tests
    need a Prometheus that finds engine pods the way a cluster's does (docs/testbed.md)."""
    module_minor, patch = pins.prometheus.removeprefix("v0.").split(".")  # module v0.316.0 is Prometheus 3.16.0
    ldflags = f"-s -w -X github.com/prometheus/common/version.Version=3.{int(module_minor) - 300}.{patch}"
    env = dict(os.environ, CGO_ENABLED="0", GOBIN=str(out), GOFLAGS="", GOWORK="off")
    for command in ("prometheus", "promtool"):
        _run(f"prometheus {pins.prometheus}: {command}",
             ["go", "install", "-v", "-trimpath", "-tags", PROMETHEUS_TAGS, "-ldflags", ldflags,
              f"github.com/prometheus/prometheus/cmd/{command}@{pins.prometheus}"], out, env,
             "check network access to the Go module proxy and the Go version")
    (out / prometheus_stamp(pins)).write_text(f"{pins.prometheus} tags {PROMETHEUS_TAGS}\n")


#: Build tags of Prometheus' own Makefile: drop every service discovery, then add Kubernetes back.
PROMETHEUS_TAGS = "remove_all_sd,enable_kubernetes_sd"


def prometheus_stamp(pins: Pins) -> str:
    """Marks a bin directory's prometheus as this build (an older cache holds Debian's under the same name)."""
    return f".prometheus-{pins.prometheus}-k8s-sd"


def build_crane(pins: Pins, out: Path) -> None:
    """crane pushes images/build's OCI layouts to a registry (images/publish) and serves a registry on
    loopback for the test that pushes there and pulls back."""
    _go_install(f"crane {pins.crane}", f"github.com/google/go-containerregistry/cmd/crane@{pins.crane}", out)
    (out / crane_stamp(pins)).write_text(f"{pins.crane}\n")


def crane_stamp(pins: Pins) -> str:
    return f".crane-{pins.crane}"


def build_actionlint(pins: Pins, out: Path) -> None:
    """actionlint checks the release workflow (.github/workflows) in a unit test."""
    _go_install(f"actionlint {pins.actionlint}", f"github.com/rhysd/actionlint/cmd/actionlint@{pins.actionlint}", out)
    (out / actionlint_stamp(pins)).write_text(f"{pins.actionlint}\n")


def actionlint_stamp(pins: Pins) -> str:
    return f".actionlint-{pins.actionlint}"


def build_helm_docs(pins: Pins, out: Path) -> None:
    """helm-docs writes the chart's README.md from its values.yaml comments (tests/unit/chart/test_chart.py checks
    the committed README is what it writes)."""
    _go_install(f"helm-docs {pins.helm_docs}", f"github.com/norwoodj/helm-docs/cmd/helm-docs@{pins.helm_docs}", out,
                ldflags=f"-s -w -X main.version={pins.helm_docs.removeprefix('v')}")
    (out / helm_docs_stamp(pins)).write_text(f"{pins.helm_docs}\n")


def helm_docs_stamp(pins: Pins) -> str:
    return f".helm-docs-{pins.helm_docs}"


def build_krew(pins: Pins, out: Path) -> None:
    """krew itself and krew-index's manifest validator: tests/unit/kubectl_plugin/test_krew_archives.py installs the kubectl
    plugin's archive with `kubectl krew install --manifest --archive` and validates the rendered manifest as
    krew-index's CI does. No version ldflags on purpose: a krew without a release tag skips its check of
    GitHub for a newer krew, which an offline test machine cannot reach (and validate-krew-manifest runs
    krew with an environment of its own, so KREW_NO_UPGRADE_CHECK cannot be passed through it)."""
    for command in ("krew", "validate-krew-manifest"):
        _go_install(f"krew {pins.krew}: {command}", f"sigs.k8s.io/krew/cmd/{command}@{pins.krew}", out)
    # kubectl runs a plugin found as kubectl-<name> on PATH: `kubectl krew` is kubectl-krew.
    os.replace(out / "krew", out / "kubectl-krew")
    (out / krew_stamp(pins)).write_text(f"{pins.krew}\n")


def krew_stamp(pins: Pins) -> str:
    return f".krew-{pins.krew}"


#: The CoreDNS plugins the local cluster's DNS uses, in the order of CoreDNS's plugin.cfg (a request passes
#: through them in this order, whatever order the Corefile lists them in): `bind` listens on the cluster DNS
#: address only, `ready` is the health check `cluster up` waits on, `errors` logs failures, `hosts` serves the
#: pod names the runner publishes (EndpointSlices refuse loopback addresses, docs/testbed.md) and `kubernetes`
#: everything else in cluster.local from the apiserver. No `forward`: a pod never queries a non-loopback server.
COREDNS_PLUGINS = ("bind", "ready", "errors", "hosts", "kubernetes")


def coredns_main(plugins: tuple[str, ...] = COREDNS_PLUGINS) -> str:
    """CoreDNS's documented way to choose plugins at compile time: a main of our own that imports only them
    and sets the directive order (the full build compiles some 60 plugins and every cloud SDK)."""
    imports = "".join(f'\t_ "github.com/coredns/coredns/plugin/{p}"\n' for p in plugins)
    directives = ", ".join(f'"{p}"' for p in plugins)
    return ("package main\n\nimport (\n\t\"github.com/coredns/coredns/core/dnsserver\"\n"
            f"\t\"github.com/coredns/coredns/coremain\"\n{imports})\n\n"
            f"func init() {{ dnsserver.Directives = []string{{{directives}}} }}\n\nfunc main() {{ coremain.Run() }}\n")


def build_coredns(pins: Pins, out: Path) -> None:
    """CoreDNS from its Go module with only the plugins the local cluster needs (coredns_main)."""
    work, env, go_line = _module_work("coredns", "github.com/coredns/coredns", pins.coredns, pins)
    (work / "go.mod").write_text(f"module drafter.dev/build/coredns\n\ngo {go_line}\n\n"
                                 f"require github.com/coredns/coredns {pins.coredns}\n")
    (work / "main.go").write_text(coredns_main())
    _run("coredns: resolve modules", ["go", "mod", "tidy"], work, env, "check network access to the Go module proxy")
    _run(f"coredns {pins.coredns}: compile {', '.join(COREDNS_PLUGINS)}",
         ["go", "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "coredns"), "."], work, env,
         "read the compiler error above; a plugin named in COREDNS_PLUGINS must exist in the pinned CoreDNS")
    (out / coredns_stamp(pins)).write_text(f"{pins.coredns} plugins {','.join(COREDNS_PLUGINS)}\n")


def coredns_stamp(pins: Pins) -> str:
    """Marks a bin directory's coredns as this version with these plugins (a changed list rebuilds it)."""
    return f".coredns-{pins.coredns}-{'-'.join(COREDNS_PLUGINS)}"


STEPS = (
    Step("etcd", ("etcd",), build_etcd, cold_seconds=49),
    Step("kubernetes", KUBE_COMMANDS, build_kubernetes, cold_seconds=270),
    Step("kwok", ("kwok", kwok_stamp(PINS)), build_kwok, cold_seconds=88),
    Step("helm", ("helm", helm_stamp(PINS)), build_helm, cold_seconds=75),
    Step("prometheus", ("prometheus", "promtool", prometheus_stamp(PINS)), build_prometheus, cold_seconds=158),
    Step("crane", ("crane", crane_stamp(PINS)), build_crane, cold_seconds=8),
    Step("actionlint", ("actionlint", actionlint_stamp(PINS)), build_actionlint, cold_seconds=5),
    Step("helm-docs", ("helm-docs", helm_docs_stamp(PINS)), build_helm_docs, cold_seconds=9),
    Step("krew", ("kubectl-krew", "validate-krew-manifest", krew_stamp(PINS)), build_krew, cold_seconds=14),
    Step("coredns", ("coredns", coredns_stamp(PINS)), build_coredns, cold_seconds=56),
)


#: What the local cluster and the demo run. The other steps (crane, actionlint, helm-docs, krew) serve only the tests
#: and the release; `./dev test` builds them (`drafter-operator cluster build`), the demo never waits for them.
CLUSTER_STEPS = ("etcd", "kubernetes", "kwok", "helm", "prometheus", "coredns")
#: Of those, what a cluster can start without, built while it runs: CoreDNS and kwok join it once built
#: (`cluster.up(join_later=True)`, `cluster.join_late`), Prometheus runs beside it for the demo's alerts. A first
#: `./dev demo` builds them in the background, niced, so its story starts after the other steps alone (6.6 of
#: the toolchain's 11.6 minutes on 2 cores: STEPS' cold_seconds). In the order they are built: what the story
#: needs first, first.
LATE_STEPS = ("coredns", "prometheus", "kwok")
START_STEPS = tuple(step for step in CLUSTER_STEPS if step not in LATE_STEPS)


def missing_steps(pins: Pins = PINS) -> list[Step]:
    out = bin_dir(pins)
    return [s for s in STEPS if not all((out / o).is_file() for o in s.outputs)]


def ensure_binaries(pins: Pins = PINS, only: tuple[str, ...] = ()) -> Path:
    """Build whatever is missing (of the steps named in `only`, when given); return the bin directory. Cheap
    when everything is cached. `only` lets the release workflow build crane and helm without the cluster's
    seven minutes of Kubernetes."""
    unknown = sorted(set(only) - {s.name for s in STEPS})
    if unknown:
        raise BuildError(f"unknown build step(s) {', '.join(unknown)}. Fix: name steps among "
                         f"{', '.join(s.name for s in STEPS)}")
    out = bin_dir(pins)
    todo = [s for s in missing_steps(pins) if not only or s.name in only]
    if only:  # in the order asked for: the demo's background build wants CoreDNS first (LATE_STEPS)
        todo.sort(key=lambda s: only.index(s.name))
    if not todo:
        return out
    check_go()
    out.mkdir(parents=True, exist_ok=True)
    console.print(f"Building {', '.join(s.name for s in todo)} into {toolchain_dir(pins)} from pinned Go modules: "
                  f"about {_duration(sum(s.cold_seconds for s in todo))} on 2 cores with cold Go caches, once "
                  "(later runs reuse it).", soft_wrap=True)
    for number, step in enumerate(todo, 1):
        left = sum(s.cold_seconds for s in todo[number - 1:])
        console.print(f"[bold]{step.name}[/] ({number} of {len(todo)}): about {_duration(step.cold_seconds)} cold, "
                      f"{_duration(left)} with the steps after it", soft_wrap=True)
        step.run(pins, out)
        missing = [o for o in step.outputs if not (out / o).is_file()]
        if missing:
            raise BuildError(f"step '{step.name}' finished but did not produce {missing} in {out}")
    return out
