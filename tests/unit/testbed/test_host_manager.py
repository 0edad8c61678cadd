"""What the controller managers that run beside the local cluster as host processes share
(drafter_testbed/host_manager.py): go.mod replaces, loopback client configurations, the serving certificate."""

from __future__ import annotations

import base64

from drafter_testbed import host_manager

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_go_mod_replaces_are_found_in_blocks_and_single_lines():
    assert host_manager.go_mod_replaces("module x\n\ngo 1.25.0\n\nrequire a v1\n") == []
    go_mod = "module x\n\nreplace (\n\tk8s.io/api => k8s.io/api v0.35.4\n)\nreplace a => ../a\n"
    assert host_manager.go_mod_replaces(go_mod) == ["k8s.io/api => k8s.io/api v0.35.4", "a => ../a"]


def test_a_service_client_config_becomes_the_same_path_on_loopback_trusted_through_the_cluster_ca():
    config = {"service": {"name": "webhook-service", "namespace": "system", "path": "/mutate--v1-pod"}}
    assert host_manager.loopback_client_config(config, 18463, CA) == {
        "url": "https://127.0.0.1:18463/mutate--v1-pod", "caBundle": base64.b64encode(CA).decode()}
    # a Service reference without a path is served at the root, as the apiserver reads it
    assert host_manager.loopback_client_config({"service": {"name": "s"}}, 1, CA)["url"] == "https://127.0.0.1:1/"


def test_the_serving_certificate_names_loopback_is_signed_by_the_cluster_ca_and_is_kept(tmp_path):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from drafter_testbed import certs

    certs.ensure_pki(tmp_path / "pki")
    host_manager.serving_certificate(tmp_path / "pki", tmp_path / "certs", "lws-webhook")
    cert = x509.load_pem_x509_certificate((tmp_path / "certs" / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / "pki" / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "lws-webhook"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert oct((tmp_path / "certs" / "tls.key").stat().st_mode & 0o777) == "0o600"
    before = (tmp_path / "certs" / "tls.crt").read_bytes()
    host_manager.serving_certificate(tmp_path / "pki", tmp_path / "certs", "lws-webhook")
    assert (tmp_path / "certs" / "tls.crt").read_bytes() == before  # kept, not reissued
