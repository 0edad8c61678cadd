"""spec.capture's schema and rules: defaults, and the values refused with the field and the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from drafter_operator.api.serving.capture import CaptureSpec


def test_defaults_keep_prompts_only_for_seven_days_within_ten_gibibytes() -> None:
    spec = CaptureSpec.model_validate({"sampleRate": "0.05", "claimName": "captured"})
    assert spec.to_json() == {"sampleRate": "0.05", "responses": False, "retention": "168h", "maxSize": "10Gi",
                              "claimName": "captured"}


@pytest.mark.parametrize("body, words", [
    ({"sampleRate": "0", "claimName": "c"}, "spec.capture.sampleRate must be above 0"),
    ({"sampleRate": "1.5", "claimName": "c"}, "sampleRate"),
    ({"sampleRate": "0.1", "claimName": "c", "retention": "30m"}, "spec.capture.retention must be between 1h"),
    ({"sampleRate": "0.1", "claimName": "c", "retention": "9000h"}, "spec.capture.retention must be between 1h"),
    ({"sampleRate": "0.1"}, "claimName"),
    ({"sampleRate": "0.1", "claimName": "c", "redaction": {"image": "r:1", "command": []}}, "command"),
])
def test_refused(body: dict, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        CaptureSpec.model_validate(body)


def test_rules_in_cel_and_python_agree_on_their_fields() -> None:
    rules = {rule.field_path: rule.cel for rule in CaptureSpec.rules}
    assert set(rules) == {".sampleRate", ".retention"}
    assert "double(self.sampleRate) > 0.0" in rules[".sampleRate"]
    assert "duration('8760h')" in rules[".retention"]
