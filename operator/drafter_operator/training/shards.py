"""A data-parallel Extract's shares (pure): which samples pod i of n captures, and the manifest that records a
finished share so a restarted pod never captures it again.

The split is speculators' own (``get_indices_to_process`` in speculators 0.9.0's ``data_generation/offline.py``,
which ``generate-offline-data --world-size n --rank i`` applies): contiguous chunks, the first ``total % n`` one
sample longer. The operator does not choose the samples, it only needs to know them to report progress and size.
Shares are written side by side into the one hidden-state directory (``hs_<sample>.safetensors``), and each
finished share adds ``shards/shard-<i>-of-<n>-<training uid>-g<generation>.json`` beside them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime

from drafter_operator import timestamps
from drafter_operator.training.stages import stage_pods

#: The Indexed Job's variable for the pod's index (set by the Job controller).
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
MANIFEST_DIR = "shards"


def shard_range(total: int, index: int, count: int) -> range:
    """The samples share ``index`` of ``count`` captures out of ``total``."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {index} of {count}: the index must be in [0, {count})")
    chunk, remainder = divmod(max(total, 0), count)
    start = index * chunk + min(index, remainder)
    return range(start, start + chunk + (1 if index < remainder else 0))


def extract_shard(spec, stage: str, environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(index, count) of this pod's share when Extract spans spec.resources.nodes pods; None on one node."""
    count = stage_pods(spec.framework, spec.resources.nodes, stage)
    if stage != "Extract" or count == 1:
        return None
    value = environ.get(INDEX_VARIABLE)
    if value is None or not value.isdigit() or int(value) >= count:
        raise ValueError(f"Extract spans {count} pods (spec.resources.nodes) but {INDEX_VARIABLE} is {value!r}: "
                         "it runs as an Indexed Job, which sets it")
    return int(value), count


def run_name(generation: int, training_uid: str | None) -> str:
    """The run a share belongs to: the training object (its uid) and its spec generation. A changed spec (another
    sample count, other layers) captures again, and so does another training that reuses the claim or its
    directory (a retained claim, a claim of the user's, a re-created training of the same name at generation 1)."""
    return f"{training_uid}-g{generation}" if training_uid else f"g{generation}"


def manifest_path(hidden_states: str, shard: tuple[int, int], run: str) -> str:
    index, count = shard
    return os.path.join(hidden_states, MANIFEST_DIR, f"shard-{index}-of-{count}-{run}.json")


def start_share(hidden_states: str, shard: tuple[int, int], total: int, run: str) -> int:
    """Before a share captures: the first pod of this run's share removes the share's files that an earlier run
    left (speculators skips a sample whose file exists, and would train on another run's hidden states); a later
    pod of the same run (a lost node's replacement) keeps them and resumes. Returns the files removed."""
    marker = os.path.join(hidden_states, MANIFEST_DIR, f"shard-{shard[0]}-of-{shard[1]}-{run}.started")
    if os.path.exists(marker):
        return 0
    removed = 0
    for sample in shard_range(total, *shard):
        try:
            os.remove(os.path.join(hidden_states, f"hs_{sample}.safetensors"))
            removed += 1
        except FileNotFoundError:
            pass
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker, "w", encoding="utf-8"):
        pass
    return removed


def manifest(shard: tuple[int, int], total: int, finished: datetime, seconds: float, bytes_written: int,
             estimated_bytes: int | None) -> dict:
    """What a finished share records: which samples, when, how long it took, and what it wrote against its part
    of the whole run's estimate."""
    samples = shard_range(total, *shard)
    record = {"index": shard[0], "count": shard[1], "samples": [samples.start, samples.stop],
              "finished": timestamps.format_seconds(finished), "seconds": round(seconds, 1), "bytesWritten": bytes_written}
    if estimated_bytes is not None:
        record["estimatedBytes"] = share_estimate(estimated_bytes, total, shard)
    return record


def share_estimate(estimated_bytes: int, total: int, shard: tuple[int, int]) -> int:
    """The share's part of the whole run's estimate: its samples' fraction of it."""
    return estimated_bytes * len(shard_range(total, *shard)) // max(total, 1)


def share_bytes(hidden_states: str, shard: tuple[int, int], total: int) -> int:
    """Bytes of the share's hidden-state files (speculators writes ``hs_<sample>.safetensors``)."""
    sizes = (os.path.getsize(os.path.join(hidden_states, f"hs_{i}.safetensors")) for i in shard_range(total, *shard)
             if os.path.exists(os.path.join(hidden_states, f"hs_{i}.safetensors")))
    return sum(sizes)


def finished(hidden_states: str, shard: tuple[int, int], run: str) -> dict | None:
    """The share's manifest when it finished before in this run (a restarted pod skips it), else None."""
    try:
        with open(manifest_path(hidden_states, shard, run), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None
