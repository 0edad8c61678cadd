"""Run the real engines' argument parsers on command lines: the helper the contract tests drive.

Runs under the engine environment's python (.ci/engine-contract-env), never under the operator's:
it imports vLLM or SGLang and nothing of drafter_operator. Two modes:

    python engine_parsers.py serve vllm|sglang
        Reads one JSON request per line on stdin, a list of cases {"id", "argv", "full"}, and answers
        one JSON line with a list of results in the same order. "argv" is the full command line as
        rendered (`vllm serve ...` or `python3 -m sglang.launch_server ...`).
    python engine_parsers.py exit vllm|sglang ARG...
        Parses ARG... (the flags after the entrypoint) the way the engine's CLI does and exits with
        the parser's own status (2 for an unknown flag), printing nothing on stdout.
    python engine_parsers.py table vllm|sglang
        Prints the engine's flag table as JSON: every option string of the parser `vllm serve` /
        `python -m sglang.launch_server` builds, with its destination, action, nargs, type, choices
        and default, plus the names of the tool-call and reasoning parsers the engine registers.
        The operator's copies live in operator/drafter_operator/engines/flagtables/; regenerate with
        `$DRAFTER_ENGINE_PYTHON tests/contract/engine_parsers.py table vllm > .../vllm.json`.

A result is {"id", "status": "ok" | "exit" | "raised" | "invalid" | "error", ...}. "exit" means the
parser called sys.exit (with "code" and its "stderr"); "raised" that parsing itself raised (e.g. an
unreadable --config file); "invalid" that parsing succeeded but the engine's own post-parse
validation raised ("error"); "error" is a failure of this helper. On "ok":
- vllm: "args" (the parsed namespace, JSON-able values; others as repr), "parsers" (whether the tool
  and reasoning parser names are registered in vLLM), and with --speculative-config "speculative":
  {"fields": SpeculativeConfig built from the JSON with __post_init__ skipped (field types, literals,
  ranges, unknown keys, the model validator), "full" (when the case asks for it): the real
  SpeculativeConfig, __post_init__ included, against a fake local target checkpoint (tiny
  DeepSeek-V3 config.json with one MTP layer, no weights) and the parsed tensor parallel size, with
  the drafter path mapped to a fake checkpoint of the method's kind}.
- sglang: "args" (ServerArgs fields from prepare_server_args) and "algorithm" (the name
  SpeculativeAlgorithm.from_string resolves the flag to, or an error).
No GPU, no network: HF_HUB_OFFLINE is set and nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

from engine_flag_tables import sglang_table, vllm_table
from parser_harness_common import FAKE_ROOTS, short_error
from sglang_parser_harness import Sglang
from vllm_parser_harness import Vllm

TABLES = {"vllm": vllm_table, "sglang": sglang_table}


ENGINES = {"vllm": Vllm, "sglang": Sglang}


def serve(engine_name: str, out) -> None:
    engine = ENGINES[engine_name]()
    out.write(json.dumps({"ready": engine_name}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        results = []
        for case in json.loads(line):
            started = time.monotonic()
            try:
                result = engine.check(case)
            except Exception as exc:  # noqa: BLE001 - a crash of the harness is reported, not fatal
                result = {"status": "error", "error": short_error(exc), "traceback": traceback.format_exc()}
            results.append({"id": case.get("id"), **result, "seconds": round(time.monotonic() - started, 3)})
        out.write(json.dumps(results) + "\n")
        out.flush()


def main() -> None:
    mode, engine_name, *args = sys.argv[1:]
    # Engines log to stdout; keep the real stdout for the protocol and send everything else to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if mode == "serve":
        try:
            serve(engine_name, out)
        finally:
            out.flush()
            for path in list(FAKE_ROOTS):
                shutil.rmtree(path, ignore_errors=True)
        os._exit(0)  # skip torch's slow interpreter teardown; nothing else to flush
    elif mode == "table":
        out.write(json.dumps(TABLES[engine_name](), indent=1, sort_keys=True) + "\n")
        out.flush()
        os._exit(0)
    elif mode == "exit":
        ENGINES[engine_name]().parse(args)  # SystemExit from the parser propagates: its status is ours
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
