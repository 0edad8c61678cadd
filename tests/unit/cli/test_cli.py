"""The `drafter-operator` command's own surface: --version, JSON log lines, the internal commands listed
apart, the chart's logFormat value, and `bench`'s progress on a terminal (quiet in a Job)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import subprocess
import sys

import pytest

from drafter_operator.cli import INTERNAL_COMMANDS, build_parser
from tests.support.bench_client import NO_SPECULATION, _env, emulator
from tests.support.chart import helm, operator_container, render


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drafter_operator.cli", *args], env=_env(),
                          capture_output=True, text=True, timeout=120, **kwargs)


def test_version_is_the_installed_distributions():
    done = _cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"drafter-operator {importlib.metadata.version('drafter-operator')}"


def test_internal_commands_are_listed_under_their_own_heading_and_still_run():
    text = build_parser().format_help()
    commands, _, after = text.partition("options:")
    heading = "internal commands (run by the operator's pods, not by hand):"
    assert heading in after
    internal = after.split(heading)[1]
    for command in INTERNAL_COMMANDS:
        assert f"  {command} " not in commands, f"{command} is listed among the user commands"
        assert f"  {command} " in internal
    for command in ("run", "bench", "preflight", "crds", "cluster"):
        assert f"    {command}" in commands
    # Listed apart, not removed: the training Job's container command parses as before.
    args = build_parser().parse_args(["run-stage", "--training", "{}", "--stage", "Train"])
    assert args.stage == "Train"


def test_run_takes_a_log_format_and_refuses_others():
    assert build_parser().parse_args(["run"]).log_format == "text"
    assert build_parser().parse_args(["run", "--log-format", "json"]).log_format == "json"
    done = _cli("run", "--log-format", "yaml")
    assert done.returncode == 2 and "--log-format: invalid choice: 'yaml'" in done.stderr


LOG_SCRIPT = """
import logging, sys
import kopf
from kopf._core.actions.loggers import LocalObjectLogger
from drafter_operator import logs
logs.configure(sys.argv[1])
logging.getLogger("drafter_operator.controllers.serving").info("swapped %s", "abc123")
body = {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing",
        "metadata": {"name": "kimi", "namespace": "team-a", "uid": "u-1"}}
LocalObjectLogger(body=body, settings=kopf.OperatorSettings()).warning("handler retried")
try:
    raise RuntimeError("boom")
except RuntimeError:
    logging.getLogger("drafter_operator").exception("reconcile failed")
"""


def _log_lines(log_format: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", LOG_SCRIPT, log_format], env=_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_json_log_lines_carry_time_level_logger_message_and_kopfs_object():
    lines = [json.loads(line) for line in _log_lines("json")]  # every line is one JSON object
    assert [line["message"] for line in lines] == ["swapped abc123", "handler retried", "reconcile failed"]
    plain, scoped, failed = lines
    assert plain["logger"] == "drafter_operator.controllers.serving" and plain["level"] == "INFO"
    assert plain["time"].startswith("20") and "+00:00" in plain["time"] and "object" not in plain
    assert scoped["logger"] == "kopf.objects" and scoped["level"] == "WARNING"
    assert scoped["object"] == {"apiVersion": "drafter.dev/v1alpha1", "kind": "DrafterServing", "name": "kimi",
                                "uid": "u-1", "namespace": "team-a"}
    assert failed["level"] == "ERROR" and "RuntimeError: boom" in failed["exc_info"]


def test_text_log_lines_prefix_kopfs_object():
    lines = _log_lines("text")
    assert " INFO drafter_operator.controllers.serving swapped abc123" in lines[0]
    assert lines[1].endswith("WARNING kopf.objects [team-a/kimi] handler retried")
    assert not any("a request line" in line for line in lines)


def test_the_chart_passes_log_format_and_its_schema_refuses_other_values():
    default = build_parser().parse_args(operator_container(render())["args"])
    assert default.log_format == "text"
    json_args = build_parser().parse_args(operator_container(render("operator.logFormat=json"))["args"])
    assert json_args.log_format == "json"
    refused = helm("template", "x", "charts/drafter-operator", "--set", "operator.logFormat=yaml", check=False)
    assert refused.returncode != 0 and "logFormat" in refused.stderr


@pytest.fixture(scope="module")
def baseline():
    with emulator(NO_SPECULATION) as url:
        yield url


BENCH = ("bench", "--num-prompts", "2", "--max-tokens", "16", "--concurrency", "1,2", "--refine", "0",
         "--timeout", "30")


def test_bench_shows_progress_on_a_terminal(baseline):
    # stdout a pseudo-terminal, as in a shell; stderr a pipe to read the bars back.
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "drafter_operator.cli", *BENCH, "--url", baseline],
                              env={**_env(), "COLUMNS": "120"}, stdout=follower, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 0, done.stderr
    # Two prompts: one wave of two at 2 streams, two waves of one at 1 stream.
    assert "   1 stream" in done.stderr and "2/2 waves" in done.stderr
    assert "   2 streams" in done.stderr and "1/1 waves" in done.stderr


def test_bench_is_quiet_without_a_terminal(baseline):
    done = _cli(*BENCH, "--url", baseline)  # stdout a pipe, as a Job's log
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout)["levels"][1]["concurrency"] == 2  # the result alone on stdout
