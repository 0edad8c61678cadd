"""SGLang's side of the adaptive-speculation contract (test_sglang_adaptive_contract.py), run by the engine
environment's python: one JSON request a line on stdin, one JSON answer a line on stdout.

- ``{"run": {"config": {...} | null, "initial_steps": N, "events": [[accepted per request], batch size]...}}``:
  SGLang's ``AdaptiveSpeculativeParams`` over the events (the steps activated for the batch, then the verify fed
  back), every slot's steps and moving average after each; a config SGLang refuses answers its exception.
- ``{"reason": [argv, ...]}``: ``adaptive_unsupported_reason`` of each command line's ServerArgs, built by
  ``prepare_server_args`` as the parser harness builds them and brought to where SGLang's speculative hook asks:
  the deprecated attention-DP spelling resolved, the algorithm upper-cased with its alias resolved.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile

from parser_harness_common import SGLANG_PREFIX, short_error


def run(request: dict) -> dict:
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    path = None
    if request["config"] is not None:
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as file:
            json.dump(request["config"], file)
    try:
        try:
            params = AdaptiveSpeculativeParams(request["initial_steps"], cfg_path=path)
        except Exception as exc:  # noqa: BLE001 - the refusal is the answer
            return {"refused": [type(exc).__name__, str(exc)]}
        trace = []
        for accepted, batch_size in request["events"]:
            activated = params.get_steps_for_batch(batch_size)
            switched = params.on_verify_complete(accepted, batch_size)
            trace.append({"activated": activated, "switched": switched,
                          "slots": {str(bs): [slot.current_steps, slot.ema_accept_len]
                                    for bs, slot in params._slots.items()}})
        return {"candidate_steps": params.candidate_steps, "trace": trace}
    finally:
        if path is not None:
            os.unlink(path)


def _deprecated_dp_attention_hook():
    """SGLang's ``parallel_hook.handle_deprecated_dp_attention``, compiled from its own source: the module's other
    imports need torchvision, which this environment lacks, while the function needs only the resolution views."""
    import ast
    import importlib.util

    from sglang.srt.arg_groups import overrides

    path = importlib.util.find_spec("sglang.srt.arg_groups").submodule_search_locations[0] + "/parallel_hook.py"
    with open(path) as file:
        tree = ast.parse(file.read())
    [function] = [node for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name == "handle_deprecated_dp_attention"]
    namespace = {"resolving_view": overrides.resolving_view, "declare_resolution": overrides.declare_resolution,
                 "Any": object}
    exec(compile(ast.Module([function], []), path, "exec"), namespace)
    return namespace["handle_deprecated_dp_attention"]


def reasons(argvs: list[list[str]]) -> list[dict]:
    from sglang.srt.arg_groups.overrides import declare_resolution
    from sglang.srt.arg_groups.speculative_hook import _resolve_speculative_algorithm_alias
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.adaptive_spec_params import adaptive_unsupported_reason

    handle_deprecated_dp_attention = _deprecated_dp_attention_hook()
    out = []
    for argv in argvs:
        assert argv[:3] == SGLANG_PREFIX, argv
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                server_args = prepare_server_args(argv[3:])
        except SystemExit as exc:
            out.append({"exit": exc.code})
            continue
        handle_deprecated_dp_attention(server_args)
        algorithm = server_args.speculative_algorithm
        if algorithm is not None:
            # No draft path: the Gemma4 promotion reads the draft's config, which these fake paths lack.
            declare_resolution(server_args, "contract", speculative_algorithm=_resolve_speculative_algorithm_alias(
                algorithm.upper(), None))
        try:
            out.append({"reason": adaptive_unsupported_reason(server_args)})
        except Exception as exc:  # noqa: BLE001
            out.append({"raised": short_error(exc)})
    return out


def main() -> None:
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        with contextlib.redirect_stdout(sys.stderr):  # SGLang's log lines must not reach the answers
            answer = run(request["run"]) if "run" in request else reasons(request["reason"])
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
