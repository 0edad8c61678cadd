"""The Helm chart without a cluster: `helm lint`, `helm template` with default and other values, and
assertions on what it renders (the operator pod's hardening, its probes, RBAC exactly as docs/chart.md
lists it, the CRDs equal to crds/, monitoring objects), and the schema refusing bad values by name.

helm is the pinned one `drafter-operator cluster build` makes (testbed.versions.bin_dir()).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from drafter_operator import __version__
from drafter_operator.resources.engine import PORT_NAME
from drafter_operator.resources.labels import SERVING_LABEL
from drafter_testbed.versions import bin_dir
from tests.support.chart import CHART, KUBE_VERSION, ROOT, documents, helm, one, operator_container, render

DOCS = ROOT / "docs" / "chart.md"
APP_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
              "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of")


def kinds(objects: list[dict]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def normalized_rules(rules: list[dict]) -> set[tuple[str, str, tuple[str, ...]]]:
    """(group, resource, sorted verbs) per resource: rules compare whatever way they are grouped."""
    return {(group, resource, tuple(sorted(rule["verbs"])))
            for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}


def documented_rules(section: str) -> set[tuple[str, str, tuple[str, ...]]]:
    """The RBAC table under `### <section>` in docs/chart.md: | `group` | `res`, `res` | verbs | why |."""
    text = DOCS.read_text()
    body = text.split(f"### {section}\n", 1)[1].split("\n#", 1)[0]
    rules = set()
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        group = cells[0].strip("`")
        group = "" if group == '""' else group
        verbs = tuple(sorted(v.strip() for v in cells[2].split(",")))
        for resource in re.findall(r"`([^`]+)`", cells[1]):
            rules.add((group, resource, verbs))
    assert rules, f"no RBAC table under '### {section}' in {DOCS}"
    return rules


# --------------------------------------------------------------------------------------------------
# lint and the default install


@pytest.mark.parametrize("sets", [(), ("operator.watchNamespaces={team-a,team-b}", "monitoring.serviceMonitor.enabled=true",
                                       "monitoring.podMonitor.enabled=true")])
def test_helm_lint_passes_strict(sets):
    args = ["lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION]
    for item in sets:
        args += ["--set", item]
    proc = helm(*args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_default_render_has_the_operator_its_rbac_crds_and_metrics_service_only():
    objects = render()
    assert kinds(objects) == sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                                     "Service", "Deployment"] + ["CustomResourceDefinition"] * 3)
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        missing = [k for k in APP_LABELS if k not in labels]
        assert not missing, f"{obj['kind']} {obj['metadata']['name']} lacks {missing}"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_operator_deployment_is_one_hardened_replica_with_recreate():
    deployment = one(render(), "Deployment")
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert one(render("operator.leaderElection.enabled=false"), "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # The one writable place: /tmp on an emptyDir.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert next(v for v in pod["volumes"] if v["name"] == "tmp")["emptyDir"]
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert pod["serviceAccountName"] == one(render(), "ServiceAccount")["metadata"]["name"]


def test_probes_ask_kopfs_health_endpoint_on_the_port_the_operator_serves_it():
    container = operator_container(render("health.port=9444", "metrics.port=9443"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 9444, "metrics": 9443}
    assert container["command"] == ["drafter-operator"]
    assert container["args"][0] == "run"
    assert "--health-port=9444" in container["args"] and "--metrics-port=9443" in container["args"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe


def test_run_accepts_every_argument_the_chart_passes():
    """The chart's args parse with `drafter-operator run`'s own parser (a renamed flag fails here)."""
    from drafter_operator.cli import build_parser

    container = operator_container(render("operator.watchNamespaces={a,b}", "operator.verbose=true",
                                          "operator.leaderElection.leaseName=drafter.shard-a"))
    args = build_parser().parse_args(container["args"])
    assert args.namespace == ["a", "b"] and args.verbose
    assert (args.metrics_port, args.health_port) == (8080, 8081)
    assert (args.leader_election, args.lease_name, args.lease_namespace) == (True, "drafter.shard-a", None)
    assert (args.lease_duration, args.renew_deadline, args.retry_period) == (15, 10, 2)
    off = build_parser().parse_args(operator_container(render("operator.leaderElection.enabled=false"))["args"])
    assert off.leader_election is False
    slow = operator_container(render("operator.leaderElection.leaseDurationSeconds=45",
                                     "operator.leaderElection.renewDeadlineSeconds=30",
                                     "operator.leaderElection.retryPeriodSeconds=5"))
    args = build_parser().parse_args(slow["args"])
    assert (args.lease_duration, args.renew_deadline, args.retry_period) == (45, 30, 5)


@pytest.mark.parametrize(("values", "says"), [
    (("operator.leaderElection.renewDeadlineSeconds=20",),
     "operator.leaderElection.leaseDurationSeconds (15) must exceed renewDeadlineSeconds (20)"),
    (("operator.leaderElection.retryPeriodSeconds=9",),
     "operator.leaderElection.renewDeadlineSeconds (10) must exceed 1.2 x retryPeriodSeconds (9)"),
])
def test_lease_timings_that_cannot_keep_one_leader_are_refused_at_install(values, says):
    sets = [arg for value in values for arg in ("--set", value)]
    proc = helm("template", "d", str(CHART), "--kube-version", KUBE_VERSION, *sets, check=False)
    assert proc.returncode != 0 and says in proc.stderr, proc.stderr


def test_default_images_are_the_release_images_and_settings_reach_the_environment():
    container = operator_container(render())
    image = f"ghcr.io/drafter-dev/drafter-operator:{__version__}"
    assert container["image"] == image
    env = env_of(container)
    assert env["DRAFTER_OPERATOR_IMAGE"] == image  # benchmark Jobs run the operator's own image
    assert env["DRAFTER_TRAINER_IMAGE"] == f"ghcr.io/drafter-dev/drafter-trainer:{__version__}"
    assert (env["DRAFTER_WORKERS"], env["DRAFTER_DRAIN_SECONDS"], env["DRAFTER_ACCEPTANCE_INTERVAL_SECONDS"]) == ("8", "15", "15")
    assert env["DRAFTER_TRAINING_CPU"] == "0"


def test_custom_images_tags_digests_and_settings():
    digest = "sha256:" + "ab" * 32
    container = operator_container(render("image.repository=registry.example:5000/ops/drafter-operator",
                                          "image.tag=0.2.0-rc1", "operator.trainerImage=registry.example/trainer:7",
                                          "operator.workers=3", "operator.trainingCpu=true"))
    assert container["image"] == "registry.example:5000/ops/drafter-operator:0.2.0-rc1"
    env = env_of(container)
    assert env["DRAFTER_OPERATOR_IMAGE"] == container["image"]
    assert env["DRAFTER_TRAINER_IMAGE"] == "registry.example/trainer:7"
    assert (env["DRAFTER_WORKERS"], env["DRAFTER_TRAINING_CPU"]) == ("3", "1")
    pinned = operator_container(render(f"image.digest={digest}", "image.tag=ignored",
                                       "operator.benchmarkImage=registry.example/bench:1"))
    assert pinned["image"] == f"ghcr.io/drafter-dev/drafter-operator@{digest}"
    assert env_of(pinned)["DRAFTER_OPERATOR_IMAGE"] == "registry.example/bench:1"


def test_tenancy_settings_reach_the_environment_as_json_the_operator_parses():
    from drafter_operator.acceptance.prometheus_source import endpoints_from_env
    from drafter_operator.resources.pod_policy import TenantPolicy
    default = env_of(operator_container(render()))
    assert endpoints_from_env(default) == {}
    assert TenantPolicy.from_env(default) == TenantPolicy()
    env = env_of(operator_container(render(
        "prometheus.endpoints.default=http://prometheus.monitoring:9090",
        "prometheus.endpoints.team-a=https://prom.team-a.svc:9091/sub",
        "tenancy.allowedImagePrefixes={registry.internal/,vllm/vllm-openai:}",
        "tenancy.allowedServiceAccounts.team-a={engines}", "tenancy.allowedServiceAccounts.\\*={inference}")))
    assert endpoints_from_env(env) == {"default": "http://prometheus.monitoring:9090",
                                       "team-a": "https://prom.team-a.svc:9091/sub"}
    policy = TenantPolicy.from_env(env)
    assert policy.image_prefixes == ("registry.internal/", "vllm/vllm-openai:")
    assert policy.allowed_service_accounts("team-a") == ("engines", "inference")
    assert policy.allowed_service_accounts("team-b") == ("inference",)


# --------------------------------------------------------------------------------------------------
# RBAC


def test_cluster_role_is_exactly_the_documented_rules():
    objects = render()
    role = one(objects, "ClusterRole")
    assert normalized_rules(role["rules"]) == documented_rules("Every namespace (ClusterRole)") | \
        documented_rules("Cluster-wide mode only")
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": one(objects, "ServiceAccount")["metadata"]["name"],
                                    "namespace": "drafter-system"}]


def test_no_rule_grants_wildcards_secrets_or_cluster_objects_beyond_crd_discovery_and_a_nodes_label():
    rules = normalized_rules(one(render(), "ClusterRole")["rules"])
    for group, resource, verbs in rules:
        assert "*" not in (group, resource) and "*" not in verbs
        assert resource not in ("secrets", "namespaces", "clusterroles", "roles", "rolebindings")
        # A node is read by name for its GPU product label (the known-bad rows keyed by GPU), never listed or written.
        assert resource != "nodes" or verbs == ("get",)
    assert {(g, r) for g, r, _ in rules if g == "apiextensions.k8s.io"} == {("apiextensions.k8s.io", "customresourcedefinitions")}
    assert all(v in ("list", "watch") for g, _, verbs in rules if g == "apiextensions.k8s.io" for v in verbs)


def test_namespaced_mode_has_a_role_per_namespace_and_nothing_cluster_wide():
    objects = render("operator.watchNamespaces={team-a,team-b}")
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    watched = [o for o in objects if not o["metadata"]["name"].endswith("-leader-election")]
    roles = [o for o in watched if o["kind"] == "Role"]
    bindings = [o for o in watched if o["kind"] == "RoleBinding"]
    assert sorted(o["metadata"]["namespace"] for o in roles) == ["team-a", "team-b"]
    assert sorted(o["metadata"]["namespace"] for o in bindings) == ["team-a", "team-b"]
    for role in roles:
        assert normalized_rules(role["rules"]) == documented_rules("Every namespace (ClusterRole)")
    for binding in bindings:
        assert binding["subjects"][0]["namespace"] == "drafter-system"  # the operator's own namespace
    args = operator_container(objects)["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=team-a", "--namespace=team-b"]


def test_chart_rbac_rules_are_generated_from_the_operators_permissions():
    from drafter_operator import permissions

    assert (CHART / "files" / "rbac-rules.yaml").read_text() == permissions.rules_document(), (
        "charts/drafter-operator/files/rbac-rules.yaml differs from drafter_operator/permissions.py: "
        "run `drafter-operator rbac > charts/drafter-operator/files/rbac-rules.yaml`")
    role = one(render(), "ClusterRole")
    assert normalized_rules(role["rules"]) == normalized_rules(
        [r.manifest() for r in permissions.NAMESPACED_RULES + permissions.CLUSTER_RULES])


@pytest.mark.parametrize("sets", [(), ("operator.watchNamespaces={team-a}",)], ids=["cluster-wide", "namespaced"])
def test_leader_election_has_a_role_for_leases_in_the_release_namespace_only(sets):
    from drafter_operator import permissions

    objects = render(*sets)
    role, binding = one(objects, "Role", "drafter-drafter-operator-leader-election"), \
        one(objects, "RoleBinding", "drafter-drafter-operator-leader-election")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "drafter-system"
    assert normalized_rules(role["rules"]) == documented_rules("Leader election (Role in the release namespace)")
    assert normalized_rules(role["rules"]) == normalized_rules([r.manifest() for r in permissions.LEASE_RULES])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == one(objects, "ServiceAccount")["metadata"]["name"]
    # The operator finds the Lease's namespace (and names itself) through the downward API.
    env = {e["name"]: e for e in operator_container(objects)["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_without_leader_election_there_is_no_lease_role():
    objects = render("operator.leaderElection.enabled=false")
    assert not [o for o in objects if o["metadata"]["name"].endswith("-leader-election")]
    assert "--no-leader-election" in operator_container(objects)["args"]


def test_rbac_create_false_renders_no_rbac():
    objects = render("rbac.create=false")
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]


# --------------------------------------------------------------------------------------------------
# CRDs


def test_chart_crd_sources_are_the_repository_crds():
    repo = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_text() for p in (CHART / "crd-sources").glob("*.yaml")}
    assert repo, "no CRDs in crds/"
    assert chart == repo, ("charts/drafter-operator/crd-sources/ differs from crds/: "
                           "run `cp crds/*.yaml charts/drafter-operator/crd-sources/` after `drafter-operator crds`")


def test_rendered_crds_are_the_files_plus_chart_labels_and_the_keep_policy():
    rendered = {o["metadata"]["name"]: o for o in render() if o["kind"] == "CustomResourceDefinition"}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        source = yaml.safe_load(path.read_text())
        crd = rendered[source["metadata"]["name"]]
        assert crd["spec"] == source["spec"], path.name
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert source["metadata"]["labels"].items() <= crd["metadata"]["labels"].items()
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert len(rendered) == 3


def test_rendered_crds_are_json_so_every_scalar_keeps_its_type():
    """toYaml writes the string "1e-4" unquoted and the apiserver reads a number (a default that then
    fails its own string schema): the CRDs are rendered as JSON, which every YAML parser reads alike."""
    text = helm("template", "d", str(CHART), "--kube-version", KUBE_VERSION, "--show-only", "templates/crds.yaml").stdout
    documents = [d for d in text.split("\n---\n") if "CustomResourceDefinition" in d]
    assert len(documents) == 3
    for document in documents:
        body = "\n".join(line for line in document.splitlines() if not line.startswith(("#", "---")))
        crd = json.loads(body)
        source = yaml.safe_load((ROOT / "crds" / f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml").read_text())
        assert crd["spec"] == source["spec"]


def test_crds_can_be_left_out_or_left_deletable():
    assert not [o for o in render("crds.install=false") if o["kind"] == "CustomResourceDefinition"]
    crds = [o for o in render("crds.keep=false") if o["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 3
    assert all("helm.sh/resource-policy" not in (c["metadata"].get("annotations") or {}) for c in crds)


# --------------------------------------------------------------------------------------------------
# metrics and monitoring


def test_metrics_service_selects_the_operator_pod_on_its_metrics_port():
    objects = render("metrics.service.port=9090", "metrics.port=8088")
    service, deployment = one(objects, "Service"), one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert not [o for o in render("metrics.service.enabled=false") if o["kind"] == "Service"]


def test_monitoring_objects_are_off_by_default_and_carry_label_overrides_when_on():
    assert not [o for o in render() if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    objects = render("monitoring.serviceMonitor.enabled=true", "monitoring.serviceMonitor.labels.release=kps",
                     "monitoring.podMonitor.enabled=true", "monitoring.podMonitor.labels.release=kps-engines",
                     "monitoring.podMonitor.interval=5s")
    monitor, service = one(objects, "ServiceMonitor"), one(objects, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # The operator's own `namespace` label (the serving's) wins over the target's (the operator pod's).
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    pods = one(objects, "PodMonitor")
    assert pods["metadata"]["labels"]["release"] == "kps-engines"
    assert pods["spec"]["selector"] == {"matchExpressions": [{"key": SERVING_LABEL, "operator": "Exists"}]}
    endpoint = pods["spec"]["podMetricsEndpoints"][0]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == (PORT_NAME, "/metrics", "5s")
    assert pods["spec"]["namespaceSelector"] == {"any": True}
    # The labels the `prometheus` acceptance source matches (drafter_dev_serving, drafter_dev_revision).
    assert pods["spec"]["podTargetLabels"] == ["drafter.dev/serving", "drafter.dev/revision"]


def test_pod_monitor_follows_namespaced_mode():
    objects = render("operator.watchNamespaces={team-a}", "monitoring.podMonitor.enabled=true")
    assert one(objects, "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_service_monitor_without_the_metrics_service_fails_with_the_reason():
    proc = helm("template", "d", str(CHART), "--kube-version", KUBE_VERSION, "--set", "monitoring.serviceMonitor.enabled=true",
                "--set", "metrics.service.enabled=false", check=False)
    assert proc.returncode != 0
    assert "monitoring.serviceMonitor.enabled needs metrics.service.enabled" in proc.stderr


def test_helm_test_pod_checks_the_metrics_service_with_a_read_only_role():
    objects = [o for o in render(show_tests=True) if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
    pod, role = one(objects, "Pod"), one(objects, "Role")
    service = one(render(), "Service")
    assert pod["spec"]["restartPolicy"] == "Never"
    env = env_of(pod["spec"]["containers"][0])
    assert env["METRICS_SERVICE"] == service["metadata"]["name"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["services"], "resourceNames": [service["metadata"]["name"]],
                              "verbs": ["get"]}]
    script = one(objects, "ConfigMap")["data"]["check.py"]
    assert script == (CHART / "test-scripts" / "check_operator.py").read_text()
    compile(script, "check.py", "exec")


# --------------------------------------------------------------------------------------------------
# values: documented and validated


def _value_keys(text: str):
    """(dotted path, comment lines just above, value text) for each key line of values.yaml."""
    stack: list[tuple[int, str]] = []
    comments: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped)
            continue
        match = re.match(r"^(\s*)([A-Za-z][\w.-]*):(.*)$", line)
        if not match:
            comments = []
            continue
        indent, key, value = len(match.group(1)), match.group(2), match.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        yield path, key, comments, value
        stack.append((indent, key))
        comments = []


def test_every_value_has_a_helm_docs_comment():
    """Each value's comment is helm-docs' `# -- description` (the chart README's Description column)."""
    text = (CHART / "values.yaml").read_text()
    documented: set[str] = set()
    problems = []
    for path, key, comments, value in _value_keys(text):
        if comments:
            first = comments[0]
            if not first.startswith("# -- "):
                problems.append(f"{path}: comment starts {first[:40]!r}, not '# -- ' (helm-docs' description)")
            # helm-docs reads any comment line with ' -- ' after a word as an old-style `key -- description`.
            problems += [f"{path}: {line!r} has ' --': write the flag in backticks" for line in comments
                         if re.search(r"\S\s+--", line.removeprefix("# -- "))]
            documented.add(path)
        leaf = value not in ("",)  # a scalar, a list or {}: a value someone sets
        parent_documented = any(path.startswith(d + ".") for d in documented)
        if leaf and path not in documented and not parent_documented:
            problems.append(f"{path}: no comment")
    assert not problems, problems


@pytest.mark.parametrize(("value", "field", "says"), [
    ("operator.watchNamespaces={Team_A}", "/operator/watchNamespaces/0", "does not match pattern"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy", "'Always', 'IfNotPresent', 'Never'"),
    ("metrics.port=70000", "/metrics/port", "65,535"),
    ("operator.workerz=3", "/operator", "'workerz' not allowed"),
    ("monitoring.serviceMonitor.interval=30", "/monitoring/serviceMonitor/interval", "want string"),
    ("monitoring.podMonitor.interval=soon", "/monitoring/podMonitor/interval", "does not match pattern"),
    ("image.digest=latest", "/image/digest", "does not match pattern"),
    ("image.repository=ghcr.io/x/y:1.0", "/image/repository", "does not match pattern"),
    ("crds.install=maybe", "/crds/install", "want boolean"),
    ("operator.workers=0", "/operator/workers", "minimum"),
    ("operator.leaderElection.leaseName=My_Lease", "/operator/leaderElection/leaseName", "does not match pattern"),
    ("operator.leaderElection.retryPeriodSeconds=0", "/operator/leaderElection/retryPeriodSeconds", "exclusiveMinimum"),
    ("operator.leaderElection.renewDeadlineSeconds=long", "/operator/leaderElection/renewDeadlineSeconds", "want number"),
    ("prometheus.endpoints.default=prometheus:9090", "/prometheus/endpoints/default", "does not match pattern"),
    ("tenancy.allowedImagePrefixes=registry.internal/", "/tenancy/allowedImagePrefixes", "want array"),
    ("tenancy.allowedServiceAccounts.team-a=engines", "/tenancy/allowedServiceAccounts/team-a", "want array"),
])
def test_schema_refuses_bad_values_naming_the_field(value, field, says):
    proc = helm("template", "d", str(CHART), "--kube-version", KUBE_VERSION, "--set", value, check=False)
    assert proc.returncode != 0, f"{value} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert f"at '{field}'" in proc.stderr and says in proc.stderr, proc.stderr


# --------------------------------------------------------------------------------------------------
# chart conventions: offline rendering, subchart, registries, replicas, commonLabels, NOTES, metadata, README


def test_helm_template_and_lint_need_no_kube_version(tmp_path):
    """GitOps tools and CI render without a cluster: helm's offline Kubernetes version must satisfy the chart's
    kubeVersion. The pinned helm is built as helm's Makefile builds releases (drafter_testbed/build.py: build_helm)."""
    objects = documents(helm("template", "drafter", str(CHART)).stdout)
    assert one(objects, "Deployment")["spec"]["replicas"] == 1
    proc = helm("lint", "--strict", str(CHART), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # What helm assumes offline, read through a chart that prints it: the release binary's (client-go's) version,
    # at or above the chart's floor.
    probe = tmp_path / "probe"
    (probe / "templates").mkdir(parents=True)
    (probe / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.0.1\n")
    (probe / "templates" / "version.yaml").write_text("kube: {{ .Capabilities.KubeVersion.Version | quote }}\n")
    offline = yaml.safe_load(helm("template", "p", str(probe)).stdout)["kube"]
    minor = int(re.fullmatch(r"v1\.(\d+)\.\d+", offline)[1])
    floor = int(re.search(r">=1\.(\d+)", yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"])[1])
    assert minor >= floor, f"the pinned helm assumes Kubernetes {offline} offline, below the chart's 1.{floor}"
    assert f"offline Kubernetes 1.{minor}" in next(bin_dir().glob(".helm-*-kube-version")).read_text()


def test_helm_build_derives_the_offline_kube_version_from_client_go():
    from drafter_testbed.build import helm_default_kube_version

    assert helm_default_kube_version("require (\n\tk8s.io/api v0.37.0\n\tk8s.io/client-go v0.37.0\n)\n") == (1, 37)
    with pytest.raises(Exception, match="client-go"):
        helm_default_kube_version("module helm.sh/helm/v3\n")


def test_chart_works_as_a_subchart_of_an_umbrella_chart(tmp_path):
    """An umbrella chart passes `global` (with keys this chart does not know) and its own values for it."""
    umbrella = tmp_path / "platform"
    umbrella.mkdir()
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "drafter-operator", "version": yaml.safe_load((CHART / "Chart.yaml").read_text())["version"],
                          "repository": f"file://{CHART}"}]}))
    (umbrella / "values.yaml").write_text(yaml.safe_dump({
        "global": {"imageRegistry": "mirror.internal:5000", "storageClass": "fast", "labels": {"x": "y"}},
        "drafter-operator": {"commonLabels": {"team": "ml-platform"}, "replicaCount": 2}}))
    helm("dependency", "build", str(umbrella))
    assert (umbrella / "charts" / "drafter-operator-0.1.0.tgz").is_file()
    lint = helm("lint", "--strict", str(umbrella), check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    objects = documents(helm("template", "platform", str(umbrella), "-n", "ops").stdout)
    deployment = one(objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"mirror.internal:5000/drafter-dev/drafter-operator:{__version__}"
    assert env_of(container)["DRAFTER_TRAINER_IMAGE"] == f"mirror.internal:5000/drafter-dev/drafter-trainer:{__version__}"
    assert deployment["spec"]["replicas"] == 2 and one(objects, "PodDisruptionBudget")
    assert all(o["metadata"]["labels"]["team"] == "ml-platform" for o in objects)
    # A global this chart refuses would fail here; so would one of the umbrella's own keys for the subchart.
    # The umbrella's globals reach this chart's schema: a bad registry is refused by name.
    bad = helm("template", "platform", str(umbrella), "--set", "global.imageRegistry=http://x/", check=False)
    assert bad.returncode != 0 and "/global/imageRegistry" in bad.stderr, bad.stderr


@pytest.mark.parametrize(("sets", "operator", "trainer", "bench", "test"), [
    ((), "ghcr.io/drafter-dev/drafter-operator:V", "ghcr.io/drafter-dev/drafter-trainer:V", None, None),
    (("image.registry=registry.internal",), "registry.internal/drafter-dev/drafter-operator:V",
     "registry.internal/drafter-dev/drafter-trainer:V", None, None),
    # global wins over image.registry and reaches images given in full, Docker Hub's included.
    (("image.registry=registry.internal", "global.imageRegistry=mirror:5000/cache",
      "operator.benchmarkImage=docker.io/ops/bench:1", "tests.image=python:3.12"),
     "mirror:5000/cache/drafter-dev/drafter-operator:V", "mirror:5000/cache/drafter-dev/drafter-trainer:V",
     "mirror:5000/cache/ops/bench:1", "mirror:5000/cache/python:3.12"),
    (("image.repository=localhost:5000/drafter-operator", "operator.trainerImage=vllm/trainer:2"),
     "localhost:5000/drafter-operator:V", "vllm/trainer:2", None, None),
    (("global.imageRegistry=mirror", "image.digest=sha256:" + "ab" * 32),
     "mirror/drafter-dev/drafter-operator@sha256:" + "ab" * 32, "mirror/drafter-dev/drafter-trainer:V", None, None),
], ids=["default", "image.registry", "global", "repository-host", "digest"])
def test_registries_replace_the_registry_of_every_image(sets, operator, trainer, bench, test):
    objects = render(*sets, show_tests=True)
    container = operator_container(objects)
    operator = operator.replace(":V", f":{__version__}")
    assert container["image"] == operator
    env = env_of(container)
    assert env["DRAFTER_TRAINER_IMAGE"] == trainer.replace(":V", f":{__version__}")
    assert env["DRAFTER_OPERATOR_IMAGE"] == (bench or operator)
    check = one(objects, "Pod")["spec"]["containers"][0]
    assert check["image"] == (test or operator)


def test_one_replica_has_no_disruption_budget_and_no_spread():
    objects = render()
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert "topologySpreadConstraints" not in one(objects, "Deployment")["spec"]["template"]["spec"]


def test_replicas_bring_a_disruption_budget_and_a_spread_across_nodes_and_stand_by_on_the_lease():
    from drafter_operator.cli import build_parser

    objects = render("replicaCount=3")
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 3 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1 and budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    [spread] = pod["spec"]["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["maxSkew"], spread["whenUnsatisfiable"]) == ("kubernetes.io/hostname", 1, "ScheduleAnyway")
    assert spread["labelSelector"]["matchLabels"] == selector
    # The standbys are the same `run --leader-election`: they wait on the Lease.
    assert build_parser().parse_args(pod["spec"]["containers"][0]["args"]).leader_election is True
    own = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "drafter-operator"}}}
    custom = render("replicaCount=2", "podDisruptionBudget.enabled=false",
                    "topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                    "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
                    "topologySpreadConstraints[0].labelSelector.matchLabels.app\\.kubernetes\\.io/name=drafter-operator")
    assert one(custom, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"] == [own]
    assert not [o for o in custom if o["kind"] == "PodDisruptionBudget"]


@pytest.mark.parametrize(("sets", "says"), [
    (("replicaCount=2", "operator.leaderElection.enabled=false"),
     "replicaCount is 2 but operator.leaderElection.enabled is false"),
    (("replicaCount=2", "podDisruptionBudget.minAvailable=2"),
     "podDisruptionBudget.minAvailable (2) must be below replicaCount (2)"),
    (("commonLabels.app\\.kubernetes\\.io/name=mine",), "commonLabels.app.kubernetes.io/name: the chart sets"),
    (("sharding.replicas=2",), "sharding.replicas (2) is above replicaCount (1)"),
    (("replicaCount=2", "sharding.replicas=2", "operator.leaderElection.enabled=false"),
     "sharding.replicas is 2 but operator.leaderElection.enabled is false"),
])
def test_values_that_conflict_are_refused_naming_them_and_the_fix(sets, says):
    args = [arg for value in sets for arg in ("--set", value)]
    proc = helm("template", "d", str(CHART), *args, check=False)
    assert proc.returncode != 0 and says in proc.stderr and "Fix:" in proc.stderr, proc.stderr


def test_sharding_runs_that_many_leaders_each_through_its_shards_lease(tmp_path):
    from drafter_operator.cli import build_parser

    deployment = one(render("replicaCount=3", "sharding.replicas=2"), "Deployment")
    args = build_parser().parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert (deployment["spec"]["replicas"], args.shards, args.leader_election) == (3, 2, True)
    assert build_parser().parse_args(one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
                                     ["args"]).shards == 1
    notes = _notes(tmp_path, "replicaCount=3", "sharding.replicas=2")
    assert "2 act, each for its shard" in notes and "-shard-<i>-of-2 in drafter-system" in notes, notes
    assert "the others stand by for any shard" in notes


def test_common_labels_are_on_every_object_and_the_operator_pod():
    objects = render("commonLabels.team=ml-platform", "commonLabels.cost-center=42a", "replicaCount=2",
                     "monitoring.serviceMonitor.enabled=true", "monitoring.podMonitor.enabled=true",
                     "monitoring.prometheusRule.enabled=true", "monitoring.dashboard.enabled=true", show_tests=True)
    assert {"PodDisruptionBudget", "PrometheusRule", "ConfigMap", "Pod", "CustomResourceDefinition"} <= set(kinds(objects))
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert (labels.get("team"), labels.get("cost-center")) == ("ml-platform", "42a"), f"{obj['kind']} {obj['metadata']['name']}"
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "ml-platform"
    assert "team" not in deployment["spec"]["selector"]["matchLabels"]  # a selector is immutable: never there


def _notes(tmp_path: Path, *sets: str) -> str:
    """NOTES.txt as `helm install` prints it. helm template leaves NOTES out and `install --dry-run` needs a
    cluster, so a copy of the chart renders it with `tpl` (the same engine, values and helpers)."""
    copy = tmp_path / "drafter-operator"
    if not copy.exists():
        shutil.copytree(CHART, copy)
        (copy / "files" / "NOTES.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
        (copy / "templates" / "notes-probe.yaml").write_text('notes: {{ tpl (.Files.Get "files/NOTES.txt") . | toJson }}\n')
    args = [arg for value in sets for arg in ("--set", value)]
    out = helm("template", "drafter", str(copy), "-n", "drafter-system", "--show-only", "templates/notes-probe.yaml", *args)
    return yaml.safe_load(out.stdout)["notes"]


def test_notes_say_what_was_installed_how_to_check_it_and_what_next(tmp_path):
    notes = _notes(tmp_path)
    assert f"image ghcr.io/drafter-dev/drafter-operator:{__version__}" in notes
    assert "1 operator pod(s)" in notes and "Cluster-wide mode" in notes
    assert "kubectl -n drafter-system rollout status deployment/drafter-drafter-operator" in notes
    assert "helm test drafter -n drafter-system" in notes and "kubectl -n drafter-system get leases" in notes
    assert "ImagePullBackOff" in notes and "kubectl apply -n <namespace> -f examples/serving-baseline.yaml" in notes
    ha = _notes(tmp_path, "replicaCount=3", "global.imageRegistry=mirror", "operator.watchNamespaces={team-a,team-b}")
    assert "3 operator pod(s), image mirror/drafter-dev/drafter-operator" in ha
    assert "the others stand by (PodDisruptionBudget minAvailable 1)" in ha
    assert "only in\n  team-a, team-b" in ha
    assert "crds.install is false" in _notes(tmp_path, "crds.install=false")


def test_chart_metadata_for_artifact_hub_matches_the_chart():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    repo = "https://github.com/drafter-dev/drafter-operator"
    assert chart["home"] == repo and repo in chart["sources"] and chart["maintainers"]
    # The icon URL is this repository's file, raw.
    icon = chart["icon"].split("/main/", 1)
    assert icon[0] == "https://raw.githubusercontent.com/drafter-dev/drafter-operator"
    assert (ROOT / icon[1]).read_text().lstrip().startswith("<svg")
    notes = chart["annotations"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'license = "{notes["artifacthub.io/license"]}"' in pyproject
    # The images are what a default install runs.
    container = operator_container(render())
    images = {i["name"]: i["image"] for i in yaml.safe_load(notes["artifacthub.io/images"])}
    assert images == {"drafter-operator": container["image"], "drafter-trainer": env_of(container)["DRAFTER_TRAINER_IMAGE"]}
    # The CRDs are the chart's, and each example is a file of examples/ of one of them.
    sources = [yaml.safe_load(p.read_text()) for p in sorted((CHART / "crd-sources").glob("*.yaml"))]
    served = {(c["spec"]["names"]["kind"], v["name"], c["metadata"]["name"]) for c in sources for v in c["spec"]["versions"]}
    assert {(c["kind"], c["version"], c["name"]) for c in yaml.safe_load(notes["artifacthub.io/crds"])} == served
    examples = yaml.safe_load(notes["artifacthub.io/crdsExamples"])
    files = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    assert {e["kind"] for e in examples} == {kind for kind, _, _ in served}
    assert all(example in files for example in examples), "a crdsExamples entry differs from its file in examples/"


def test_chart_readme_is_generated_from_the_values_comments_and_current(tmp_path):
    """README.md is helm-docs' output (README.md.gotmpl + values.yaml's `# --` comments). After changing
    either: `drafter-operator cluster build --only helm-docs`, then run `helm-docs --chart-search-root
    charts/drafter-operator` with the bin directory's helm-docs."""
    binary = bin_dir() / "helm-docs"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `drafter-operator cluster build --only helm-docs`")
    copy = tmp_path / "drafter-operator"
    for name in ("Chart.yaml", "values.yaml", "README.md.gotmpl"):
        copy.mkdir(exist_ok=True)
        (copy / name).write_text((CHART / name).read_text())
    subprocess.run([str(binary), "--chart-search-root", str(copy), "--log-level", "warning"], check=True, timeout=60)
    generated = (copy / "README.md").read_text()
    committed = (CHART / "README.md").read_text()
    assert committed == generated, ("charts/drafter-operator/README.md is not what helm-docs writes from values.yaml: "
                                    "regenerate it (this test's docstring says how)")
    # Every value is a row with a description; `helm show readme` is this file.
    rows = [line for line in generated.splitlines() if line.startswith("| ") and not line.startswith("| Key")]
    assert len(rows) > 100 and not [r for r in rows if not r.rstrip(" |").split("|")[-1].strip()]
    for value in ("global.imageRegistry", "image.registry", "replicaCount", "commonLabels", "podDisruptionBudget.minAvailable"):
        assert f"| {value} |" in generated
    assert helm("show", "readme", str(CHART)).stdout.strip() == committed.strip()
