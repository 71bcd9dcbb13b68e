"""client_options: settings become aiokafka keywords (pure; no broker)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from lagd.config import ClusterSettings, Secret
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.kafka_client import client_options


def test_plaintext_options() -> None:
    opts = client_options(ClusterSettings(name="a", bootstrap_servers=["k1:9092", "k2:9092"], request_timeout=12.5))
    assert opts == {
        "bootstrap_servers": ["k1:9092", "k2:9092"],
        "client_id": "lagd",
        "security_protocol": "PLAINTEXT",
        "request_timeout_ms": 12500,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_reveals_password(mechanism: str) -> None:
    c = ClusterSettings(
        bootstrap_servers=["k:9092"],
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="lagd",
        sasl_password=Secret("s3cret"),
    )
    opts = client_options(c)
    assert opts["sasl_mechanism"] == mechanism
    assert opts["sasl_plain_username"] == "lagd"
    assert opts["sasl_plain_password"] == "s3cret"
    assert type(opts["sasl_plain_password"]) is str
    assert "ssl_context" not in opts


def test_plaintext_ignores_sasl_fields() -> None:
    opts = client_options(ClusterSettings(bootstrap_servers=["k:9092"], sasl_username="x", sasl_password=Secret("y")))
    assert "sasl_plain_password" not in opts and "sasl_mechanism" not in opts


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    key, cert = d / "key.pem", d / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=kafka.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    enc = d / "key-enc.pem"
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-out", str(enc), "-aes256", "-passout", "pass:pw"],
        check=True,
        capture_output=True,
    )
    return cert, key, enc


@pytest.mark.parametrize("check_hostname", [True, False])
def test_tls_context_from_files(tls_files: tuple[Path, Path, Path], check_hostname: bool) -> None:
    cert, _key, enc = tls_files
    c = ClusterSettings(
        bootstrap_servers=["k:9093"],
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u",
        sasl_password=Secret("p"),
        tls_ca_file=str(cert),
        tls_cert_file=str(cert),
        tls_key_file=str(enc),
        tls_key_password=Secret("pw"),
        tls_check_hostname=check_hostname,
    )
    opts = client_options(c)
    ctx = opts["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.check_hostname is check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert [x["subject"] for x in ctx.get_ca_certs()] == [((("commonName", "kafka.test"),),)]
    assert opts["security_protocol"] == "SASL_SSL"


def test_tls_wrong_key_password_is_an_error(tls_files: tuple[Path, Path, Path]) -> None:
    cert, _key, enc = tls_files
    c = ClusterSettings(
        bootstrap_servers=["k:9093"],
        security_protocol="SSL",
        tls_cert_file=str(cert),
        tls_key_file=str(enc),
        tls_key_password=Secret("wrong"),
    )
    with pytest.raises(ssl.SSLError):
        client_options(c)


def test_group_filter_allow_and_deny() -> None:
    f = GroupFilter.for_cluster(ClusterSettings())
    assert f.allows("orders")
    assert not f.allows("console-consumer-1234")
    g = GroupFilter(allow="^app-", deny="-test$")
    assert [x for x in ["app-a", "app-b-test", "other", "app-test-x"] if g.allows(x)] == ["app-a", "app-test-x"]
    assert GroupFilter(allow=".*", deny="").allows("anything")
