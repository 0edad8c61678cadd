"""Which requests a capture keeps: by a hash of the id, the same answer every time, nested across rates."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drafter_operator.capture.sampling import bucket, kept

RATES = st.floats(min_value=0.0001, max_value=1.0)


@given(st.text(), RATES)
def test_a_request_is_kept_or_dropped_the_same_every_time(request_id: str, rate: float) -> None:
    assert kept(request_id, rate) == kept(request_id, rate)
    assert 0.0 <= bucket(request_id) < 1.0


@given(st.text(), RATES, RATES)
def test_a_higher_rate_keeps_every_request_a_lower_one_keeps(request_id: str, a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert not kept(request_id, low) or kept(request_id, high)


@given(st.text())
def test_rate_one_keeps_everything(request_id: str) -> None:
    assert kept(request_id, 1.0)


def test_the_kept_fraction_is_near_the_rate() -> None:
    ids = [f"chatcmpl-{n}" for n in range(20000)]
    for rate in (0.01, 0.05, 0.5):
        fraction = sum(kept(i, rate) for i in ids) / len(ids)
        assert abs(fraction - rate) < 0.2 * rate + 0.002, (rate, fraction)


def test_the_choice_does_not_depend_on_the_process() -> None:
    # SHA-256, not the salted builtin hash(): a sidecar restart or a second replica agrees on every id.
    assert bucket("req-1") == int("9456bdfa12ea7695", 16) / 2**64  # sha256(b"req-1")'s first 8 bytes
