"""The operator's own install is lean: the testbed subcommands name the extra they need when it is missing.

Simulated here by what the installed metadata says (the real lean install is checked in the operator
image: test_operator_image.py)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from drafter_operator import cli

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
REQUIRES = [  # how importlib.metadata reports pyproject.toml's lists (Requires-Dist)
    "kopf>=1.37", "rich>=13",
    'cryptography>=42; extra == "testbed"', 'tokenizers>=0.20; extra == "testbed"', 'jinja2>=3.1; extra == "testbed"',
    'drafter-operator[testbed]; extra == "test"', 'pytest>=8; extra == "test"',
]


@pytest.fixture
def installed(monkeypatch):
    """Pretend drafter-operator is installed with REQUIRES and that only ``present`` distributions exist."""
    present: set[str] = set()

    def requires(name):
        assert name == cli.DISTRIBUTION
        return REQUIRES

    def distribution(name):
        if name.lower() not in present:
            raise importlib.metadata.PackageNotFoundError(name)
        return object()

    monkeypatch.setattr(importlib.metadata, "requires", requires)
    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    return present


def test_extra_requirements_reads_only_that_extra(installed):
    assert cli.extra_requirements("testbed") == ["cryptography", "tokenizers", "jinja2"]
    assert cli.extra_requirements("test") == ["drafter-operator", "pytest"]


@pytest.mark.parametrize("command", sorted(cli.EXTRA_OF_COMMAND))
def test_missing_extra_is_named_with_the_install_command(installed, capsys, command):
    installed.add("tokenizers")
    assert cli.main([command, "up"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"drafter-operator {command} needs the testbed extra: pip install 'drafter-operator[testbed]' "
        "(not installed: cryptography, jinja2)")


def test_installed_extra_lets_the_command_through(installed):
    installed.update({"cryptography", "tokenizers", "jinja2"})
    assert cli.missing_extra_error("cluster") is None
    assert cli.missing_extra_error("run") is None  # the operator's own commands need no extra


def test_extra_commands_exist_and_the_extra_is_declared():
    subcommands = cli.build_parser()._subparsers._group_actions[0].choices
    assert set(cli.EXTRA_OF_COMMAND) <= set(subcommands)
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(cli.EXTRA_OF_COMMAND.values()) <= set(extras)
    # ./dev and .ci/run install the test extra: it must bring the testbed with it.
    assert "drafter-operator[testbed]" in extras["test"]


def test_the_runtime_dependencies_leave_the_testbed_packages_out():
    runtime = {dep.split(">")[0].split("=")[0].lower() for dep in PYPROJECT["project"]["dependencies"]}
    testbed = {dep.split(">")[0].split("=")[0].lower() for dep in PYPROJECT["project"]["optional-dependencies"]["testbed"]}
    assert testbed and not runtime & testbed
    assert not runtime & {"hypothesis", "pytest"}
