"""Why lagd cannot reach a cluster, in one line an operator can act on.

aiokafka reports every failed bootstrap as "Unable to bootstrap from [...]", whatever the
cause; the cause itself (a refused password, a certificate lagd does not trust, nothing
listening) goes to aiokafka's own log, which lagd keeps quiet. So when a client of a
cluster cannot bootstrap, `diagnose` connects to each bootstrap address once more, alone,
as the client would (TLS, then SASL), and names the first listener that fails, what failed,
and which setting to change. It runs only after a failure, at the readers' backoff pace.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass

from aiokafka.conn import create_conn
from aiokafka.errors import (
    IllegalSaslStateError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from lagd.core.config import ClusterSettings
from lagd.ingest.kafka_options import client_options
from lagd.runtime.backoff import describe_error

_SECURITY_ERRORS = (SaslAuthenticationFailed, UnsupportedSaslMechanismError, IllegalSaslStateError, ssl.SSLError)
PROBE_TIMEOUT_S = 10.0  # at most: a broker that does not answer is named without waiting out request-timeout


@dataclass(frozen=True, slots=True)
class Problem:
    """A listener lagd cannot use: its address, what went wrong there, and what to change."""

    listener: str
    error: str
    fix: str
    # A setting to change (a refused password, a certificate lagd does not trust, a wrong
    # mechanism or protocol), not brokers away: retrying cannot mend it until someone acts, so
    # it is told once (reconnecting), where an outage is told again every 30 s or so.
    settings: bool = False

    def __str__(self) -> str:
        return f"{self.listener}: {self.error}; {self.fix}"


def is_bootstrap_failure(exc: BaseException) -> bool:
    """aiokafka's answer when no bootstrap address let a client in (the cause left out)."""
    return isinstance(exc, KafkaConnectionError) and "Unable to bootstrap" in str(exc)


async def diagnose(cluster: ClusterSettings, exc: BaseException) -> Problem | None:
    """The listener `exc` came from and what to fix there; None when it is not one of the
    failures named here (or no listener fails when tried again)."""
    if not is_bootstrap_failure(exc):
        # raised by a connection after the bootstrap (to a broker the metadata named)
        if isinstance(exc, _SECURITY_ERRORS):
            return explain(cluster, ",".join(cluster.bootstrap_servers), exc)
        return None
    for address in cluster.bootstrap_servers:
        failure = await _connect(cluster, address)
        if failure is not None:
            return explain(cluster, address, failure)
    return None


async def _connect(cluster: ClusterSettings, address: str) -> BaseException | None:
    """Open one connection to `address` as lagd's clients do (TLS and SASL included); what failed."""
    host, _, port = address.rpartition(":")
    timeout = min(cluster.request_timeout, PROBE_TIMEOUT_S)
    try:
        opts = client_options(cluster)  # reads the TLS files, which may have gone since the client read them
        conn = await asyncio.wait_for(
            create_conn(
                host.strip("[]"),
                int(port),
                client_id=opts["client_id"],
                request_timeout_ms=int(timeout * 1000),
                ssl_context=opts.get("ssl_context"),
                security_protocol=opts["security_protocol"],
                sasl_mechanism=opts.get("sasl_mechanism", "PLAIN"),
                sasl_plain_username=opts.get("sasl_plain_username"),
                sasl_plain_password=opts.get("sasl_plain_password"),
            ),
            timeout + 1,
        )
    except (Exception, TimeoutError) as exc:  # asyncio.CancelledError passes
        return exc
    conn.close()
    return None


def explain(cluster: ClusterSettings, listener: str, exc: BaseException) -> Problem:
    """One failure of a connection to `listener`, with the setting that fixes it."""
    protocol = cluster.security_protocol
    mechanism = cluster.sasl_mechanism
    env = f"LAGD_CLUSTERS_{cluster.name.upper().replace('-', '_')}_SASL_PASSWORD"
    ca = cluster.tls_ca_file or "empty: the system CAs"
    if isinstance(exc, SaslAuthenticationFailed):
        said = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)  # the broker's words
        return Problem(
            listener,
            f"SASL authentication failed: {said}",
            f"the broker refused user {cluster.sasl_username!r} with {mechanism}: check sasl-username and "
            f"sasl-password ({env}), and that the user has {mechanism} credentials on the cluster",
            settings=True,
        )
    if isinstance(exc, UnsupportedSaslMechanismError | IllegalSaslStateError):
        said = str(exc) if "mechanisms" in str(exc) else f"the listener does not take SASL {mechanism}"
        return Problem(
            listener,
            said,
            "set sasl-mechanism to one the listener enables, and security-protocol to the listener's",
            settings=True,
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or str(exc)
        if "mismatch" in reason:
            fix = (
                "the broker's certificate does not name the host lagd connects to: use a bootstrap address "
                "the certificate names, or set tls-check-hostname = false"
            )
        elif "expired" in reason or "not yet valid" in reason:
            fix = "renew the broker's certificate (or correct this machine's clock)"
        else:
            fix = f"lagd does not trust the broker's certificate: set tls-ca-file to the CA that signed it (now {ca})"
        return Problem(listener, f"TLS certificate verification failed: {reason}", fix, settings=True)
    if isinstance(exc, ssl.SSLError):
        return Problem(
            listener,
            f"TLS handshake failed: {exc.reason or exc}",
            f"check that this listener speaks TLS (security-protocol is {protocol}) and, for mutual TLS, "
            "tls-cert-file and tls-key-file",
            settings=True,
        )
    if isinstance(exc, socket.gaierror):
        return Problem(listener, f"cannot resolve the host: {exc}", "check bootstrap-servers")
    if isinstance(exc, ConnectionRefusedError):
        return Problem(
            listener, "connection refused", "check bootstrap-servers and that the brokers run and listen there"
        )
    if isinstance(exc, TimeoutError):
        return Problem(
            listener,
            "no answer in time",
            f"check bootstrap-servers, the network, and that this listener's security protocol is {protocol}",
        )
    if isinstance(exc, KafkaConnectionError):
        return Problem(
            listener,
            describe_error(exc),
            f"the broker closed the connection: check that security-protocol ({protocol}) and sasl-mechanism "
            "match this listener",
        )
    return Problem(listener, describe_error(exc), "check bootstrap-servers and the security settings")
