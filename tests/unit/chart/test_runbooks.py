"""The runbooks' commands find what they name: every label selector in docs/runbooks selects the objects the
chart (for the operator) or the operator (for its children) labels that way. A runbook whose selector
matches nothing sends the person on call to an empty list in the middle of an incident."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from drafter_operator import constants
from tests.support.chart import render

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks"
#: `kubectl ... <verb> [kinds] -l <selector>`: the kinds a command reads and the selector it reads them by.
COMMAND = re.compile(r"kubectl -n \S+ (?P<verb>get|logs|describe)(?: (?P<kinds>[a-z,]+))? -l (?P<selector>[^\s`]+)")
#: What each kind a runbook reads is, in the chart's objects (endpoints carry their Service's labels).
KIND = {"deploy": "Deployment", "pod": "Pod", "pods": "Pod", "svc": "Service", "endpoints": "Service"}
#: The release the chart is rendered as in these tests (test_chart.render); runbooks write it RELEASE.
RELEASE = "drafter"


def commands() -> list[tuple[str, str, list[str], dict[str, str]]]:
    found = []
    for page in sorted(RUNBOOKS.glob("*.md")):
        for match in COMMAND.finditer(page.read_text()):
            kinds = (match["kinds"] or "pods").split(",") if match["verb"] == "get" else ["pods"]
            selector = dict(term.split("=", 1) for term in match["selector"].split(","))
            found.append((page.name, match[0], kinds, selector))
    return found


def test_the_runbooks_have_selector_commands_to_check():
    operator = [c for c in commands() if c[3].get(constants.NAME_LABEL) == "drafter-operator"]
    children = [c for c in commands() if constants.NAME_LABEL not in c[3]]
    assert len(operator) >= 8 and len(children) >= 5, (operator, children)


@pytest.mark.parametrize("page, command, kinds, selector",
                         [c for c in commands() if c[3].get(constants.NAME_LABEL) == "drafter-operator"],
                         ids=lambda value: value if isinstance(value, str) and value.endswith(".md") else "")
def test_each_operator_selector_finds_the_charts_objects(page, command, kinds, selector):
    objects = render()
    wanted = {key: RELEASE if value == "RELEASE" else value for key, value in selector.items()}
    for kind in kinds:
        if kind == "pods" or kind == "pod":
            labels = [o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] == "Deployment"]
        else:
            labels = [o["metadata"].get("labels") or {} for o in objects if o["kind"] == KIND[kind]]
        assert any(wanted.items() <= found.items() for found in labels), \
            f"{page}: `{command}` finds no {kind} of the chart (labels: {labels})"


def test_each_child_selector_uses_a_label_the_operator_sets():
    keys = {constants.SERVING_LABEL, constants.BENCHMARK_LABEL, constants.TRAINING_LABEL, constants.REVISION_LABEL,
            constants.GATE_LABEL, constants.STAGE_LABEL}
    for page, command, _, selector in commands():
        if constants.NAME_LABEL not in selector:
            assert set(selector) <= keys, f"{page}: `{command}` selects by a label the operator never sets"


def test_no_runbook_names_the_operators_objects_by_a_release_prefixed_name():
    for page in RUNBOOKS.glob("*.md"):
        assert not re.search(r"(deploy|deployment|pod|svc)/RELEASE-", page.read_text()), page.name
