"""The capture sidecar's loop (`drafter-operator capture`): each poll it follows the spool as following.plan says,
keeps the sampled requests' lines as records (sampling.py, records.py), appends them to the hour file on the claim
(retention.hour_file), through the user's redaction container first when spec.capture.redaction names one
(redaction.py), and prunes the claim (retention.to_delete). Every decision is in those pure modules; this
one only lists, reads, appends, renames and deletes.

Each sidecar appends under a directory of its own in the claim (its pod's name): the pods of a serving never
append to one file. Each prunes the whole claim, so retention and maxSize hold for the claim, not per pod (two
sidecars deleting the same file is harmless).

The consumed offsets are saved in the spool (an emptyDir: it outlives a restart of the sidecar's container) after
the records they produced are appended, so a restarted sidecar goes on where the last one stopped; a crash between
the append and the save may repeat that one poll's records, never lose them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from drafter_operator.capture import following, retention, sampling
from drafter_operator.capture.redaction import Redaction, redact
from drafter_operator.capture.samples import SAMPLES_PATH, PromptTally
from drafter_operator.capture.records import RequestLine, capture_record
from drafter_operator.capture.spool import SpoolKind
from drafter_operator.timestamps import UTC, format_seconds, parse_aware

log = logging.getLogger(__name__)

#: The sidecar's own file in the spool: the byte offsets consumed, by inode.
OFFSETS_FILE = ".capture-offsets.json"


@dataclass(frozen=True)
class Sample:
    """What of the engine's lines a capture keeps."""

    engine: str
    parse: Callable[[str], RequestLine | None]
    rate: float
    responses: bool


@dataclass(frozen=True)
class Bounds:
    """How much of the claim a capture keeps."""

    retention_s: float
    max_bytes: int


@dataclass(frozen=True)
class Sidecar:
    spool: Path
    claim: Path
    #: The directory of the claim this sidecar appends in (its pod's name).
    writer: str
    kind: SpoolKind
    sample: Sample
    bounds: Bounds
    #: spec.capture.redaction's shared directory; None: records are written as the engine logged them.
    redaction: Redaction | None = None
    #: Where it answers how many prompts the claim holds since a time (samples.py); None: it does not.
    samples_address: tuple[str, int] | None = None


def records(lines: Iterable[str], sample: Sample, time_text: str) -> list[dict[str, Any]]:
    """The records a capture writes for these engine lines: the sampled requests' prompts (and responses)."""
    kept = []
    for line in lines:
        request = sample.parse(line)
        if request is None or not sampling.kept(request.request_id, sample.rate):
            continue
        if (record := capture_record(sample.engine, request, responses=sample.responses, time=time_text)) is not None:
            kept.append(record)
    return kept


# --------------------------------------------------------------------------------------------------- I/O


def spool_files(spool: Path) -> list[following.SpoolFile]:
    files = []
    for entry in os.scandir(spool):
        if entry.name != OFFSETS_FILE and entry.is_file(follow_symlinks=False):
            stat = entry.stat(follow_symlinks=False)
            files.append(following.SpoolFile(entry.name, stat.st_ino, stat.st_size))
    return files


def load_offsets(spool: Path) -> dict[int, int]:
    try:
        return {int(inode): int(offset) for inode, offset in json.loads((spool / OFFSETS_FILE).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}  # none yet (a fresh pod), or unreadable: the spool's files are then read from their start


def save_offsets(spool: Path, offsets: dict[int, int]) -> None:
    partial = spool / (OFFSETS_FILE + ".partial")
    partial.write_text(json.dumps({str(inode): offset for inode, offset in offsets.items()}))
    os.replace(partial, spool / OFFSETS_FILE)


def append_records(claim: Path, name: str, kept: list[dict[str, Any]]) -> None:
    if not kept:
        return
    with open(claim / name, "a", encoding="utf-8") as out:
        out.write("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in kept))
        out.flush()
        os.fsync(out.fileno())


def claim_files(claim: Path) -> list[retention.CapturedFile]:
    """The files of the claim and of its directories one level down (every pod's), by their path in it."""
    files = []
    for entry in os.scandir(claim):
        if entry.is_file(follow_symlinks=False):
            files.append(retention.CapturedFile(entry.name, entry.stat(follow_symlinks=False).st_size))
        elif entry.is_dir(follow_symlinks=False):
            files += [retention.CapturedFile(f"{entry.name}/{inner.name}", inner.stat(follow_symlinks=False).st_size)
                      for inner in os.scandir(entry.path) if inner.is_file(follow_symlinks=False)]
    return files


def prune(claim: Path, now: float, bounds: Bounds) -> list[str]:
    files = claim_files(claim)
    doomed = retention.to_delete(files, now, bounds.retention_s, bounds.max_bytes)
    for name in doomed:
        (claim / name).unlink(missing_ok=True)
    return doomed


def poll(sidecar: Sidecar, offsets: dict[int, int], now: float, *, draining: bool = False) -> dict[int, int]:
    """One pass over the spool and the claim; the offsets after it."""
    files = spool_files(sidecar.spool)
    offsets = following.offsets_kept(offsets, files)
    step = following.plan(sidecar.kind, files, offsets, draining=draining)
    time_text = format_seconds(datetime.fromtimestamp(now, UTC))
    for read in step.reads:
        with open(sidecar.spool / read.name, "rb") as source:
            source.seek(read.start)
            lines, consumed = following.complete_lines(source.read(), final=read.final)
        kept = records(lines, sidecar.sample, time_text)
        if sidecar.redaction is not None:  # RedactionFailed: nothing appended, the offsets stay, the next poll retries
            kept = redact(sidecar.redaction, kept)
        append_records(sidecar.claim / sidecar.writer, retention.hour_file(now), kept)
        if read.final:
            offsets.pop(read.inode, None)
            save_offsets(sidecar.spool, offsets)
            (sidecar.spool / read.name).unlink(missing_ok=True)
        else:
            offsets[read.inode] = read.start + consumed
            save_offsets(sidecar.spool, offsets)
    for source_name, taken in step.takes:
        os.rename(sidecar.spool / source_name, sidecar.spool / taken)
    prune(sidecar.claim, now, sidecar.bounds)
    return offsets


def serve_samples(claim: Path, address: tuple[str, int]) -> ThreadingHTTPServer:
    """Answer ``GET /samples?since=<time>`` with ``{"prompts": N, "since": <time>}`` from a daemon thread (the count
    of prompt records on the whole claim written at or after that time); the server, to shut it down."""
    tally = PromptTally(claim)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            url = urlsplit(self.path)
            since = parse_aware((parse_qs(url.query).get("since") or [""])[0])
            if url.path != SAMPLES_PATH:
                self._answer(HTTPStatus.NOT_FOUND, {"error": f"only {SAMPLES_PATH}?since=<time> is served"})
            elif since is None:
                self._answer(HTTPStatus.BAD_REQUEST,
                             {"error": 'since: give a time with its zone, e.g. since=2026-12-07T02:00:00Z'})
            else:
                self._answer(HTTPStatus.OK, {"prompts": tally.count_since(since), "since": format_seconds(since)})

        def _answer(self, status: HTTPStatus, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 (the standard library's signature)
            log.debug("samples: " + format, *args)

    server = ThreadingHTTPServer(address, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="samples", daemon=True).start()
    # Read the claim once now (about 5 s a GB here): the operator's first question then takes milliseconds, not
    # longer than its timeout.
    threading.Thread(target=tally.count_since, args=(datetime.fromtimestamp(0, UTC),), name="samples-warm",
                     daemon=True).start()
    return server


def run(sidecar: Sidecar, poll_s: float, *, clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll until SIGTERM (the pod's end), then drain the spool once: by then the engine has stopped writing."""
    stopping: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    server = serve_samples(sidecar.claim, sidecar.samples_address) if sidecar.samples_address else None
    try:
        (sidecar.claim / sidecar.writer).mkdir(parents=True, exist_ok=True)
        offsets = load_offsets(sidecar.spool)
        log.info("capture: following %s into %s, sample rate %g%s", sidecar.spool, sidecar.claim, sidecar.sample.rate,
                 f", redacted through {sidecar.redaction.directory}" if sidecar.redaction else "")
        while not stopping:
            try:
                offsets = poll(sidecar, offsets, clock())
            except OSError as exc:  # a full claim, a file gone between listing and reading: the next poll retries
                log.warning("capture: poll failed, retrying in %gs: %s", poll_s, exc)
            sleep(poll_s)
        poll(sidecar, offsets, clock(), draining=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server is not None:
            server.shutdown()
            server.server_close()
