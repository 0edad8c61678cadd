"""`drafter-operator run`: start kopf with our handlers and the operator's /metrics endpoint."""

from __future__ import annotations

import asyncio
import logging

import kopf
from prometheus_client import start_http_server


def run(namespaces: list[str], metrics_port: int = 8080, verbose: bool = False,
        metrics_host: str = "0.0.0.0") -> int:
    """Run until interrupted. `namespaces` empty: cluster-wide; else only those (namespaced mode)."""
    from drafter_operator.controllers import handlers  # noqa: F401 - registers the handlers

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # httpx logs every request at INFO: one line per engine pod per acceptance interval drowns the log.
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose else logging.WARNING)
    if metrics_port:
        start_http_server(metrics_port, addr=metrics_host)
    asyncio.run(kopf.operator(namespaces=namespaces, clusterwide=not namespaces, standalone=True))
    return 0
