"""The operator's environment settings (settings.py): one home for each name, default and parser."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drafter_operator import settings

PACKAGE = Path(settings.__file__).parent


def test_every_setting_has_a_distinct_name_and_a_doc():
    names = [setting.name for setting in settings.ALL]
    assert len(names) == len(set(names))
    assert all(setting.doc for setting in settings.ALL)
    module_settings = [value for value in vars(settings).values() if isinstance(value, settings.Setting)]
    assert set(map(id, module_settings)) == set(map(id, settings.ALL)), "a Setting missing from settings.ALL"


@pytest.mark.parametrize("setting", settings.ALL, ids=lambda s: s.name)
def test_unset_gives_the_default(setting):
    assert setting.read({}) == setting.default


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_seconds_read_back_what_was_written(value):
    assert settings.DRAIN_SECONDS.read({"DRAFTER_DRAIN_SECONDS": repr(value)}) == value


@given(st.integers())
def test_counts_read_back_what_was_written(value):
    assert settings.WORKERS.read({"DRAFTER_WORKERS": str(value)}) == value


@given(st.text())
def test_a_flag_is_on_only_for_the_yes_words(raw):
    assert settings.TRAINING_CPU.read({"DRAFTER_TRAINING_CPU": raw}) == (raw.lower() in ("1", "true", "yes"))


@pytest.mark.parametrize("raw", ["TRUE", "Yes", "1"])
def test_the_yes_words_in_any_case_turn_a_flag_on(raw):
    assert settings.TRAINING_CPU.read({"DRAFTER_TRAINING_CPU": raw}) is True


@given(st.text().filter(lambda raw: not raw.strip().lstrip("+-").isdigit()))
def test_a_malformed_count_names_the_variable(raw):
    with pytest.raises(settings.SettingError, match="DRAFTER_WORKERS"):
        settings.WORKERS.read({"DRAFTER_WORKERS": raw})


def test_a_malformed_number_of_seconds_names_the_variable_and_value():
    with pytest.raises(settings.SettingError, match="DRAFTER_RECHECK_SECONDS='soon'"):
        settings.RECHECK_SECONDS.read({"DRAFTER_RECHECK_SECONDS": "soon"})


def test_raw_settings_keep_the_text_and_an_empty_value():
    assert settings.PROMETHEUS_ENDPOINTS.read({"DRAFTER_PROMETHEUS_ENDPOINTS": ""}) == ""
    assert settings.POD_NAMESPACE.read({"POD_NAMESPACE": "ops"}) == "ops"


def test_read_defaults_to_the_process_environment(monkeypatch):
    monkeypatch.setenv("DRAFTER_WORKERS", "3")
    assert settings.WORKERS.read() == 3


def test_the_modules_moved_onto_settings_spell_no_variable_of_their_own():
    """The readers switched to settings.py name no DRAFTER_* variable themselves (the rest of the package
    is listed for the lead: controllers/handlers.py, runner.py, benchmark.py, training.py, prometheus_source)."""
    switched = ["container_paths.py", "memory_release.py", "resources/pod_policy.py",
                "controllers/leader_election.py"]
    known = {setting.name for setting in settings.ALL}
    for relative in switched:
        tree = ast.parse((PACKAGE / relative).read_text())
        literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
        assert not literals & known, f"{relative} spells {literals & known}"
