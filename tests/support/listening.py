"""Which addresses a host process listens on: the controller managers beside the local cluster (Kueue, LWS) must
listen on 127.0.0.1 only."""
from __future__ import annotations


def listening_addresses(pid: int) -> set[str]:
    """host:port of every TCP socket `pid` listens on (from /proc/net/tcp{,6}, as the cluster's own check reads)."""
    from drafter_testbed import processes

    owned = processes.socket_inodes({pid})
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in owned:
                address, port = fields[1].rsplit(":", 1)
                host = ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)) if len(address) == 8 else address
                found.add(f"{host}:{int(port, 16)}")
    return found
