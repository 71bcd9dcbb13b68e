"""client_options: settings become aiokafka keywords (pure; no broker)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from lagd.core.config import ClusterSettings, Secret
from lagd.core.model import IngestCounters
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.kafka_options import client_options


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


async def _retries(exc: BaseException, failures_before: int, failures_after: int) -> tuple[list[dict], IngestCounters]:  # type: ignore[type-arg]
    """`reconnecting` over a session failing with `exc` `failures_before` times, then letting
    the reader in once, then failing `failures_after` times: what it logged, and its counters."""
    import asyncio

    from structlog.testing import capture_logs

    from lagd.ingest.kafka_client import reconnecting
    from lagd.runtime.backoff import Backoff

    stop = asyncio.Event()
    counters = IngestCounters()
    calls = 0

    async def session() -> None:
        nonlocal calls
        calls += 1
        if calls == failures_before + 1:
            return  # the cluster let the reader in
        if calls > failures_before + 1 + failures_after:
            stop.set()
            return
        raise exc

    cluster = ClusterSettings(name="prod", bootstrap_servers=["k1:9093"], security_protocol="SASL_SSL")
    with capture_logs() as logged:
        await reconnecting(
            session, stop, counters, cluster=cluster, what="log-end sampler", counter="log_end", hint="check it",
            backoff=Backoff(first=0.001, cap=0.004, log_every=0.01),
        )  # fmt: skip
    return [e for e in logged if e["log_level"] == "warning"], counters


async def test_a_refused_password_is_one_warning_while_lagd_keeps_retrying_with_backoff() -> None:
    """The quick-start trial: a wrong password was a warning at every retry. Now it is one,
    naming the listener and what to fix, for as long as it lasts, while the reader keeps
    retrying (the user may yet be given credentials); after the cluster let a reader in, the
    same refusal is news again and told once more."""
    from aiokafka.errors import SaslAuthenticationFailed

    refused = SaslAuthenticationFailed("Authentication failed during authentication due to invalid credentials")
    warned, counters = await _retries(refused, 30, 30)
    assert counters.failures == {"log_end_SaslAuthenticationFailed": 60}  # it kept retrying
    assert len(warned) == 2, warned  # once, then once after the cluster answered
    for w in warned:
        assert w["listener"] == "k1:9093" and w["error"].startswith("SASL authentication failed"), w
        assert "check sasl-username and sasl-password (LAGD_CLUSTERS_PROD_SASL_PASSWORD)" in w["hint"], w


async def test_brokers_away_are_still_told_at_the_outage_cadence() -> None:
    """An outage (not a setting to change) is told at once, then again every `log_every`."""
    warned, counters = await _retries(ConnectionRefusedError(111, "Connection refused"), 30, 0)
    assert counters.failures == {"log_end_ConnectionRefusedError": 30}
    assert len(warned) > 1, warned  # 30 waits of at least 2 ms outlast a 10 ms cadence
