"""What one poll costs the machine: `kubectl get -o json` against the harness's kept-alive read (reads.py).

The end-to-end tests wait by polling (Cluster.wait_for, every 0.5 s), and most polls are `get_json`. This bench
reads the same forms both ways against the local cluster and prints, per read, the CPU the reader spent (kubectl
processes, or this process), the CPU the kube-apiserver spent (from /proc), and the wall time.

Runs on the local cluster in DRAFTER_STATE_DIR (started if it is not running, and stopped again afterwards).

Usage: python bench/poll_cost.py [--reads 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

from drafter_testbed import cluster as local
from drafter_testbed import harness

FORMS = (("nodes",), ("-n", "kube-system", "pods"), ("namespace", "default"), ("crd",))


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def measure(read, reads: int, apiserver: int) -> dict[str, float]:
    read(FORMS[0])  # the first read pays for discovery or kubectl's cache: not a poll's cost
    apiserver_before, own_before, wall_before = process_cpu_seconds(apiserver), own_cpu_seconds(), time.monotonic()
    for index in range(reads):
        read(FORMS[index % len(FORMS)])
    per_read = 1000 / reads
    return {"reader_cpu_ms": round((own_cpu_seconds() - own_before) * per_read, 2),
            "apiserver_cpu_ms": round((process_cpu_seconds(apiserver) - apiserver_before) * per_read, 2),
            "wall_ms": round((time.monotonic() - wall_before) * per_read, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    layout = local.Layout()
    cluster, started = harness.start_local(layout)
    try:
        apiserver = local.running_components(layout)["kube-apiserver"]

        def by_kubectl(form):
            proc = subprocess.run([str(cluster.bin_dir / "kubectl"), "get", *form, "-o", "json"], env=cluster.env,
                                  capture_output=True, text=True, check=True)
            return json.loads(proc.stdout)

        result = {"reads": args.reads, "kubectl": measure(by_kubectl, args.reads, apiserver),
                  "kept_alive": measure(lambda form: cluster.get_json(*form), args.reads, apiserver)}
    finally:
        if started:
            local.down(layout=layout)
    for way in ("kubectl", "kept_alive"):
        figures = result[way]
        print(f"{way:>10}: {figures['reader_cpu_ms'] + figures['apiserver_cpu_ms']:6.1f} ms CPU per read "
              f"(reader {figures['reader_cpu_ms']}, apiserver {figures['apiserver_cpu_ms']}), wall {figures['wall_ms']} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
