"""The keywords every aiokafka client of a cluster shares: one place that knows SASL and TLS.

`client_options` is pure (apart from reading TLS files into an SSL context) so the mapping
from settings to aiokafka keywords is testable without a broker. A module of its own so
the clients (kafka_client) and the diagnosis of a failed bootstrap (diagnose), which
kafka_client calls, both import it, never each other.
"""

from __future__ import annotations

from typing import Any

from aiokafka.helpers import create_ssl_context

from lagd.core.config import ClusterSettings


def client_options(cluster: ClusterSettings) -> dict[str, Any]:
    """Keyword arguments every aiokafka client of `cluster` shares (consumer, admin, client)."""
    opts: dict[str, Any] = {
        "bootstrap_servers": list(cluster.bootstrap_servers),
        "client_id": cluster.client_id,
        "security_protocol": cluster.security_protocol,
        "request_timeout_ms": int(cluster.request_timeout * 1000),
    }
    if cluster.security_protocol.startswith("SASL"):
        opts["sasl_mechanism"] = cluster.sasl_mechanism
        opts["sasl_plain_username"] = cluster.sasl_username
        opts["sasl_plain_password"] = cluster.sasl_password.reveal()
    if cluster.security_protocol in ("SSL", "SASL_SSL"):
        ctx = create_ssl_context(
            cafile=cluster.tls_ca_file or None,
            certfile=cluster.tls_cert_file or None,
            keyfile=cluster.tls_key_file or None,
            password=cluster.tls_key_password.reveal() or None,
        )
        ctx.check_hostname = cluster.tls_check_hostname
        opts["ssl_context"] = ctx
    return opts
