"""Pod DNS on the local cluster, the pure parts: a pod's hostname, /etc/hosts and /etc/resolv.conf as the kubelet
writes them, the argv that runs a pod in namespaces of its own, the names published for headless Services,
and the cluster's CoreDNS configuration (docs/testbed.md, "Cluster DNS")."""

from __future__ import annotations

from pathlib import Path

import pytest

from drafter_testbed import build, certs, launch, nodes
from drafter_testbed.cluster import COMPONENTS, RESTARTABLE, Layout, Ports, component_commands, corefile, dns_manifests
from drafter_testbed.versions import PINS

DNS = "127.242.0.10"


def _pod(name="ranks-1-x7k2p", namespace="team", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"job": "ranks"}}, "spec": spec}


# ---- hostname ----
def test_hostname_is_spec_hostname_or_the_pod_name():
    assert launch.pod_hostname(_pod()) == "ranks-1-x7k2p"
    assert launch.pod_hostname(_pod(hostname="ranks-1")) == "ranks-1"


def test_a_long_name_is_cut_to_63_without_a_trailing_dash_or_dot():
    name = "a" * 61 + "-.b"  # the 63rd character is '.', the 62nd '-'
    assert launch.pod_hostname(_pod(name=name)) == "a" * 61
    assert len(launch.pod_hostname(_pod(name="x" * 80))) == 63


def test_fqdn_only_with_a_subdomain():
    assert launch.pod_fqdn(_pod(hostname="ranks-0")) is None
    assert launch.pod_fqdn(_pod(hostname="ranks-0", subdomain="workers")) == "ranks-0.workers.team.svc.cluster.local"


def test_set_hostname_as_fqdn_sets_the_kernel_hostname_to_the_fqdn_and_refuses_one_too_long():
    assert launch.uts_hostname(_pod(hostname="r-0", subdomain="w")) == "r-0"
    fqdn = launch.uts_hostname(_pod(hostname="r-0", subdomain="w", setHostnameAsFQDN=True))
    assert fqdn == "r-0.w.team.svc.cluster.local"
    with pytest.raises(launch.LaunchError, match="longer than 64"):
        launch.uts_hostname(_pod(hostname="r" * 40, subdomain="w" * 20, setHostnameAsFQDN=True))


def test_the_containers_hostname_env_is_the_pods_hostname(tmp_path):
    pod = _pod(hostname="ranks-0", containers=[])
    plan = launch.plan(pod, {"name": "c", "command": ["sh", "-c", "true"]}, "127.240.0.2", tmp_path, 6443,
                       lambda *a: None)
    assert plan.env["HOSTNAME"] == "ranks-0"


# ---- /etc/hosts ----
def test_hosts_file_is_the_kubelets_with_the_fqdn_when_a_subdomain_is_set():
    text = launch.hosts_file(_pod(hostname="ranks-0", subdomain="workers"), "127.240.0.2")
    lines = text.splitlines()
    assert lines[:3] == ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
                         "::1\tlocalhost ip6-localhost ip6-loopback"]
    assert lines[-1] == "127.240.0.2\tranks-0.workers.team.svc.cluster.local\tranks-0"
    assert text.endswith("\n")


def test_hosts_file_without_a_subdomain_and_with_host_aliases():
    pod = _pod(hostAliases=[{"ip": "127.0.0.5", "hostnames": ["foo.local", "bar.local"]}])
    lines = launch.hosts_file(pod, "127.240.0.3").splitlines()
    assert "127.240.0.3\tranks-1-x7k2p" in lines
    assert lines[-2:] == ["# Entries added by HostAliases.", "127.0.0.5\tfoo.local\tbar.local"]


def test_a_host_network_pod_keeps_the_nodes_hostname_and_hosts_file():
    pod = _pod(hostname="ranks-0", hostNetwork=True, hostAliases=[{"ip": "127.0.0.5", "hostnames": ["foo"]}])
    assert launch.uts_hostname(pod, "node-a") == "node-a"
    assert launch.hosts_file(pod, "127.240.0.2", "127.0.0.1\tlocalhost\n") == (
        "127.0.0.1\tlocalhost\n\n# Entries added by HostAliases.\n127.0.0.5\tfoo\n")


# ---- /etc/resolv.conf ----
HOST_RESOLV = "# from DHCP\nnameserver 10.0.0.53\nnameserver 10.0.0.54\nsearch corp.example\noptions edns0 ndots:1\n"


def test_cluster_first_is_the_default_and_searches_the_namespace():
    assert launch.resolv_conf(_pod(), DNS, HOST_RESOLV) == (
        "search team.svc.cluster.local svc.cluster.local cluster.local\n"
        f"nameserver {DNS}\n"
        "options ndots:5\n")
    assert launch.resolv_conf(_pod(dnsPolicy="ClusterFirst"), DNS, HOST_RESOLV) == launch.resolv_conf(_pod(), DNS, "")


def test_default_keeps_the_hosts_file_and_merges_a_dns_config_into_it():
    assert launch.resolv_conf(_pod(dnsPolicy="Default"), DNS, HOST_RESOLV) is None  # no bind mount at all
    merged = launch.resolv_conf(_pod(dnsPolicy="Default", dnsConfig={"searches": ["extra.example"]}), DNS, HOST_RESOLV)
    assert merged == ("search corp.example extra.example\nnameserver 10.0.0.53\nnameserver 10.0.0.54\n"
                      "options edns0 ndots:1\n")


def test_cluster_first_on_the_host_network_or_without_cluster_dns_falls_back_to_the_hosts():
    assert launch.resolv_conf(_pod(hostNetwork=True), DNS, HOST_RESOLV) is None
    assert launch.resolv_conf(_pod(), None, HOST_RESOLV) is None
    with_host_net = launch.resolv_conf(_pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"), DNS, HOST_RESOLV)
    assert f"nameserver {DNS}" in with_host_net


def test_none_uses_the_dns_config_alone_and_needs_a_nameserver():
    pod = _pod(dnsPolicy="None", dnsConfig={"nameservers": ["127.0.0.53"], "searches": ["a.example"],
                                            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]})
    assert launch.resolv_conf(pod, DNS, HOST_RESOLV) == (
        "search a.example\nnameserver 127.0.0.53\noptions ndots:2 edns0\n")
    with pytest.raises(launch.LaunchError, match="nameservers"):
        launch.resolv_conf(_pod(dnsPolicy="None", dnsConfig={"searches": ["a.example"]}), DNS, HOST_RESOLV)


def test_dns_config_options_replace_same_named_ones_and_limits_apply():
    pod = _pod(dnsConfig={"nameservers": [DNS, "127.0.0.2", "127.0.0.3", "127.0.0.4"],
                          "searches": [f"s{i}.example" for i in range(40)],
                          "options": [{"name": "ndots", "value": "1"}, {"name": "timeout", "value": "2"}]})
    conf = launch.parse_resolv_conf(launch.resolv_conf(pod, DNS, ""))
    assert conf.nameservers == (DNS, "127.0.0.2", "127.0.0.3")  # duplicates dropped, then three at most
    assert len(conf.searches) == launch.MAX_SEARCHES and conf.searches[0] == "team.svc.cluster.local"
    assert conf.options == ("ndots:1", "timeout:2")


def test_an_unknown_dns_policy_is_refused():
    with pytest.raises(launch.LaunchError, match="dnsPolicy 'Cluster'"):
        launch.resolv_conf(_pod(dnsPolicy="Cluster"), DNS, "")


# ---- the namespaces ----
def test_argv_runs_in_a_mount_and_uts_namespace_and_execs_the_program(tmp_path):
    argv = launch.in_pod_namespaces(["python", "-c", "x"], "ranks-0", tmp_path / "hosts", tmp_path / "resolv.conf",
                                    unshare="/usr/bin/unshare")
    assert argv[:6] == ["/usr/bin/unshare", "--mount", "--uts", "--propagation", "private", "--"]
    assert "--fork" not in argv  # unshare execs: the pid the runner signals is the program's
    assert argv[6:8] == ["sh", "-c"] and 'exec "$@"' in argv[8]
    assert argv[9:] == ["pod-namespaces", "ranks-0", str(tmp_path / "hosts"), str(tmp_path / "resolv.conf"),
                        "python", "-c", "x"]


def test_without_a_resolv_conf_of_its_own_the_pod_keeps_the_hosts():
    argv = launch.in_pod_namespaces(["sh"], "h", Path("/p/hosts"), None)
    assert argv[-2:] == ["", "sh"] and 'if [ -n "$3" ]' in argv[8]


# ---- names of pods behind headless Services ----
def _service(name="workers", cluster_ip="None", selector=None, publish=False) -> dict:
    return {"metadata": {"name": name, "namespace": "team"},
            "spec": {"clusterIP": cluster_ip, "selector": selector if selector is not None else {"job": "ranks"},
                     **({"publishNotReadyAddresses": True} if publish else {})}}


def test_headless_service_names_its_pods_by_hostname_and_by_address():
    rank0 = _pod(name="ranks-0-abcde", hostname="ranks-0", subdomain="workers")
    other = _pod(name="loner")  # no hostname: named after its address, as CoreDNS names such endpoints
    text = launch.pod_name_records([_service()], [(rank0, "127.240.0.2", True), (other, "127.240.0.3", True)])
    assert text.splitlines()[1:] == [
        "127.240.0.3 127-240-0-3.workers.team.svc.cluster.local",
        "127.240.0.2 ranks-0.workers.team.svc.cluster.local",
        "127.240.0.2 workers.team.svc.cluster.local",
        "127.240.0.3 workers.team.svc.cluster.local",
    ]


def test_unready_pods_count_only_with_publish_not_ready_addresses():
    rank = _pod(name="ranks-0-abcde", hostname="ranks-0", subdomain="workers")
    assert launch.pod_name_records([_service()], [(rank, "127.240.0.2", False)]).count("\n") == 1  # the header
    assert "ranks-0.workers" in launch.pod_name_records([_service(publish=True)], [(rank, "127.240.0.2", False)])


def test_only_headless_services_with_a_matching_selector_in_the_pods_namespace():
    rank = _pod(name="ranks-0-abcde", hostname="ranks-0", subdomain="workers")
    services = [_service(cluster_ip="127.242.0.7"), _service(selector={}), _service(selector={"job": "other"}),
                {**_service(), "metadata": {"name": "workers", "namespace": "elsewhere"}}]
    assert launch.pod_name_records(services, [(rank, "127.240.0.2", True)]).count("\n") == 1


def test_a_hostname_names_the_pod_only_under_its_own_subdomain():
    rank = _pod(name="ranks-0-abcde", hostname="ranks-0", subdomain="workers")
    text = launch.pod_name_records([_service(name="all")], [(rank, "127.240.0.2", True)])
    assert "127-240-0-2.all.team.svc.cluster.local" in text and "ranks-0" not in text


# ---- the cluster's DNS server ----
def test_the_cluster_dns_address_is_the_tenth_of_the_service_range():
    network = nodes.network_for(17440)
    assert network.cluster_dns == f"127.{network.base + 2}.0.10"
    assert network.cluster_dns.rsplit(".", 2)[0] == network.service_cidr.rsplit(".", 2)[0]


def test_corefile_serves_cluster_local_on_the_dns_address_only_and_forwards_nothing(tmp_path):
    layout, network = Layout(tmp_path), nodes.network_for(17440)
    text = corefile(network, layout)
    assert f"bind {network.cluster_dns}\n" in text and f"ready {network.cluster_dns}:8181" in text
    assert f"hosts {layout.pod_names} cluster.local" in text and "fallthrough" in text
    assert f"kubeconfig {layout.component_kubeconfig('coredns')} drafter-local" in text
    assert "forward" not in text and ". {" not in text  # no upstream, no catch-all zone
    # Plugins a Corefile names must be compiled in, in CoreDNS's order.
    used = [p for p in build.COREDNS_PLUGINS if f"\n    {p} " in text or f"\n    {p}\n" in text]
    assert used == list(build.COREDNS_PLUGINS)


def test_kube_dns_reserves_the_address_without_a_selector_and_coredns_may_list_what_it_serves():
    role, binding, service = dns_manifests(nodes.network_for(17440))
    assert service["metadata"] == {**service["metadata"], "name": "kube-dns", "namespace": "kube-system"}
    assert service["spec"]["clusterIP"] == nodes.network_for(17440).cluster_dns and "selector" not in service["spec"]
    assert {(p["port"], p["protocol"]) for p in service["spec"]["ports"]} == {(53, "UDP"), (53, "TCP")}
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               if set(rule["verbs"]) >= {"list", "watch"}}
    assert granted >= {("", "services"), ("", "namespaces"), ("", "pods"), ("", "endpoints"),
                       ("discovery.k8s.io", "endpointslices")}
    coredns = next(c for c in certs.CLIENTS if c.file_stem == "coredns")
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": coredns.common_name}]
    assert "system:masters" not in coredns.organizations  # its own rights, no more


def test_coredns_is_a_restartable_component_and_the_runner_learns_the_address(tmp_path):
    layout = Layout(tmp_path)
    commands = component_commands(layout, Ports(17440), tmp_path)
    assert commands["coredns"] == [str(tmp_path / "coredns"), "-conf", str(layout.corefile)]
    runner = commands["runner"]
    assert runner[runner.index("--cluster-dns") + 1] == nodes.network_for(17440).cluster_dns
    assert runner[runner.index("--pod-names-file") + 1] == str(layout.pod_names)
    assert "coredns" in RESTARTABLE and COMPONENTS.index("coredns") < COMPONENTS.index("runner")


def test_an_existing_pki_gains_the_coredns_certificate(tmp_path):
    certs.ensure_pki(tmp_path)
    (tmp_path / "coredns.crt").unlink()
    (tmp_path / "coredns.key").unlink()
    ca_before = (tmp_path / "ca.crt").read_bytes()
    certs.ensure_pki(tmp_path)
    assert (tmp_path / "coredns.crt").exists() and (tmp_path / "ca.crt").read_bytes() == ca_before


def test_coredns_is_built_with_only_its_plugins_and_outside_the_cache_key():
    main = build.coredns_main()
    assert "dnsserver.Directives = []string{" + ", ".join(f'"{p}"' for p in build.COREDNS_PLUGINS) + "}" in main
    assert main.count("github.com/coredns/coredns/plugin/") == len(build.COREDNS_PLUGINS)
    assert "forward" not in main
    assert PINS.coredns not in PINS.key
    step = next(s for s in build.STEPS if s.name == "coredns")
    assert step.outputs == ("coredns", build.coredns_stamp(PINS))


# ---- a LeaderWorkerSet's leader address, from a worker pod ----
def _resolve(name: str, resolv_conf: str, records: str) -> set[str]:
    """What a pod's resolver gets for ``name``, as glibc searches: a name with fewer dots than ndots is tried under
    each search domain first, then as given; the first name the cluster DNS knows answers. The cluster DNS here is
    CoreDNS's view of the runner's records (its hosts plugin for cluster.local; the Services' ClusterIPs, from its
    kubernetes plugin, are left out)."""
    conf = launch.parse_resolv_conf(resolv_conf)
    ndots = next((int(o.split(":")[1]) for o in conf.options if o.startswith("ndots:")), 1)
    known: dict[str, set[str]] = {}
    for line in records.splitlines():
        if line and not line.startswith("#"):
            ip, host = line.split()
            known.setdefault(host, set()).add(ip)
    searched = [f"{name}.{domain}" for domain in conf.searches]
    tries = [*searched, name] if name.count(".") < ndots else [name, *searched]
    return next((known[t] for t in tries if t in known), set())


def _lws_pods(publish: bool):
    """A group of LWS v0.9.0 (the shapes docs/testbed.md observed): set `engine`, group 0, leader unready."""
    labels = {"leaderworkerset.sigs.k8s.io/name": "engine"}
    leader = {"metadata": {"name": "engine-0", "namespace": "team", "labels": labels},
              "spec": {"hostname": "engine-0", "subdomain": "engine"}}
    worker = {"metadata": {"name": "engine-0-1", "namespace": "team", "labels": labels},
              "spec": {"hostname": "engine-0-1", "subdomain": "engine"}}
    # LWS's headless Service (pkg/utils/controller CreateHeadlessServiceIfNotExists): no ports, the set's selector.
    service = {"metadata": {"name": "engine", "namespace": "team"},
               "spec": {"clusterIP": "None", "selector": labels, **({"publishNotReadyAddresses": True} if publish else {})}}
    return leader, worker, service


def test_a_worker_resolves_its_unready_leaders_lws_address_through_the_search_path():
    leader, worker, service = _lws_pods(publish=True)
    records = launch.pod_name_records([service], [(leader, "127.240.0.2", False), (worker, "127.240.0.3", True)])
    resolv = launch.resolv_conf(worker, DNS, "")
    # LWS_LEADER_ADDRESS as LWS v0.9.0 writes it (pkg/utils/pod AddLWSVariables): <set>-<group>.<subdomain>.<ns>
    address = f"engine-0.{worker['spec']['subdomain']}.{worker['metadata']['namespace']}"
    assert _resolve(address, resolv, records) == {"127.240.0.2"}
    assert _resolve("engine-0.engine", resolv, records) == {"127.240.0.2"}
    assert _resolve("engine-0.engine.team.svc.cluster.local", resolv, records) == {"127.240.0.2"}
    # The records hold fully qualified names only: the short forms resolve because the resolver searches.
    names = {line.split()[1] for line in records.splitlines()[1:]}
    assert address not in names and f"{address}.svc.cluster.local" in names


def test_without_publish_not_ready_addresses_an_unready_leader_would_not_resolve_until_ready():
    leader, worker, service = _lws_pods(publish=False)
    resolv = launch.resolv_conf(worker, DNS, "")
    unready = launch.pod_name_records([service], [(leader, "127.240.0.2", False), (worker, "127.240.0.3", True)])
    assert _resolve("engine-0.engine.team", resolv, unready) == set()
    ready = launch.pod_name_records([service], [(leader, "127.240.0.2", True), (worker, "127.240.0.3", True)])
    assert _resolve("engine-0.engine.team", resolv, ready) == {"127.240.0.2"}
