"""The pure parts of starting Apache Kafka (lagd.embedded.kafka): no JVM here."""

from __future__ import annotations

import base64

from lagd.embedded.kafka import _cluster_id, _distinct_ports


def test_cluster_ids_are_kafkas_shape_and_never_read_as_an_option() -> None:
    """16 bytes in URL-safe base64 without padding; none starts with "-" (one in 64 would)."""
    ids = [_cluster_id() for _ in range(3000)]
    assert len(set(ids)) == len(ids)
    for cluster_id in ids:
        assert not cluster_id.startswith("-"), cluster_id
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_a_clusters_ports_are_all_different() -> None:
    ports = _distinct_ports(12)
    assert len(set(ports)) == 12
    assert all(20000 <= p < 32000 for p in ports)
