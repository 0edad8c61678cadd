"""What the demo waits for before it measures a serving (drafter_testbed/demo.py, `routed_revisions`): the revisions
a Service sends requests to, as the process runner's proxy picks its backends (selector, Ready, not being deleted)."""

from __future__ import annotations

from drafter_operator.constants import REVISION_LABEL, SERVING_LABEL
from drafter_testbed.demo import routed_revisions

SERVICE = {"spec": {"selector": {SERVING_LABEL: "kimi-vllm-eagle3"}}}


def pod(revision: str, ready: bool = True, deleting: bool = False, serving: str = "kimi-vllm-eagle3") -> dict:
    metadata = {"name": f"{serving}-{revision}", "labels": {SERVING_LABEL: serving, REVISION_LABEL: revision}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-07T22:00:00Z"
    return {"metadata": metadata, "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_right_after_disable_speculation_the_old_revision_still_serves_beside_the_new():
    assert routed_revisions(SERVICE, [pod("98da64b08d"), pod("3cb8c8d9d0")]) == {"98da64b08d", "3cb8c8d9d0"}


def test_a_pod_being_deleted_or_not_ready_takes_no_requests():
    assert routed_revisions(SERVICE, [pod("98da64b08d", deleting=True), pod("3cb8c8d9d0")]) == {"3cb8c8d9d0"}
    assert routed_revisions(SERVICE, [pod("98da64b08d"), pod("3cb8c8d9d0", ready=False)]) == {"98da64b08d"}


def test_another_servings_pods_are_not_this_services():
    assert routed_revisions(SERVICE, [pod("3cb8c8d9d0"), pod("81537ea7f5", serving="kimi-sglang-eagle3")]) == {
        "3cb8c8d9d0"}
    assert routed_revisions(SERVICE, []) == set()
