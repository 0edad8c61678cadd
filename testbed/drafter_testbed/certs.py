"""Certificates for the local control plane: one CA, the apiserver's serving cert, client certs.

Written once per cluster state directory with Python's `cryptography`, as envtest and
local-up-cluster do with openssl. Only 127.0.0.1 and localhost are in the serving cert: nothing in
the local cluster is meant to be reached from another address.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class ClientIdentity:
    file_stem: str
    common_name: str
    organizations: tuple[str, ...] = ()


# The admin is a cluster superuser through the system:masters group; the control-plane components
# authenticate under their well-known user names so RBAC's bootstrap roles apply to them.
CLIENTS = (
    ClientIdentity("admin", "admin", ("system:masters",)),
    ClientIdentity("controller-manager", "system:kube-controller-manager"),
    ClientIdentity("scheduler", "system:kube-scheduler"),
    # kwok and the local process runner act for nodes: node-level rights granted via system:masters
    # would be too broad for a real cluster, but these identities only ever exist on the local one.
    ClientIdentity("kwok", "kwok-controller", ("system:masters",)),
    ClientIdentity("runner", "drafter-local-runner", ("system:masters",)),
    # CoreDNS reads Services and namespaces with the rights of its own ClusterRole (cluster.dns_manifests), as
    # CoreDNS's manifests grant them. ensure_pki issues a missing certificate, so an older cluster gains it.
    ClientIdentity("coredns", "system:coredns"),
)


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALIDITY))


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


LOOPBACK_SANS = (x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")))


def _ca(pki: Path):
    """The cluster's CA: loaded when present (certificates already issued stay valid), else created."""
    if (pki / "ca.crt").exists() and (pki / "ca.key").exists():
        key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
        return key, x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("drafter-operator-local-ca")
    cert = (_builder(name, name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_key(pki / "ca.key", key)
    _write_cert(pki / "ca.crt", cert)
    return key, cert


def ensure_pki(pki: Path) -> None:
    """Create whatever part of the PKI under `pki` is missing (idempotent across `cluster up`s)."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca(pki)

    def issue(stem: str, name: x509.Name, usage, sans=None) -> None:
        if (pki / f"{stem}.crt").exists() and (pki / f"{stem}.key").exists():
            return
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(name, ca_cert.subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        _write_key(pki / f"{stem}.key", key)
        _write_cert(pki / f"{stem}.crt", builder.sign(ca_key, hashes.SHA256()))

    issue("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, LOOPBACK_SANS + (
        x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"), x509.DNSName("kubernetes.default.svc")))
    # The process runner's kubelet API (kubectl logs), and the apiserver's client cert to call it.
    issue("runner-serving", _name("drafter-local-runner"), ExtendedKeyUsageOID.SERVER_AUTH, LOOPBACK_SANS)
    issue("apiserver-kubelet-client", _name("kube-apiserver-kubelet-client", ("system:masters",)),
          ExtendedKeyUsageOID.CLIENT_AUTH)
    for client in CLIENTS:
        issue(client.file_stem, _name(client.common_name, client.organizations), ExtendedKeyUsageOID.CLIENT_AUTH)

    if not (pki / "sa.key").exists():
        # Service-account tokens are signed with RSA: the apiserver's issuer discovery expects it.
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki / "sa.key", sa_key)
        (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
