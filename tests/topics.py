"""Topics on the tests' real broker (Tansu), made the one way every test needs them."""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topic(kafka: str, name: str, partitions: int) -> None:
    """Create `name` with `partitions` partitions (replication 1: one broker)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()
