"""/metrics in the Prometheus text format, written directly from verdicts and live status.

Burrow's metric names and labels (core/internal/httpserver/prometheus.go) keep existing
alerts working; lagd's own series follow. No global registry: every scrape renders the
groups the state holds, so removed groups vanish at once, each from the verdict watch's
snapshot of its last verdict (lagd.evaluate.snapshot): a scrape judges no group the watch
has judged. The per-partition series dominate cardinality (4 a group-partition):
`http.metrics-detail = "group"` drops them, and the default "auto" drops them while the state
holds more than `http.metrics-partition-limit` group-partitions, saying so in the log and in
`lagd_metrics_partitions_omitted`.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from aiohttp import web

from lagd.core.model import GroupStatus
from lagd.evaluate import Evaluator
from lagd.evaluate.clearing import snapshot_clearing
from lagd.evaluate.mirror_flow import FLOW_STATUSES
from lagd.evaluate.probe import BROKER_STATUSES
from lagd.evaluate.snapshot import GroupSnapshot, Snapshots
from lagd.http.context import CTX, Health, HttpContext
from lagd.ingest.mirror_flows import MirrorFlows
from lagd.ingest.probe import Probes
from lagd.ingest.share_groups import ShareGroups
from lagd.ingest.validate import REASONS as REJECT_REASONS
from lagd.runtime import logs
from lagd.runtime.slices import SLICE_S, Slices
from lagd.runtime.turns import Turn
from lagd.state.windows import State

log = logs.get(__name__)

# Burrow's status index: NOTFOUND, OK, WARN, ERR, STOP, STALL, REWIND.
STATUS_INDEX: dict[str, int] = {
    s: i for i, s in enumerate(("NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND"))
}

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CHUNK_CHARS = 1 << 19  # text joined, encoded and written at a time: about 512 KB
# Lines a family keeps apart before they are joined into one block while the page renders. A
# list of one string per line is traversed item by item by the garbage collector: the 400k lines
# of a page at 100k group-partitions made each young collection 20 ms and each middle one 8 ms
# while the page was rendered and sent (bench_http: /metrics steps of 14-16 ms). Blocks of this
# many lines keep every list short.
BLOCK_LINES = 4_096


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Family:
    """One metric family: HELP and TYPE once, then its samples (`out`: lines not yet joined into
    `blocks`, see BLOCK_LINES)."""

    def __init__(self, out: list[str], name: str, kind: str, help_text: str) -> None:
        self.out = out
        self.name = name
        self.blocks: list[str] = []
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")

    def add(self, labels: str, value: float | int) -> None:
        self.out.append(f"{self.name}{{{labels}}} {_num(value)}\n" if labels else f"{self.name} {_num(value)}\n")

    def settle(self) -> None:
        """Join the lines so far into one block once there are BLOCK_LINES of them (`out` is
        emptied in place: the render appends to it through a local name)."""
        if len(self.out) >= BLOCK_LINES:
            self.blocks.append("".join(self.out))
            self.out.clear()

    def text(self) -> list[str]:
        """The family's text in order: its blocks, then what is not joined yet."""
        return [*self.blocks, "".join(self.out)]


def group_snapshots(
    state: State, evaluator: Evaluator, snapshots: Snapshots | None, now_ms: int, cluster: str | None = None
) -> Iterator[GroupSnapshot]:
    """Every known group's snapshot (of `cluster`, or of all), NOTFOUND left out: the one the
    verdict watch keeps where it has judged the group; else the group is judged now into a
    snapshot (Evaluator.snapshot: no verdict, nothing in the response cache), kept for the next
    page until the watch judges it."""
    for name in list(state.clusters()) if cluster is None else [cluster]:
        for group in list(state.groups(name)):  # groups may come and go between slices
            snap = snapshots.get(name, group) if snapshots is not None else None
            if snap is None:
                snap = evaluator.snapshot(name, group, now_ms)
                if snap.status is GroupStatus.NOTFOUND:
                    continue
                if snapshots is not None:
                    snap = snapshots.keep(snap)
            yield snap


async def each_snapshot(ctx: HttpContext, now_ms: int, cluster: str | None = None) -> AsyncIterator[GroupSnapshot]:
    """`group_snapshots`, handing the loop back every SLICE_S (a group not judged yet costs an
    evaluation: many of them while lagd catches up)."""
    slices = Slices(SLICE_S, ctx.turns.turn)
    for snap in group_snapshots(ctx.state, ctx.evaluator, ctx.snapshots, now_ms, cluster):
        yield snap
        await slices.turn()


_GROUP_FAMILIES = (
    ("burrow_kafka_consumer_status", "gauge", "Status index of the group: NOTFOUND, OK, WARN, ERR"),
    ("burrow_kafka_consumer_lag_total", "gauge", "Sum of the current lag of the group's partitions"),
    ("lagd_consumer_lag_seconds", "gauge", "How far behind the group is in time (highest partition)"),
    (
        "lagd_consumer_lag_seconds_lower_bound",
        "gauge",
        "1 when a lagging partition's lag in seconds is only a lower bound (older than every kept log-end sample)",
    ),
    (
        "lagd_consumer_records_lost",
        "gauge",
        "Records retention deleted before the group read them, summed over its partitions now below the log start",
    ),
)
_CLEAR_FAMILY = (
    "lagd_group_clear_seconds",
    "gauge",
    "Seconds until a catching-up group's lag is expected to reach zero at its drain rate (only while predicted)",
)
_PARTITION_FAMILIES = (
    ("burrow_kafka_consumer_partition_lag", "gauge", "Messages the group is behind on a partition"),
    ("burrow_kafka_consumer_current_offset", "gauge", "Newest committed offset (full windows only)"),
    ("burrow_kafka_topic_partition_status", "gauge", "Status index of a partition: OK=1 ... REWIND=6"),
    ("lagd_consumer_partition_lag_seconds", "gauge", "How far behind a partition is in time"),
    (
        "lagd_consumer_partition_retention_used",
        "gauge",
        "Share of what the log retains that the group still has to read: lag / (log end - log start); 1 or more: at or past the log start",
    ),
    (
        "lagd_consumer_partition_records_lost",
        "gauge",
        "Records retention deleted before the group read them (committed offset below the log start)",
    ),
)


def _spans(state: State, cluster: str, topic: str) -> dict[int, int]:
    """Log end - log start of each partition of the topic with a log-start sample (the records
    the log retains; lagd_consumer_partition_retention_used divides the lag by it)."""
    starts = state.topic_log_starts(cluster, topic)
    if not starts:
        return {}
    ends = state.topic_offsets(cluster, topic) or []
    return {p: max(0, ends[p] - s[-1][1]) for p, s in starts.items() if s and p < len(ends)}


def render_steps(
    state: State,
    evaluator: Evaluator,
    health: Health,
    now_ms: int,
    detail: str,
    out: list[str],
    snapshots: Snapshots | None = None,
) -> Iterator[None]:
    """Render the exposition page into `out`, yielding after every group and topic so the caller
    can hand the event loop back: a page of 100k series is long work. Groups come from the
    verdict watch's `snapshots` (see group_snapshots). Each family's samples are collected apart
    and joined at the end, as the text format wants them contiguous."""
    started = time.process_time()
    per_partition = detail == "partition"
    families = [_Family([], name, kind, help_text) for name, kind, help_text in _GROUP_FAMILIES]
    status_f, total_f, seconds_f, bound_f, lost_f = families
    clear_f = _Family([], *_CLEAR_FAMILY)
    families.append(clear_f)
    if per_partition:
        part_families = [_Family([], name, kind, help_text) for name, kind, help_text in _PARTITION_FAMILIES]
        families += part_families
        lag_f, offset_f, pstatus_f, pseconds_f, used_f, plost_f = part_families
    for v in group_snapshots(state, evaluator, snapshots, now_ms):
        lab = f'cluster="{_esc(v.cluster)}",consumer_group="{_esc(v.group)}"'
        status_f.add(lab, STATUS_INDEX[v.status.value])
        total_f.add(lab, v.totallag)
        seconds_f.add(lab, v.lag_seconds)
        bound_f.add(lab, v.lag_seconds_bound)
        lost_f.add(lab, sum(n.lost for n in v.retention))
        if v.totallag > 0 and (clearing := snapshot_clearing(state, v)) is not None:
            clear_f.add(lab, round(clearing.clears_in(now_ms), 1))
        if per_partition:
            for n in v.retention:
                if n.lost:
                    plost_f.add(f'{lab},topic="{_esc(n.topic)}",partition="{n.partition}"', n.lost)
            spans = [_spans(state, v.cluster, topic) for topic in v.topics]
            # 4 lines a partition, 400k for 100k group-partitions: the lines are built here, not
            # through _Family.add, and the labels up to the partition number once per topic
            heads = [f'{lab},topic="{_esc(topic)}",partition="' for topic in v.topics]
            lag_out, offset_out, pstatus_out, pseconds_out = lag_f.out, offset_f.out, pstatus_f.out, pseconds_f.out
            lag_n, offset_n, pstatus_n, pseconds_n = lag_f.name, offset_f.name, pstatus_f.name, pseconds_f.name
            for t, partition, current_lag, offset, status, lag_s in v.partition_values():
                plab = f'{heads[t]}{partition}"}} '
                lag_out.append(f"{lag_n}{{{plab}{current_lag}\n")
                if offset >= 0:
                    offset_out.append(f"{offset_n}{{{plab}{offset}\n")
                pstatus_out.append(f"{pstatus_n}{{{plab}{STATUS_INDEX[status.value]}\n")
                seconds = repr(lag_s) if math.isfinite(lag_s) else _num(lag_s)  # as _num writes a float
                pseconds_out.append(f"{pseconds_n}{{{plab}{seconds}\n")
                span = spans[t].get(partition)
                if span is not None:
                    used_f.out.append(
                        f"{used_f.name}{{{plab}{_num(current_lag / span if span else (math.inf if current_lag else 0.0))}\n"
                    )
        for f in families:
            f.settle()
        yield
    health.evaluation_seconds_last = time.process_time() - started
    if per_partition:
        offsets_f = _Family(
            [], "burrow_kafka_topic_partition_offset", "gauge", "Newest log-end offset of a topic partition"
        )
        families.append(offsets_f)
        reports = health.reports_topic
        for cluster in state.clusters():
            for topic in state.topics(cluster):
                if reports is not None and not reports(cluster, topic):
                    continue
                for partition, offset in enumerate(state.topic_offsets(cluster, topic) or ()):
                    offsets_f.add(f'cluster="{_esc(cluster)}",topic="{_esc(topic)}",partition="{partition}"', offset)
                offsets_f.settle()
                yield
    for f in families:
        out.extend(f.text())
    _health(out, health, now_ms)


def render(
    state: State,
    evaluator: Evaluator,
    health: Health,
    now_ms: int,
    detail: str = "partition",
    snapshots: Snapshots | None = None,
) -> str:
    """The whole exposition page, at once (tests, tools); the handler renders it in slices."""
    out: list[str] = []
    for _ in render_steps(state, evaluator, health, now_ms, detail, out, snapshots):
        pass
    return "".join(out)


def share_group_series(out: list[str], view: ShareGroups) -> None:
    """Share groups (KIP-932) as Kafka reports them: lag and start offset per share-partition
    where Kafka knows them, and each group's total (lagd.ingest.share_groups)."""
    lag = _Family(
        out, "lagd_share_group_lag", "gauge", "Records of a share-partition not yet acknowledged, as Kafka reports it"
    )
    start = _Family(
        [], "lagd_share_group_start_offset", "gauge", "Start offset of a share-partition, as Kafka reports it"
    )
    total = _Family([], "lagd_share_group_total_lag", "gauge", "Sum of a share group's known share-partition lags")
    for cluster, groups in sorted(view.groups.items()):
        for name, g in sorted(groups.items()):
            labels = f'cluster="{_esc(cluster)}",group="{_esc(name)}"'
            for p in g.partitions:
                part = f'{labels},topic="{_esc(p.topic)}",partition="{p.partition}"'
                if p.lag is not None:
                    lag.add(part, p.lag)
                if p.start_offset is not None:
                    start.add(part, p.start_offset)
            if g.total_lag is not None:
                total.add(labels, g.total_lag)
    out.extend(start.text())
    out.extend(total.text())


def mirror_flow_series(out: list[str], view: MirrorFlows) -> None:
    """MirrorMaker 2 flows (lagd.ingest.mirror_flows): heartbeat age, status, and each mirrored
    group's failover gap summed over its partitions (per partition at /lagd/v1/mirrors/<m>/flow)."""
    if not view.verdicts:
        return
    delay = _Family(
        out, "lagd_mirror_delay_seconds", "gauge",
        "How far the target is behind the source, from the heartbeats MirrorMaker 2 replicates (lagd.evaluate.mirror_flow)",
    )  # fmt: skip
    age = _Family(
        [], "lagd_mirror_heartbeat_age_seconds", "gauge",
        "Seconds since the newest heartbeat replicated to the target was emitted",
    )  # fmt: skip
    status = _Family([], "lagd_mirror_flow_status", "gauge", "1 for the flow's current status, 0 for the others")
    gap = _Family(
        [], "lagd_mirror_failover_gap_records", "gauge",
        "Records a mirrored group would read again if it moved to the target now (MM2's checkpoints)",
    )  # fmt: skip
    gap_s = _Family(
        [], "lagd_mirror_failover_gap_seconds", "gauge",
        "The longest stretch of the source's traffic a mirrored group would process again if it moved now",
    )  # fmt: skip
    dropped = _Family([], "lagd_mirror_checkpoints_dropped_total", "counter", "Checkpoints not kept (bound reached)")
    missing = _Family(
        [], "lagd_mirror_missing_partitions", "gauge",
        "Covered source partitions without a copy on the target for topic-missing-after (INCOMPLETE)",
    )  # fmt: skip
    for name, v in sorted(view.verdicts.items()):
        labels = f'mirror="{_esc(name)}"'
        if v.delay_s is not None:
            delay.add(labels, v.delay_s)
        if v.heartbeat_age_s is not None:
            age.add(labels, v.heartbeat_age_s)
        for s in FLOW_STATUSES:
            status.add(f'{labels},status="{s}"', 1 if v.status == s else 0)
        per_group: dict[str, int] = {}
        longest: dict[str, float] = {}
        for g in v.gaps:
            per_group[g.group] = per_group.get(g.group, 0) + g.records
            if g.seconds is not None:
                longest[g.group] = max(longest.get(g.group, 0.0), g.seconds)
        for group, records in sorted(per_group.items()):
            gap.add(f'{labels},group="{_esc(group)}"', records)
        for group, seconds in sorted(longest.items()):
            gap_s.add(f'{labels},group="{_esc(group)}"', seconds)
        dropped.add(labels, view.dropped_checkpoints.get(name, 0))
        missing.add(labels, sum(len(m.partitions) for m in v.missing))
    out.extend(age.text())
    out.extend(status.text())
    out.extend(gap.text())
    out.extend(gap_s.text())
    out.extend(dropped.text())
    out.extend(missing.text())


def probe_series(out: list[str], probes: Probes) -> None:
    """The end-to-end probe (lagd.ingest.probe), per broker: its status, produce-ack and end-to-end
    latency, probes sent, failed and lost (nothing while no cluster is probed)."""
    rows = [(c, b, v) for c, brokers in sorted(probes.verdicts.items()) for b, v in sorted(brokers.items())]
    if not rows:
        return
    status = _Family(
        out, "lagd_probe_broker_status", "gauge", "1 for the broker's current probe status, 0 for the others"
    )
    figures = [
        (_Family([], name, "gauge", help_text), field)
        for name, help_text, field in (
            ("lagd_probe_ack_seconds", "Produce-ack latency of the newest acknowledged probe (acks=all)", "ack_s"),
            ("lagd_probe_end_to_end_seconds", "Sent to read back, of the newest probe read back", "e2e_s"),
            ("lagd_probe_sent", "Probes sent to the broker's canary partition in the trailing window", "sent"),
            (
                "lagd_probe_failed",
                "Of them, writes that failed or were not acknowledged within probe-timeout",
                "failed",
            ),
            ("lagd_probe_lost", "Of them, acknowledged but not read back within probe-timeout", "lost"),
        )
    ]
    for cluster, broker, v in rows:
        labels = f'cluster="{_esc(cluster)}",broker="{broker}"'
        for s in BROKER_STATUSES:
            status.add(f'{labels},status="{s}"', 1 if v.status == s else 0)
        for family, field in figures:
            value = getattr(v, field)
            if value is not None:
                family.add(labels, value)
    for family, _ in figures:
        out.extend(family.text())


def _health(out: list[str], health: Health, now_ms: int) -> None:
    counters = sorted(health.counters.items())
    f = _Family(out, "lagd_ingest_records_total", "counter", "Records ingested by record type")
    for cluster, c in counters:
        for kind, n in sorted(c.records_by_type.items()):
            f.add(f'cluster="{_esc(cluster)}",type="{_esc(kind)}"', n)
    f = _Family(
        out,
        "lagd_ingest_decode_errors_total",
        "counter",
        "Records that could not be decoded, and KIP-848 owners that could not be updated (unknown_topic_id, "
        "kip848_owners_unseeded: no record rejected), by reason (a fixed set: docs/hostile-input.md)",
    )
    for cluster, c in counters:
        for reason, n in sorted(c.decode_errors.items()):
            f.add(f'cluster="{_esc(cluster)}",reason="{_esc(reason)}"', n)
    f = _Family(
        out, "lagd_ingest_rejected_total", "counter", "Records skipped as invalid or unusable, by reason (a fixed set)"
    )
    for cluster, c in counters:
        for reason in REJECT_REASONS:
            f.add(f'cluster="{_esc(cluster)}",reason="{reason}"', c.rejected.get(reason, 0))
    f = _Family(
        out,
        "lagd_offsets_topic_rereads_total",
        "counter",
        "Offsets-topic partitions read again from the start: stored positions outside them (recreated or truncated)",
    )
    for cluster, c in counters:
        f.add(f'cluster="{_esc(cluster)}"', c.offsets_topic_rereads)
    f = _Family(out, "lagd_ingest_failures_total", "counter", "Broker-side failures of readers, by reader and error")
    for cluster, c in counters:
        for what, n in sorted(c.failures.items()):
            f.add(f'cluster="{_esc(cluster)}",failure="{_esc(what)}"', n)
    f = _Family(out, "lagd_ingest_filtered_groups_total", "counter", "Records skipped by the group filters")
    for cluster, c in counters:
        f.add(f'cluster="{_esc(cluster)}"', c.filtered_groups)
    progress: Iterable[tuple[str, object]] = sorted(health.progress.items())
    f = _Family(out, "lagd_reader_caught_up", "gauge", "1 once the cluster's offsets reader has caught up")
    for cluster, p in progress:
        f.add(f'cluster="{_esc(cluster)}"', bool(getattr(p, "caught_up", False)))
    f = _Family(
        out, "lagd_offsets_source", "gauge", 'Where committed offsets come from: 1 for source="topic" or "admin"'
    )
    for cluster, p in sorted(health.progress.items()):
        source = str(getattr(p, "source", "") or "")
        if source:
            f.add(f'cluster="{_esc(cluster)}",source="{_esc(source)}"', 1)
    f = _Family(out, "lagd_reader_progress_ratio", "gauge", "Share of the backlog at start already read")
    for cluster, p in sorted(health.progress.items()):
        f.add(f'cluster="{_esc(cluster)}"', float(getattr(p, "fraction", 0.0)))
    f = _Family(
        out,
        "lagd_cluster_degraded",
        "gauge",
        "1 while lagd cannot read the cluster (reader or log-end sampler failing or stale): verdicts are held",
    )
    for cluster, sight in sorted(health.sights.items()):
        f.add(f'cluster="{_esc(cluster)}"', bool(getattr(sight, "unreachable", False)))
    f = _Family(
        out,
        "lagd_offsets_reader_behind_seconds",
        "gauge",
        "How far the offsets reader runs behind the offsets topic while that holds verdicts back (0 otherwise): "
        "lagd reads slower than commits arrive",
    )
    for cluster, sight in sorted(health.sights.items()):
        since = getattr(sight, "blind_since", None)
        behind = max(0.0, (now_ms - since) / 1000) if since is not None and getattr(sight, "behind", False) else 0.0
        f.add(f'cluster="{_esc(cluster)}"', behind)
    st = health.persister
    if st is not None:
        _Family(out, "lagd_store_pending_changes", "gauge", "Changes waiting to be written to Postgres").add(
            "", int(st.pending)
        )
        _Family(out, "lagd_store_write_seconds", "gauge", "Duration of the last successful write").add(
            "", float(st.write_seconds_last)
        )
        _Family(out, "lagd_store_healthy", "gauge", "1 while writes to Postgres succeed").add("", bool(st.healthy))
        _Family(
            out, "lagd_store_dropped_history_total", "counter", "History rows dropped because the buffer was full"
        ).add("", int(st.dropped_history))
        _Family(
            out, "lagd_store_quarantined_total", "counter", "Rows Postgres refused, kept in the quarantine table"
        ).add("", int(getattr(st, "quarantined", 0)))
        _Family(
            out,
            "lagd_store_window_log_appended_windows",
            "gauge",
            "Windows appended to the window log since its last copy began; the next copy (which lets the older "
            "generations go) begins once they reach the windows lagd holds",
        ).add("", int(getattr(st, "log_appended", 0)))
        _Family(
            out,
            "lagd_store_window_log_copy_groups_left",
            "gauge",
            "Groups left to copy in the window log's running copy",
        ).add("", int(getattr(st, "log_copy_groups_left", 0)))
        _Family(
            out,
            "lagd_store_window_log_copies_total",
            "counter",
            "Copies of every window into the window log completed since start (each drops the generations before it)",
        ).add("", int(getattr(st, "log_copies", 0)))
        _Family(
            out,
            "lagd_store_backlog_wait_seconds_total",
            "counter",
            "Time apply waited for Postgres because the write backlog was full: verdicts fell behind the offsets "
            "topic by that much (a slow or overloaded Postgres)",
        ).add("", float(getattr(st, "backlog_wait_seconds", 0.0)))
        forced = getattr(st, "requested_checkpoints", None)
        if forced is not None:
            _Family(
                out,
                "lagd_store_postgres_requested_checkpoints",
                "gauge",
                "Checkpoints Postgres ran on request (most often its WAL filling max_wal_size) in the last 10 minutes, "
                "as lagd last read them: 3 or more and its window writes fill the WAL with whole pages (docs/operations.md: "
                "Postgres for a large estate)",
            ).add("", int(forced))
    pub = health.publisher
    if pub is not None:
        _Family(out, "lagd_mqtt_connected", "gauge", "1 while connected to the MQTT broker").add(
            "", bool(getattr(pub, "connected", False))
        )
        _Family(out, "lagd_mqtt_publish_leader", "gauge", "1 on the one instance that holds the publish lease").add(
            "", bool(getattr(pub, "leader", False))
        )
        _Family(out, "lagd_outbox_pending", "gauge", "Incident messages waiting to be published").add(
            "", int(getattr(pub, "pending", 0))
        )
        _Family(out, "lagd_mqtt_published_total", "counter", "Incident messages published").add(
            "", int(getattr(pub, "published_total", 0))
        )
    lag = health.loop_lag
    if lag is not None:
        _Family(out, "lagd_event_loop_lag_seconds", "gauge", "Worst lateness of the event loop in the last minute").add(
            "", float(lag.worst(time.monotonic()))
        )
        _Family(out, "lagd_event_loop_stalls_total", "counter", "Times the event loop woke more than 50 ms late").add(
            "", int(lag.stalls_total)
        )
    if health.watch is not None:
        _Family(
            out,
            "lagd_verdict_pass_seconds",
            "gauge",
            "Time the last verdict pass over the changed groups held the event loop",
        ).add("", float(health.watch.pass_seconds))
        _Family(
            out,
            "lagd_verdict_cycle_seconds",
            "gauge",
            "Time between the starts of the last two verdict passes: how late a status change can be noticed",
        ).add("", float(health.watch.cycle_seconds))
    _sinks(out, health, now_ms)
    _Family(
        out, "lagd_evaluation_seconds", "gauge", "CPU time to judge and render every group for the last scrape"
    ).add("", health.evaluation_seconds_last)
    _Family(
        out,
        "lagd_metrics_partitions_omitted",
        "gauge",
        "Group-partitions whose series this page leaves out (metrics-detail auto, past metrics-partition-limit)",
    ).add("", health.metrics_partitions_omitted)


def _sinks(out: list[str], health: Health, now_ms: int) -> None:
    """Per notification sink (webhook, Slack, PagerDuty, Alertmanager): lease, backlog, outcomes."""
    sinks = sorted(health.sinks.items())
    if not sinks:
        return
    families: list[tuple[str, str, str, Any]] = [
        ("lagd_sink_leader", "gauge", "1 on the instance that holds the sink's lease and delivers", "leader"),
        ("lagd_sink_backlog", "gauge", "Incident events after the sink's position, not delivered yet", "backlog"),
        ("lagd_sink_delivered_total", "counter", "Incident events the sink's receiver accepted", "delivered_total"),
        ("lagd_sink_failures_total", "counter", "Failed delivery attempts (each is retried)", "failures_total"),
        (
            "lagd_sink_dead_letters_total",
            "counter",
            "Events given up on (GET /lagd/v1/dead-letters)",
            "dead_letters_total",
        ),
    ]
    for name, kind, help_text, attr in families:
        f = _Family(out, name, kind, help_text)
        for sink, st in sinks:
            f.add(f'sink="{_esc(sink)}",kind="{_esc(str(getattr(st, "kind", "")))}"', getattr(st, attr, 0) or 0)
    f = _Family(out, "lagd_sink_retrying_seconds", "gauge", "How long the event at the sink's head has been failing")
    for sink, st in sinks:
        since = getattr(st, "retrying_since", None)
        value = max(0.0, (now_ms - since) / 1000) if since is not None else 0.0
        f.add(f'sink="{_esc(sink)}",kind="{_esc(str(getattr(st, "kind", "")))}"', value)


def page_detail(detail: str, limit: int, tracked: int) -> str:
    """The detail a page is rendered at: "auto" is "partition" while `tracked` group-partitions
    are at most `limit`, else "group"."""
    if detail != "auto":
        return detail
    return "partition" if tracked <= limit else "group"


def _note_detail(health: Health, detail: str, limit: int, tracked: int) -> None:
    """Keep (and log when it changes) how many group-partitions this page leaves out."""
    omitted = tracked if detail == "group" else 0
    was = health.metrics_partitions_omitted
    health.metrics_partitions_omitted = omitted
    if omitted and not was:
        log.warning(
            "/metrics leaves out per-partition series: more group-partitions than http.metrics-partition-limit",
            group_partitions=tracked,
            limit=limit,
            hint='raise http.metrics-partition-limit, or set http.metrics-detail = "partition" to keep them '
            '(4 series a group-partition), or "group" to silence this',
        )
    elif was and not omitted:
        log.info("/metrics has per-partition series again", group_partitions=tracked, limit=limit)


async def metrics(request: web.Request) -> web.Response:
    """Rendered in slices of at most SLICE_S and sent a chunk at a time, so a scrape of a large
    estate never stalls the loop (100k group-partitions are 400k series, about 45 MB: joined
    and encoded at once, they alone held the loop about 80 ms)."""
    ctx = request.app[CTX]
    out: list[str] = []
    slices = Slices(SLICE_S, ctx.turns.turn)
    http = ctx.settings.http
    tracked = ctx.state.partitions_tracked()
    detail = page_detail(http.metrics_detail, http.metrics_partition_limit, tracked)
    if http.metrics_detail == "auto":
        _note_detail(ctx.health, detail, http.metrics_partition_limit, tracked)
    for _ in render_steps(ctx.state, ctx.evaluator, ctx.health, ctx.now_ms(), detail, out, ctx.snapshots):
        await slices.turn()
    share_group_series(out, ctx.share_groups)
    mirror_flow_series(out, ctx.mirror_flows)
    probe_series(out, ctx.probes)
    return web.Response(body=_chunks(out, ctx.turns.turn), headers={"Content-Type": CONTENT_TYPE})


async def _chunks(pieces: list[str], turn: Turn) -> AsyncIterator[bytes]:
    """The page, about CHUNK_CHARS of text at a time, encoded as it is sent (chunked transfer)."""
    batch: list[str] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= CHUNK_CHARS:
            yield "".join(batch).encode()
            batch, size = [], 0
            await turn()
    if batch:
        yield "".join(batch).encode()


def add_routes(app: web.Application) -> None:
    app.router.add_get("/metrics", metrics)
