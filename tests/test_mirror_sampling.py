"""Mirrored topics are sampled on both clusters even when no group consumes them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from lagd.core.config import parse
from lagd.core.model import IngestCounters, LogEndSample, TopicDeleted
from lagd.daemon import mirror_patterns
from lagd.ingest.log_end import sample_log_ends
from lagd.sim.driver import Driver
from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec
from tests.test_ingest_kafka import Store, cluster, drive, running

Settle = Callable[..., Awaitable[Any]]


def test_mirror_patterns_cover_source_and_renamed_target_topics() -> None:
    s = parse(
        {
            "clusters": {"dc1": {"bootstrap-servers": ["a:1"]}, "dc2": {"bootstrap-servers": ["b:1"]}},
            "mirrors": {
                "m": {"source": "dc1", "target": "dc2", "topics": "^orders", "rename": "prefix", "prefix": "dc1."}
            },
        },
        env={},
    )
    src = mirror_patterns(s, "dc1")
    tgt = mirror_patterns(s, "dc2")
    assert [p.pattern for p in src] == ["^orders"]
    assert any(p.search("dc1.orders-eu") for p in tgt) and not any(p.search("orders-eu") for p in tgt)


async def test_unconsumed_topic_matching_a_mirror_pattern_is_sampled(kafka: str, unique: str, settle: Settle) -> None:
    mirrored = TopicSpec(f"mirror-src-{unique}", 2, rate=1.0)
    other = TopicSpec(f"other-{unique}", 2, rate=1.0)
    driver = Driver(kafka, Scenario((mirrored, other), (GroupSpec(f"g-{unique}", ()),)), mode="produce")
    await driver.start()
    try:
        await drive(driver, 2)
        store, stop = Store(), asyncio.Event()
        sampler = sample_log_ends(
            cluster(kafka),
            list,  # no group consumes anything
            store,
            IngestCounters(),
            stop,
            patterns=[re.compile(f"^mirror-src-{unique}$")],
            known=[f"gone-while-down-{unique}"],
        )
        async with running(sampler):
            await settle(lambda: any(isinstance(e, LogEndSample) for e in store.events), what="a sample round")
            latest = {(e.topic, e.partition): e.offset for e in store.events if isinstance(e, LogEndSample)}
            assert latest == {(mirrored.name, p): driver.produced[(mirrored.name, p)] for p in range(2)}
            # A topic sampled before a restart and gone since is reported deleted, once a
            # second metadata answer confirms it (one absence may be a broker's error).
            gone = TopicDeleted("sim", f"gone-while-down-{unique}")
            await settle(lambda: gone in store.events, what="TopicDeleted")
    finally:
        await driver.close()
