"""`drafter-operator cluster|demo|emulate` come from drafter-testbed's entry points: with it installed they
are subcommands like the others, without it the help and the commands say how to get it (the operator's
own install: its image, a user's pip install). The real lean install is checked in the operator image
(tests/images/test_operator_image.py)."""

from __future__ import annotations

import argparse
import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from drafter_operator import cli

REPO = Path(__file__).resolve().parents[3]
RUNTIME = tomllib.loads((REPO / "pyproject.toml").read_text())
TESTBED = tomllib.loads((REPO / "testbed" / "pyproject.toml").read_text())


def declared_entry_points() -> list[importlib.metadata.EntryPoint]:
    """What testbed/pyproject.toml registers in the group, as an installed drafter-testbed reports it."""
    table = TESTBED["project"]["entry-points"][cli.COMMAND_GROUP]
    return [importlib.metadata.EntryPoint(name, value, cli.COMMAND_GROUP) for name, value in table.items()]


@pytest.fixture
def installed(monkeypatch):
    """The entry points this environment reports for COMMAND_GROUP: fill the list to install them."""
    entries: list[importlib.metadata.EntryPoint] = []

    def entry_points(*, group):
        return [entry for entry in entries if entry.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return entries


def choices(parser) -> set[str]:
    return set(parser._subparsers._group_actions[0].choices)


@pytest.mark.parametrize("command", cli.TESTBED_COMMANDS)
def test_without_the_testbed_its_commands_say_how_to_get_it(installed, capsys, command):
    assert cli.main([command, "up", "--help"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"drafter-operator {command} comes with the drafter-testbed package, not installed here: "
        "pip install -e ./testbed from a checkout of the repository (./dev does it)")


def test_without_the_testbed_the_help_lists_the_operator_and_names_the_missing_tools(installed):
    parser = cli.build_parser()
    assert {"run", "bench", "crds", "preflight", "rbac"} <= choices(parser)
    assert not choices(parser) & set(cli.TESTBED_COMMANDS)
    assert parser.format_help().rstrip().endswith(
        "cluster, demo, emulate: developer tools of the drafter-testbed package: pip install -e ./testbed from a "
        "checkout of the repository (./dev does it)")


def test_with_the_testbed_its_entry_points_are_subcommands_and_the_help_has_no_hint(installed):
    installed.extend(declared_entry_points())
    parser = cli.build_parser()
    assert set(cli.TESTBED_COMMANDS) <= choices(parser)
    assert "drafter-testbed" not in parser.format_help()
    assert cli.missing_testbed_error("cluster", cli.added_commands()) is None
    args = parser.parse_args(["cluster", "down", "--wipe"])
    assert args.wipe and args.cluster_handler.__module__ == "drafter_testbed.cli"


def test_only_a_partly_missing_testbed_is_named_in_the_help(installed):
    installed.extend(entry for entry in declared_entry_points() if entry.name != "demo")
    assert cli.testbed_epilog(cli.added_commands()).startswith("demo: developer tools of the drafter-testbed")


def test_emulate_takes_the_rest_of_the_command_line_verbatim(installed):
    installed.extend(declared_entry_points())
    parser = cli.build_parser()
    assert cli.passes_through(parser, "emulate")
    assert not cli.passes_through(parser, "run") and not cli.passes_through(parser, "cluster")
    assert not cli.passes_through(parser, "no-such-command")


def test_the_operator_commands_need_no_testbed(installed):
    assert cli.missing_testbed_error("run", {}) is None
    assert cli.missing_testbed_error("bench", {}) is None


def test_the_testbed_registers_exactly_its_commands_each_under_its_own_name():
    entries = declared_entry_points()
    assert sorted(entry.name for entry in entries) == sorted(cli.TESTBED_COMMANDS)
    for entry in entries:
        subparsers = argparse.ArgumentParser().add_subparsers()
        entry.load()(subparsers)
        assert list(subparsers.choices) == [entry.name]


def test_the_runtime_dependencies_leave_the_testbed_packages_out():
    def names(requirements: list[str]) -> set[str]:
        return {req.split(">")[0].split("=")[0].split("[")[0].strip().lower() for req in requirements}

    runtime = names(RUNTIME["project"]["dependencies"])
    testbed = names(TESTBED["project"]["dependencies"])
    assert {"cryptography", "tokenizers", "jinja2", "httpx", "drafter-operator"} <= testbed
    assert not runtime & (testbed - {"drafter-operator"})
    assert not runtime & {"hypothesis", "pytest"}
    # The tools are a package apart now, not an extra of the operator's.
    assert set(RUNTIME["project"]["optional-dependencies"]) == {"test"}
    assert "drafter-operator" not in names(RUNTIME["project"]["optional-dependencies"]["test"])
