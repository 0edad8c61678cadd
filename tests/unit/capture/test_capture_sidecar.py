"""The capture sidecar against a spool and a claim in a temporary directory, the spool written by the same
logging handlers the engines use (logging's WatchedFileHandler for vLLM's request logger as capture configures it,
TimedRotatingFileHandler for SGLang's log target) with lines in the engines' formats (tests/contract holds the
formats to the real loggers)."""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import signal
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafter_operator import engines
from drafter_operator.capture import sampling, sidecar
from drafter_operator.capture.following import TAKEN_SUFFIX
from drafter_operator.capture.retention import hour_file
from drafter_operator.cli import build_parser

NOW = datetime(2026, 12, 6, 18, 30, tzinfo=timezone.utc).timestamp()
HOUR = 3600
VLLM, SGLANG = engines.engine("vllm"), engines.engine("sglang")
WRITER = "serving-abc-0"  # the pod's directory in the claim


def vllm_prompt(request_id: str, text: str) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "request_id": request_id}
    return f"Request {request_id} JSON body: {json.dumps(body)}"


def vllm_response(request_id: str, text: str) -> str:
    return f"Generated response chatcmpl-{request_id}: output: {text!r}, finish_reason: stop"


def sglang_prompt(request_id: str, text: str) -> str:
    return json.dumps({"timestamp": "2026-12-06T18:00:00", "event": "request.received", "rid": request_id,
                       "obj": {"rid": request_id, "text": text, "sampling_params": {"max_new_tokens": 8}}})


def make(tmp_path: Path, engine, *, rate: float = 1.0, responses: bool = True,
         bounds: sidecar.Bounds = sidecar.Bounds(168 * HOUR, 10**9)) -> sidecar.Sidecar:
    (tmp_path / "spool").mkdir(exist_ok=True)
    (tmp_path / "claim").mkdir(exist_ok=True)
    (tmp_path / "claim" / WRITER).mkdir(exist_ok=True)
    return sidecar.Sidecar(tmp_path / "spool", tmp_path / "claim", WRITER, engine.CAPTURE_SPOOL,
                           sidecar.Sample(engine.ENGINE, engine.capture_line, rate, responses), bounds)


def captured(car: sidecar.Sidecar) -> list[tuple[str, str]]:
    """(request id, kind) of every record on the claim, in the order written."""
    return [(record["requestId"], record["kind"])
            for path in sorted((car.claim / WRITER).iterdir()) if path.name.startswith("capture-")
            for record in map(json.loads, path.read_text(encoding="utf-8").splitlines())]


def logger(name: str, handler: logging.Handler, fmt: str) -> logging.Logger:
    handler.setFormatter(logging.Formatter(fmt, datefmt="%Y-%m-%d %H:%M:%S"))
    log = logging.getLogger(f"capture-test.{name}")
    log.handlers[:] = [handler]
    log.propagate, log.level = False, logging.INFO
    return log


def vllm_writer(car: sidecar.Sidecar, name: str) -> logging.Logger:
    # As capture_logging_config() routes vLLM's request logger: a WatchedFileHandler, the bare message.
    return logger(name, logging.handlers.WatchedFileHandler(car.spool / VLLM.CAPTURE_SPOOL.name, delay=True),
                  "%(message)s")


def sglang_writer(car: sidecar.Sidecar, name: str) -> tuple[logging.Logger, logging.handlers.TimedRotatingFileHandler]:
    # As sglang/srt/utils/log_utils.py opens a directory target: hourly rotation, "[time] message".
    handler = logging.handlers.TimedRotatingFileHandler(car.spool / "host_0.log", when="H", backupCount=0,
                                                        encoding="utf-8")
    return logger(name, handler, "[%(asctime)s] %(message)s"), handler


def test_vllm_lines_are_captured_once_across_takes_and_the_handlers_reopening(tmp_path: Path) -> None:
    car = make(tmp_path, VLLM)
    log = vllm_writer(car, "vllm-once")
    offsets: dict[int, int] = {}
    log.info(vllm_prompt("a", "hello"))
    log.info(vllm_response("a", "hi there"))
    offsets = sidecar.poll(car, offsets, NOW)  # takes the file: nothing read yet
    assert captured(car) == [] and (car.spool / (VLLM.CAPTURE_SPOOL.name + TAKEN_SUFFIX)).exists()
    log.info(vllm_prompt("b", "second"))  # the handler reopens a fresh file under the name
    offsets = sidecar.poll(car, offsets, NOW + 5)
    assert captured(car) == [("a", "prompt"), ("a", "response")]
    offsets = sidecar.poll(car, offsets, NOW + 10)
    offsets = sidecar.poll(car, offsets, NOW + 15)
    assert captured(car) == [("a", "prompt"), ("a", "response"), ("b", "prompt")]
    assert sorted(p.name for p in car.spool.iterdir()) == [sidecar.OFFSETS_FILE]


def test_prompts_only_unless_responses_are_asked_for(tmp_path: Path) -> None:
    car = make(tmp_path, VLLM, responses=False)
    log = vllm_writer(car, "vllm-prompts")
    log.info(vllm_prompt("a", "hello"))
    log.info(vllm_response("a", "hi there"))
    sidecar.poll(car, sidecar.poll(car, {}, NOW), NOW + 5)
    assert captured(car) == [("a", "prompt")]
    record = json.loads((car.claim / WRITER / hour_file(NOW + 5)).read_text())
    assert record["content"]["messages"][0]["content"] == "hello" and record["engine"] == "vllm"


def test_a_sampled_out_request_leaves_nothing_on_the_claim(tmp_path: Path) -> None:
    rate = 0.5
    ids = [f"req-{n}" for n in range(40)]
    kept = [i for i in ids if sampling.kept(i, rate)]
    assert 0 < len(kept) < len(ids)  # the test sees both
    car = make(tmp_path, VLLM, rate=rate)
    log = vllm_writer(car, "vllm-sampled")
    for request_id in ids:
        log.info(vllm_prompt(request_id, "p"))
        log.info(vllm_response(request_id, "r"))
    sidecar.poll(car, sidecar.poll(car, {}, NOW), NOW + 5)
    assert captured(car) == [(i, kind) for i in kept for kind in ("prompt", "response")]


@given(st.booleans(), st.booleans())
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_a_benchmarks_requests_are_never_captured_whatever_the_rate(tmp_path_factory, sglang: bool, chat: bool) -> None:
    """What the benchmark client sends (its own body, named for the engine) reaches the claim neither as a prompt
    nor as a response; a user's request beside it does."""
    from drafter_operator.benchmark_client.stream import Endpoint, request

    engine = SGLANG if sglang else VLLM
    tmp_path = tmp_path_factory.mktemp("bench")
    car = make(tmp_path, engine, rate=1.0)
    endpoint = Endpoint("target", "http://127.0.0.1:1", "m", 8, chat=chat, request_id_field=engine.CLIENT_REQUEST_ID_FIELD)
    _, body = request(endpoint, "a gate's prompt")
    benchmark_id = body[engine.CLIENT_REQUEST_ID_FIELD]
    assert sampling.is_benchmark(benchmark_id)
    if sglang:
        log, handler = sglang_writer(car, f"sglang-bench-{chat}")
        log.info(sglang_prompt(benchmark_id, "a gate's prompt"))
        log.info(sglang_prompt("user-1", "a user's prompt"))
        handler.close()
    else:
        log = vllm_writer(car, f"vllm-bench-{chat}")
        log.info(f"Request {benchmark_id} JSON body: {json.dumps(body)}")
        log.info(vllm_response(benchmark_id, "answer"))  # named chatcmpl-<id>: the parser strips the prefix
        log.info(vllm_prompt("user-1", "a user's prompt"))
    sidecar.poll(car, sidecar.poll(car, {}, NOW), NOW + 5)
    assert captured(car) == [("user-1", "prompt")]


def test_sglang_tail_never_rereads_a_line_nor_keeps_one_torn_across_rotation(tmp_path: Path) -> None:
    car = make(tmp_path, SGLANG)
    log, handler = sglang_writer(car, "sglang-tail")
    log.info(sglang_prompt("a", "first"))
    offsets = sidecar.poll(car, {}, NOW)
    assert captured(car) == [("a", "prompt")]
    # A line the engine is in the middle of writing: half of it now, the rest after the poll.
    line = f"[2026-12-06 18:00:01] {sglang_prompt('b', 'split across two polls')}\n".encode()
    with open(car.spool / "host_0.log", "ab") as live:
        live.write(line[:40])
    offsets = sidecar.poll(car, offsets, NOW + 5)
    assert captured(car) == [("a", "prompt")]
    with open(car.spool / "host_0.log", "ab") as live:
        live.write(line[40:])
    log.info(sglang_prompt("c", "before the rotation"))
    handler.doRollover()  # the hour turns: host_0.log is renamed host_0.log.<stamp>, a new one opened
    log.info(sglang_prompt("d", "after the rotation"))
    offsets = sidecar.poll(car, offsets, NOW + 10)
    offsets = sidecar.poll(car, offsets, NOW + 15)
    handler.close()
    assert captured(car) == [("a", "prompt"), ("b", "prompt"), ("c", "prompt"), ("d", "prompt")]
    assert sorted(p.name for p in car.spool.iterdir()) == [sidecar.OFFSETS_FILE, "host_0.log"]  # rotated deleted
    record = [json.loads(x) for x in (car.claim / WRITER / hour_file(NOW)).read_text().splitlines()][1]
    assert record["content"]["text"] == "split across two polls"


def test_a_restarted_sidecar_goes_on_from_the_saved_offsets(tmp_path: Path) -> None:
    car = make(tmp_path, SGLANG)
    log, handler = sglang_writer(car, "sglang-restart")
    log.info(sglang_prompt("a", "before the restart"))
    sidecar.poll(car, {}, NOW)
    log.info(sglang_prompt("b", "after the restart"))
    sidecar.poll(car, sidecar.load_offsets(car.spool), NOW + 5)  # a new container: only the spool's state
    handler.close()
    assert captured(car) == [("a", "prompt"), ("b", "prompt")]


def claim_paths(car: sidecar.Sidecar) -> list[str]:
    return sorted(str(p.relative_to(car.claim)) for p in car.claim.rglob("*") if p.is_file())


def test_retention_deletes_only_our_hour_files_in_every_pods_directory(tmp_path: Path) -> None:
    car = make(tmp_path, SGLANG, bounds=sidecar.Bounds(2 * HOUR, 10**9))
    (car.claim / "other-pod").mkdir()
    old, recent = hour_file(NOW - 5 * HOUR), hour_file(NOW - HOUR)
    for name in (old, recent, "notes.txt", "capture-someone-else.jsonl"):
        for directory in (WRITER, "other-pod", "."):
            (car.claim / directory / name).write_text("{}\n")
    sidecar.poll(car, {}, NOW)
    assert claim_paths(car) == sorted(f"{d}{n}" for d in (f"{WRITER}/", "other-pod/", "")
                                      for n in (recent, "notes.txt", "capture-someone-else.jsonl"))


def test_the_size_cap_holds_for_the_whole_claim_oldest_first_and_spares_foreign_files(tmp_path: Path) -> None:
    car = make(tmp_path, SGLANG, bounds=sidecar.Bounds(168 * HOUR, 250))
    (car.claim / "other-pod").mkdir()
    paths = [f"{WRITER}/{hour_file(NOW - 3 * HOUR)}", f"other-pod/{hour_file(NOW - 2 * HOUR)}",
             f"{WRITER}/{hour_file(NOW - HOUR)}"]
    for path in paths:
        (car.claim / path).write_bytes(b"x" * 100)
    (car.claim / "big-foreign.bin").write_bytes(b"y" * 1000)
    sidecar.poll(car, {}, NOW)
    assert claim_paths(car) == sorted(paths[1:] + ["big-foreign.bin"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=12))
def test_any_interleaving_of_writes_polls_and_rotations_captures_each_line_once(tmp_path_factory, steps) -> None:
    """Each step writes some lines, then polls, and sometimes rotates before polling: every line once, in order."""
    car = make(tmp_path_factory.mktemp("spool"), SGLANG)
    log, handler = sglang_writer(car, "sglang-interleave")
    written, offsets, n = [], {}, 0
    for count, rotate in steps:
        for _ in range(count):
            log.info(sglang_prompt(f"r{n}", f"line {n}"))
            written.append((f"r{n}", "prompt"))
            n += 1
        if rotate:
            handler.doRollover()
        offsets = sidecar.poll(car, offsets, NOW)
    handler.close()
    assert captured(car) == written


def test_run_polls_until_sigterm_then_drains_the_spool(tmp_path: Path) -> None:
    car = make(tmp_path, VLLM)
    log = vllm_writer(car, "vllm-run")
    log.info(vllm_prompt("a", "first"))
    sleeps = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            log.info(vllm_prompt("b", "written just before the pod ends"))
            signal.raise_signal(signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    assert sidecar.run(car, 5.0, clock=lambda: NOW, sleep=sleep) == 0
    assert signal.getsignal(signal.SIGTERM) is previous
    assert sleeps == [5.0, 5.0]
    assert captured(car) == [("a", "prompt"), ("b", "prompt")]


def test_the_capture_command_parses_the_specs_units() -> None:
    args = build_parser().parse_args(["capture", "--spool", "/s", "--claim", "/c", "--engine", "sglang",
                                      "--sample-rate", "0.05", "--retention", "168h", "--max-size", "10Gi"])
    assert (args.sample_rate, args.responses, args.retention, args.max_size, args.poll_seconds, args.writer) == (
        0.05, False, 168 * HOUR, 10 * 2**30, 5.0, None)


@pytest.mark.parametrize("option, value", [("--sample-rate", "0"), ("--sample-rate", "1.5"),
                                           ("--retention", "7d"), ("--max-size", "lots")])
def test_the_capture_command_refuses_values_the_spec_refuses(option: str, value: str, capsys) -> None:
    argv = {"--spool": "/s", "--claim": "/c", "--engine": "vllm", "--sample-rate": "0.5", "--retention": "1h",
            "--max-size": "1Gi", option: value}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["capture", *[part for pair in argv.items() for part in pair]])
    assert option in capsys.readouterr().err
