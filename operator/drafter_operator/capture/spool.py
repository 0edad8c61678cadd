"""The spool: a per-pod emptyDir the engine writes its request log into and the capture sidecar reads and empties.
The engine never sees the claim; the sidecar is the only writer of captured records there.

How the sidecar follows an engine's log depends on how the engine's logging handler writes it; each engine's
module names its kind (engines/*.py CAPTURE_SPOOL), the sidecar's following.py reads both kinds."""

from __future__ import annotations

from dataclasses import dataclass

#: Where the engine's request log goes inside the engine container (and the sidecar's view of the same volume).
SPOOL_DIRECTORY = "/var/run/drafter/capture"
#: Where files an engine needs for capture are carried into the engine container (one directory of their own:
#: the pod projects each directory of carried files as one volume).
CAPTURE_FILES_DIRECTORY = "/etc/drafter/capture"


@dataclass(frozen=True)
class ReopenedLog:
    """One log file the engine reopens by its name whenever that name is gone (logging's WatchedFileHandler checks
    before every line). The sidecar takes it by renaming it away, reads it one poll later (by then every writer has
    reopened a fresh file under the name) and deletes it."""

    name: str


@dataclass(frozen=True)
class RotatedLogs:
    """Log files the engine rotates itself (logging's TimedRotatingFileHandler): the live ``<stem><suffix>`` is
    appended to and tailed by byte offset; at rotation it is renamed ``<stem><suffix>.<stamp>`` and never written
    again, so the sidecar reads such a file to its end and deletes it."""

    suffix: str


SpoolKind = ReopenedLog | RotatedLogs
