"""The developer subcommands drafter-testbed adds to `drafter-operator` (its entry points in the group
``drafter_operator.commands``, testbed/pyproject.toml): `cluster up|down|status|env|add-nodes` (the embedded
local cluster from the shell), `demo` and `emulate`.

Only the standard library and nodes.py at the top: `drafter-operator --help` registers these options
without paying for the cluster, the demo or the emulator."""

from __future__ import annotations

import argparse
import json
import sys

from drafter_testbed.nodes import DEFAULT_GPU_PRODUCT, GPU_PRODUCTS, KWOK, PROCESS


def register_emulate(subparsers: argparse._SubParsersAction) -> None:
    emulate = subparsers.add_parser(
        "emulate", add_help=False,
        help="serve an engine emulator from a vLLM or SGLang command line (emulate vllm serve ... | emulate sglang ...)",
    )
    # passthrough: everything after `emulate` reaches the emulator verbatim (the engine's own flags are not
    # drafter-operator's to parse).
    emulate.set_defaults(handler=_emulate, passthrough=True)


def _emulate(args: argparse.Namespace, extra: list[str]) -> int:
    from drafter_testbed.emulator import server

    return server.main(extra)


def register_demo(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="the main job on the embedded local cluster: baseline vs two drafters, measured")
    demo.add_argument("--max-tokens", type=int, default=256, help="tokens generated per prompt (default 256)")
    demo.add_argument("--prompts", type=int, default=3, help="prompts per serving, 1-5 (default 3)")
    demo.add_argument("--story", choices=("seed", "retraining"), default="seed",
                      help="seed: the seed's drafters measured, degraded, retrained and swept (default); retraining: "
                           "traffic shifts, the acceptance drifts, the serving retrains from its captured prompts")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace, extra: list[str]) -> int:
    if args.story == "retraining":
        from drafter_testbed import demo_retraining

        return demo_retraining.main()
    from drafter_testbed import demo

    return demo.main(max_tokens=args.max_tokens, prompts=max(1, min(5, args.prompts)))


def register_cluster(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser("cluster", help="the embedded local Kubernetes cluster (127.0.0.1 only)")
    verbs = cluster.add_subparsers(dest="verb", required=True, metavar="VERB")

    up = verbs.add_parser("up", help="build (once, cached) and start the local cluster; reuses a running one")
    up.add_argument("--gpu-nodes", type=int, default=2, help="number of 8-GPU nodes (default 2)")
    up.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu allocatable per node (default 8)")
    up.add_argument("--gpu-product", default=DEFAULT_GPU_PRODUCT, choices=sorted(GPU_PRODUCTS),
                    help=f"GPU product label (default {DEFAULT_GPU_PRODUCT})")
    up.add_argument("--gpu-runtime", default=KWOK, choices=(KWOK, PROCESS),
                    help="kwok: pods only pretend to run (scale tests); process: the local runner really "
                         "starts them (engine pods become emulator processes)")
    up.add_argument("--port-base", type=int, default=None, help="first of 8 consecutive ports on 127.0.0.1")
    up.add_argument("--audit", action="store_true",
                    help="write every request of the admin user (kubectl, tests, the operator) to the apiserver's "
                         "audit log, <state>/logs/audit.log (off by default; bench/fleet_scale.py counts with it)")
    up.set_defaults(cluster_handler=_up)

    down = verbs.add_parser("down", help="stop every process the local cluster started")
    down.add_argument("--wipe", action="store_true", help="also delete its state (etcd data, certificates)")
    down.set_defaults(cluster_handler=_down)

    status = verbs.add_parser("status", help="components, pids, memory and health as JSON")
    status.set_defaults(cluster_handler=_status)

    env = verbs.add_parser("env", help="print `export KUBECONFIG=...` for the local cluster")
    env.add_argument("--bin-dir", action="store_true", help="print the directory of kubectl, helm, promtool instead")
    env.set_defaults(cluster_handler=_env)

    restart = verbs.add_parser("restart", help="stop one component of the running local cluster and start it again "
                                                "(fault tests: a control-plane restart mid-swap)")
    restart.add_argument("component", help="etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok or runner")
    restart.add_argument("--timeout", type=float, default=90, help="seconds to wait for it to be healthy (default 90)")
    restart.set_defaults(cluster_handler=_restart)

    build = verbs.add_parser("build", help="build the pinned toolchain into the cache (no-op when cached)")
    steps = build.add_mutually_exclusive_group()
    steps.add_argument("--only", default="", metavar="STEP[,STEP]",
                       help="build only these steps (etcd, kubernetes, kwok, helm, prometheus, crane, actionlint, helm-docs, krew), "
                            "e.g. --only crane,helm for images/publish and packaging the chart")
    steps.add_argument("--cluster", action="store_true",
                       help="only what `cluster up` and the demo run (etcd, kubernetes, kwok, helm, prometheus, "
                            "coredns), not the tests' tools")
    build.add_argument("--managers", action="store_true",
                       help="also the controller managers the tests start beside the cluster (Kueue, LeaderWorkerSet): "
                            "a cold build of them takes minutes, which a test's timeout would otherwise pay")
    build.set_defaults(cluster_handler=_build)

    add = verbs.add_parser("add-nodes", help="register more nodes on the running local cluster")
    add.add_argument("--count", type=int, default=1)
    add.add_argument("--runtime", default=KWOK, choices=(KWOK, PROCESS))
    add.add_argument("--gpus", type=int, default=8)
    add.add_argument("--gpu-product", default=DEFAULT_GPU_PRODUCT, choices=sorted(GPU_PRODUCTS))
    add.add_argument("--name-prefix", default=None, help="node name prefix (default gpu-<runtime>-extra)")
    add.set_defaults(cluster_handler=_add_nodes)

    training = verbs.add_parser("training-env", help="run trainer-image containers with this training environment's python")
    training.add_argument("python", help="e.g. the path .ci/training-env prints")
    training.set_defaults(cluster_handler=_training_env)

    kueue = verbs.add_parser("kueue", help="build (once) and run Kueue v0.17.0 in the running local cluster "
                                           "(gang admission of Jobs labelled kueue.x-k8s.io/queue-name)")
    kueue.add_argument("--stop", action="store_true", help="stop it and unregister its webhooks instead")
    kueue.set_defaults(cluster_handler=_kueue)

    lws = verbs.add_parser("lws", help="build (once) and run LeaderWorkerSet v0.9.0 in the running local cluster "
                                       "(a serving replica as a leader pod and its workers, created and restarted "
                                       "as one)")
    lws.add_argument("--stop", action="store_true", help="stop it and unregister its webhooks instead")
    lws.set_defaults(cluster_handler=_lws)

    cluster.set_defaults(handler=lambda args, extra: args.cluster_handler(args))


def _up(args: argparse.Namespace) -> int:
    from drafter_testbed import cluster
    from drafter_testbed.build import BuildError

    topology = cluster.Topology(gpu_nodes=args.gpu_nodes, gpu_runtime=args.gpu_runtime,
                                gpus_per_node=args.gpus_per_node, gpu_product=args.gpu_product)
    try:
        record = cluster.up(topology, port_base=args.port_base or cluster.default_port_base(), audit=args.audit)
    except (BuildError, cluster.ClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={record['kubeconfig']}")
    return 0


def _down(args: argparse.Namespace) -> int:
    from drafter_testbed import cluster

    stopped = cluster.down(wipe=args.wipe)
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}" + ("; state wiped" if args.wipe else ""))
    return 0


def _status(args: argparse.Namespace) -> int:
    from drafter_testbed import cluster

    report = cluster.status()
    print(json.dumps(report, indent=2))
    return 0 if report["healthy"] else 3


def _restart(args: argparse.Namespace) -> int:
    from drafter_testbed import cluster

    try:
        seconds = cluster.restart(args.component, timeout=args.timeout)
    except cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"restarted {args.component}: healthy after {seconds}s")
    return 0


def _build(args: argparse.Namespace) -> int:
    from drafter_testbed.build import CLUSTER_STEPS, BuildError, ensure_binaries

    only = CLUSTER_STEPS if args.cluster else tuple(step for step in args.only.split(",") if step)
    try:
        print(ensure_binaries(only=only))
        if args.managers:
            from drafter_testbed import kueue, lws

            print(kueue.build())
            print(lws.build())
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _env(args: argparse.Namespace) -> int:
    from drafter_testbed import cluster
    from drafter_testbed.versions import bin_dir

    if args.bin_dir:
        print(bin_dir())
        return 0

    layout = cluster.Layout()
    if not layout.kubeconfig.exists():
        print("error: no local cluster state; run `drafter-operator cluster up` first", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={layout.kubeconfig}")
    return 0


def _training_env(args: argparse.Namespace) -> int:
    from drafter_testbed import cluster

    try:
        cluster.use_training_python(args.python)
    except cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _add_nodes(args: argparse.Namespace) -> int:
    from drafter_testbed import cluster

    try:
        names = cluster.add_nodes(args.count, args.runtime, args.gpus, args.gpu_product, args.name_prefix)
    except cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(names))
    return 0


def _kueue(args: argparse.Namespace) -> int:
    from drafter_testbed import kueue

    return _host_manager(kueue, args.stop)


def _lws(args: argparse.Namespace) -> int:
    from drafter_testbed import lws

    return _host_manager(lws, args.stop)


def _host_manager(addon, stop: bool) -> int:
    """`cluster kueue|lws [--stop]`: install (build once) or stop a controller manager that runs beside the cluster."""
    from drafter_testbed.build import BuildError
    from drafter_testbed.host_manager import HostManagerError

    name = addon.PROCESS
    if stop:
        print(f"stopped {name}" if addon.stop() else f"{name} was not running")
        return 0
    try:
        done = addon.install()
    except (BuildError, HostManagerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    verb = f"started in {done['seconds']}s" if done["started"] else "already running"
    print(f"{name} {addon.VERSION} {verb} (pid {done['pid']}, 127.0.0.1 ports {done['ports']})")
    return 0
