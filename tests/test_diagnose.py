"""Why lagd cannot reach a cluster, named per listener (lagd.ingest.diagnose), against a real
broker (Tansu: PLAINTEXT, no SASL). Refused passwords and untrusted certificates are proven on
Apache Kafka's SASL_SSL listener (tests/test_apache_kafka_security.py)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError

from lagd.core.config import ClusterSettings, Secret
from lagd.ingest.diagnose import diagnose

UNABLE = KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9092, <AddressFamily.AF_INET: 2>)]")


def _cluster(kafka: str, **keys: Any) -> ClusterSettings:
    return ClusterSettings(name="prod", bootstrap_servers=[kafka], request_timeout=2.0, **keys)


@pytest.mark.parametrize(
    ("keys", "error", "fix"),
    [
        # TLS spoken to a listener that does not: no answer to the handshake
        ({"security_protocol": "SSL"}, "no answer in time", "this listener's security protocol is SSL"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "lagd"},
            "the listener does not take SASL SCRAM-SHA-512",
            "set sasl-mechanism to one the listener enables",
        ),
    ],
)
async def test_a_listener_that_speaks_otherwise_is_named_with_the_key_to_change(
    kafka: str, keys: dict[str, Any], error: str, fix: str
) -> None:
    problem = await diagnose(_cluster(kafka, sasl_password=Secret("pw"), **keys), UNABLE)
    assert problem is not None and problem.listener == kafka, problem
    assert problem.error == error and fix in problem.fix, problem


async def test_a_host_that_does_not_resolve_is_named() -> None:
    problem = await diagnose(_cluster("no-such-host.invalid:9092"), UNABLE)
    assert problem is not None and problem.listener == "no-such-host.invalid:9092", problem
    assert problem.error.startswith("cannot resolve the host") and problem.fix == "check bootstrap-servers", problem


async def test_a_listener_that_lets_lagd_in_is_no_problem(kafka: str) -> None:
    """The bootstrap failed, but each address answers when tried again (brokers came back): no cause to name."""
    assert await diagnose(_cluster(kafka), UNABLE) is None


async def test_failures_after_the_bootstrap_are_left_to_the_readers(kafka: str) -> None:
    assert await diagnose(_cluster(kafka), NodeNotReadyError("node 1")) is None
