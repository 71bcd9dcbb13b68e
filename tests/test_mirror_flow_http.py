"""A MirrorMaker 2 flow's verdict as users see it: /lagd/v1/mirrors/<m>/flow, /metrics and the
status page, from a real server over a context holding one flow (lagd.ingest.mirror_flows)."""

from __future__ import annotations

import dataclasses

import aiohttp

from lagd.core.config import MirrorSettings, Settings
from lagd.evaluate.mirror_flow import FailoverGap, FlowVerdict
from lagd.ingest.mirror_flows import MirrorFlows
from tests.http_state import CLUSTER, NOW, build_context, build_settings, serve

STALLED = FlowVerdict(
    "dr",
    "STALLED",
    "no heartbeat replicated for 41 s (limit 30 s): MirrorMaker 2 is stopped or cannot copy",
    NOW,
    NOW - 41_000,
    41.0,
    40.0,
    0.9,
    (
        FailoverGap("billing", "src.orders", 0, 498, 495, 3),
        FailoverGap("billing", "src.orders", 1, 500, 498, 2),
        FailoverGap("audit", "src.orders", 0, 10, 10, 0),
    ),
)


def settings_with_mirrors() -> Settings:
    settings = build_settings()
    mirrors = {
        "dr": MirrorSettings(name="dr", source=CLUSTER, target=CLUSTER, rename="prefix", prefix="src."),
        "plain": MirrorSettings(name="plain", source=CLUSTER, target=CLUSTER),  # no MM2 alias
        "young": MirrorSettings(name="young", source=CLUSTER, target=CLUSTER, mm2_alias="eu"),
    }
    return dataclasses.replace(settings, mirrors=mirrors)


async def test_a_flow_is_shown_by_the_api_the_metrics_and_the_status_page() -> None:
    ctx = build_context(settings_with_mirrors(), mirror_flows=MirrorFlows(verdicts={"dr": STALLED}))
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        async with s.get("/lagd/v1/mirrors/dr/flow") as resp:
            assert resp.status == 200
            body = await resp.json()
        assert (body["status"], body["heartbeat_age_s"], body["delay_s"]) == ("STALLED", 41.0, 40.0)
        assert (body["newest_heartbeat_at"], body["delay_trend_s_per_min"]) == (NOW - 41_000, 0.9)
        assert [(g["group"], g["partition"], g["records"]) for g in body["failover"]] == [
            ("billing", 0, 3),
            ("billing", 1, 2),
            ("audit", 0, 0),
        ]
        async with s.get("/lagd/v1/mirrors/plain/flow") as resp:
            assert resp.status == 404 and "mm2-alias" in (await resp.json())["message"]
        async with s.get("/lagd/v1/mirrors/young/flow") as resp:
            assert resp.status == 503 and "retry" in (await resp.json())["message"]
        async with s.get("/metrics") as resp:
            metrics = await resp.text()
        assert 'lagd_mirror_heartbeat_age_seconds{mirror="dr"} 41' in metrics
        assert 'lagd_mirror_delay_seconds{mirror="dr"} 40' in metrics
        assert 'lagd_mirror_flow_status{mirror="dr",status="STALLED"} 1' in metrics
        assert 'lagd_mirror_flow_status{mirror="dr",status="OK"} 0' in metrics
        assert 'lagd_mirror_failover_gap_records{mirror="dr",group="billing"} 5' in metrics
        async with s.get("/") as resp:
            page = await resp.text()
        assert "mirrors (MirrorMaker 2)" in page and "no heartbeat replicated for 41 s" in page
        assert "audit: 0, billing: 5" in page


async def test_without_mirror_maker_flows_nothing_is_added() -> None:
    ctx = build_context(build_settings())
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s:
        async with s.get("/metrics") as resp:
            assert "lagd_mirror_" not in await resp.text()
        async with s.get("/") as resp:
            assert "MirrorMaker 2" not in await resp.text()
