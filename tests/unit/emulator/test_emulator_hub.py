"""The emulator and the Hugging Face hub: environment names, the hub cache, offline mode, emulated downloads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from drafter_testbed.emulator import hub
from drafter_testbed.emulator.cmdline import parse_command_line
from drafter_testbed.emulator.engine import EmulatedEngine
from drafter_testbed.emulator.hub import HubModelUnavailable
from drafter_testbed.emulator.model import Settings
from drafter_testbed.emulator.profiles import load_profile
from drafter_testbed.emulator.server import build_engine, main
from tests.processes import free_port, wait_until_listening

TARGET = "moonshotai/Kimi-K2.5"
DRAFTER = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
SECRET = "hf_secret123"
#: What a developer's or CI's environment may set that would change these tests' hub behaviour.
HUB_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                 "XDG_CACHE_HOME")


def vllm_argv(target: str = TARGET, drafter: str | None = DRAFTER, *extra: str) -> list[str]:
    spec = ["--speculative-config", json.dumps({"method": "eagle3", "model": drafter, "num_speculative_tokens": 3})]
    return ["vllm", "serve", target, "--port", str(free_port()), *(spec if drafter else []), *extra]


def sglang_argv(target: str = TARGET, drafter: str = DRAFTER, port: int | None = None) -> list[str]:
    return ["python3", "-m", "sglang.launch_server", "--model-path", target, "--port", str(port or free_port()),
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", drafter,
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without hub settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in HUB_VARIABLES and not k.startswith("DRAFTER_EMULATOR_")}
    return {**env, "DRAFTER_EMULATOR_HOST": "127.0.0.1", "DRAFTER_EMULATOR_TIME_SCALE": "0.01", **extra}


# ------------------------------------------------------------------------------- cache dir, offline

def test_hub_cache_dir_precedence():
    base = {"HOME": "/home/u"}
    assert hub.hub_cache_dir(base) == "/home/u/.cache/huggingface/hub"
    assert hub.hub_cache_dir({**base, "XDG_CACHE_HOME": "/xdg"}) == "/xdg/huggingface/hub"
    assert hub.hub_cache_dir({**base, "XDG_CACHE_HOME": "/xdg", "HF_HOME": "/hf"}) == "/hf/hub"
    assert hub.hub_cache_dir({**base, "HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/legacy"}) == "/legacy"
    assert hub.hub_cache_dir({**base, "HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/legacy",
                              "HF_HUB_CACHE": "/new"}) == "/new"
    assert hub.hub_cache_dir({**base, "HF_HOME": "~/hf"}) == "/home/u/hf/hub"
    assert hub.hub_cache_dir({**base, "HF_HOME": "$VOL/hf", "VOL": "/mnt/v"}) == "/mnt/v/hf/hub"
    assert hub.hub_cache_dir({**base, "HF_HUB_CACHE": "${VOL}/c/$NOPE", "VOL": "/v"}) == "/v/c/$NOPE"
    # only the variables naming a Hugging Face cache let the emulator write its entries
    assert not hub.cache_configured({**base, "XDG_CACHE_HOME": "/xdg"})
    assert all(hub.cache_configured({name: "/c"}) for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"))


def test_offline_mode_parses_like_huggingface_hub():
    on = [{"HF_HUB_OFFLINE": v} for v in ("1", "true", "TRUE", "yes", "On")] + [
        {"TRANSFORMERS_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "yes"}]
    off = [{}, *({"HF_HUB_OFFLINE": v} for v in ("0", "", "false", "no", " 1", "y", "2")),
           {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}]  # a set HF_HUB_OFFLINE wins, even "0"
    assert [hub.offline_mode(env) for env in on] == [True] * len(on)
    assert [hub.offline_mode(env) for env in off] == [False] * len(off)


CASES = [
    {},
    {"XDG_CACHE_HOME": "/xdg"},
    {"XDG_CACHE_HOME": "/xdg", "HF_HOME": "/hf"},
    {"HF_HOME": "~/hf", "HUGGINGFACE_HUB_CACHE": "/legacy"},
    {"HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/legacy", "HF_HUB_CACHE": "$VOL/new", "VOL": "/v"},
    {"HF_HOME": "${VOL}/hf", "VOL": "/v", "HF_HUB_OFFLINE": "TRUE"},
    {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"},
    {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "on"},
    {"HF_HUB_OFFLINE": " 1"},
]


def test_cache_dir_and_offline_agree_with_huggingface_hub_constants(tmp_path):
    """huggingface_hub (installed with tokenizers) resolves each environment; the emulator must agree."""
    script = textwrap.dedent("""
        import importlib, json, os, sys
        import huggingface_hub.constants as c
        out = []
        for env in json.load(sys.stdin):
            os.environ.clear()
            os.environ.update(env)
            importlib.reload(c)
            out.append([c.HF_HUB_CACHE, c.HF_HUB_OFFLINE])
        print(json.dumps(out))
    """)
    envs = [{"HOME": str(tmp_path), **case} for case in CASES]
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(envs), capture_output=True, text=True,
                          timeout=60, env={"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0, proc.stderr
    real = json.loads(proc.stdout)
    assert [[hub.hub_cache_dir(env), hub.offline_mode(env)] for env in envs] == real


# ------------------------------------------------------------------------------------ hub ids, cache

def test_hub_ids_and_paths():
    assert hub.is_hub_id(DRAFTER) and hub.is_hub_id("Qwen/Qwen3-0.6B") and hub.is_hub_id(TARGET)
    for not_hub in ("/models/kimi", "gpt2", "models/a/b", "./a/b", "../a", "~/m", "org/-name", "org/name.git",
                    "org--x/name", "a/b..c", "", "org/"):
        assert not hub.is_hub_id(not_hub), not_hub
    assert hub.repo_folder("/c", DRAFTER) == "/c/models--AQ-MedAI--Kimi-K2-Instruct-eagle3"


def test_cached_snapshot_follows_refs_like_huggingface_hub(tmp_path):
    cache = str(tmp_path)
    folder = Path(hub.repo_folder(cache, DRAFTER))
    assert hub.cached_snapshot(cache, DRAFTER) is None
    (folder / "snapshots" / "abc").mkdir(parents=True)
    (folder / "snapshots" / "abc" / "config.json").write_text("{}")
    assert hub.cached_snapshot(cache, DRAFTER) is None  # no refs/main: huggingface_hub does not find it either
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc")
    assert hub.cached_snapshot(cache, DRAFTER) == str(folder / "snapshots" / "abc")
    assert hub.cached_snapshot(cache, DRAFTER, "v2") is None
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "snapshots" / commit).mkdir()
    assert hub.cached_snapshot(cache, DRAFTER, commit) is None  # the snapshot lacks config.json
    (folder / "snapshots" / commit / "config.json").write_text("{}")
    assert hub.cached_snapshot(cache, DRAFTER, commit) == str(folder / "snapshots" / commit)
    # an emulated download is found by the same lookup, for its revision
    written = hub.write_emulated_snapshot(cache, DRAFTER, "v2")
    assert hub.cached_snapshot(cache, DRAFTER, "v2") == written == str(folder / "snapshots" / "emulated")
    assert (folder / "refs" / "v2").read_text() == "emulated"


# -------------------------------------------------------------------------------------- offline

OFFLINE_ERRORS = {
    ("vllm", "target"): "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot "
                        "folder for the specified revision on the local disk and outgoing traffic has been disabled. "
                        "To enable repo look-ups and downloads online, pass 'local_files_only=False' as input.",
    ("vllm", "drafter"): "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
                         f"  Value error, Invalid repository ID or local directory specified: '{DRAFTER}'.\n",
    ("sglang", "target"): "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't "
                          "find them in the cached files.\nCheck your internet connection or see how to run the "
                          "library in offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'.",
}
OFFLINE_ERRORS["sglang", "drafter"] = OFFLINE_ERRORS["sglang", "target"]


@pytest.mark.parametrize("engine, role", sorted(OFFLINE_ERRORS))
def test_offline_and_not_cached_fails_at_once_with_the_engines_error(tmp_path, engine, role):
    """The target is checked first, as both engines do; a slow startup or download is never waited for
    (an hour of each is set: a wait would end in the suite's timeout, not in a pass)."""
    make = vllm_argv if engine == "vllm" else sglang_argv
    argv = make(TARGET, DRAFTER) if role == "target" else make("/models/kimi-k2.5", DRAFTER)
    env = {"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
           "DRAFTER_EMULATOR_STARTUP_SECONDS": "3600", "DRAFTER_EMULATOR_DOWNLOAD_SECONDS": "3600"}
    lines: list[str] = []
    with pytest.raises(HubModelUnavailable) as caught:
        build_engine(argv, env, log=lines.append)
    assert caught.value.status == 1
    assert str(caught.value).startswith(OFFLINE_ERRORS[engine, role])
    assert any((TARGET if role == "target" else DRAFTER) in line and "HF_HUB_OFFLINE" in line for line in lines)
    assert not (tmp_path / "hf").exists()  # nothing was "downloaded"


def test_offline_failure_of_the_cli_exits_1_without_waiting_out_startup_or_download(tmp_path):
    # An hour of each: had the CLI waited, the run would end in TimeoutExpired, never in exit 1.
    port = free_port()
    env = clean_env(HOME=str(tmp_path), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1",
                    DRAFTER_EMULATOR_STARTUP_SECONDS="3600", DRAFTER_EMULATOR_DOWNLOAD_SECONDS="3600")
    proc = subprocess.run([sys.executable, "-m", "drafter_operator.cli", "emulate", "vllm", "serve", TARGET,
                           "--port", str(port)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.rstrip("\n").endswith(OFFLINE_ERRORS["vllm", "target"])
    assert TARGET in proc.stderr  # the emulator's line before the engine's error names the model


def test_main_returns_the_engines_status(tmp_path, monkeypatch, capsys):
    for name in HUB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "yes")
    assert main(sglang_argv("/models/kimi-k2.5", DRAFTER)) == 1
    assert capsys.readouterr().err.rstrip("\n").endswith(OFFLINE_ERRORS["sglang", "drafter"])


# ------------------------------------------------------------------------------------- downloads

def test_download_is_emulated_once_then_found_in_the_cache_even_offline(tmp_path):
    cache = tmp_path / "hf" / "hub"
    env = {"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "DRAFTER_EMULATOR_DOWNLOAD_SECONDS": "0.3"}
    argv = vllm_argv(TARGET, DRAFTER)

    start = time.monotonic()
    first = build_engine(argv, env, log=lambda line: None).state()["hub"]
    first_seconds = time.monotonic() - start
    assert first_seconds >= 0.6  # two models, 0.3 s of wall time each
    assert first["offline"] is False and first["cacheDir"] == str(cache) and first["writesCache"] is True
    assert [(m["role"], m["model"], m["source"], m["persisted"]) for m in first["models"]] == [
        ("target", TARGET, "downloaded", True), ("drafter", DRAFTER, "downloaded", True)]
    assert all(m["downloadSeconds"] >= 0.3 for m in first["models"])
    for model, entry in zip((TARGET, DRAFTER), first["models"]):
        snapshot = cache / f"models--{model.replace('/', '--')}" / "snapshots" / "emulated"
        assert entry["snapshot"] == str(snapshot)
        assert json.loads((snapshot / "config.json").read_text())["_emulated"] is True
        assert (snapshot.parent.parent / "refs" / "main").read_text() == "emulated"

    # a swap: the next start with the same cache downloads nothing: offline mode, which refuses a download
    # at once, now passes
    second = build_engine(argv, {**env, "HF_HUB_OFFLINE": "1"}, log=lambda line: None).state()["hub"]
    assert second["offline"] is True
    assert [(m["source"], m["snapshot"], m["downloadSeconds"]) for m in second["models"]] == [
        ("cache", m["snapshot"], 0.0) for m in first["models"]]


def test_local_paths_and_single_names_are_not_checked(tmp_path):
    env = {"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    state = build_engine(vllm_argv("/models/missing", "/models/drafter-missing"), env, log=lambda _: None).state()
    assert [(m["model"], m["source"]) for m in state["hub"]["models"]] == [
        ("/models/missing", "local"), ("/models/drafter-missing", "local")]
    state = build_engine(vllm_argv("gpt2", None), env, log=lambda _: None).state()
    assert [(m["model"], m["source"]) for m in state["hub"]["models"]] == [("gpt2", "unchecked")]
    assert not (tmp_path / "hf").exists()


def test_revisions_are_looked_up_and_written_per_revision(tmp_path):
    env = {"HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "c")}
    hub.write_emulated_snapshot(str(tmp_path / "c"), TARGET)  # main is cached, v2 is not
    state = build_engine(vllm_argv(TARGET, None, "--revision", "v2"), env, log=lambda _: None).state()
    assert [(m["revision"], m["source"]) for m in state["hub"]["models"]] == [("v2", "downloaded")]
    assert (Path(hub.repo_folder(str(tmp_path / "c"), TARGET)) / "refs" / "v2").read_text() == "emulated"
    with pytest.raises(HubModelUnavailable):  # the drafter's own revision is not cached
        build_engine(sglang_argv("/models/k", DRAFTER) + ["--speculative-draft-model-revision", "r1"],
                     {**env, "HF_HUB_OFFLINE": "1"}, log=lambda _: None)


def test_the_default_cache_and_an_unwritable_cache_are_not_written(tmp_path):
    """No HF_HOME/HF_HUB_CACHE: the account's own ~/.cache is left alone; a cache that cannot be created is
    reported, and both are downloaded again by the next start."""
    env = {"HOME": str(tmp_path)}
    models = build_engine(vllm_argv(TARGET, None), env, log=lambda _: None).state()["hub"]["models"]
    assert [(m["source"], m["persisted"]) for m in models] == [("downloaded", False)]
    assert "left alone" in models[0]["note"] and not (tmp_path / ".cache").exists()

    (tmp_path / "file").write_text("not a directory")
    env = {"HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "file" / "hub")}
    for _ in range(2):
        models = build_engine(vllm_argv(TARGET, None), env, log=lambda _: None).state()["hub"]["models"]
        assert [(m["source"], m["persisted"]) for m in models] == [("downloaded", False)]
        assert models[0]["note"].startswith("cache not writable")


# ----------------------------------------------------------------------------------- environment

def test_environment_names_without_values_or_emulator_knobs():
    env = {"HF_TOKEN": SECRET, "PATH": "/bin", "DRAFTER_EMULATOR_SEED": "3", "A_VAR": "x", "HF_HOME": "/c"}
    assert hub.environment_names(env) == ["A_VAR", "HF_HOME", "HF_TOKEN", "PATH"]
    engine = EmulatedEngine(parse_command_line(vllm_argv("/models/k", None)), Settings(), load_profile(),
                            environment_names=env)
    assert engine.state()["environment"]["names"] == ["A_VAR", "HF_HOME", "HF_TOKEN", "PATH"]
    assert SECRET not in json.dumps(engine.state())
    bare = EmulatedEngine(parse_command_line(vllm_argv("/models/k", None)), Settings(), load_profile())
    assert bare.state()["environment"] is None and bare.state()["hub"] is None


def test_a_secret_value_is_in_neither_the_state_nor_the_log(tmp_path):
    """The CLI as a pod runs it: HF_TOKEN from a Secret, a cache volume, a hub drafter downloaded."""
    port = free_port()
    env = clean_env(HOME=str(tmp_path), HF_HOME=str(tmp_path / "hf"), HF_TOKEN=SECRET, DRAFTER_EMULATOR_SEED="3")
    proc = subprocess.Popen([sys.executable, "-m", "drafter_operator.cli", "emulate",
                             *sglang_argv("/models/kimi-k2.5", DRAFTER, port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(proc, port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/emulator/state", timeout=10) as r:
            body = r.read().decode()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    state = json.loads(body)
    names = state["environment"]["names"]
    assert "HF_TOKEN" in names and "HF_HOME" in names and names == sorted(names)
    assert not [n for n in names if n.startswith("DRAFTER_EMULATOR_")]
    assert [(m["role"], m["source"]) for m in state["hub"]["models"]] == [("target", "local"),
                                                                          ("drafter", "downloaded")]
    assert SECRET not in body
    assert SECRET not in stdout + stderr
    assert "HF_TOKEN" in stderr  # the log names it
