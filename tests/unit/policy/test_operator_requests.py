"""tests/operator_requests.py reads what a package's code asks the apiserver for: here on a small package written
for it, one pattern of the operator's code at a time, each with the need it must find (or the line it must
refuse to guess about)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.operator_requests import Need, Scan

HELPERS = '''
GROUP_VERSION, PLURAL = "example.dev/v1", "widgets"


def object_path(api_version, plural, namespace=None, name=None, subresource=None):
    return "/".join(str(part) for part in (api_version, plural, namespace, name, subresource) if part)


class Write:
    def __init__(self, verb, plural, path, body):
        self.verb, self.plural, self.path, self.body = verb, plural, path, body
'''


def scan_of(tmp_path: Path, monkeypatch, source: str, package: str) -> Scan:
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "helpers.py").write_text(HELPERS)
    (root / "code.py").write_text(f"from {package}.helpers import GROUP_VERSION, PLURAL, Write, object_path\n\n"
                                  + textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    scan = Scan(root)
    monkeypatch.delitem(sys.modules, f"{package}.code")
    return scan


@pytest.mark.parametrize("source, needs", [
    ("""
     def observe(kube, ns):
         return kube.get(object_path("batch/v1", "jobs", ns, "run")), kube.list(object_path(GROUP_VERSION, PLURAL, ns))
     """, {Need("batch", "jobs", "get"), Need("example.dev", "widgets", "list")}),
    ("""
     def status(kube, ns):
         kube.patch(object_path(GROUP_VERSION, PLURAL, ns, "w", "status"), {})
         kube.read_text(object_path("v1", "pods", ns, "p", "log"))
     """, {Need("example.dev", "widgets/status", "patch"), Need("", "pods/log", "get")}),
    ("""
     class Elector:
         def _path(self, name=None):
             return object_path("coordination.k8s.io/v1", "leases", "ns", name)

         def run(self):
             self.kube.request("GET", self._path("l"))
             self.kube.request("PUT", self._path("l"), {})
             self.kube.request("POST", self._path(), {})
     """, {Need("coordination.k8s.io", "leases", verb) for verb in ("get", "update", "create")}),
    # a plan's fields, filled by a decision and sent by an apply
    ("""
     def stale(ns, kind):
         plural = "deployments" if kind == "Deployment" else "services"
         return [object_path("apps/v1" if plural == "deployments" else "v1", plural, ns, "old")]

     def decide(plan, ns):
         plan.deletes = stale(ns, "Deployment")
         plan.creates.append((object_path("v1", "configmaps", ns), {}))
         patches = [(object_path(GROUP_VERSION, PLURAL, ns, "w"), {})]
         plan.patches += patches

     def apply(kube, plan):
         for path in plan.deletes:
             kube.delete(path)
         for path, body in plan.creates:
             kube.create(path, body)
         for path, body in plan.patches:
             kube.patch(path, body)
     """, {Need("apps", "deployments", "delete"), Need("", "services", "delete"), Need("", "configmaps", "create"),
           Need("example.dev", "widgets", "patch")}),
    # Writes sent with their own verb, and their objects read back by name
    ("""
     def writes(ns):
         path = object_path("apps/v1", "deployments", ns)
         return [Write("create", "deployments", path, {}), Write("patch", "services", object_path("v1", "services", ns, "s"), {})]

     class Writer:
         def write(self, write):
             send = self.kube.create if write.verb == "create" else self.kube.patch
             send(write.path, write.body)
             self.kube.get(f"{write.path}/name")
     """, {Need("apps", "deployments", "create"), Need("", "services", "patch"),
           Need("apps", "deployments", "get"), Need("", "services", "get")}),
    # a local list of paths, grown by append and read in a comprehension
    ("""
     class Observer:
         def named(self, ns, across):
             paths = [object_path("v1", "configmaps", ns, "spec")]
             if across:
                 paths.append(object_path("v1", "services", ns, "rendezvous"))
             return [(path, self.kube.get(path)) for path in paths if "/configmaps/" in path or across]
     """, {Need("", "configmaps", "get"), Need("", "services", "get")}),
], ids=["direct", "subresources", "helper", "plan-fields", "writes", "local-list"])
def test_each_pattern_yields_its_needs(tmp_path, monkeypatch, source, needs):
    scan = scan_of(tmp_path, monkeypatch, source, f"pattern_{abs(hash(source))}")
    assert scan.unreadable == []
    assert set(scan.needs) == needs


@pytest.mark.parametrize("source, says", [
    ("""
     def observe(kube, where):
         return kube.get(where())
     """, "cannot tell what kube.get(where()) asks for"),
    ("""
     def decide(ns):
         keep = object_path("v1", "secrets", ns, "s")
         return len(keep)
     """, "is neither sent on the spot nor put in a plan's deletes, creates or patches"),
    ("""
     def apply(kube, plan):
         for path in plan.deletes:
             kube.patch(path, {})
     """, "sends a plan's deletes with patch"),
], ids=["unknown-path", "path-going-nowhere", "wrong-verb-for-the-field"])
def test_what_cannot_be_read_is_reported_with_its_line(tmp_path, monkeypatch, source, says):
    scan = scan_of(tmp_path, monkeypatch, source, f"unreadable_{abs(hash(source))}")
    assert len(scan.unreadable) == 1 and says in scan.unreadable[0]
    assert scan.unreadable[0].startswith(f"unreadable_{abs(hash(source))}/code.py:")
