"""Comparing nested manifests in tests: is what we sent still in what the apiserver (or a model) gave back?"""

from __future__ import annotations


def contains(small, big, *, empty_may_be_absent: bool = False) -> bool:
    """Every key/value of ``small`` is in ``big``, recursively; lists are compared item by item and must have
    the same length. With ``empty_may_be_absent``, an empty value ("", [], {}) of ``small`` may be missing
    from ``big``, as Kubernetes leaves out empty optional fields when it stores an object."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(
            contains(value, big[key], empty_may_be_absent=empty_may_be_absent) if key in big
            else empty_may_be_absent and value in ("", [], {})
            for key, value in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(
            contains(a, b, empty_may_be_absent=empty_may_be_absent) for a, b in zip(small, big))
    return small == big
