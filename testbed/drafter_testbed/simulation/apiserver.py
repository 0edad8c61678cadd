"""An in-memory Kubernetes apiserver behind the operator's own `Kube` client.

`FakeApiserver` subclasses `Kube` and replaces only `request`, so the real `Kube.create` (409 ->
None), `Kube.delete` (404 -> False), `get` and `list` run unchanged over it. It keeps the store keyed
by object path and does what the operator relies on: a global resourceVersion bumped on every write,
uid, creationTimestamp and generation; 409 AlreadyExists on create, 409 Conflict on a patch carrying a
stale metadata.resourceVersion; JSON merge patch; the status subresource; deletionTimestamp and
finalizers; names refused the way the real apiserver refuses them (422); admission refusals; random
500s and timeouts; and the garbage collector (owner references). World controllers write through
`put`/`remove` (no faults, not counted as the operator's requests).
"""

from __future__ import annotations

import json
import marshal
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from drafter_operator.kube import ApiError, Kube

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
KINDS = {"deployments": "Deployment", "leaderworkersets": "LeaderWorkerSet", "services": "Service", "pods": "Pod",
         "drafterservings": "DrafterServing", "drafterbenchmarks": "DrafterBenchmark",
         "draftertrainings": "DrafterTraining", "jobs": "Job", "persistentvolumeclaims": "PersistentVolumeClaim",
         "configmaps": "ConfigMap"}
GROUPS = {"deployments": "deployments.apps", "leaderworkersets": "leaderworkersets.leaderworkerset.x-k8s.io",
          "drafterservings": "drafterservings.drafter.dev",
          "drafterbenchmarks": "drafterbenchmarks.drafter.dev", "services": "services", "pods": "pods",
          "draftertrainings": "draftertrainings.drafter.dev", "jobs": "jobs.batch",
          "persistentvolumeclaims": "persistentvolumeclaims", "configmaps": "configmaps"}
WITH_STATUS = {"deployments", "leaderworkersets", "drafterservings", "drafterbenchmarks", "services", "pods", "draftertrainings", "jobs",
               "persistentvolumeclaims"}
CUSTOM_NAME_MAX = 52
PVC_PROTECTION = "kubernetes.io/pvc-protection"  # api/kind.py: the CRDs' CEL rule on metadata.name


class OperatorCrash(BaseException):
    """The operator process dies at this request (a BaseException: no `except Exception` in the
    operator's code may survive it)."""


@dataclass(frozen=True)
class Path:
    collection: str  # the list path
    plural: str
    namespace: str
    name: str | None
    subresource: str | None

    @property
    def key(self) -> str:
        return f"{self.collection}/{self.name}"


def parse(path: str) -> Path:
    parts = path.split("/")
    # ['', 'api', 'v1', 'namespaces', ns, plural, name?, sub?] or ['', 'apis', g, v, 'namespaces', ...]
    i = parts.index("namespaces")
    namespace, plural = parts[i + 1], parts[i + 2]
    name = parts[i + 3] if len(parts) > i + 3 else None
    sub = parts[i + 4] if len(parts) > i + 4 else None
    return Path("/".join(parts[:i + 3]), plural, namespace, name, sub)


def _copy(stored):
    """A copy of stored objects as a client decodes them: for the JSON values the store holds, marshal (version 2:
    nothing shared between two places of the copy) gives json's result in half the time, and reads are most of a
    scenario's requests (tests/simulation/test_apiserver_reads.py checks the two agree)."""
    try:
        return marshal.loads(marshal.dumps(stored, 2))
    except ValueError:  # a value marshal does not know (a str subclass, say): as json makes it
        return json.loads(json.dumps(stored))


def merge_patch(target: dict, patch: dict) -> dict:
    """RFC 7386 into a new dict; `target` is never changed (stored objects are shared, never mutated)."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            base = out.get(key)
            out[key] = merge_patch(base if isinstance(base, dict) else {}, value)
        else:
            out[key] = value
    return out


def selected(obj: dict, selector: str) -> bool:
    """Does the object match a label selector of equality and existence terms (`a=b,c!=d,e,!f`)?"""
    labels = obj["metadata"].get("labels") or {}
    for term in selector.split(","):
        term = term.strip()
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def status_error(code: int, reason: str, message: str) -> ApiError:
    return ApiError(code, reason, json.dumps({"kind": "Status", "status": "Failure", "message": message,
                                              "reason": reason, "code": code}))


def name_problem(plural: str, name: str) -> str | None:
    """Why the real apiserver refuses this name for this kind (None: it accepts it)."""
    if plural in ("drafterbenchmarks", "drafterservings", "draftertrainings"):
        if len(name) > CUSTOM_NAME_MAX or not DNS1035.match(name):
            return (f"metadata.name must be at most {CUSTOM_NAME_MAX} lowercase letters, digits and '-', starting "
                    "with a letter and ending with a letter or digit")
        return None
    if plural == "services":
        if len(name) > 63:
            return "must be no more than 63 characters"
        if not DNS1035.match(name):
            return "a DNS-1035 label must consist of lower case alphanumeric characters or '-'"
        return None
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not DNS1123_SUBDOMAIN.match(name):
        return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
    return None


#: (method, plural, path, body) -> (code, message) to refuse the request, or None.
Admission = Callable[[str, str, str, dict | None], "tuple[int, str] | None"]


@dataclass
class Faults:
    fail_rate: float = 0.0  # chance that an operator request fails with a 500 or a timeout
    admission: dict[str, Admission] = field(default_factory=dict)  # name -> rule
    crash_in: int | None = None  # the operator dies at this many requests from now


class FakeApiserver(Kube):
    def __init__(self, clock, rng_of: Callable[[], object], listener: Callable[..., None]):
        # No Kube.__init__: there is no API client; `request` below is the whole transport.
        self.requests: Counter[str] = Counter()
        self.clock = clock
        self.rng_of = rng_of  # the world's current random source
        self.listener = listener  # listener(actor, plural, key, old, new, ok, detail)
        self.store: dict[str, dict] = {}
        #: The store by collection (the list path), each in the store's order: what a list reads, without a scan
        self.collections: dict[str, dict[str, dict]] = {}
        self.by_uid: dict[str, str] = {}
        self.rv = 0
        self.uids = 0
        self.faults = Faults()
        self.on_request: Callable[[], None] | None = None  # runs before each operator request (time passes)
        self.racing: Callable[[str, str], None] | None = None  # (method, path) -> a racing write, before the request
        self.logs: Callable[[str], object] | None = None  # pod key -> its log (text or JSON), None: not readable
        self.graceful: Callable[[dict], bool] | None = None  # pod -> is its delete graceful (deletionTimestamp first)?

    # ---------------------------------------------------------------- the operator's transport
    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                query: dict | None = None, timeout: float | None = None) -> dict | None:
        self.requests[method] += 1
        if self.on_request is not None:
            self.on_request()
        if self.racing is not None:  # another controller's write that lands just before this request
            self.racing(method, path)
        faults = self.faults
        if faults.crash_in is not None:
            faults.crash_in -= 1
            if faults.crash_in <= 0:
                faults.crash_in = None
                raise OperatorCrash(f"{method} {path}")
        if body is not None:
            body = json.loads(json.dumps(body))  # what crosses the wire; never aliased with the caller's dicts
        p = parse(path)
        if method != "GET":
            for rule in list(faults.admission.values()):
                refused = rule(method, p.plural, path, body)
                if refused:
                    code, message = refused
                    err = status_error(code, "Forbidden" if code == 403 else "Invalid", message)
                    self.listener("operator", p.plural, p.key, None, None, False, (method, path, code, message, body))
                    raise err
            rng = self.rng_of()
            if faults.fail_rate and rng.random() < faults.fail_rate:
                if rng.random() < 0.5:
                    self.listener("operator", p.plural, p.key, None, None, False, (method, path, 500, "internal", body))
                    raise status_error(500, "InternalError", "etcdserver: request timed out")
                result = self._serve(method, p, body)  # applied, but the answer is lost
                raise status_error(504, "Timeout", "the request timed out; it may or may not have been applied")
        return self._serve(method, p, body, query)

    def read_text(self, path: str, query: dict | None = None) -> str:
        """A pod's log (Kube.read_text goes around `request`; here it goes through it)."""
        text = self.request("GET", path, query=query)
        return text if isinstance(text, str) else json.dumps(text)

    def _serve(self, method: str, p: Path, body, query: dict | None = None) -> dict | None:
        if method == "GET":
            if p.subresource == "log":
                log = self.logs(p.key) if self.logs is not None and p.key in self.store else None
                if log is None:
                    raise status_error(400, "BadRequest", f'container in pod "{p.name}" is waiting to start')
                return log
            if p.name is None:
                selector = (query or {}).get("labelSelector")
                # The one field selector the operator sends: metadata.name=<name> (a list that finds an object by
                # name, labelled or not, where RBAC grants list but not get).
                named = ((query or {}).get("fieldSelector") or "").removeprefix("metadata.name=") or None
                items = [o for k, o in self.collections.get(p.collection, {}).items()
                         if (not selector or selected(o, selector)) and (named is None or k == f"{p.collection}/{named}")]
                return {"items": _copy(items)}
            obj = self.store.get(p.key)
            if obj is None:
                raise status_error(404, "NotFound", f'{GROUPS[p.plural]} "{p.name}" not found')
            return _copy(obj)
        if method == "POST":
            return self._create(p, body)
        if method == "PATCH":
            return self._patch(p, body)
        if method == "DELETE":
            return self._delete(p, preconditions=(body or {}).get("preconditions") or {})
        raise status_error(405, "MethodNotAllowed", method)

    def _create(self, p: Path, body: dict, actor: str = "operator") -> dict:
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        key = f"{p.collection}/{name}"
        problem = name_problem(p.plural, name or "")
        if problem:
            message = f'{KINDS[p.plural]} "{name}" is invalid: metadata.name: Invalid value: "{name}": {problem}'
            self.listener(actor, p.plural, key, None, None, False, ("POST", key, 422, message, body))
            raise status_error(422, "Invalid", message)
        if key in self.store:
            message = f'{GROUPS[p.plural]} "{name}" already exists'
            self.listener(actor, p.plural, key, None, None, False, ("POST", key, 409, message, body))
            raise status_error(409, "AlreadyExists", message)
        if actor == "operator" and p.plural in WITH_STATUS:
            body.pop("status", None)
        self.uids += 1
        meta.update(namespace=p.namespace, uid=f"uid-{self.uids}", creationTimestamp=self.clock.iso(), generation=1)
        if p.plural == "persistentvolumeclaims":  # the StorageObjectInUseProtection admission plugin
            meta["finalizers"] = sorted({*(meta.get("finalizers") or []), PVC_PROTECTION})
        meta.pop("deletionTimestamp", None)
        return self._store(actor, p.plural, key, None, body)

    def _patch(self, p: Path, patch: dict, actor: str = "operator") -> dict:
        old = self.store.get(p.key)
        if old is None:
            raise status_error(404, "NotFound", f'{GROUPS[p.plural]} "{p.name}" not found')
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != old["metadata"]["resourceVersion"]:
            message = (f'Operation cannot be fulfilled on {GROUPS[p.plural]} "{p.name}": the object has been '
                       "modified; please apply your changes to the latest version and try again")
            self.listener(actor, p.plural, p.key, old, None, False, ("PATCH", p.key, 409, message, patch))
            raise status_error(409, "Conflict", message)
        if p.subresource == "status":
            patch = {"status": patch.get("status") or {}}
        elif p.plural in WITH_STATUS:
            patch = {k: v for k, v in patch.items() if k != "status"}
        new = merge_patch(old, patch)
        meta = dict(new["metadata"])
        for immutable in ("uid", "creationTimestamp", "namespace", "name", "generation", "deletionTimestamp"):
            if immutable in old["metadata"]:
                meta[immutable] = old["metadata"][immutable]
        if new.get("spec") != old.get("spec") and p.plural != "pods":
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        new["metadata"] = meta
        if new == old:
            return old  # a no-op patch: no new resourceVersion, no watch event (as the real apiserver)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._store(actor, p.plural, p.key, old, new)
            return self._drop(actor, p.plural, p.key)
        return self._store(actor, p.plural, p.key, old, new)

    def _delete(self, p: Path, actor: str = "operator", preconditions: dict | None = None) -> dict:
        old = self.store.get(p.key)
        if old is None:
            raise status_error(404, "NotFound", f'{GROUPS[p.plural]} "{p.name}" not found')
        wanted_rv = (preconditions or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != old["metadata"]["resourceVersion"]:
            # The real apiserver's words (test_refused_writes.py reads them from kube-apiserver 1.35).
            message = (f'Operation cannot be fulfilled on {KINDS[p.plural]} "{p.name}": the ResourceVersion in the '
                       f'precondition ({wanted_rv}) does not match the ResourceVersion in record '
                       f'({old["metadata"]["resourceVersion"]}). The object might have been modified')
            self.listener(actor, p.plural, p.key, old, None, False, ("DELETE", p.key, 409, message, None))
            raise status_error(409, "Conflict", message)
        if old["metadata"].get("finalizers") or (p.plural == "pods" and self.graceful is not None and self.graceful(old)):
            if old["metadata"].get("deletionTimestamp"):
                return old
            meta = {**old["metadata"], "deletionTimestamp": self.clock.iso()}
            return self._store(actor, p.plural, p.key, old, {**old, "metadata": meta})
        return self._drop(actor, p.plural, p.key)

    # ---------------------------------------------------------------- the world's own writes
    def put(self, actor: str, key: str, obj: dict) -> dict:
        """Create or replace (a controller's write: no faults, no admission)."""
        p = parse(key)
        old = self.store.get(key)
        if old is None:
            return self._create(p, obj, actor)
        meta = {**obj["metadata"]}
        for immutable in ("uid", "creationTimestamp", "namespace", "name"):
            meta[immutable] = old["metadata"][immutable]
        if obj.get("spec") != old.get("spec") and p.plural != "pods":
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        return self._store(actor, p.plural, key, old, {**obj, "metadata": meta})

    def patch_as(self, actor: str, key: str, patch: dict) -> dict:
        return self._patch(parse(key), patch, actor)

    def remove(self, actor: str, key: str) -> None:
        """Delete as a controller would (finalizers honoured)."""
        if key in self.store:
            self._delete(parse(key), actor)

    # ---------------------------------------------------------------- bookkeeping
    def _store(self, actor: str, plural: str, key: str, old: dict | None, new: dict) -> dict:
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        self.store[key] = new
        self.collections.setdefault(key.rsplit("/", 1)[0], {})[key] = new
        self.by_uid[new["metadata"]["uid"]] = key
        self.listener(actor, plural, key, old, new, True, None)
        return new

    def _drop(self, actor: str, plural: str, key: str) -> dict:
        old = self.store.pop(key)
        del self.collections[key.rsplit("/", 1)[0]][key]
        self.by_uid.pop(old["metadata"]["uid"], None)
        self.rv += 1
        self.listener(actor, plural, key, old, None, True, None)
        return {"kind": "Status", "status": "Success"}

    def orphans(self) -> list[str]:
        """Objects every owner of which is gone: what the garbage collector deletes next."""
        out = []
        for key, obj in self.store.items():
            refs = obj["metadata"].get("ownerReferences")
            if refs and not any(r.get("uid") in self.by_uid for r in refs):
                out.append(key)
        return out

    def collect_garbage(self) -> int:
        gone = self.orphans()
        for key in gone:
            self.remove("garbage-collector", key)
        return len(gone)
