"""The spool: a per-pod emptyDir the engine writes its request log into and the capture sidecar reads and empties.
The engine never sees the claim; the sidecar is the only writer of captured records there."""

#: Where the engine's request log goes inside the engine container (and the sidecar's view of the same volume).
SPOOL_DIRECTORY = "/var/run/drafter/capture"
