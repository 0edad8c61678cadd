"""``drafter-operator captured-dataset``: the first step of a Generate stage whose data is a serving's capture
(spec.data.capture): the captured prompts on the claim, mounted read-only, become the train and held-out
conversations JSONL on the training's work volume (capture/dataset.py decides what goes where). The regeneration
that follows answers the train set with the target.

Each output is written whole and then renamed over the last one, so a killed run leaves the previous file or none,
never half of one. A capture with no usable prompt fails the stage with the counts that say why: a drafter trained
on nothing would pass no gate anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from drafter_operator.capture.dataset import captured_dataset, captured_files, read_records


def command_line(claim: str, train: str, held_out: str, held_out_fraction: str) -> tuple[str, ...]:
    """The argv a Generate stage runs (training/rendering.py: captured_source)."""
    return ("drafter-operator", "captured-dataset", "--claim", claim, "--train", train, "--held-out", held_out,
            "--held-out-fraction", held_out_fraction)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{text} is not at least 0 and below 1")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "captured-dataset", help="turn a serving's captured prompts into train and held-out conversations JSONL")
    parser.add_argument("--claim", required=True, type=Path, metavar="DIR", help="where the capture's claim is mounted")
    parser.add_argument("--train", required=True, type=Path, metavar="FILE", help="the train conversations to write")
    parser.add_argument("--held-out", required=True, type=Path, metavar="FILE",
                        help="the held-out conversations to write")
    parser.add_argument("--held-out-fraction", required=True, type=_fraction, metavar="F",
                        help="the share of distinct prompts held out, at least 0 and below 1")
    parser.set_defaults(handler=_main)


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)


def _main(args: argparse.Namespace, _extra=()) -> int:
    if not args.claim.is_dir():
        print(f"captured-dataset: {args.claim} is not a directory: the capture's claim is not mounted there",
              file=sys.stderr)
        return 2
    unreadable: Counter = Counter()
    dataset = captured_dataset(read_records(args.claim, unreadable), args.held_out_fraction)
    dataset.skipped.update(unreadable)
    summary = {"files": len(captured_files(args.claim)), **dataset.summary()}
    if not dataset.train:
        print(f"captured-dataset: no prompt to train on in {args.claim} ({json.dumps(summary)}): let the serving "
              "capture for longer, raise its spec.capture.sampleRate, or lower spec.data.capture.heldOutFraction",
              file=sys.stderr)
        return 1
    _write(args.train, dataset.train)
    _write(args.held_out, dataset.held_out)
    print(json.dumps({"capturedDataset": summary}), flush=True)
    return 0
