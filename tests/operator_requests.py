"""Every (API group, resource, verb) the operator's own code asks the apiserver for, read from its source.

The chart's RBAC (generated from drafter_operator/permissions.py) must grant each, and a table written by hand
drifts from the code: `get` on jobs (a benchmark's observe reading a same-named Job) and `get` on deployments
(a serving reading who holds a name its create found taken) were both missing while a guard that knew the
resources but not the verbs passed. So the needs are derived, with the verb each call really sends:

- a call on the Kube client (`kube.get/list/create/patch/delete/read_text/request`) whose path is built right
  there, or from a local name, a loop over a tuple of paths or a small helper that returns `object_path(...)`;
- a path a decision builds for its plan to apply later: the plans' own conventions say the verb (an entry of
  `deletes`, `creates` or `patches`, a `Write("create" | "patch", ...)`), followed through local names,
  comprehensions, keyword arguments and one function's return to its callers;
- the applies that send those plan paths (`for path in plan.deletes: kube.delete(path)`, a Write's own verb,
  a GET of a Write's object): each must send the verb its plan field promises.

The group and resource of a path are evaluated from the source: constants from the module, a local set from a
conditional, a parameter from what its callers pass. Whatever cannot be read this way is reported, naming the
file and line, rather than silently skipped: that is the point.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import drafter_operator

PACKAGE = Path(drafter_operator.__file__).parent
KUBE_VERBS = {"get": "get", "list": "list", "create": "create", "patch": "patch", "delete": "delete",
              "read_text": "get", "request": None}  # request: the HTTP method says
HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}  # GET: get or list
#: A plan's fields of paths and the verb its apply sends each with.
PLAN_FIELDS = {"deletes": "delete", "creates": "create", "patches": "patch"}


@dataclass(frozen=True, order=True)
class Need:
    group: str
    resource: str  # with its subresource: pods/log, drafterservings/status
    verb: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}{'.' + self.group if self.group else ''}"


def need_of_request(method: str, path: str, query: dict | None = None) -> Need:
    """The RBAC attributes of one request as the apiserver authorizes it."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    if method == "GET":
        verb = "watch" if (query or {}).get("watch") in ("true", "1", True) else ("get" if name else "list")
    else:
        verb = HTTP_VERBS[method] if name or method != "DELETE" else "deletecollection"
    return Need(group, f"{resource}/{sub}" if sub else resource, verb)


def group_of(api_version: str) -> str:
    return "" if api_version == "v1" else api_version.split("/")[0]


class Unreadable(Exception):
    """The source does not say (statically) what this is."""


@dataclass(frozen=True)
class Site:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class PathMeaning:
    """What a path expression is: a concrete object or collection path, or one taken from a plan's field or a
    Write (whose verbs and resources the decisions' side of the scan supplies)."""

    group: str = ""
    resource: str = ""
    named: bool = False
    plan_field: str | None = None  # "deletes" | "creates" | "patches"
    from_write: bool = False


@dataclass
class Module:
    name: str
    file: str
    tree: ast.Module
    globals: dict
    parents: dict = field(default_factory=dict)

    def site(self, node: ast.AST) -> Site:
        return Site(self.file, node.lineno)

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or the module) a node is in."""
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return node
        return self.tree

    def statement(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parents[node]
        return node


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_kube(node: ast.AST) -> bool:
    return _last_name(node) == "kube"


def _called(node: ast.Call) -> str | None:
    return _last_name(node.func)


def _walk_in(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function, not of the functions defined inside it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


class Scan:
    """The needs of every module of a package (the runtime package unless told), and what could not be read."""

    def __init__(self, package: Path = PACKAGE) -> None:
        self.modules = list(self._modules(package))
        self.needs: dict[Need, set[Site]] = {}
        self.unreadable: list[str] = []
        self.write_paths: set[tuple[str, str, str]] = set()  # (verb, group, resource) of each Write built
        self.kube_sites: list[tuple[Module, ast.Attribute]] = []
        self.functions: dict[str, list[tuple[Module, ast.FunctionDef]]] = {}
        for module in self.modules:
            for node in ast.walk(module.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions.setdefault(node.name, []).append((module, node))
        for module in self.modules:
            self._scan_constructions(module)
        for module in self.modules:
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Attribute) and node.attr in KUBE_VERBS and _is_kube(node.value):
                    self._scan_kube_call(module, node)

    @staticmethod
    def _modules(package: Path) -> Iterator[Module]:
        for path in sorted(package.rglob("*.py")):
            if path.name == "kube.py":
                continue  # the client itself: its verbs are what the others call
            source = path.read_text()
            if "object_path" not in source and "kube" not in source:
                continue
            tree = ast.parse(source)
            relative = path.relative_to(package)
            name = f"{package.name}." + ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
            module = Module(name, f"{package.name}/{relative}", tree, vars(importlib.import_module(name)))
            module.parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
            yield module

    def _add(self, need: Need, site: Site) -> None:
        self.needs.setdefault(need, set()).add(site)

    # ------------------------------------------------------------------ values
    def values(self, module: Module, expr: ast.AST, scope: ast.AST, depth: int = 0) -> set:
        """Every value `expr` may have, read from the source."""
        if depth > 4:
            raise Unreadable("too deep")
        if isinstance(expr, ast.Constant):
            return {expr.value}
        if isinstance(expr, ast.IfExp):
            return self.values(module, expr.body, scope, depth + 1) | self.values(module, expr.orelse, scope, depth + 1)
        if isinstance(expr, ast.Name):
            return self.name_values(module, expr.id, scope, depth + 1)
        try:
            return {eval(compile(ast.Expression(expr), module.file, "eval"), dict(module.globals))}
        except Exception as exc:
            raise Unreadable(ast.unparse(expr)) from exc

    def name_values(self, module: Module, name: str, scope: ast.AST, depth: int) -> set:
        if not isinstance(scope, ast.Module):
            assigned = [n.value for n in _walk_in(scope) if isinstance(n, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
            if assigned:
                return set().union(*(self.values(module, value, scope, depth) for value in assigned))
            parameters = [a.arg for a in scope.args.posonlyargs + scope.args.args + scope.args.kwonlyargs]
            if name in parameters:
                return self.parameter_values(module, scope, name, depth)
        if name in module.globals:
            return {module.globals[name]}
        raise Unreadable(name)

    def parameter_values(self, module: Module, function: ast.FunctionDef, name: str, depth: int) -> set:
        """What the callers of `function` pass for its parameter `name` (its default where one passes none)."""
        positional = [a.arg for a in function.args.posonlyargs + function.args.args]
        index = positional.index(name) if name in positional else None
        if index is not None and positional and positional[0] in ("self", "cls"):
            index -= 1
        defaults = dict(zip(positional[len(positional) - len(function.args.defaults):], function.args.defaults))
        found: set = set()
        calls = list(self.calls_of(function.name))
        if not calls:
            raise Unreadable(f"{function.name}({name}): never called")
        for caller, call in calls:
            keyword = next((k.value for k in call.keywords if k.arg == name), None)
            if keyword is not None:
                found |= self.values(caller, keyword, caller.scope(call), depth + 1)
            elif index is not None and index < len(call.args):
                found |= self.values(caller, call.args[index], caller.scope(call), depth + 1)
            elif name in defaults:
                found |= self.values(module, defaults[name], function, depth + 1)
            else:
                raise Unreadable(f"{function.name}({name})")
        return found

    def calls_of(self, function_name: str) -> Iterator[tuple[Module, ast.Call]]:
        for module in self.modules:
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call) and _called(node) == function_name:
                    yield module, node

    def object_paths(self, module: Module, call: ast.Call) -> set[PathMeaning]:
        """The (group, resource) pairs an `object_path(api_version, plural, namespace, name, subresource)` call
        may build: its arguments evaluated together, each free name over the values it may have."""
        args = {i: a for i, a in enumerate(call.args)}
        args.update({{"api_version": 0, "plural": 1, "namespace": 2, "name": 3, "subresource": 4}[k.arg]: k.value
                     for k in call.keywords})
        wanted = [args[0], args[1]] + ([args[4]] if 4 in args else [])
        scope = module.scope(call)
        free = sorted({n.id for expr in wanted for n in ast.walk(expr) if isinstance(n, ast.Name)}
                      - set(dir(builtins)))
        choices = [sorted(self.name_values(module, name, scope, 1), key=repr) for name in free]
        meanings = set()
        for binding in itertools.product(*choices):
            env = {**module.globals, **dict(zip(free, binding))}
            api_version, plural, *sub = (eval(compile(ast.Expression(e), module.file, "eval"), env) for e in wanted)
            if not isinstance(api_version, str) or not isinstance(plural, str):
                raise Unreadable(ast.unparse(call))
            resource = f"{plural}/{sub[0]}" if sub and sub[0] else plural
            named = 3 in args and not (isinstance(args[3], ast.Constant) and args[3].value is None)
            meanings.add(PathMeaning(group_of(api_version), resource, named))
        return meanings

    # ------------------------------------------------------------------ the decisions' paths
    def _scan_constructions(self, module: Module) -> None:
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Call) and _called(node) == "object_path"):
                continue
            try:
                meanings = self.object_paths(module, node)
                verbs = self.verbs_of_use(module, node, 0)
            except Unreadable as exc:
                self.unreadable.append(f"{module.site(node)}: cannot read the path {ast.unparse(node)} ({exc})")
                continue
            if not verbs:
                self.unreadable.append(f"{module.site(node)}: {ast.unparse(node)} is neither sent on the spot nor "
                                       "put in a plan's deletes, creates or patches, nor a Write's path")
            for use in verbs - {"sent"}:
                verb = use.removeprefix("write:")
                for meaning in meanings:
                    if use.startswith("write:"):
                        self.write_paths.add((verb, meaning.group, meaning.resource))
                    self._add(Need(meaning.group, meaning.resource, verb), module.site(node))

    def verbs_of_use(self, module: Module, node: ast.AST, depth: int) -> set[str]:
        """How a path value is used: the verbs it will be sent with ("sent": a Kube call on the spot, read by
        the call's own scan; "write:<verb>": a Write's path)."""
        if depth > 6:
            return set()  # no verb this way (the other uses of the value may still say one)
        child, parent = node, module.parents.get(node)
        while parent is not None:
            if isinstance(parent, (ast.Compare, ast.FormattedValue)):
                return set()  # compared or written in a message: not sent from here
            if isinstance(parent, ast.Call):
                called = _called(parent)
                if isinstance(parent.func, ast.Attribute) and parent.func.attr in KUBE_VERBS and _is_kube(parent.func.value):
                    return {"sent"}
                if called == "Write" and child is not parent.func:
                    verb = parent.args[0]
                    if not isinstance(verb, ast.Constant):
                        raise Unreadable(ast.unparse(parent))
                    return {f"write:{verb.value}"}
                if called in ("append", "extend") and _last_name(parent.func.value) in PLAN_FIELDS:
                    return {PLAN_FIELDS[_last_name(parent.func.value)]}
                if called in ("append", "extend") and isinstance(parent.func.value, ast.Name):
                    return self.uses(module, module.scope(parent), parent.func.value, depth)  # a local list of paths
            if isinstance(parent, ast.keyword) and parent.arg in PLAN_FIELDS:
                return {PLAN_FIELDS[parent.arg]}
            if isinstance(parent, ast.comprehension) and child is parent.iter:
                target = parent.target
                comprehension = module.parents[parent]
                return self.uses(module, comprehension, target, depth)
            if isinstance(parent, ast.For) and child is parent.iter:
                return self.uses(module, parent, parent.target, depth)
            if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                fields = {PLAN_FIELDS[_last_name(t)] for t in targets if _last_name(t) in PLAN_FIELDS}
                if fields:
                    return fields
                names = [t for t in targets if isinstance(t, ast.Name)]
                if names:
                    return self.uses(module, module.scope(parent), names[0], depth)
                return set()
            if isinstance(parent, ast.Return):
                function = module.scope(parent)
                return set().union(*(self.verbs_of_use(caller, call, depth + 1)
                                     for caller, call in self.calls_of(function.name))) if hasattr(function, "name") else set()
            if isinstance(parent, ast.stmt):
                return set()
            child, parent = parent, module.parents.get(parent)
        return set()

    def uses(self, module: Module, scope: ast.AST, target: ast.AST, depth: int) -> set[str]:
        """The verbs of every use of the name(s) `target` binds, within `scope`."""
        names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if isinstance(target, ast.Tuple):  # `for path, body in ...`: the path is the first
            names = {target.elts[0].id} if isinstance(target.elts[0], ast.Name) else set()
        found: set[str] = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
                found |= self.verbs_of_use(module, node, depth + 1)
        return found

    # ------------------------------------------------------------------ the Kube calls
    def _scan_kube_call(self, module: Module, attribute: ast.Attribute) -> None:
        site = module.site(attribute)
        parent = module.parents[attribute]
        if isinstance(parent, ast.Call) and parent.func is attribute:
            calls = [parent]
        else:  # `send = self.kube.create if ... else self.kube.patch`: the calls of that name
            statement = module.statement(attribute)
            alias = statement.targets[0].id if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name) else None
            calls = [n for n in _walk_in(module.scope(attribute)) if isinstance(n, ast.Call)
                     and isinstance(n.func, ast.Name) and n.func.id == alias]
            if not calls:
                self.unreadable.append(f"{site}: {ast.unparse(attribute)} is used but never called as a known name")
        for call in calls:
            self.kube_sites.append((module, attribute))
            method = attribute.attr
            path_argument = call.args[1] if method == "request" else (call.args[0] if call.args else None)
            http = call.args[0].value if method == "request" and isinstance(call.args[0], ast.Constant) else None
            try:
                if path_argument is None or (method == "request" and http is None):
                    raise Unreadable("no path or method")
                meanings = self.path_meanings(module, path_argument, module.scope(call), 0)
            except Unreadable as exc:
                self.unreadable.append(f"{site}: cannot tell what {ast.unparse(call)} asks for ({exc})")
                continue
            for meaning in meanings:
                if meaning.plan_field:
                    if KUBE_VERBS[method] != PLAN_FIELDS[meaning.plan_field]:
                        self.unreadable.append(f"{site}: sends a plan's {meaning.plan_field} with {method}")
                elif meaning.from_write:
                    writes = [(v, g, r) for v, g, r in self.write_paths]
                    if not writes:
                        self.unreadable.append(f"{site}: a Write's path, but no Write is built anywhere")
                    for verb, group, resource in writes:
                        self._add(Need(group, resource, verb if method in ("create", "patch") else KUBE_VERBS[method]), site)
                else:
                    verb = KUBE_VERBS[method] or (("get" if meaning.named else "list") if http == "GET" else HTTP_VERBS[http])
                    self._add(Need(meaning.group, meaning.resource, verb), site)

    def path_meanings(self, module: Module, expr: ast.AST, scope: ast.AST, depth: int) -> set[PathMeaning]:
        if depth > 4:
            raise Unreadable("too deep")
        if isinstance(expr, ast.Call) and _called(expr) == "object_path":
            return self.object_paths(module, expr)
        if isinstance(expr, ast.IfExp):  # `group_path(...) if ... else deployment_path(...)`: either
            return self.path_meanings(module, expr.body, scope, depth + 1) | \
                self.path_meanings(module, expr.orelse, scope, depth + 1)
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            need = need_of_request("POST", expr.value)  # the resource; the verb is the call's
            return {PathMeaning(need.group, need.resource, named=False)}
        if isinstance(expr, ast.Attribute) and expr.attr == "path" or (
                isinstance(expr, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) and _last_name(v.value) == "path"
                                                        for v in expr.values)):
            return {PathMeaning(from_write=True)}
        if isinstance(expr, ast.Call) and _called(expr) in self.functions:
            meanings: set[PathMeaning] = set()
            for helper_module, helper in self.functions[_called(expr)]:
                for node in _walk_in(helper):
                    if isinstance(node, ast.Return) and node.value is not None:
                        meanings |= self.path_meanings(helper_module, node.value, helper, depth + 1)
            if meanings:
                return meanings
        if isinstance(expr, ast.Name):
            return self.bound_path(module, expr, scope, depth)
        raise Unreadable(ast.unparse(expr))

    def bound_path(self, module: Module, use: ast.Name, scope: ast.AST, depth: int) -> set[PathMeaning]:
        """What a name holding a path was bound to: the loop around its use that binds it (over paths, or over a
        plan's field), else its assignments in the function."""
        name, node = use.id, use
        while node in module.parents and node is not scope:
            node = module.parents[node]
            loops = [(node.target, node.iter)] if isinstance(node, ast.For) else (
                [(g.target, g.iter) for g in node.generators] if isinstance(node, (ast.GeneratorExp, ast.ListComp,
                                                                                 ast.SetComp, ast.DictComp)) else [])
            for target, iterable in loops:
                first = target.elts[0] if isinstance(target, ast.Tuple) else target
                if isinstance(first, ast.Name) and first.id == name:
                    return self.iterated_paths(module, iterable, scope, depth)
        meanings: set[PathMeaning] = set()
        for node in _walk_in(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                meanings |= self.path_meanings(module, node.value, scope, depth + 1)
        if not meanings:
            raise Unreadable(name)
        return meanings

    def iterated_paths(self, module: Module, iterable: ast.AST, scope: ast.AST, depth: int) -> set[PathMeaning]:
        if _last_name(iterable) in PLAN_FIELDS:
            return {PathMeaning(plan_field=_last_name(iterable))}
        if isinstance(iterable, (ast.Tuple, ast.List)):
            return set().union(*(self.path_meanings(module, e, scope, depth + 1) for e in iterable.elts))
        if isinstance(iterable, ast.Name):  # a local list: what it is made of and what is appended to it
            elements: list[ast.AST] = []
            for node in _walk_in(scope):
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == iterable.id
                                                        for t in node.targets):
                    if not isinstance(node.value, (ast.List, ast.Tuple)):
                        raise Unreadable(f"paths from {ast.unparse(node.value)}")
                    elements += node.value.elts
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                      and isinstance(node.func.value, ast.Name) and node.func.value.id == iterable.id):
                    elements += node.args
            if elements:
                return set().union(*(self.path_meanings(module, e, scope, depth + 1) for e in elements))
        raise Unreadable(f"paths from {ast.unparse(iterable)}")
