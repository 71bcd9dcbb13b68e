"""/metrics: Burrow's series and lagd's own, exact values for a known State, and the
cardinality setting. The exposition is parsed strictly (one HELP/TYPE per family, before
its samples; every sample line well formed)."""

from __future__ import annotations

import asyncio
import re
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from lagd.core.config import ConfigError
from lagd.core.config import parse as parse_settings
from lagd.core.model import IngestCounters
from lagd.evaluate.sight import ClusterSight
from lagd.http import metrics
from lagd.http.context import HttpContext
from lagd.ingest.progress import ReaderProgress
from lagd.notify.mqtt import PublisherStatus
from lagd.runtime.loop_lag import LoopLag
from lagd.state.persister import PersisterStatus
from tests.http_state import CLUSTER, NOW, build_context, build_settings, build_state, serve

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_]+="(?:[^"\\]|\\.)*",?)*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"')

Key = tuple[str, frozenset[tuple[str, str]]]


def parse(text: str) -> tuple[dict[Key, float], dict[str, str]]:
    """Samples by (name, labels) and each family's TYPE; fails on anything malformed."""
    samples: dict[Key, float] = {}
    types: dict[str, str] = {}
    helped: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert name not in helped, f"HELP twice for {name}"
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name not in types and kind in ("gauge", "counter")
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"malformed sample line {line!r}"
            name, labels, value = m.groups()
            assert name in types, f"{name} sampled before its TYPE"
            key = (name, frozenset(LABEL.findall(labels or "")))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = float(value)
    assert helped == set(types)
    return samples, types


def series(samples: dict[Key, float], name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def lab(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


def health_context(detail: str = "partition", **http: Any) -> HttpContext:
    ctx = build_context(build_settings(metrics_detail=detail, **http))
    counters = IngestCounters()
    for kind in ("offset_commit", "offset_commit", "group_metadata"):
        counters.count_record(kind)
    counters.count_error("unknown_key_version")
    progress = ReaderProgress()
    progress.measure({0: 0, 1: 0}, {0: 10, 1: 30})
    progress.advance(0, 10)
    ctx.health.counters = {"prod": counters}
    ctx.health.progress = {"prod": progress}
    ctx.health.persister = PersisterStatus(
        log_appended=900,
        log_copy_groups_left=7,
        log_copies=2,
        pending=12,
        write_seconds_last=0.25,
        dropped_history=3,
        healthy=False,
        backlog_wait_seconds=1.5,
        requested_checkpoints=4,
    )
    ctx.health.publisher = PublisherStatus(connected=True, leader=True, pending=4, published_total=17)
    ctx.health.loop_lag = LoopLag()
    ctx.health.watch = SimpleNamespace(pass_seconds=0.125, cycle_seconds=2.5)
    at = ctx.now_ms()
    ctx.health.sights = {
        "prod": ClusterSight("prod", at - 45_000, False, "offsets reader is 45 s behind", behind=True),
        "dr": ClusterSight("dr", at - 100_000, True, "no log-end sample for 100 s"),
    }
    now = time.monotonic()
    ctx.health.loop_lag.note(now - 120, 0.9)  # older than a minute: no longer the worst
    ctx.health.loop_lag.note(now - 1, 0.07)
    ctx.health.loop_lag.note(now, 0.002)
    return ctx


async def scrape(detail: str) -> tuple[dict[Key, float], dict[str, str], str]:
    async with serve(health_context(detail)) as base, aiohttp.ClientSession(base) as s, s.get("/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    samples, types = parse(text)
    return samples, types, text


async def test_burrow_series_exact() -> None:
    samples, types, _ = await scrape("partition")
    g = {g: lab(cluster="prod", consumer_group=g) for g in ("g-ok", "g-warn", "g-stall", "g-rewind", "g-stop")}
    # Burrow's index: NOTFOUND 0, OK 1, WARN 2, ERR 3, STOP 4, STALL 5, REWIND 6
    assert series(samples, "burrow_kafka_consumer_status") == {
        g["g-ok"]: 1, g["g-warn"]: 2, g["g-stall"]: 3, g["g-rewind"]: 3, g["g-stop"]: 3
    }  # fmt: skip
    assert series(samples, "burrow_kafka_consumer_lag_total") == {
        g["g-ok"]: 0, g["g-warn"]: 1500, g["g-stall"]: 2950, g["g-rewind"]: 2600, g["g-stop"]: 6700
    }  # fmt: skip

    def p(group: str, topic: str, partition: int) -> frozenset[tuple[str, str]]:
        return lab(cluster="prod", consumer_group=group, topic=topic, partition=str(partition))

    # Partitions of a consumed topic without commits are in the group's status (OK, lag 0), so
    # they have lag and status series; a current offset only where there is a commit.
    padded = [p("g-ok", "orders", 1), p("g-stall", "events", 1), p("g-rewind", "events", 1), p("g-stop", "events", 0)]
    assert series(samples, "burrow_kafka_consumer_partition_lag") == {
        p("g-ok", "orders", 0): 0,
        p("g-warn", "orders", 0): 0,
        p("g-warn", "orders", 1): 1500,
        p("g-stall", "events", 0): 2950,
        p("g-rewind", "events", 0): 2600,
        p("g-stop", "events", 1): 6700,
        **dict.fromkeys(padded, 0),
    }
    assert series(samples, "burrow_kafka_consumer_current_offset") == {
        p("g-ok", "orders", 0): 300,
        p("g-warn", "orders", 0): 300,
        p("g-warn", "orders", 1): 1500,
        p("g-stall", "events", 0): 50,
        p("g-rewind", "events", 0): 400,
        p("g-stop", "events", 1): 300,
    }
    assert series(samples, "burrow_kafka_topic_partition_status") == {
        p("g-ok", "orders", 0): 1,
        p("g-warn", "orders", 0): 1,
        p("g-warn", "orders", 1): 2,
        p("g-stall", "events", 0): 5,
        p("g-rewind", "events", 0): 6,
        p("g-stop", "events", 1): 4,
        **dict.fromkeys(padded, 1),
    }
    assert series(samples, "burrow_kafka_topic_partition_offset") == {
        lab(cluster="prod", topic="events", partition="0"): 3000,
        lab(cluster="prod", topic="events", partition="1"): 7000,
        lab(cluster="prod", topic="orders", partition="0"): 300,
        lab(cluster="prod", topic="orders", partition="1"): 3000,
    }
    # lag in seconds: g-warn's committed 1500 lies halfway between the log ends 1000 (9.999 s)
    # and 2000 (19.999 s), so it was reached at 14.999 s; now is 30 s
    assert series(samples, "lagd_consumer_lag_seconds")[g["g-warn"]] == 15.001
    assert series(samples, "lagd_consumer_lag_seconds")[g["g-ok"]] == 0.0
    assert series(samples, "lagd_consumer_partition_lag_seconds")[p("g-warn", "orders", 1)] == 15.001
    # exact within the kept samples: not a lower bound
    assert series(samples, "lagd_consumer_lag_seconds_lower_bound")[g["g-warn"]] == 0
    assert types["burrow_kafka_consumer_status"] == "gauge"


async def test_lagd_health_series_exact() -> None:
    samples, types, _ = await scrape("partition")
    assert series(samples, "lagd_ingest_records_total") == {
        lab(cluster="prod", type="group_metadata"): 1,
        lab(cluster="prod", type="offset_commit"): 2,
    }
    assert series(samples, "lagd_ingest_decode_errors_total") == {lab(cluster="prod", reason="unknown_key_version"): 1}
    assert types["lagd_ingest_records_total"] == "counter"
    assert series(samples, "lagd_reader_caught_up") == {lab(cluster="prod"): 0}
    assert series(samples, "lagd_reader_progress_ratio") == {lab(cluster="prod"): 0.25}
    # a reader behind holds verdicts but is not the cluster's fault; an unreachable one is
    assert series(samples, "lagd_cluster_degraded") == {lab(cluster="dr"): 1, lab(cluster="prod"): 0}
    behind = series(samples, "lagd_offsets_reader_behind_seconds")
    assert behind == {lab(cluster="dr"): 0, lab(cluster="prod"): pytest.approx(45, abs=5)}  # 45 s, as of the scrape
    flat = {name: series(samples, name).get(frozenset()) for name in types}
    assert {k: flat[k] for k in (
        "lagd_store_pending_changes", "lagd_store_write_seconds", "lagd_store_healthy",
        "lagd_store_dropped_history_total", "lagd_mqtt_connected", "lagd_mqtt_publish_leader", "lagd_outbox_pending",
        "lagd_mqtt_published_total", "lagd_event_loop_lag_seconds", "lagd_event_loop_stalls_total",
        "lagd_verdict_pass_seconds", "lagd_verdict_cycle_seconds", "lagd_store_backlog_wait_seconds_total",
        "lagd_store_postgres_requested_checkpoints", "lagd_store_window_log_appended_windows",
        "lagd_store_window_log_copy_groups_left", "lagd_store_window_log_copies_total",
    )} == {
        "lagd_store_pending_changes": 12, "lagd_store_write_seconds": 0.25, "lagd_store_healthy": 0,
        "lagd_store_dropped_history_total": 3, "lagd_mqtt_connected": 1, "lagd_mqtt_publish_leader": 1,
        "lagd_outbox_pending": 4,
        "lagd_mqtt_published_total": 17, "lagd_event_loop_lag_seconds": 0.07, "lagd_event_loop_stalls_total": 2,
        "lagd_verdict_pass_seconds": 0.125, "lagd_verdict_cycle_seconds": 2.5,
        "lagd_store_backlog_wait_seconds_total": 1.5, "lagd_store_postgres_requested_checkpoints": 4,
        "lagd_store_window_log_appended_windows": 900, "lagd_store_window_log_copy_groups_left": 7,
        "lagd_store_window_log_copies_total": 2,
    }  # fmt: skip
    seconds = flat["lagd_evaluation_seconds"]
    assert seconds is not None and seconds >= 0.0


async def test_group_detail_drops_partition_series() -> None:
    full, _, _ = await scrape("partition")
    grouped, types, _ = await scrape("group")
    per_partition = {
        "burrow_kafka_consumer_partition_lag",
        "burrow_kafka_consumer_current_offset",
        "burrow_kafka_topic_partition_status",
        "burrow_kafka_topic_partition_offset",
        "lagd_consumer_partition_lag_seconds",
    }
    assert not per_partition & set(types)
    assert {k for k in full if k[0] not in per_partition} == set(grouped)
    # four series per committed group-partition (six), three per partition without commits
    # (four: no current offset), topic offsets (four)
    assert len(full) - len(grouped) == 6 * 4 + 4 * 3 + 4


async def test_auto_detail_drops_partition_series_past_the_limit_and_says_so() -> None:
    """The default: per-partition series while the state holds at most metrics-partition-limit
    group-partitions; past it the page is the "group" one, the log says once what to set, and
    lagd_metrics_partitions_omitted counts what was left out."""
    full, _, _ = await scrape("partition")
    grouped, _, _ = await scrape("group")
    tracked = build_state().partitions_tracked()
    ctx = health_context("auto", metrics_partition_limit=tracked)
    omitted = ("lagd_metrics_partitions_omitted", frozenset())

    async def page() -> dict[Key, float]:
        async with serve(ctx) as base, aiohttp.ClientSession(base) as s, s.get("/metrics") as resp:
            assert resp.status == 200
            return parse(await resp.text())[0]

    def without(samples: dict[Key, float], *names: str) -> set[Key]:
        return {k for k in samples if k[0] not in names}

    with capture_logs() as logged:
        at_limit = await page()
        assert at_limit[omitted] == 0
        assert without(at_limit, "lagd_evaluation_seconds") == without(full, "lagd_evaluation_seconds")
        from lagd.core.model import Commit

        ctx.state.apply(Commit("prod", "g-ok", "orders", 99, 5, 6, 30_000, 30_000))  # one more: past the limit
        for _ in range(2):
            past = await page()
            assert past[omitted] == tracked + 1
            assert without(past, "lagd_evaluation_seconds") == without(grouped, "lagd_evaluation_seconds")
        assert ctx.state.remove_group("prod", "g-ok")
        again = await page()
        assert again[omitted] == 0
        assert (
            "burrow_kafka_consumer_partition_lag",
            lab(cluster="prod", consumer_group="g-warn", topic="orders", partition="0"),
        ) in again
    said = [(e["log_level"], e["event"]) for e in logged if "/metrics" in e["event"]]
    assert said == [
        (
            "warning",
            "/metrics leaves out per-partition series: more group-partitions than http.metrics-partition-limit",
        ),
        ("info", "/metrics has per-partition series again"),
    ]
    warning = next(e for e in logged if e["log_level"] == "warning")
    assert warning["group_partitions"] == tracked + 1 and "metrics-detail" in warning["hint"]


def test_partition_limit_must_not_be_negative() -> None:
    toml = {"clusters": {"prod": {"bootstrap-servers": ["k:9092"]}}, "http": {"metrics-partition-limit": -1}}
    with pytest.raises(ConfigError, match=r"http\.metrics-partition-limit"):
        parse_settings(toml, env={})
    assert parse_settings({**toml, "http": {}}, env={}).http.metrics_detail == "auto"


async def test_label_values_are_escaped() -> None:
    ctx = health_context()
    from lagd.core.model import Commit

    ctx.state.apply(Commit("prod", 'we"ird\\g\nroup', "orders", 0, 300, 999, 30_000, 30_000))
    ctx.state.apply(Commit("prod", "plain", 'ord"ers\\', 3, 300, 1000, 30_000, 30_000))
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s, s.get("/metrics") as resp:
        samples, _ = parse(await resp.text())
    assert (
        series(samples, "burrow_kafka_consumer_status")[lab(cluster="prod", consumer_group='we\\"ird\\\\g\\nroup')] == 1
    )
    # per-partition lines are built apart from the group ones: a topic's label is escaped there too
    partition = lab(cluster="prod", consumer_group="plain", topic='ord\\"ers\\\\', partition="3")
    for family in ("burrow_kafka_consumer_partition_lag", "burrow_kafka_topic_partition_status"):
        assert partition in series(samples, family)


async def test_each_snapshot_hands_the_loop_back_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages over every group (/lagd/v1/groups, the status page) judge them all in slices,
    other tasks running between them, never in one go."""
    ctx = build_context()
    monkeypatch.setattr(metrics, "SLICE_S", 0.0)  # a slice per group
    events: list[str] = []

    async def other() -> None:
        while True:
            events.append("-")
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    async for v in metrics.each_snapshot(ctx, NOW):
        events.append(v.group)
    task.cancel()
    groups = [e for e in events if e != "-"]
    assert len(groups) >= 3 and sorted(groups) == sorted(
        g for g in ctx.state.groups(CLUSTER) if ctx.evaluator.group(CLUSTER, g, NOW).status.value != "NOTFOUND"
    )
    assert all(events[k + 1] == "-" for k, e in enumerate(events[:-1]) if e != "-")  # a turn after each group


def test_a_page_joined_in_blocks_as_it_renders_is_the_same_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines are joined into blocks while the page renders (a list of a string per line made
    every collection of the garbage collector walk them): the same text, joined as it renders."""
    ctx = build_context(build_settings(metrics_detail="partition"))

    def page(block_lines: int) -> list[str]:
        monkeypatch.setattr(metrics, "BLOCK_LINES", block_lines)
        out: list[str] = []
        for _ in metrics.render_steps(ctx.state, ctx.evaluator, ctx.health, NOW, "partition", out):
            pass
        return out

    def steady(text: str) -> str:  # the render's own duration differs from one render to the next
        return "".join(line for line in text.splitlines(True) if "evaluation_seconds" not in line)

    by_line, in_blocks = page(10**9), page(3)
    assert steady("".join(in_blocks)) == steady("".join(by_line))
    assert "".join(by_line).count("\nburrow_kafka_consumer_partition_lag{") == 10  # more than a block of 3
    # joined a few groups at a time as they rendered, not all at the end
    holding = [p for p in in_blocks if "burrow_kafka_consumer_partition_lag{" in p]
    assert len(holding) >= 2 and all(p.count("\n") < 10 for p in holding)
