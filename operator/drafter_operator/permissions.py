"""What the operator may need to do in the Kubernetes API, and a check at start that it may.

This is the one home of the operator's permissions: the Helm chart's RBAC rules are generated from it
(`drafter-operator rbac`, copied to charts/drafter-operator/files/rbac-rules.yaml; a unit test fails when
the copy differs), and `drafter-operator run` asks the apiserver (SelfSubjectAccessReview, which every
authenticated identity may create) whether it holds each of them in every namespace it is to watch,
before kopf starts. Without the check, an operator pointed at a namespace its Role does not cover would
start, log a 403 for a watch it retries forever, and never say what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from drafter_operator.constants import API_GROUP, BENCHMARK_PLURAL, SERVING_PLURAL, TRAINING_PLURAL


@dataclass(frozen=True)
class Rule:
    """One RBAC rule and why the operator needs it."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str

    def manifest(self) -> dict:
        return {"apiGroups": [self.group], "resources": list(self.resources), "verbs": list(self.verbs)}


_CUSTOM = (SERVING_PLURAL, BENCHMARK_PLURAL, TRAINING_PLURAL)

#: Everything the operator does in a namespace it watches (the ClusterRole, or a Role per namespace).
NAMESPACED_RULES: tuple[Rule, ...] = (
    Rule(API_GROUP, (SERVING_PLURAL,), ("get", "list", "watch", "patch"),
         "kopf lists and watches them; it removes, with a patch, the finalizer older operator versions left "
         "(this one adds none); a DrafterTraining's Promote patches the serving's drafter."),
    Rule(API_GROUP, (TRAINING_PLURAL,), ("get", "list", "watch", "create", "patch", "delete"),
         "kopf lists and watches them (and removes older versions' finalizers with a patch); a serving's "
         "spec.retraining creates its trainings and deletes the finished ones beyond its historyLimit."),
    Rule(API_GROUP, (BENCHMARK_PLURAL,), ("get", "list", "watch", "create", "patch", "delete"),
         "A serving creates its gate benchmarks and a training its Evaluate benchmark; older ones are deleted."),
    Rule(API_GROUP, tuple(f"{kind}/status" for kind in _CUSTOM), ("patch",),
         "Status is written through the status subresource only."),
    Rule(API_GROUP, tuple(f"{kind}/finalizers" for kind in _CUSTOM), ("update",),
         "Children carry ownerReferences with blockOwnerDeletion; where the OwnerReferencesPermissionEnforcement "
         "admission plugin runs, that needs update on the owner's finalizers."),
    Rule("apps", ("deployments",), ("get", "list", "watch", "create", "patch", "delete"),
         "One Deployment per serving revision (and Generate's engine): watched, created, scaled, patched, deleted; "
         "read by name when its create finds the name taken (whose is it?)."),
    Rule("leaderworkerset.x-k8s.io", ("leaderworkersets",), ("get", "list", "watch", "create", "patch", "delete"),
         "A serving revision whose replica spans several nodes is a LeaderWorkerSet, handled as a Deployment is."),
    Rule("", ("services",), ("get", "list", "watch", "create", "patch", "delete"),
         "The serving's Service (its selector points at the active revision) and Generate's engine Service."),
    Rule("", ("pods",), ("list", "watch", "delete"),
         "Engine, benchmark and stage pods are watched for readiness, IPs and preflight verdicts; finished "
         "stage pods are deleted with the hidden-states claim."),
    Rule("", ("pods/log",), ("get",),
         "The bench pod's full result and the running training stage's progress lines are in their logs."),
    Rule("batch", ("jobs",), ("get", "list", "watch", "create", "delete"),
         "Benchmark and training stage Jobs; a benchmark reads its Job by name when the label selector does not "
         "find it (someone else's Job of that name)."),
    Rule("kueue.x-k8s.io", ("workloads",), ("list",),
         "A queued training stage's (spec.queueName) Workload says why Kueue has not admitted it yet."),
    Rule("", ("configmaps",), ("list", "create"),
         "A benchmark's result ConfigMap and a training generation's spec ConfigMap."),
    Rule("", ("persistentvolumeclaims",), ("get", "create", "delete"),
         "The hidden-states claim a DrafterTraining makes, deleted once the drafter is exported."),
    Rule("", ("events",), ("create",), "The operator's and kopf's Events on the custom resources."),
)

#: Cluster-wide mode only.
CLUSTER_RULES: tuple[Rule, ...] = (
    Rule("apiextensions.k8s.io", ("customresourcedefinitions",), ("list", "watch"),
         "kopf notices CRDs installed or upgraded after it started."),
    Rule("", ("nodes",), ("get",),
         "A serving's known-bad rows keyed by GPU product read the nvidia.com/gpu.product label of the nodes its "
         "pods run on (only then; namespaced mode does without, checking spec.placement.gpuProduct only)."),
)


#: Leader election (`run --leader-election`, the default): the Lease in the lease namespace only (the chart's
#: release namespace, a Role there in both modes).
LEASE_RULES: tuple[Rule, ...] = (
    Rule("coordination.k8s.io", ("leases",), ("get", "create", "update"),
         "Leader election: one Lease per operator scope, read by every candidate, created by the first, "
         "renewed and taken over by PUT with its resourceVersion, so two operators never both act."),
)


def rules_document() -> str:
    """The rules as the chart reads them (files/rbac-rules.yaml), each with its reason above it."""
    def section(name: str, rules: tuple[Rule, ...]) -> str:
        lines = [f"{name}:"]
        for rule in rules:
            lines.append(f"  # {rule.why}")
            item = yaml.safe_dump([rule.manifest()], default_flow_style=None, sort_keys=False, width=200)
            lines += [f"  {line}" for line in item.splitlines()]
        return "\n".join(lines)

    header = ("# Generated by `drafter-operator rbac` from drafter_operator/permissions.py; do not edit.\n"
              "# namespaced: the ClusterRole, or each Role in namespaced mode. clusterWide: the ClusterRole only.\n"
              "# leaderElection: a Role in the release namespace, where the operator's Lease is.\n")
    return header + "\n".join(section(name, rules) for name, rules in (
        ("namespaced", NAMESPACED_RULES), ("clusterWide", CLUSTER_RULES), ("leaderElection", LEASE_RULES))) + "\n"


@dataclass(frozen=True)
class Access:
    """One question for the apiserver: may I `verb` `group`/`resource` in `namespace` ('' = all namespaces)?"""

    namespace: str
    group: str
    resource: str
    verb: str

    def review(self) -> dict:
        resource, _, subresource = self.resource.partition("/")
        attributes = {"group": self.group, "resource": resource, "verb": self.verb}
        if subresource:
            attributes["subresource"] = subresource
        if self.namespace:
            attributes["namespace"] = self.namespace
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes}}

    def __str__(self) -> str:
        where = f"in namespace {self.namespace}" if self.namespace else "in all namespaces"
        kind = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {kind} {where}"


def is_pattern(namespace: str) -> bool:
    """kopf also takes globs and negations (`team-*`, `!kube-system`): which namespaces they match is only
    known once kopf lists them, so the start-up check asks about literal names only."""
    return any(c in namespace for c in "*?[!")


def _accesses(namespace: str, rules: tuple[Rule, ...]) -> list[Access]:
    return [Access(namespace, rule.group, resource, verb)
            for rule in rules for resource in rule.resources for verb in rule.verbs]


def required_access(namespaces: list[str], lease_namespace: str | None = None) -> list[Access]:
    """Every (namespace, resource, verb) the operator needs: in each literally named watched namespace,
    or cluster-wide when no namespace is given; and the Lease's in `lease_namespace` (None: no leader
    election)."""
    scopes = [n for n in namespaces if not is_pattern(n)] if namespaces else [""]
    needed = [access for namespace in scopes for access in _accesses(namespace, NAMESPACED_RULES)]
    if not namespaces:
        needed += _accesses("", CLUSTER_RULES)
    if lease_namespace is not None:
        needed += _accesses(lease_namespace, LEASE_RULES)
    return needed


def missing_access(kube, namespaces: list[str], lease_namespace: str | None = None) -> list[Access]:
    """The accesses the apiserver denies this identity (one SelfSubjectAccessReview each)."""
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    return [access for access in required_access(namespaces, lease_namespace)
            if not (kube.request("POST", path, access.review()) or {}).get("status", {}).get("allowed")]


def _is_lease(access: Access) -> bool:
    return any(access.group == rule.group and access.resource in rule.resources for rule in LEASE_RULES)


def explain_missing(missing: list[Access], namespaces: list[str]) -> str:
    """The error `drafter-operator run` exits with: what is denied and how to grant it."""
    for_lease = [access for access in missing if _is_lease(access)]
    for_work = [access for access in missing if not _is_lease(access)]
    scope = (f"the namespaces it was given (--namespace {' --namespace '.join(namespaces)})" if namespaces
             else "all namespaces (no --namespace given: cluster-wide mode)")
    lines = [f"drafter-operator may not do what it needs in {scope}; denied:" if for_work
             else "drafter-operator may not hold its leader-election Lease; denied:"]
    lines += [f"  - {access}" for access in missing[:20]]
    if len(missing) > 20:
        lines.append(f"  - ... and {len(missing) - 20} more")
    denied_namespaces = sorted({access.namespace for access in for_work})
    if for_work and namespaces:
        lines.append(f"Fix: grant its ServiceAccount the chart's Role in {', '.join(n for n in denied_namespaces if n)} "
                     "(with the Helm chart: add the namespace to operator.watchNamespaces), or run it without "
                     "--namespace for those it may not act in.")
    elif for_work:
        lines.append("Fix: bind its ServiceAccount to the chart's ClusterRole, or run it in namespaced mode "
                     "(--namespace, the chart's operator.watchNamespaces) in the namespaces it is granted.")
    if for_lease:
        lease_namespaces = ", ".join(sorted({access.namespace for access in for_lease}))
        lines.append(f"Fix (leader election): grant get, create and update on leases.coordination.k8s.io in "
                     f"{lease_namespaces} (the chart's leader-election Role in its release namespace), or pass "
                     "--lease-namespace a namespace where it may, or run with --no-leader-election (then nothing "
                     "stops a second operator for the same namespaces from acting too).")
    lines.append("The rules and why each is needed: drafter-operator rbac")
    return "\n".join(lines)
