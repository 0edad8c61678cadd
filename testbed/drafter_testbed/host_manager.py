"""What the add-on controller managers that run beside the local cluster as host processes (Kueue: kueue.py,
LeaderWorkerSet: lws.py) share: their module's source, a webhook serving certificate for 127.0.0.1 from the
cluster CA, webhook client configurations that call 127.0.0.1 by URL, and the apply-start-wait steps.

No Service can reach a host process (the apiserver has no pod network to route through), so every webhook
and CRD conversion of such a manager is rewritten from `clientConfig.service` to `clientConfig.url` on
loopback, with the cluster CA as its `caBundle`; the manager serves a certificate that CA signed.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from drafter_testbed import cluster, processes


class HostManagerError(RuntimeError):
    """A step of installing a host-process controller manager failed; the message names the step and the fix."""


# ----------------------------------------------------------------------------------------- module source


@dataclass(frozen=True)
class ManagerPorts:
    """A manager's listeners on 127.0.0.1: webhook, health and metrics at ``base + offset`` and the next two. Each
    manager has its own offset beyond the eight ports cluster.Ports takes (base .. base+7), so two managers, or two
    clusters with different port bases, never share one."""

    base: int
    offset: int

    @property
    def webhook(self) -> int:
        return self.base + self.offset

    @property
    def health(self) -> int:
        return self.base + self.offset + 1

    @property
    def metrics(self) -> int:
        return self.base + self.offset + 2

    def all(self) -> dict[str, int]:
        return {"webhook": self.webhook, "health": self.health, "metrics": self.metrics}


@dataclass(frozen=True)
class ManagerLayout:
    """A manager's files under the cluster's state directory (so `cluster down --wipe` removes them with the CA)."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def certs(self) -> Path:
        """tls.crt and tls.key: the webhook server's certDir."""
        return self.root / "certs"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"


def module_download(module: str, version: str) -> dict:
    """`go mod download -json module@version`: the module's source directory (`Dir`, read-only, in the Go module
    cache) and its `Origin` (the commit the version tag names)."""
    env = dict(os.environ, GOFLAGS="", GOWORK="off")
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise HostManagerError(f"step 'download {module}@{version}' failed: {proc.stderr.strip() or proc.stdout.strip()}\n"
                               "Fix: check that the Go module proxy is reachable (GOPROXY) and the version exists.")
    return json.loads(proc.stdout)


def source_dir(module: str, version: str) -> Path:
    """The module's source in the Go module cache (downloaded once): its CRDs and webhook manifests."""
    return Path(module_download(module, version)["Dir"])


def go_mod_replaces(go_mod: str) -> list[str]:
    """The `replace` directives of a go.mod: `go install module/cmd@version` refuses a module that has any
    (then it needs a wrapper module, as build.py's kubernetes and etcd steps do)."""
    block = re.findall(r"^replace\s*\((.*?)^\)", go_mod, flags=re.M | re.S)
    lines = [line.strip() for chunk in block for line in chunk.splitlines() if line.strip()]
    return lines + re.findall(r"^replace\s+([^(\s].*)$", go_mod, flags=re.M)


# ------------------------------------------------------------------------------------- loopback webhooks


def loopback_url(port: int, path: str) -> str:
    return f"https://127.0.0.1:{port}{path}"


def loopback_client_config(client_config: dict, port: int, ca_bundle: bytes) -> dict:
    """A webhook's or CRD conversion's `clientConfig` that names a Service, as this cluster needs it: the
    same path on 127.0.0.1 by URL, trusted through the cluster CA."""
    path = client_config["service"].get("path", "/")
    return {"url": loopback_url(port, path), "caBundle": base64.b64encode(ca_bundle).decode()}


def serving_certificate(pki: Path, cert_dir: Path, common_name: str) -> None:
    """tls.crt/tls.key for 127.0.0.1 signed by the cluster CA (the apiserver checks webhooks against it).
    Kept when present: they are under the cluster's state directory, which a wipe removes with the CA."""
    crt, key_path = cert_dir / "tls.crt", cert_dir / "tls.key"
    if crt.exists() and key_path.exists():
        return
    cert_dir.mkdir(parents=True, exist_ok=True)
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


# ------------------------------------------------------------------------------------ install and wait


def running_cluster(layout: cluster.Layout, step: str) -> dict:
    """The running local cluster's record (its ports); a clear error when none runs."""
    record = cluster.read_record(layout)
    if not record or not cluster.is_up(layout):
        raise HostManagerError(f"step '{step}': no local cluster is running in {layout.root}. "
                               "Fix: `drafter-operator cluster up` first.")
    return record


def check_ports_free(step: str, ports: dict[str, int]) -> None:
    busy = {n: p for n, p in ports.items() if processes.port_in_use(p)}
    if busy:
        raise HostManagerError(f"step '{step}': already in use on 127.0.0.1: {busy}. Fix: stop whatever "
                               "listens there, or run the cluster with another --port-base.")


def write_admin_kubeconfig(layout: cluster.Layout, record: dict, path: Path) -> None:
    """The admin identity (system:masters) for a manager: its own ClusterRoles would need a client certificate
    of its own and their bindings; what this cluster shows is what the manager does, not its RBAC."""
    server = f"https://127.0.0.1:{record['ports']['apiserver']}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cluster.kubeconfig_dict(server, layout.pki, "admin")))
    path.chmod(0o600)


def apply(layout: cluster.Layout, step: str, manifests: list[dict], field_manager: str, fix: str) -> None:
    proc = cluster.kubectl(layout, "apply", "--server-side", "--force-conflicts", "--field-manager", field_manager,
                           "-f", "-", input=yaml.safe_dump_all(manifests))
    if proc.returncode != 0:
        raise HostManagerError(f"step '{step}' failed: {proc.stderr.strip()}\nFix: {fix}")


def wait_established(layout: cluster.Layout, step: str, definitions: list[dict], timeout: float) -> None:
    """A manager sets up its informers at start and exits if a kind is not served yet ("no matches for kind")."""
    names = [f"crd/{d['metadata']['name']}" for d in definitions]
    established = cluster.kubectl(layout, "wait", "--for=condition=Established", f"--timeout={timeout:.0f}s", *names)
    if established.returncode != 0:
        raise HostManagerError(f"step '{step}' failed: {established.stderr.strip()}\n"
                               "Fix: read the kube-apiserver log; `cluster down --wipe` starts afresh")


def readyz(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
        return resp.status == 200


def answers(probe) -> bool:
    """A probe whose connection fails says "no" (a manager still starting, or gone)."""
    try:
        return bool(probe())
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


def dry_run_passes(layout: cluster.Layout, manifest: dict) -> bool:
    """The apiserver reaches a manager's webhooks through the rewritten URLs and trusts their certificate: a
    server-side dry run of one of its objects passes its mutating and validating webhooks."""
    return cluster.kubectl(layout, "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest)).returncode == 0


def wait(step: str, probe, timeout: float, log: Path, stop_hint: str, alive=lambda: True) -> None:
    """Poll `probe` until it says yes; fail with the log's tail on timeout, or at once when `alive` says no
    (the manager exited: its log says why, and waiting longer would not change it)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError) as exc:
            last = str(exc)
        if not alive():
            last = "the process exited"
            break
        time.sleep(0.5)
    else:
        last = f"not ready within {timeout:.0f}s; {last}"
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else ""
    raise HostManagerError(f"step '{step}': {last}.\n{tail}\nFix: read {log} for the cause; {stop_hint} cleans up.")
