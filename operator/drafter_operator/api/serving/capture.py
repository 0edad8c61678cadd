"""spec.capture: a sample of a serving's requests kept on a claim in its namespace (opt-in, bounded).

The engines log requests by their own facilities (engines/sglang.py, engines/vllm.py: capture_flags); the
capture sidecar (drafter_operator/capture/) samples those lines, keeps prompts (and responses when asked)
and prunes the claim to ``retention`` and ``maxSize``. A redaction container the user names rewrites or drops each
kept record before it is written (capture/redaction.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from drafter_operator.api.common import (
    RATIO_PATTERN,
    ApiModel,
    Duration,
    Image,
    ObjectName,
    Quantity,
    Ratio,
    decimal_range_rule,
    duration_range_rule,
)

#: How long captured files are kept when spec.capture.retention is unset (seven days; durations have no day unit).
DEFAULT_RETENTION = "168h"
#: The most a claim holds of captured files when spec.capture.maxSize is unset.
DEFAULT_MAX_SIZE = "10Gi"
#: Retention bounds: under an hour would delete the hour file being written; over a year is no longer a sample
#: kept for training but an archive, which this feature does not mean to be.
MIN_RETENTION, MAX_RETENTION = "1h", "8760h"

CommandItem = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class RedactionSpec(ApiModel):
    """A container the user names that rewrites each kept record before it reaches the claim.

    Contract: the command is run once per batch of records, reads one JSON record per line on standard input until
    its end, writes exactly one JSON line per record read, in order, on standard output (the record rewritten, or
    ``null`` to drop it; a rewritten record keeps its engine, requestId and kind), and exits 0. The image needs a
    POSIX ``sh`` (the wrapper that hands it the batches). It never sees the claim."""

    image: Image
    """The redaction container's image."""
    command: Annotated[list[CommandItem], Field(min_length=1, max_length=32)]
    """Its command line (argv), e.g. ["python3", "/redact.py"]."""


class CaptureSpec(ApiModel):
    """Opt-in capture of a sample of the serving's requests to a claim in its namespace."""

    rules = (
        decimal_range_rule(
            "sampleRate", RATIO_PATTERN,
            'spec.capture.sampleRate must be above 0 and at most 1 (the fraction of requests kept), e.g. "0.05"',
            minimum=0.0, maximum=1.0, exclusive_minimum=True,
        ),
        duration_range_rule(
            "retention", MIN_RETENTION, MAX_RETENTION,
            f'spec.capture.retention must be between {MIN_RETENTION} and {MAX_RETENTION}, e.g. "{DEFAULT_RETENTION}" '
            "(seven days)",
        ),
    )

    sample_rate: Ratio
    """The fraction of requests kept, a decimal string above 0 and at most 1, e.g. "0.05". A request is kept or not by a hash of its id, so its prompt and its response agree."""
    responses: bool = False
    """Keep the engine's responses as well as the prompts (off: prompts only)."""
    retention: Duration = DEFAULT_RETENTION
    """How long a captured hour file is kept, e.g. "168h" (seven days)."""
    max_size: Quantity = DEFAULT_MAX_SIZE
    """The most the captured files may take on the claim; the oldest go first beyond it."""
    claim_name: ObjectName
    """The PersistentVolumeClaim in the serving's namespace the sample is written to (mounted read-write by the capture sidecar only, never by the engine)."""
    redaction: RedactionSpec | None = None
    """A container that rewrites or drops each kept record before it is written (see RedactionSpec). A record it gives no valid answer for is not written; the capture retries it the next poll."""
