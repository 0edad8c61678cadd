"""SGLang's side of the engine-parser harness (engine_parsers.py): prepare_server_args, the algorithm
SpeculativeAlgorithm resolves, and the speculative hook's resolved view."""

from __future__ import annotations

import contextlib
import io
import sys

from parser_harness_common import SGLANG_PREFIX, jsonable, short_error



class Sglang:
    def __init__(self):
        import msgspec
        from sglang.srt.server_args import prepare_server_args
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.prepare = prepare_server_args
        self.algorithms = SpeculativeAlgorithm
        self.asdict = msgspec.structs.asdict
        self.baseline = jsonable(self.asdict(self.prepare(["--model-path", "/model"])))

    def parse(self, args: list[str]):
        return self.prepare(args)

    def check(self, case: dict) -> dict:
        argv = case["argv"]
        if argv[:3] != SGLANG_PREFIX:
            return {"status": "error", "error": f"not a `python3 -m sglang.launch_server` command line: {argv[:3]}"}
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                server_args = self.parse(argv[3:])
        except SystemExit as exc:
            return {"status": "exit", "code": exc.code, "stderr": stderr.getvalue()[-800:]}
        except Exception as exc:  # noqa: BLE001 - e.g. --config FILE that cannot be read: the launcher crashes
            return {"status": "raised", "error": short_error(exc)}
        args = jsonable(self.asdict(server_args))
        out = {"status": "ok", "args": args,
               "changed": sorted(k for k, v in args.items() if self.baseline.get(k) != v)}
        try:
            out["algorithm"] = {"ok": self.algorithms.from_string(server_args.speculative_algorithm).name}
        except Exception as exc:  # noqa: BLE001
            out["algorithm"] = {"error": short_error(exc)}
        if server_args.speculative_algorithm in self.BLOCK_HANDLERS:
            out["resolved"] = self.resolve(argv[3:], server_args.speculative_algorithm)
        return out

    # The block drafters' handlers of SGLang's speculative hook (arg_groups/speculative_hook.py), which set the
    # steps, topk and verified tokens from the block size after parsing.
    BLOCK_HANDLERS = {"DFLASH": "_handle_dflash", "DSPARK": "_handle_dspark"}
    RESOLVED = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                "speculative_dflash_block_size", "speculative_dspark_block_size", "speculative_draft_model_path")

    def resolve(self, args: list[str], algorithm: str) -> dict:
        """What the algorithm's own handler resolves, on CUDA as in the pod (the handlers refuse other devices).
        A handler that must read the draft's config to find the block size imports SGLang's config registry,
        which needs torchvision, absent from this environment: that is reported as the error it is."""
        from sglang.srt.arg_groups import speculative_hook
        from sglang.srt.arg_groups.model_override_base import resolved_view

        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(sys.stderr):
                server_args = self.parse([*args, "--device", "cuda"])
                getattr(speculative_hook, self.BLOCK_HANDLERS[algorithm])(server_args)
            view = resolved_view(server_args)
            return {"ok": {name: jsonable(getattr(view, name)) for name in self.RESOLVED}}
        except Exception as exc:  # noqa: BLE001
            return {"error": short_error(exc)}
