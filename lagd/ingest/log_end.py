"""The log-end sampler: one per cluster, the broker side of every lag number.

Every `topic-refresh` seconds it reads the cluster's metadata (topics, partitions, leaders);
every `offset-refresh` seconds it asks each leader, in one ListOffsets request per broker,
for the latest offset of every partition of the topics lagd needs (`topics_wanted`, which the
daemon supplies: topics any known group consumes, plus mirrored topics, plus with
`every_topic` every topic of the metadata, which the daemon sets; `topics-deny` takes some
out). A partition without a leader, or with an error, is skipped and asked again next round. A sampled topic that
disappears from the metadata becomes TopicDeleted, but only once it has been missing from
`ABSENT_REFRESHES_BEFORE_DELETE` successful metadata refreshes in a row (see there).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka.errors import for_code
from aiokafka.protocol.admin import DescribeConfigsRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import Event, IngestCounters, LogEndSample, LogStartSample, TopicDeleted, TopicPolicy
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_client
from lagd.ingest.record_ts import Candidate, RecordFetcher, marked_for
from lagd.runtime import logs
from lagd.runtime.backoff import LOG_EVERY_S, describe_error
from lagd.runtime.clock import Clock, wall_ms

log = logs.get(__name__)

Emit = Callable[[list[Event]], Awaitable[None]]
LATEST = -1
EARLIEST = -2
TOPIC_RESOURCE = 2  # DescribeConfigs resource type of a topic
READ_UNCOMMITTED = 0  # the high watermark, which is what consumers' lag is measured against

# A topic missing from one metadata answer is no evidence that it was deleted: aiokafka leaves
# out every topic the answer carries an error for (LEADER_NOT_AVAILABLE while a leader is being
# elected, for one), and a broker can answer from a partial view of the cluster. Deleting drops
# every group's windows for the topic, which cannot be undone, so a topic has to be missing
# from this many successful refreshes in a row; a refresh that fails is no evidence at all.
# Two is enough: the second answer comes from a new request at least one round later. Admin
# polling applies the same rule to partitions that disappear and to groups ListGroups stops
# naming.
ABSENT_REFRESHES_BEFORE_DELETE = 2

K = TypeVar("K", bound=Hashable)


@dataclass
class Layout:
    """What the metadata said: partitions of each topic and their leader (None = no leader)."""

    leaders: dict[str, dict[int, int | None]] = field(default_factory=dict)
    # Topics the answer named without partitions lagd may use (e.g. not authorized): they exist.
    unavailable: set[str] = field(default_factory=set)

    def present(self) -> set[str]:
        return set(self.leaders) | self.unavailable


LED_RECENTLY_MS = 300_000  # how long Leadership remembers that a broker led a partition


@dataclass
class Leadership:
    """Which partitions each broker led lately, per cluster, from the sampler's metadata
    (`record`). A killed broker's partitions get new leaders at the next refresh, before the
    probe has judged it, so `led_by` answers what the broker led in the last `LED_RECENTLY_MS`,
    not only now: the partitions whose groups its outage explains (lagd.notify.incidents)."""

    # cluster -> broker -> (topic, partition) -> when last seen led by it (ms)
    seen: dict[str, dict[int, dict[tuple[str, int], int]]] = field(default_factory=dict)

    def record(self, cluster: str, leaders: Mapping[str, Mapping[int, int | None]], now: int) -> None:
        by_broker = self.seen.setdefault(cluster, {})
        for topic, parts in leaders.items():
            for p, leader in parts.items():
                if leader is not None:
                    by_broker.setdefault(leader, {})[(topic, p)] = now
        for broker, led in list(by_broker.items()):
            for tp in [tp for tp, at in led.items() if now - at > LED_RECENTLY_MS]:
                del led[tp]
            if not led:
                del by_broker[broker]

    def led_by(self, cluster: str, broker: int, now: int) -> tuple[tuple[str, int], ...]:
        """The partitions `broker` led in the last LED_RECENTLY_MS, sorted."""
        led = self.seen.get(cluster, {}).get(broker, {})
        return tuple(sorted(tp for tp, at in led.items() if now - at <= LED_RECENTLY_MS))


def layout_from_metadata(metadata: Any) -> Layout:
    out = Layout(unavailable=set(getattr(metadata, "unauthorized_topics", None) or ()))
    for topic in metadata.topics():
        parts = metadata.partitions_for_topic(topic) or set()
        leaders: dict[int, int | None] = {}
        for p in parts:
            leader = metadata.leader_for_partition(TopicPartition(topic, p))
            leaders[p] = leader if leader is not None and leader >= 0 else None
        out.leaders[topic] = leaders
    return out


def plan_requests(layout: Layout, wanted: Iterable[str]) -> tuple[dict[int, dict[str, list[int]]], int]:
    """Group the wanted partitions by leader; also count the leaderless ones (asked next round)."""
    by_node: dict[int, dict[str, list[int]]] = {}
    leaderless = 0
    for topic in sorted(set(wanted)):
        for p, leader in sorted(layout.leaders.get(topic, {}).items()):
            if leader is None:
                leaderless += 1
                continue
            by_node.setdefault(leader, {}).setdefault(topic, []).append(p)
    return by_node, leaderless


def parse_list_offsets(response: Any) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], str]]:
    """Offsets by (topic, partition), and the error name of each partition that failed."""
    offsets: dict[tuple[str, int], int] = {}
    errors: dict[tuple[str, int], str] = {}
    for topic, parts in response.topics:
        for part in parts:
            partition, code = part[0], part[1]
            if code:
                errors[(topic, partition)] = for_code(code).__name__
                continue
            if response.API_VERSION == 0:
                values = part[2]
                if values:
                    offsets[(topic, partition)] = values[0]
            else:
                offsets[(topic, partition)] = part[3]
    return offsets, errors


def confirm_absent(
    tracked: Iterable[K],
    present: Collection[K] | None,
    streaks: Mapping[K, int],
    rounds: int = ABSENT_REFRESHES_BEFORE_DELETE,
) -> tuple[list[K], dict[K, int]]:
    """Which tracked things are gone, after one metadata refresh (pure).

    `present` is what a successful refresh listed, or None when the refresh failed (no
    evidence: nothing is gone and the streaks stay as they were). `streaks` counts, per
    tracked thing, the successful refreshes in a row it has been missing from. Returns the
    things missing `rounds` times in a row, in `tracked` order, and the new streaks (only of
    things missing now: one that is present again starts over).
    """
    if present is None:
        return [], dict(streaks)
    new = {k: streaks.get(k, 0) + 1 for k in tracked if k not in present}
    return [k for k, n in new.items() if n >= rounds], new


def broker_news(
    failed: Iterable[int],
    answered: Iterable[int],
    failing: Mapping[int, float],
    now: float,
    every: float = LOG_EVERY_S,
) -> tuple[list[int], list[int], dict[int, float]]:
    """Of one round's ListOffsets (pure): the brokers whose failure to warn of (the first of a
    run of failures, then one every `every` seconds; the rest go to debug), those answering
    again after a failure, and the failing brokers with when each was last warned of. A broker
    that died keeps leading its partitions until the controller fences it
    (broker.session.timeout.ms, 9 s by default) and fails every round until then: one
    warning, not one a round. One no longer asked (its partitions have new leaders) is
    forgotten, so its next failure is news again."""
    warn = [n for n in sorted(set(failed)) if n not in failing or now - failing[n] >= every]
    failing_now = {n: now if n in warn else failing[n] for n in set(failed)}
    back = sorted(set(answered) & set(failing))
    return warn, back, failing_now


def deleted_topics(
    sampled: Iterable[str], layout: Layout | None, streaks: Mapping[str, int]
) -> tuple[list[str], dict[str, int]]:
    """Sampled topics confirmed deleted by this refresh (`layout` None: the refresh failed)."""
    gone, streaks = confirm_absent(sorted(sampled), None if layout is None else layout.present(), streaks)
    return gone, streaks


async def sample_log_ends(
    cluster: ClusterSettings,
    topics_wanted: Callable[[], Iterable[str]],
    emit: Emit | asyncio.Queue[list[Event]],
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    patterns: Iterable[re.Pattern[str]] = (),
    known: Iterable[str] = (),
    every_topic: bool = False,
    share: Callable[[str], bool] | None = None,
    clock: Clock = wall_ms,
    leadership: Leadership | None = None,
    record_candidates: Callable[[int], list[Candidate]] | None = None,
) -> None:
    """Sample log-end offsets until `stop` is set; reconnect with backoff on outages.

    `patterns` add every topic whose name matches (mirrored topics are sampled even when no
    group consumes them); `every_topic` adds every topic of the metadata that `topics-deny`
    lets through, as Burrow does (the daemon sets it, so Burrow's topic paths know every
    topic); `known` are topics sampled before a restart, so one deleted while lagd was down
    still becomes TopicDeleted. `share` (workers, lagd.scale) keeps of what `patterns` and
    `every_topic` add only this worker's share; the topics its own groups consume are always
    sampled. `clock` (lagd.runtime.clock) stamps each round's samples. `leadership` records
    each metadata refresh's leaders (what the probe's broker incidents need).
    `record_candidates(limit)` (State.record_candidates) names the partitions whose lag in
    seconds is only a bound; after each round the first unconsumed record of at most
    `record-timestamp-fetches` of them is read (lagd.ingest.record_ts); with `share`, those
    of topics outside it are relayed (kept, not stored).
    """
    put: Emit = emit.put if isinstance(emit, asyncio.Queue) else emit
    sampled: set[str] = set(known)
    absent: dict[str, int] = {}  # sampled topics missing from the latest refreshes, survives reconnects
    failing: dict[int, float] = {}  # brokers whose ListOffsets failed when last asked: when warned of (broker_news)
    matchers = tuple(patterns)
    await reconnecting(
        lambda: _session(
            cluster,
            topics_wanted,
            put,
            counters,
            stop,
            sampled,
            matchers,
            absent,
            every_topic,
            share,
            clock=clock,
            failing=failing,
            leadership=leadership,
            record_candidates=record_candidates,
        ),
        stop,
        counters,
        cluster=cluster,
        what="log-end sampler",
        counter="log_end",
        hint="check that the brokers are reachable (bootstrap-servers, security settings)",
    )


async def _session(
    cluster: ClusterSettings,
    topics_wanted: Callable[[], Iterable[str]],
    put: Emit,
    counters: IngestCounters,
    stop: asyncio.Event,
    sampled: set[str],
    matchers: tuple[re.Pattern[str], ...] = (),
    absent: dict[str, int] | None = None,
    every_topic: bool = False,
    share: Callable[[str], bool] | None = None,
    *,
    clock: Clock = wall_ms,
    failing: dict[int, float] | None = None,
    leadership: Leadership | None = None,
    record_candidates: Callable[[int], list[Candidate]] | None = None,
) -> None:
    absent = {} if absent is None else absent
    deny = re.compile(cluster.topics_deny) if cluster.topics_deny else None

    def add_listed(wanted: set[str], layout: Layout) -> None:
        listed = [t for t in layout.leaders if share is None or share(t)]
        if matchers:
            wanted.update(t for t in listed if any(m.search(t) for m in matchers))
        if every_topic:
            wanted.update(t for t in listed if deny is None or not deny.search(t))

    fetches = cluster.record_timestamp_fetches
    fetcher = RecordFetcher(cluster, counters) if record_candidates is not None and fetches > 0 else None
    client = await start_client(cluster)
    try:
        loop = asyncio.get_running_loop()
        layout: Layout | None = None
        refresh_at = 0.0
        unknown_seen: set[str] = set()
        start_at = 0.0  # when the next round also asks for log-start offsets
        policies_at = 0.0  # when cleanup.policy is described again (every topic-refresh)
        described: set[str] = set()
        while not stop.is_set():
            started = loop.time()
            wanted = {t for t in topics_wanted() if deny is None or not deny.search(t)}
            if layout is not None:
                add_listed(wanted, layout)
            # A wanted topic the metadata does not know yet (new topic, new group) gets one
            # early refresh instead of waiting a whole topic-refresh.
            unknown = wanted - set(layout.leaders) - unknown_seen if layout else wanted
            if layout is None or started >= refresh_at or unknown:
                # A failed refresh raises here, before any deletion is decided: no evidence.
                layout = layout_from_metadata(await client.fetch_all_metadata())
                if leadership is not None:
                    leadership.record(cluster.name, layout.leaders, clock())
                refresh_at = started + cluster.topic_refresh
                unknown_seen = wanted - set(layout.leaders)
                add_listed(wanted, layout)
                gone, streaks = deleted_topics(sampled, layout, absent)
                absent.clear()
                absent.update(streaks)
                if gone:
                    sampled.difference_update(gone)
                    log.info("topics deleted", cluster=cluster.name, topics=gone)
                    await put([TopicDeleted(cluster.name, t) for t in gone])
                if len(gone) < len(streaks):
                    # Missing once: ask again next round rather than a whole topic-refresh later.
                    log.info(
                        "sampled topics missing from the metadata; confirming next round",
                        cluster=cluster.name,
                        topics=sorted(t for t in streaks if t not in gone),
                    )
                    refresh_at = started
            events, stale = await sample_once(client, cluster, layout, wanted, counters, clock=clock, failing=failing)
            if stale:
                refresh_at = 0.0
            if events:
                sampled.update(e.topic for e in events)
                await put(list(events))
            if started >= start_at or (wanted - described):  # a new topic gets its log start at once
                start_at = started + cluster.log_start_refresh
                starts = await sample_log_starts(client, cluster, layout, wanted, counters, events, clock=clock)
                if starts:
                    await put(list(starts))
            if started >= policies_at or (wanted - described):
                # Asked once per topic-refresh, and at once for a topic not asked yet; a failed
                # or partial answer is asked again at the next topic-refresh, not every round.
                policies_at = started + cluster.topic_refresh
                described = wanted & set(layout.leaders)
                policies = await describe_policies(client, cluster.name, sorted(wanted & set(layout.leaders)), counters)
                if policies:
                    await put(list(policies))
            if fetcher is not None and record_candidates is not None:
                found = await fetcher.fetch(record_candidates(fetches), clock())
                if found:
                    await put(list(marked_for(found, share)))
            await _wait_next_round(
                loop, started, cluster, stop, functools.partial(_new_topic, topics_wanted, set(wanted), deny)
            )
    finally:
        if fetcher is not None:
            await fetcher.close()
        await close_quietly(client.close)


NEW_TOPIC_CHECK_S = 1.0  # how often the wait between rounds looks for a topic no sample covers yet


def _new_topic(wanted: Callable[[], Iterable[str]], asked: set[str], deny: re.Pattern[str] | None) -> bool:
    """Does a group consume a topic the last round did not ask for? Its commits have no lag to
    be judged by until it has a sample."""
    return any(t not in asked and (deny is None or not deny.search(t)) for t in wanted())


async def _wait_next_round(
    loop: asyncio.AbstractEventLoop,
    started: float,
    cluster: ClusterSettings,
    stop: asyncio.Event,
    new_topic: Callable[[], bool],
) -> None:
    """Wait until offset-refresh after `started`, or less: a topic a commit names for the first
    time is sampled within NEW_TOPIC_CHECK_S, not a whole offset-refresh later."""
    while not stop.is_set():
        left = cluster.offset_refresh - (loop.time() - started)
        if left <= 0 or new_topic():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), min(left, NEW_TOPIC_CHECK_S))


async def sample_once(
    client: Any,
    cluster: ClusterSettings,
    layout: Layout,
    wanted: Iterable[str],
    counters: IngestCounters,
    *,
    clock: Clock = wall_ms,
    failing: dict[int, float] | None = None,
) -> tuple[list[LogEndSample], bool]:
    """One round: a ListOffsets(LATEST) per leader, in parallel; failures are counted and skipped.

    Also says whether the layout looks stale (a leader failed or a partition lacks a leader),
    so the caller refreshes metadata before the next round. `failing`: the brokers that failed
    last round, kept by the caller and updated here, so a broker failing round after round is
    warned of once, then every LOG_EVERY_S (broker_news); without it every failure is.
    """
    by_node, leaderless = plan_requests(layout, wanted)
    if leaderless:
        counters.count_failure("log_end_leaderless_partition")
    nodes = list(by_node)
    requests = [
        client.send(
            node, OffsetRequest(-1, READ_UNCOMMITTED, [(t, [(p, LATEST) for p in ps]) for t, ps in topics.items()])
        )
        for node, topics in by_node.items()
    ]
    sent = clock()
    answers = await asyncio.gather(*requests, return_exceptions=True)
    # The brokers read their log ends between the sending and the last answer: the middle is the
    # best time to give them. Stamped at the answer, a slow round (a busy broker, a loop held up)
    # dated the offsets late, and a mirror's source so read made its copy look that much less
    # behind (1.5 s in 1 of 10 real-MM2 runs on a busy box).
    ts = sent + (clock() - sent) // 2
    stale = leaderless > 0
    out: list[LogEndSample] = []
    failed: dict[int, BaseException] = {}
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, BaseException):
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            counters.count_failure(f"log_end_{answer.__class__.__name__}")
            failed[node] = answer
            stale = True
            continue
        offsets, errors = parse_list_offsets(answer)
        for (topic, partition), offset in sorted(offsets.items()):
            out.append(LogEndSample(cluster.name, topic, partition, offset, ts))
        for (topic, partition), name in errors.items():
            counters.count_failure(f"log_end_{name}")
            log.debug("partition offset error; retrying next round", topic=topic, partition=partition, error=name)
            stale = True
    _log_broker_failures(cluster.name, failed, [n for n in nodes if n not in failed], failing)
    return out, stale


def valid_log_starts(
    starts: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int], counters: IngestCounters
) -> dict[tuple[str, int], int]:
    """Log-start offsets to keep (pure but for the counts): a negative one, or one above the
    partition's log end of the same round, is counted (`log_start_negative`,
    `log_start_above_log_end` among the ingest failures) and skipped."""
    out: dict[tuple[str, int], int] = {}
    for key, offset in starts.items():
        if offset < 0:
            counters.count_failure("log_start_negative")
            continue
        end = ends.get(key)
        if end is not None and offset > end:
            counters.count_failure("log_start_above_log_end")
            continue
        out[key] = offset
    return out


async def sample_log_starts(
    client: Any,
    cluster: ClusterSettings,
    layout: Layout,
    wanted: Iterable[str],
    counters: IngestCounters,
    ends: Iterable[LogEndSample] = (),
    *,
    clock: Clock = wall_ms,
) -> list[LogStartSample]:
    """One ListOffsets(EARLIEST) per leader, in parallel, batched as the log ends are; failures
    are counted (`log_start_<error>`) and asked again next time. `ends`: this round's log ends,
    which a log start may not exceed (valid_log_starts)."""
    by_node, _ = plan_requests(layout, wanted)
    nodes = list(by_node)
    answers = await asyncio.gather(
        *(
            client.send(
                node,
                OffsetRequest(-1, READ_UNCOMMITTED, [(t, [(p, EARLIEST) for p in ps]) for t, ps in topics.items()]),
            )
            for node, topics in by_node.items()
        ),
        return_exceptions=True,
    )
    ts = clock()
    found: dict[tuple[str, int], int] = {}
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, BaseException):
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            counters.count_failure(f"log_start_{answer.__class__.__name__}")
            log.debug("ListOffsets(EARLIEST) failed; retrying next time", broker=node, error=describe_error(answer))
            continue
        offsets, errors = parse_list_offsets(answer)
        found.update(offsets)
        for name in errors.values():
            counters.count_failure(f"log_start_{name}")
    kept = valid_log_starts(found, {(e.topic, e.partition): e.offset for e in ends}, counters)
    return [LogStartSample(cluster.name, t, p, o, ts) for (t, p), o in sorted(kept.items())]


def parse_policies(cluster: str, response: Any, counters: IngestCounters | None = None) -> list[TopicPolicy]:
    """cleanup.policy of each topic a DescribeConfigs answer describes without error; each
    topic refused is counted as `log_start_describe_<error>` (no DescribeConfigs ACL:
    TopicAuthorizationFailedError), and judged as not compacted."""
    out: list[TopicPolicy] = []
    for resource in response.resources:
        code, _msg, _kind, name, entries = resource[:5]
        if code:
            if counters is not None:
                counters.count_failure(f"log_start_describe_{for_code(code).__name__}")
            continue
        for entry in entries:
            if entry[0] == "cleanup.policy" and entry[1] is not None:
                out.append(TopicPolicy(cluster, name, entry[1]))
    return out


async def describe_policies(
    client: Any, cluster: str, topics: list[str], counters: IngestCounters
) -> list[TopicPolicy] | None:
    """The topics' cleanup.policy, in one DescribeConfigs to any broker; None when it failed
    (counted as `log_start_describe_<error>`; lagd then judges as if not compacted)."""
    if not topics:
        return []
    node = client.get_random_node()
    if node is None:
        return None
    request = DescribeConfigsRequest([(TOPIC_RESOURCE, t, ["cleanup.policy"]) for t in topics])
    try:
        answer = await client.send(node, request)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        counters.count_failure(f"log_start_describe_{exc.__class__.__name__}")
        log.debug("DescribeConfigs failed; retrying next topic-refresh", error=describe_error(exc))
        return None
    return parse_policies(cluster, answer, counters)


def _log_broker_failures(
    cluster: str, failed: dict[int, BaseException], answered: list[int], failing: dict[int, float] | None
) -> None:
    """A warning for each broker whose failure is news, a debug line for the rest of its run of
    failures, and a line when it answers again (broker_news); `failing` is updated."""
    warn, back, failing_now = broker_news(failed, answered, failing or {}, time.monotonic())
    if failing is not None:
        failing.clear()
        failing.update(failing_now)
    for node, exc in failed.items():
        (log.warning if failing is None or node in warn else log.debug)(
            "ListOffsets failed; retrying next round",
            cluster=cluster,
            broker=node,
            error=describe_error(exc),
            hint="a broker that stopped answering leads its partitions until the controller fences it "
            "(broker.session.timeout.ms, 9 s by default); lagd then samples them from their new leaders. "
            "If this broker stays unreachable longer, check it and the network to it",
        )
    for node in back:
        log.info("broker answers ListOffsets again", cluster=cluster, broker=node)
