"""`kubectl get ... -o json`'s answer for its plain forms, read over one kept-alive connection.

Why: the tests and benches poll. Each `kubectl get` is a new process and a new TLS handshake, about 110 ms of CPU
between kubectl and the apiserver on the 2-core machine, against about 7 ms for the same GET on a kept-alive
connection (bench/poll_cost.py measures both). Four end-to-end workers polling every half second spent a large share
of the machine on that. The answer is the one kubectl gives: one object as the apiserver returns it, or a `List`
whose items carry their apiVersion and kind; a missing object fails as kubectl's NotFound does.

Only the plain forms are read here: a resource type (plural, singular, short name or kind, optionally
`type.group`, or `type/name`), at most one name, and the flags -n/--namespace, -l/--selector, --field-selector and
-A/--all-namespaces. Anything else answers None, and the caller runs kubectl itself.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from drafter_operator.kube import ApiError, Kube, object_path

#: The flags that take a value, by every spelling kubectl accepts for them, and the query they become.
_VALUE_FLAGS = {"-n": "namespace", "--namespace": "namespace", "-l": "labelSelector", "--selector": "labelSelector",
                "--field-selector": "fieldSelector"}
_ALL_NAMESPACES = {"-A", "--all-namespaces"}


class ReadFailed(Exception):
    """The apiserver refused the read (the message is kubectl's own wording for it), or could not be reached."""


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1" or "apps/v1"
    plural: str
    kind: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None) -> str:
        return object_path(self.group_version, self.plural, namespace if self.namespaced else None, name)


@dataclass(frozen=True)
class Query:
    resource: str
    name: str | None
    namespace: str | None
    all_namespaces: bool
    params: tuple[tuple[str, str], ...]


def parse(args: tuple[str, ...]) -> Query | None:
    """The query a `kubectl get <args>` asks, or None for a form this module leaves to kubectl."""
    positional, namespace, all_namespaces, params = [], None, False, []
    words = iter(args)
    for word in words:
        flag, has_value, inline = word.partition("=")
        if flag in _VALUE_FLAGS:
            value = inline if has_value else next(words, None)
            if value is None:
                return None
            if _VALUE_FLAGS[flag] == "namespace":
                namespace = value
            else:
                params.append((_VALUE_FLAGS[flag], value))
        elif word in _ALL_NAMESPACES:
            all_namespaces = True
        elif word.startswith("-"):
            return None  # an output option or a flag not read here: kubectl answers
        else:
            positional.append(word)
    if len(positional) == 1 and "/" in positional[0]:
        positional = positional[0].split("/", 1)
    if not 1 <= len(positional) <= 2 or "," in positional[0] or (len(positional) == 2 and params):
        return None
    name = positional[1] if len(positional) == 2 else None
    return Query(positional[0].lower(), name, namespace, all_namespaces, tuple(params))


class ApiReads:
    """Reads through the operator's own REST client (drafter_operator.kube: the kubeconfig's credentials, one
    connection pool), resolving resource names from the apiserver's discovery as kubectl does: the core group
    first, then the groups in the order the apiserver lists them. Discovery is read again when a name is not found (a CRD installed since)."""

    def __init__(self, kubeconfig: str):
        self.kubeconfig = kubeconfig
        self._kube: Kube | None = None
        self._names: dict[str, Resource] | None = None
        self._default_namespace = "default"
        self._lock = threading.Lock()

    def get(self, args: tuple[str, ...]) -> dict | None:
        query = parse(args)
        if query is None:
            return None
        resource = self._resolve(query.resource)
        if resource is None:
            return None  # a name discovery does not know: kubectl says what it makes of it
        namespace = None if query.all_namespaces and not query.name else (query.namespace or self._default_namespace)
        body = self._read(resource.path(namespace, query.name), query.params)
        if query.name:
            return body
        items = [{"apiVersion": resource.group_version, "kind": resource.kind, **item} for item in body.get("items") or []]
        return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}

    def _client(self) -> Kube:
        if self._kube is None:
            from kubernetes import config

            self._kube = Kube(config.new_client_from_config(config_file=self.kubeconfig))
            _, context = config.list_kube_config_contexts(config_file=self.kubeconfig)
            self._default_namespace = (context or {}).get("context", {}).get("namespace") or "default"
        return self._kube

    def _read(self, path: str, params: tuple[tuple[str, str], ...]) -> dict:
        try:
            return self._client().request("GET", path, query=dict(params)) or {}
        except ApiError as refused:
            try:
                status = json.loads(refused.body)
            except ValueError:
                status = {}
            raise ReadFailed(f"Error from server ({status.get('reason') or refused.status}): "
                             f"{status.get('message') or refused.body}") from None
        except Exception as exc:  # noqa: BLE001 - urllib3's connection errors: kubectl fails on them too
            raise ReadFailed(f"reading {path} failed: {exc}") from exc

    def _resolve(self, name: str) -> Resource | None:
        with self._lock:
            if self._names is None or name not in self._names:
                self._names = self._discover()
            return self._names.get(name)

    def _discover(self) -> dict[str, Resource]:
        names: dict[str, Resource] = {}
        versions = ["v1"] + [group["preferredVersion"]["groupVersion"] for group in self._read("/apis", ())["groups"]]
        for group_version in versions:
            path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            group = group_version.rpartition("/")[0]
            for entry in self._read(path, ())["resources"]:
                if "/" in entry["name"] or "get" not in entry.get("verbs", ()):
                    continue  # a subresource, or nothing kubectl get can read
                resource = Resource(group_version, entry["name"], entry["kind"], entry["namespaced"])
                spellings = [entry["name"], entry.get("singularName") or entry["kind"].lower(), entry["kind"].lower(),
                             *entry.get("shortNames", ())]
                for spelling in spellings:
                    names.setdefault(spelling, resource)  # the first group to claim a name keeps it, as kubectl's
                    if group:
                        names.setdefault(f"{spelling}.{group}", resource)
        return names
