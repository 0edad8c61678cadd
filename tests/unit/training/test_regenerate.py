"""`drafter-operator regenerate` against the real engine emulator (vLLM's and SGLang's OpenAI API) on loopback,
and against small loopback servers that fail the way engines fail."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.cli import build_parser
from drafter_operator.training.regenerate import (
    RegenerateError,
    Requests,
    Settings,
    finished_ids,
    read_samples,
    regenerate,
    regenerate_conversation,
)
from tests.processes import free_port, listening_process, loopback_http

MODEL = "/models/tiny-target"
OLD = "an answer from the dataset, not the target"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.01",
            "DRAFTER_EMULATOR_SEED": "5", "PYTHONPATH": os.pathsep.join(sys.path), **extra}


@contextmanager
def emulator(*engine_argv: str, **env: str):
    port = free_port()
    with listening_process([sys.executable, "-m", "drafter_operator.cli", "emulate", *engine_argv, "--port", str(port)],
                           _env(**env), port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def vllm():
    with emulator("vllm", "serve", MODEL) as url:
        yield url


def requests_served(url: str) -> int:
    with urllib.request.urlopen(f"{url}/emulator/state", timeout=5) as response:
        return json.load(response)["totals"]["requests"]


def conversation(i: int, turns: int = 1, system: bool = False) -> dict:
    messages = [{"role": "system", "content": "Answer briefly."}] if system else []
    for turn in range(turns):
        messages += [{"role": "user", "content": f"question {turn} of sample {i}"},
                     {"role": "assistant", "content": OLD}]
    return {"id": f"s{i}", "source": "test", "conversations": messages}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drafter_operator.cli", "regenerate", *argv], env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def run(url: str, input_path: Path, output: Path, num_samples: int, *extra: str) -> subprocess.CompletedProcess:
    return cli("--endpoint", f"{url}/v1", "--model", MODEL, "--input", str(input_path), "--output", str(output),
               "--num-samples", str(num_samples), "--max-tokens", "12", *extra)


# ------------------------------------------------------------------------------------------------
# Against the emulator


def test_regenerates_the_first_n_samples_with_their_ids_and_fields(vllm, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [conversation(i) for i in range(6)])
    output = tmp_path / "data" / "regenerated.jsonl"
    done = run(vllm, source, output, 4, "--concurrency", "3")
    assert done.returncode == 0, done.stderr
    rows = lines(output)
    assert sorted(row["id"] for row in rows) == ["s0", "s1", "s2", "s3"]
    for row in rows:
        assert row["source"] == "test"  # every other field kept
        user, answer = row["conversations"]
        assert user == conversation(int(row["id"][1:]))["conversations"][0]
        assert answer["role"] == "assistant" and answer["content"].strip() and answer["content"] != OLD
    assert "regenerated 4/4 samples" in done.stdout.splitlines()
    assert done.stdout.splitlines()[0] == "regenerated 0/4 samples"


def test_every_assistant_turn_of_a_multi_turn_conversation_is_replaced(tmp_path):
    rows = [conversation(0, turns=3, system=True), conversation(1, turns=2)]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    output = tmp_path / "out.jsonl"
    # SGLang's server this time: the same OpenAI API, another port and readiness path.
    with emulator("python3", "-m", "sglang.launch_server", "--model-path", MODEL) as url:
        done = run(url, source, output, 2)
        assert done.returncode == 0, done.stderr
        assert requests_served(url) == 5  # one request per user turn, each with the conversation so far
    by_id = {row["id"]: row["conversations"] for row in lines(output)}
    for original in rows:
        got = by_id[original["id"]]
        kept = [m for m in original["conversations"] if m["role"] != "assistant"]
        assert [m for m in got if m["role"] != "assistant"] == kept
        users = sum(m["role"] == "user" for m in kept)
        assert [m["role"] for m in got if m["role"] != "system"] == ["user", "assistant"] * users
        assert all(m["content"] != OLD and m["content"].strip() for m in got if m["role"] == "assistant")


def test_a_restart_skips_finished_ids_and_drops_a_torn_last_line(vllm, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [conversation(i) for i in range(5)])
    output = tmp_path / "out.jsonl"
    # What a run killed while writing its third sample leaves: two whole lines and a torn one.
    earlier = [{**conversation(i), "conversations": [conversation(i)["conversations"][0],
                                                     {"role": "assistant", "content": f"earlier run {i}"}]}
               for i in (3, 0)]
    output.write_text("".join(json.dumps(row) + "\n" for row in earlier) + '{"id": "s1", "conversations": [{"ro')
    first = run(vllm, source, output, 5)  # records its settings; the file had none, so it starts over
    assert first.returncode == 0, first.stderr
    assert "starting over" in first.stdout

    # Now a real torn line after whole ones from this very run's settings.
    whole = output.read_text()
    kept = lines(output)[:2]
    output.write_text("".join(json.dumps(row) + "\n" for row in kept) + whole.splitlines()[2][:17])
    before = requests_served(vllm)
    again = run(vllm, source, output, 5)
    assert again.returncode == 0, again.stderr
    assert "resuming: 2 samples already in" in again.stdout
    assert again.stdout.splitlines()[-1] == "regenerated 5/5 samples"
    assert requests_served(vllm) - before == 3  # only the three missing samples were asked for
    rows = lines(output)
    assert rows[:2] == kept  # untouched
    assert sorted(row["id"] for row in rows) == [f"s{i}" for i in range(5)]


def test_a_killed_run_resumes_to_the_same_set_of_samples(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [conversation(i) for i in range(8)])
    output = tmp_path / "out.jsonl"
    # Slow enough (real time) that the kill lands mid-run: about 0.1 s a sample.
    with emulator("vllm", "serve", MODEL, DRAFTER_EMULATOR_TIME_SCALE="1") as url:
        argv = [sys.executable, "-m", "drafter_operator.cli", "regenerate", "--endpoint", f"{url}/v1", "--model", MODEL,
                "--input", str(source), "--output", str(output), "--num-samples", "8", "--max-tokens", "8",
                "--concurrency", "1"]
        proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 180  # the subprocess starts under CI load; a bound only for a hang
        while not (output.exists() and output.read_text().count("\n") >= 2):
            assert time.monotonic() < deadline and proc.poll() is None, "no sample was written"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        survived = [row["id"] for row in lines(output)]
        assert 2 <= len(survived) < 8
        done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"resuming: {len(survived)} samples already in" in done.stdout
    ids = [row["id"] for row in lines(output)]
    assert ids[:len(survived)] == survived and sorted(ids) == [f"s{i}" for i in range(8)]


def test_an_engine_refusal_fails_at_once_with_the_sample_and_its_message(vllm, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [conversation(0)])
    done = cli("--endpoint", f"{vllm}/v1", "--model", "not-served", "--input", str(source),
               "--output", str(tmp_path / "out.jsonl"), "--num-samples", "1", "--max-tokens", "8")
    assert done.returncode == 1
    assert 'sample "s0"' in done.stderr and "HTTP 404: The model `not-served` does not exist." in done.stderr
    assert "attempts)" not in done.stderr  # a 404 is not retried: a retried failure names its attempts
    assert (tmp_path / "out.jsonl").read_text() == ""


def test_an_answer_past_the_context_length_names_the_engines_limit(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [conversation(0)])
    with emulator("vllm", "serve", MODEL, "--max-model-len", "128") as url:
        done = run(url, source, tmp_path / "out.jsonl", 1, "--max-tokens", "4096")
    assert done.returncode == 1
    assert "This model's maximum context length is 128 tokens" in done.stderr and '"s0"' in done.stderr


# ------------------------------------------------------------------------------------------------
# Transient failures: a loopback server that fails the way an overloaded or restarting engine does


@contextmanager
def flaky_engine(failures: int, status: int = 503):
    """Answers ``status`` to the first ``failures`` requests, then a chat completion saying "fine"."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            failing = len(seen) <= failures
            body = {"error": {"message": "KV cache is full, try again"}} if failing else \
                {"choices": [{"message": {"role": "assistant", "content": "fine"}}]}
            data = json.dumps(body).encode()
            self.send_response(status if failing else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    with loopback_http(Handler) as url:
        yield f"{url}/v1", seen


def regenerate_now(endpoint: str, tmp_path: Path, retries: int) -> tuple[int, str]:
    source = write_jsonl(tmp_path / "in.jsonl", [conversation(0)])
    out = io.StringIO()
    count = asyncio.run(regenerate(endpoint=endpoint, settings=Settings(MODEL, str(source), 8, 0.7),
                                   output=tmp_path / "out.jsonl", num_samples=1,
                                   requests=Requests(retries=retries, backoff=0.01, timeout=5), out=out))
    return count, out.getvalue()


def test_transient_failures_are_retried(tmp_path):
    with flaky_engine(failures=2) as (endpoint, seen):
        count, _ = regenerate_now(endpoint, tmp_path, retries=2)
    assert count == 1 and seen == ["/v1/chat/completions"] * 3
    assert lines(tmp_path / "out.jsonl")[0]["conversations"][1] == {"role": "assistant", "content": "fine"}


def test_a_failure_that_outlasts_the_retries_fails_with_the_engines_message(tmp_path):
    with flaky_engine(failures=10, status=500) as (endpoint, seen):
        with pytest.raises(RegenerateError, match=r'sample "s0": .*HTTP 500: KV cache is full, try again '
                                                  r"\(after 3 attempts\)"):
            regenerate_now(endpoint, tmp_path, retries=2)
    assert len(seen) == 3


def test_no_engine_at_all(tmp_path):
    with pytest.raises(RegenerateError, match=r'sample "s0": POST http://127\.0\.0\.1:\d+/v1/chat/completions: '
                                              r"ClientConnectorError.*\(after 2 attempts\)"):
        regenerate_now(f"http://127.0.0.1:{free_port()}/v1", tmp_path, retries=1)


# ------------------------------------------------------------------------------------------------
# Files and conversations (no engine)


def test_unusable_rows_are_skipped_as_the_frameworks_skip_them_and_ids_are_required():
    rows = [{"id": 1, "conversations": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]},
            {"id": 2, "conversations": [{"role": "system", "content": "only a system turn"}]},
            {"id": 3, "conversations": [{"role": "tool", "content": "{}"}, {"role": "user", "content": "x"}]},
            {"id": 4, "conversations": [{"role": "user", "content": None}]},
            {"id": 5, "conversations": [{"role": "user", "content": "fine"}]},
            {"id": "5", "conversations": [{"role": "user", "content": "a different id"}]}]
    said: list[str] = []
    samples = read_samples([json.dumps(row) for row in rows], 10, skipped=said.append)
    assert [s.key for s in samples] == ["5", '"5"']
    assert said == ["skipped sample 1: an assistant turn comes before any user turn",
                    "skipped sample 2: no user turn",
                    "skipped sample 3: message 0 has role 'tool', not one of system, user, assistant",
                    "skipped sample 4: message 0 has no text content"]
    with pytest.raises(RegenerateError, match="input line 2 has no id"):
        read_samples([json.dumps(rows[4]), json.dumps({"conversations": []})], 10)
    with pytest.raises(RegenerateError, match='line 2: id "a" appears twice'):
        read_samples([json.dumps({**rows[4], "id": "a"})] * 2, 10)


def test_a_broken_line_before_the_last_is_not_ours(tmp_path):
    output = tmp_path / "out.jsonl"
    output.write_text('{"id": 1, "conversations": []}\nnot json\n{"id": 2, "conversations": []}\n')
    with pytest.raises(RegenerateError, match="line 2 is not a regenerated sample: delete the file"):
        finished_ids(output)
    output.write_text('{"id": 1, "conversations": []}\n{"id": 2, "conv')
    assert finished_ids(output) == {"1"} and output.read_text() == '{"id": 1, "conversations": []}\n'


def test_other_settings_start_over(vllm, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [conversation(i) for i in range(2)])
    output = tmp_path / "out.jsonl"
    assert run(vllm, source, output, 2).returncode == 0
    before = requests_served(vllm)
    done = run(vllm, source, output, 2, "--temperature", "0")
    assert done.returncode == 0 and "starting over" in done.stdout
    assert requests_served(vllm) - before == 2 and len(lines(output)) == 2


def test_the_command_line_the_renderers_build_parses():
    from drafter_operator.training.regenerate import command_line

    argv = command_line("http://e/v1", MODEL, "/in.jsonl", "/out.jsonl", 10, 2048)
    assert argv[0] == "drafter-operator"
    args = build_parser().parse_args(list(argv[1:]))
    assert (args.endpoint, args.model, args.input, args.output, args.num_samples, args.max_tokens) == \
        ("http://e/v1", MODEL, "/in.jsonl", "/out.jsonl", 10, 2048)


roles = st.sampled_from(["system", "user", "assistant"])
messages = st.lists(st.builds(lambda role, text: {"role": role, "content": text}, roles, st.text(max_size=5)),
                    max_size=8)


@given(messages)
def test_each_user_turn_gets_the_answer_to_the_conversation_so_far(conversations):
    asked: list[list[dict]] = []

    async def answer(prefix: list[dict]) -> str:
        asked.append(prefix)
        return f"answer {len(asked)}"

    got = asyncio.run(regenerate_conversation(conversations, answer))
    assert [m for m in got if not m["content"].startswith("answer ") or m["role"] != "assistant"] == \
        [m for m in conversations if m["role"] != "assistant"]
    users = [i for i, m in enumerate(got) if m["role"] == "user"]
    assert len(asked) == len(users)
    for n, i in enumerate(users):
        assert got[i + 1] == {"role": "assistant", "content": f"answer {n + 1}"}
        assert asked[n] == got[:i + 1]  # exactly what came before, the answers to earlier turns included
