"""A Kube stand-in that records each request and applies the writes to a World; it refuses creates of one
plural as an admission policy would."""
from __future__ import annotations

import json

from drafter_operator.kube import ApiError
from tests.support.servings import World, merge_patch

POLICY = ("deployments.apps kimi-x is forbidden: ValidatingAdmissionPolicy 'gpu-quota' with binding "
          "'gpu-quota' denied request: at most 8 GPUs per namespace")


class RecordingKube:
    """Applies writes to a World; refuses creates of ``refuse_plural`` with a Status body like the apiserver's."""

    def __init__(self, world: World, refuse_plural: str | None = None, status_code: int = 403):
        self.world, self.refuse_plural, self.status_code = world, refuse_plural, status_code
        self.requests: list[tuple[str, str, dict]] = []
        self.version = 100

    def _refuse(self, path: str) -> None:
        if self.refuse_plural and f"/{self.refuse_plural}" in path:
            raise ApiError(self.status_code, "Forbidden", json.dumps({"kind": "Status", "message": POLICY}))

    def create(self, path: str, body: dict) -> dict:
        self.requests.append(("create", path, body))
        self._refuse(path)
        from drafter_operator.controllers.plan import Plan, Write
        self.world.apply(Plan(writes=[Write("create", path.rsplit("/", 1)[1], path, body)]))
        return {"metadata": {"name": body["metadata"]["name"], "resourceVersion": str(self._bump())}}

    def patch(self, path: str, body: dict) -> dict:
        self.requests.append(("patch", path, body))
        if path.endswith("/status"):
            sent = (body.get("metadata") or {}).get("resourceVersion")
            current = self.world.body["metadata"].get("resourceVersion")
            if sent is not None and sent != current:
                raise ApiError(409, "Conflict", json.dumps({"message": "the object has been modified"}))
            self.world.body["status"] = merge_patch(self.world.body.get("status") or {}, body["status"])
            self.world.body["metadata"]["resourceVersion"] = str(self._bump())
            return {"metadata": {"name": self.world.body["metadata"]["name"],
                                 "resourceVersion": self.world.body["metadata"]["resourceVersion"]}}
        self._refuse(path)
        return {"metadata": {"name": path.rsplit("/", 1)[1], "resourceVersion": str(self._bump())}}

    def get(self, path: str) -> dict | None:
        self.requests.append(("get", path, {}))
        return self.world.service if "/services/" in path else None

    def delete(self, path: str, resource_version: str | None = None) -> bool:
        self.requests.append(("delete", path, {} if resource_version is None else
                              {"preconditions": {"resourceVersion": resource_version}}))
        return True

    def _bump(self) -> int:
        self.version += 1
        return self.version
