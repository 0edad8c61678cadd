"""Benchmark client fidelity and cost: three clients, one emulator, the model's truth.

What it measures. One ``drafter-operator emulate vllm serve`` subprocess (time scale 1.0, so a
modelled step of 12 ms is 12 ms of wall time; no speculation by default, so the truth is exact and
deterministic) serves, one run after the other, at each concurrency level of ``--streams``:

- our client: ``drafter-operator bench --url U --concurrency N --num-prompts M --max-tokens T
  --prompts-file F`` (this venv's ``python -m drafter_operator.cli``), tok/s = its JSON's
  ``tokensPerSecond`` (tokens over the sum of its waves' wall times);
- GuideLLM (``guidellm run`` from ``DRAFTER_CLIENTS_PYTHON``, or the clients venv ``.ci/clients-env``
  builds, found under ``~/.cache/drafter-operator/clients-venv-*``), ``--profile kind=concurrent,streams=N``,
  ``--constraint kind=max_requests,count=M``, synthetic prompts; tok/s = successful output tokens over
  its benchmark's duration (its own ``output_tokens_per_second`` mean is recorded as well);
- ``vllm bench serve`` (vLLM 0.33.0, backend ``openai``: streamed /v1/completions), ``--max-concurrency N
  --request-rate inf --num-prompts M --ignore-eos``, random dataset with fixed lengths; tok/s = its
  ``output_throughput``. It runs with the clients venv's python: the engine contract venv
  (``DRAFTER_ENGINE_PYTHON``) holds vLLM but cannot import ``vllm bench serve`` on its own (no
  ``uvicorn``, which ``.ci/clients-env`` adds on top of it).

Every request: a prompt of ``--input-len`` tokens (our client and GuideLLM send it as one chat user
message, so the server adds the chat template's tokens; vLLM sends raw text to /v1/completions),
exactly ``--max-tokens`` output tokens (``ignore_eos``; the emulator never stops early anyway),
``M = N x --waves`` requests per run.

The truth, per run:
- *model*: ``drafter_testbed/emulator/batching.py`` ``tokens_per_second(N, a, spec, costs)`` with the emulator's
  profile costs: the steady decode rate of N streams (no prefill, no ramp);
- *run model*: the same model over the schedule actually asked for: ``waves`` waves, each one step
  that prefills the N prompts (``step(0, N x P)``, P = prompt tokens per request as the emulator
  counted them) and ``T - 1`` decode steps of ``step(N, 0)``; a client that measured perfectly, with
  no gap between waves, reads exactly this rate. Without speculation only (with it the step count is
  random).
Error % = client tok/s / truth - 1. Two more columns split that error: *engine* is the rate the
emulator itself achieved during the client's run (generated tokens over its modelled busy seconds,
``/emulator/state`` ``batching.modelSeconds``; includes the client's warm-up requests), so *meas err*
= client tok/s / engine - 1 is the client's measurement error alone, and engine / run model is the load
the client really offered (requests that arrive late in a wave make extra, under-filled steps: see
*steps*, ideally waves x max tokens).

Cost: CPU seconds (user + system) of the client process and all its children, from
``resource.getrusage(RUSAGE_CHILDREN)`` around each client subprocess (the emulator is a child too,
but its usage only lands there when it is reaped, at the very end). A probe run per client (1 request,
1 output token) gives its fixed start-up cost (imports, tokenizer load); "net" subtracts it. The
emulator's own CPU per run comes from ``/proc/<pid>/stat``. The client token count is compared with
what the emulator served (``/emulator/state`` totals before and after; warm-up and test requests of
a client are included there).

Bounded: the emulator must listen within 60 s; each client run is killed (its whole process group)
after ``--timeout`` seconds plus twice the modelled run time.

Usage: python bench/client_fidelity.py [--streams 1,8,64] [--max-tokens 256] [--input-len 64] [--waves 3]
                                       [--clients ours,guidellm,vllm] [--speculative] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR, shipped
from drafter_testbed.emulator import batching
from drafter_testbed.emulator.batching import NO_SPECULATION, Speculation

MODEL_PATH = "/models/kimi-k2.5-int4"
SERVED_NAME = "kimi"
SEED_DRAFTER = "/models/kimi-k2.5-eagle3"
CLIENTS = ("ours", "guidellm", "vllm")
CACHE = Path.home() / ".cache" / "drafter-operator"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------ helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 10.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of one process (not its children), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def clients_python() -> tuple[str | None, str]:
    """The clients venv's python (GuideLLM, vllm bench serve) and where it came from, or why it is absent."""
    env = os.environ.get("DRAFTER_CLIENTS_PYTHON")
    if env:
        if os.access(env, os.X_OK):
            return env, "DRAFTER_CLIENTS_PYTHON"
        return None, f"DRAFTER_CLIENTS_PYTHON={env!r} is not an executable (rebuild it with .ci/clients-env)"
    found = sorted(p for p in glob.glob(str(CACHE / "clients-venv-*" / "bin" / "python")) if os.access(p, os.X_OK))
    if found:
        return found[-1], "the clients venv built by .ci/clients-env"
    return None, ("no clients venv: DRAFTER_CLIENTS_PYTHON is unset and nothing matches "
                  "~/.cache/drafter-operator/clients-venv-*; build it with `export DRAFTER_CLIENTS_PYTHON=\"$(.ci/clients-env)\"`")


# ----------------------------------------------------------------------------------------- emulator


class Emulator:
    def __init__(self, speculative: bool, seed: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = ["vllm", "serve", MODEL_PATH, "--served-model-name", SERVED_NAME]
        if speculative:
            argv += ["--speculative-config",
                     json.dumps({"method": "eagle3", "model": SEED_DRAFTER, "num_speculative_tokens": 5})]
        env = {**os.environ, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "1.0",
               "DRAFTER_EMULATOR_SEED": str(seed)}
        for name in ("DRAFTER_EMULATOR_PROFILE", "DRAFTER_EMULATOR_ACCEPTANCE", "DRAFTER_EMULATOR_STARTUP_SECONDS",
                     "DRAFTER_EMULATOR_FAIL_STARTUP"):
            env.pop(name, None)
        self.argv = [sys.executable, "-m", "drafter_operator.cli", "emulate", *argv, "--port", str(self.port)]
        self.proc = subprocess.Popen(self.argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the emulator exited ({self.proc.returncode}): {self.proc.stderr.read()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the emulator did not answer /health within 60 s")
            time.sleep(0.2)

    def snapshot(self) -> dict:
        state = get_json(self.url + "/emulator/state")
        totals = {k: v for k, v in state["totals"].items() if isinstance(v, (int, float))}
        return {**totals, "modelSeconds": state["batching"]["modelSeconds"],
                "steps": state["batching"]["steps"], "cpu": proc_cpu_seconds(self.proc.pid)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ------------------------------------------------------------------------------------------ prompts


def fixed_length_prompts(count: int, tokens: int, seed: int) -> list[str]:
    """``count`` distinct prompts of exactly ``tokens`` tokens with the emulator's tokenizer (random
    words of its vocabulary, re-encoded until the count is exact)."""
    tok = shipped()
    rng = random.Random(seed)
    words = [w for w in ("speculative decoding drafter target verify accept reject token batch stream "
                         "latency throughput engine kernel memory tensor expert router prefill decode "
                         "cache schedule request model serving operator cluster node replica metric").split()]
    prompts = []
    while len(prompts) < count:
        text = ""
        while tok.count(text) < tokens:
            candidate = (text + " " + rng.choice(words)).strip()
            if tok.count(candidate) > tokens:
                break
            text = candidate
        if tok.count(text) == tokens and text not in prompts:
            prompts.append(text)
        elif tok.count(text) != tokens:
            ids = tok.encode(text + " " + " ".join(rng.choices(words, k=8)), add_special_tokens=False)[:tokens]
            text = tok.decode(ids)
            if tok.count(text) == tokens and text not in prompts and "\n" not in text:
                prompts.append(text)
    return prompts


# ------------------------------------------------------------------------------------------ running


@dataclass
class Run:
    client: str
    streams: int
    requests: int
    max_tokens: int
    ok: bool = False
    error: str | None = None
    command: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    tokens_per_second: float | None = None
    client_tokens: int | None = None
    client_detail: dict = field(default_factory=dict)
    emulator: dict = field(default_factory=dict)


def run_process(argv: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int | None, str, str, float, float]:
    """(exit status or None on timeout, stdout, stderr, wall s, CPU s of it and its children)."""
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the session this run started: the client and its workers
        out, err = proc.communicate()
        code = None
    return code, out, err, time.monotonic() - t0, children_cpu() - cpu0


def client_env() -> dict:
    return {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "PYTHONWARNINGS": "ignore", "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL": "ERROR"}


def command(client: str, url: str, streams: int, requests: int, max_tokens: int, input_len: int, seed: int,
            work: Path, prompts_file: Path, cpython: str | None) -> tuple[list[str], Path | None]:
    """The argv of one client run, and the result file it writes (None: JSON on stdout)."""
    if client == "ours":
        return [sys.executable, "-m", "drafter_operator.cli", "bench", "--url", url, "--model", SERVED_NAME,
                "--concurrency", str(streams), "--num-prompts", str(requests), "--max-tokens", str(max_tokens),
                "--prompts-file", str(prompts_file), "--timeout", "600"], None
    if client == "guidellm":
        out = work / "guidellm.json"
        return [str(Path(cpython).parent / "guidellm"), "run", "--backend", f"kind=openai_http,target={url}",
                "--profile", ("kind=synchronous" if streams == 1 else f"kind=concurrent,streams={streams}"),
                "--data", f"kind=synthetic_text,prompt_tokens={input_len},output_tokens={max_tokens}",
                "--constraint", f"kind=max_requests,count={requests}",
                "--tokenizer", f"kind=huggingface_auto,model={TOKENIZER_DIR}",
                "--output", f"kind=json,path={out}", "--disable-progress"], out
    if client == "vllm":
        return [cpython, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--base-url", url, "--model", SERVED_NAME,
                "--tokenizer", str(TOKENIZER_DIR), "--dataset-name", "random", "--num-prompts", str(requests),
                "--random-input-len", str(input_len), "--random-output-len", str(max_tokens),
                "--random-range-ratio", "0", "--ignore-eos", "--max-concurrency", str(streams),
                "--request-rate", "inf", "--num-warmups", "0", "--seed", str(seed), "--disable-tqdm",
                "--save-result", "--result-dir", str(work), "--result-filename", "vllm.json"], work / "vllm.json"
    raise ValueError(client)


def parse_result(client: str, stdout: str, path: Path | None) -> tuple[float, int, dict]:
    """(tok/s, output tokens, detail) from a client's own output."""
    if client == "ours":
        data = json.loads(stdout)
        if "error" in data:
            raise RuntimeError(data["error"])
        return data["tokensPerSecond"], data["totalTokens"], {
            "totalSeconds": data.get("totalSeconds"), "ttftSeconds": data.get("ttftSeconds"),
            "itlSeconds": data.get("itlSeconds")}
    data = json.loads(path.read_text())
    if client == "guidellm":
        bench = data["benchmarks"][0]
        metrics = bench["metrics"]
        totals = metrics["request_totals"]
        if totals.get("errored") or totals.get("incomplete"):
            raise RuntimeError(f"GuideLLM request totals {totals}")
        tokens = int(metrics["output_token_count"]["successful"]["total_sum"])
        duration = bench.get("duration")
        if duration is None:
            duration = bench["end_time"] - bench["start_time"]
        own = metrics.get("output_tokens_per_second", {}).get("successful", {}).get("mean")
        ttft = metrics.get("time_to_first_token_ms", {}).get("successful", {}).get("mean")
        return tokens / duration, tokens, {"durationSeconds": duration, "ownOutputTokensPerSecondMean": own,
                                           "requests": totals, "ttftSeconds": None if ttft is None else ttft / 1000}
    if client == "vllm":
        if data.get("failed"):
            raise RuntimeError(f"vllm bench serve: {data['failed']} failed requests")
        return data["output_throughput"], int(data["total_output_tokens"]), {
            "durationSeconds": data["duration"], "completed": data["completed"],
            "totalInputTokens": data["total_input_tokens"], "ttftSeconds": data.get("mean_ttft_ms", 0) / 1000}
    raise ValueError(client)


def run_client(client: str, emu: Emulator, streams: int, requests: int, max_tokens: int, input_len: int, seed: int,
               prompts_file: Path, cpython: str | None, timeout: float) -> Run:
    run = Run(client, streams, requests, max_tokens)
    with tempfile.TemporaryDirectory(prefix=f"fidelity-{client}-") as tmp:
        work = Path(tmp)
        argv, path = command(client, emu.url, streams, requests, max_tokens, input_len, seed, work, prompts_file, cpython)
        run.command = argv
        before = emu.snapshot()
        code, out, err, run.wall_seconds, run.cpu_seconds = run_process(argv, work, client_env(), timeout)
        after = emu.snapshot()
        run.emulator = {key: after[key] - before[key] for key in after if key in before}
        if code is None:
            run.error = f"timed out after {timeout:.0f} s (killed)"
            return run
        if code != 0:
            tail = " | ".join((err or out).strip().splitlines()[-3:])
            run.error = f"exit status {code}: {tail[-600:]}"
            return run
        try:
            run.tokens_per_second, run.client_tokens, run.client_detail = parse_result(client, out, path)
            run.ok = True
        except (OSError, ValueError, KeyError, IndexError, TypeError, RuntimeError) as exc:
            run.error = f"cannot read its result: {type(exc).__name__}: {exc}"
    return run


# ------------------------------------------------------------------------------------------ truth


def run_model_tps(streams: int, waves: int, max_tokens: int, prompt_tokens: float, costs) -> float:
    """Tokens per second of ``waves`` waves of ``streams`` requests on the emulator's step loop (no speculation)."""
    per_wave_ms = (batching.step_ms(0, NO_SPECULATION, costs, round(streams * prompt_tokens))
                   + (max_tokens - 1) * batching.step_ms(streams, NO_SPECULATION, costs))
    return waves * streams * max_tokens / (waves * per_wave_ms / 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1,8,64", help="concurrency levels (default 1,8,64)")
    parser.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (default 256)")
    parser.add_argument("--input-len", type=int, default=64, help="prompt tokens per request (default 64)")
    parser.add_argument("--waves", type=int, default=3, help="requests per run = streams x waves (default 3)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="subset of ours,guidellm,vllm")
    parser.add_argument("--speculative", action="store_true",
                        help="serve with the seed's EAGLE-3 drafter (k=5); the truth is then an expectation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=180.0, help="per client run, on top of 2x the modelled time")
    parser.add_argument("--json", help="also write every run here")
    args = parser.parse_args()
    levels = [int(x) for x in args.streams.split(",") if x.strip()]
    wanted = [c.strip() for c in args.clients.split(",") if c.strip()]
    started = time.monotonic()

    profile = load_profile(None)
    costs = profile.costs
    if args.speculative:
        accept, spec = profile.lookup("vllm", SEED_DRAFTER).acceptance, Speculation(5)
    else:
        accept, spec = 0.0, NO_SPECULATION

    print(f"machine: {os.cpu_count()} cores, load average {load_average()} (1, 5, 15 min) at start")
    cpython, where = clients_python()
    skipped: dict[str, str] = {}
    if cpython is None:
        for client in ("guidellm", "vllm"):
            skipped[client] = where
    else:
        print(f"clients venv python: {cpython} ({where})")
        if not (Path(cpython).parent / "guidellm").exists():
            skipped["guidellm"] = f"{Path(cpython).parent / 'guidellm'} does not exist (GuideLLM not installed)"
    clients = [c for c in wanted if c in CLIENTS and c not in skipped]
    for client, reason in skipped.items():
        if client in wanted:
            print(f"SKIP {client}: {reason}")

    prompts_file = Path(tempfile.mkstemp(prefix="fidelity-prompts-", suffix=".txt")[1])
    prompts_file.write_text("\n".join(fixed_length_prompts(max(levels) * args.waves, args.input_len, args.seed)) + "\n")

    emu = Emulator(args.speculative, args.seed)
    print(f"emulator: {' '.join(emu.argv[1:])} (time scale 1.0, {'seed drafter k=5, a=%.3f' % accept if args.speculative else 'no speculation'})")
    runs: list[Run] = []
    probes: dict[str, Run] = {}
    try:
        for client in clients:
            probe = run_client(client, emu, 1, 1, 1, args.input_len, args.seed, prompts_file, cpython, args.timeout)
            probes[client] = probe
            print(f"probe {client}: 1 request x 1 token: wall {probe.wall_seconds:.1f} s, CPU {probe.cpu_seconds:.2f} s"
                  + ("" if probe.ok else f" FAILED: {probe.error}"), flush=True)
        for streams in levels:
            requests = streams * args.waves
            modelled = requests * args.max_tokens / batching.tokens_per_second(streams, accept, spec, costs)
            for client in clients:
                run = run_client(client, emu, streams, requests, args.max_tokens, args.input_len, args.seed,
                                 prompts_file, cpython, args.timeout + 2 * modelled)
                runs.append(run)
                print(f"{client:>8} x {streams:>2} streams: "
                      + (f"{run.tokens_per_second:8.1f} tok/s, {run.client_tokens} tokens" if run.ok else f"FAILED: {run.error}")
                      + f", wall {run.wall_seconds:.1f} s, CPU {run.cpu_seconds:.2f} s, load {load_average()}", flush=True)
    finally:
        emu.stop()
        prompts_file.unlink(missing_ok=True)

    # ---- the table
    rows = []
    print()
    print(f"{'client':<9} {'streams':>7} {'tok/s':>8} {'model':>7} {'err':>7} {'run model':>9} {'err':>7} "
          f"{'engine':>7} {'meas err':>8} {'steps':>5} {'TTFT s':>6} {'tokens':>7} {'served':>7} {'CPU s/1k':>8} {'net':>6} {'emu CPU s/1k':>12} {'wall s':>6}")
    for run in runs:
        truth = batching.tokens_per_second(run.streams, accept, spec, costs)
        emu_delta = run.emulator
        prompt_per_req = (emu_delta.get("promptTokens", 0) / emu_delta["requests"]) if emu_delta.get("requests") else args.input_len
        run_truth = None if args.speculative else run_model_tps(run.streams, args.waves, args.max_tokens, prompt_per_req, costs)
        probe = probes.get(run.client)
        fixed = probe.cpu_seconds if probe and probe.ok else None
        engine_rate = (emu_delta["generatedTokens"] / emu_delta["modelSeconds"]) if emu_delta.get("modelSeconds") else None
        row = {**asdict(run), "modelTokensPerSecond": truth, "engineTokensPerSecond": engine_rate, "runModelTokensPerSecond": run_truth,
               "promptTokensPerRequest": prompt_per_req, "probeCpuSeconds": fixed}
        if run.ok and run.client_tokens:
            k = run.client_tokens / 1000
            row["errorPercent"] = 100 * (run.tokens_per_second / truth - 1)
            row["runErrorPercent"] = None if run_truth is None else 100 * (run.tokens_per_second / run_truth - 1)
            row["measurementErrorPercent"] = None if engine_rate is None else 100 * (run.tokens_per_second / engine_rate - 1)
            row["cpuPer1k"] = run.cpu_seconds / k
            row["netCpuPer1k"] = None if fixed is None else (run.cpu_seconds - fixed) / k
            row["emulatorCpuPer1k"] = emu_delta["cpu"] / k
            f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
            pct = lambda v: "-" if v is None else f"{v:+.1f}%"  # noqa: E731
            print(f"{run.client:<9} {run.streams:>7} {run.tokens_per_second:>8.1f} {truth:>7.1f} {row['errorPercent']:>+6.1f}% "
                  f"{f(run_truth, '.1f'):>9} {pct(row['runErrorPercent']):>7} {f(engine_rate, '.1f'):>7} "
                  f"{pct(row['measurementErrorPercent']):>8} {emu_delta['steps']:>5} "
                  f"{f(run.client_detail.get('ttftSeconds'), '.3f'):>6} {run.client_tokens:>7} "
                  f"{emu_delta['generatedTokens']:>7} {row['cpuPer1k']:>8.2f} {f(row['netCpuPer1k'], '.2f'):>6} "
                  f"{row['emulatorCpuPer1k']:>12.2f} {run.wall_seconds:>6.1f}")
        else:
            print(f"{run.client:<9} {run.streams:>7} FAILED: {run.error}")
        rows.append(row)
    for client, reason in skipped.items():
        if client in wanted:
            print(f"{client:<9} skipped: {reason}")
    print(f"\nprobe (1 request, 1 token) CPU s: " + ", ".join(f"{c} {p.cpu_seconds:.2f}" for c, p in probes.items()))
    print(f"load average at end {load_average()}; bench wall time {time.monotonic() - started:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"args": vars(args), "skipped": skipped, "probes": {c: asdict(p) for c, p in probes.items()},
                       "rows": rows, "loadAverageEnd": os.getloadavg()}, fh, indent=2)
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
