"""The offsets-topic reader: streams `__consumer_offsets` into domain events.

No consumer group and no commits of its own: every partition is assigned by hand and
positions come from the store, so a restart resumes exactly where the applied state ends.
`read_committed` keeps aborted transactional commits out. Each fetched batch is emitted as
its events followed by one ReaderPosition per partition, so a position is never stored
ahead of the changes it covers. Only public aiokafka APIs are used: the partitions of the
offsets topic come from a metadata client of the reader's own (`AIOKafkaClient`), positions
from `AIOKafkaConsumer.position`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import Commit, Event, GroupMembers, IngestCounters, OffsetsPartitionReset, ReaderPosition
from lagd.ingest.codec import CommitKeys
from lagd.ingest.group_filter import GroupFilter
from lagd.ingest.kafka_client import close_quietly, reconnecting, start_client, start_consumer
from lagd.ingest.progress import ReaderProgress
from lagd.ingest.records import ConsumerGroupOwners, events_from_record
from lagd.ingest.validate import MAX_OFFSET, EdgeLimits
from lagd.runtime import compiled, logs
from lagd.runtime.clock import Clock, wall_ms
from lagd.runtime.turns import Turn, plain_turn

log = logs.get(__name__)

# the usual record read compiled (build_batch), or None where the Python reads it (lagd.runtime.compiled)
_commits = compiled.load("lagd.ingest._commits", Path(__file__).with_name("_commits.c"))
_read_commits: Callable[..., int] | None = None if _commits is None else _commits.read_commits
_MIN_Q, _MAX_Q = -(2**63), 2**63 - 1

DECODE_SLICE = 500  # records decoded between two turns of the event loop (about 1.5 ms)
# Records per fetch handed over by aiokafka, which builds a ConsumerRecord for each of them in
# one go (about 1.5-3 us a record): 10,000 held the loop 15-40 ms at a time during catch-up.
# A request waits for a turn of the loop two or three times: with 1,000 (and slices of 1,000
# decoded and applied) bench_catchup's /lag answered in 20-24 ms (p50) and up to 38-46 ms
# while catching up; with 500, in 12 ms and up to 21-32 ms, at the same records/s (3 runs each).
FETCH_MAX_RECORDS = 500

Emit = Callable[[list[Event]], Awaitable[None]]

# How long to wait for the consumer's positions while catching up (all partitions together):
# one is unknown only while a reset (after OFFSET_OUT_OF_RANGE) is in flight.
POSITION_WAIT_S = 0.2
# While catching up, the consumer's positions are asked after a short fetch (the reader nears
# the end) and otherwise at most this often: asking them after every full fetch cost about 1 ms
# a fetch (a position and a timeout per offsets partition).
POSITIONS_EVERY_S = 1.0
# At most this often, a commit for a partition beyond a topic's known count refreshes metadata.
STALE_COUNTS_REFRESH_S = 5.0
# Records left to read past a fetch, by the broker's last answers, from which the reader has
# fallen behind and takes its turns at once instead of after waiting requests (lagd.runtime.turns).
# A full fetch was the sign before, but under 20,000 commits/s a busy loop fetches about every
# 25 ms, so nearly every fetch came back full and the reader went ahead of requests in the
# steady state: at 1M group-partitions (bench_http) the steps requests waited behind most.
BEHIND_RECORDS = 10_000


def records_left(consumer: Any, fetched: dict[Any, list[Any]]) -> int:
    """Records past `fetched` in its partitions, by the broker's last answers (the last stable
    offset, or the high watermark where there is none)."""
    left = 0
    for tp, records in fetched.items():
        if records:
            end = consumer.last_stable_offset(tp)
            if end is None or end < 0:
                end = consumer.highwater(tp)
            if type(end) is int:
                left += max(0, end - int(records[-1].offset) - 1)
    return left


def fetch_turn(consumer: Any, fetched: dict[Any, list[Any]], turn: Turn, behind: int = BEHIND_RECORDS) -> Turn:
    """The turn to take between slices of this fetch: `turn` (requests first) while the reader
    keeps up, the loop's plain turn once `behind` records or more are left (BEHIND_RECORDS)."""
    return turn if records_left(consumer, fetched) < behind else plain_turn


def _emitter(target: Emit | asyncio.Queue[list[Event]]) -> Emit:
    if isinstance(target, asyncio.Queue):
        return target.put
    return target


def build_batch(
    cluster: str,
    partition: int,
    records: Iterable[Any],
    observed: int,
    groups: GroupFilter,
    counters: IngestCounters,
    out: list[Event],
    kip848: ConsumerGroupOwners | None = None,
    limits: EdgeLimits | None = None,
    keys: CommitKeys | None = None,
) -> int | None:
    """Append the events of one partition's fetched records (then its position) to `out`.

    Returns the new position (last offset + 1), or None when there were no records.
    Events of groups the filter denies are dropped and counted here, before anything is stored;
    records `limits` refuses are counted and skipped, and the position still moves past them.
    The usual record (an offset commit every check passes) is read by the compiled code where
    it is built (`_commits.c`), every other one by `events_from_record`, in the records' order.
    `keys` is the reader's memory of the offset keys it has read; without it, each call reads
    its keys afresh.
    """
    records = records if type(records) is list else list(records)
    if not records:
        return None
    keys = CommitKeys() if keys is None else keys
    allows = groups.allows
    append = out.append
    usual = _usual_commits(cluster, observed, groups, counters, limits, keys, kip848)
    i, n = 0, len(records)
    while i < n:
        if usual is not None:
            i = usual(records, i, out)
            if i >= n:
                break
        rec = records[i]
        i += 1
        events = events_from_record(
            cluster,
            rec.key,
            rec.value,
            rec.offset,
            observed,
            counters,
            kip848=kip848,
            limits=limits,
            source=partition,
            keys=keys,
        )
        for ev in events:
            group = getattr(ev, "group", None)
            if group is not None and not allows(group):
                counters.filtered_groups += 1
                continue
            append(ev)
    last = int(records[-1].offset) + 1
    out.append(ReaderPosition(cluster, partition, last))
    return last


UsualCommits = Callable[[list[Any], int, list[Event]], int]


def _usual_commits(
    cluster: str,
    observed: int,
    groups: GroupFilter,
    counters: IngestCounters,
    limits: EdgeLimits | None,
    keys: CommitKeys,
    kip848: ConsumerGroupOwners | None = None,
) -> UsualCommits | None:
    """The compiled reader of the usual record for one fetch's slice: `(records, start, out)`
    appends the Commits of the records from `start` on, counts them as `events_from_record` and
    the filter would, and returns the index of the first record it leaves to them. None where
    only the Python reads: not built, or no limits to check (tests, `lagd decode`). A v4 commit
    naming a topic id `kip848` does not know by that name yet is left to the Python, which
    learns it (`ConsumerGroupOwners.learn_topic`)."""
    if _read_commits is None or limits is None or type(observed) is not int or type(cluster) is not str:
        return None
    settings = (limits.max_group_bytes, limits.max_commit_age_ms, limits.max_commit_ahead_ms)
    if any(type(v) is not int for v in settings):
        return None
    # the commit-time limits as EdgeLimits.commit_problem applies them, clamped to int64 (record times are)
    oldest = max(_MIN_Q, observed - limits.max_commit_age_ms)
    newest = min(_MAX_Q, observed + limits.max_commit_ahead_ms)
    if not (_MIN_Q <= oldest <= _MAX_Q and _MIN_Q <= newest <= _MAX_Q):
        return None  # every commit is refused: the Python says why
    max_group_bytes = max(-1, min(limits.max_group_bytes, _MAX_Q))
    read_commits = _read_commits
    topic_names = None if kip848 is None else kip848.topic_names

    def read(records: list[Any], start: int, out: list[Event]) -> int:
        counts, ok = limits.partition_counts, limits.topics_ok
        if type(out) is not list or type(counts) is not dict or type(ok) is not set or type(groups.cache) is not dict:
            return start  # not what the compiled reader reads: the Python does
        tally = [0, 0]  # records read, of which filtered: counted even if one raises
        try:
            return read_commits(
                records,
                start,
                out,
                keys.known,
                keys.max_keys,
                groups.cache,
                groups.allows,
                counts,
                ok,
                max_group_bytes,
                MAX_OFFSET,
                oldest,
                newest,
                cluster,
                observed,
                Commit,
                tally,
                topic_names,
            )
        finally:
            if tally[0]:
                by_type = counters.records_by_type
                by_type["offset_commit"] = by_type.get("offset_commit", 0) + tally[0]
                counters.filtered_groups += tally[1]

    return read


async def read_offsets_topic(
    cluster: ClusterSettings,
    positions: dict[int, int],
    emit: Emit | asyncio.Queue[list[Event]],
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    *,
    groups: GroupFilter | None = None,
    fetch_timeout_ms: int = 500,
    max_records: int = FETCH_MAX_RECORDS,
    members: Iterable[GroupMembers] | None = None,
    clock: Clock = wall_ms,
    turn: Turn = plain_turn,
) -> None:
    """Read the offsets topic until `stop` is set; survive broker outages with backoff.

    `positions` maps offsets-topic partition to the next offset to read (the store's
    ReaderPosition); partitions without one start from the beginning. `members` are the
    stored GroupMembers of this cluster, where the state resumes: KIP-848 groups' owners are
    folded from one record per member, so a resumed reader starts that fold from them (see
    `lagd.ingest.records`); resumed without them, it leaves those owners as stored. `clock`
    (lagd.runtime.clock) gives each fetch its observed time and the reader's freshness while the topic
    has no partitions. `turn` is awaited before each slice of a fetch is decoded (lagd.runtime.turns).
    """
    put = _emitter(emit)
    groups = groups or GroupFilter.for_cluster(cluster)
    next_offsets = dict(positions)
    # KIP-848 groups' owners, folded from their member records
    owners = ConsumerGroupOwners(resumed=bool(next_offsets))
    if members is not None:
        owners.seed(m for m in members if m.cluster == cluster.name)
    warned: set[str] = set()
    limits = EdgeLimits.for_cluster(cluster)
    keys = CommitKeys()  # kept across sessions: the keys do not change
    await reconnecting(
        lambda: _session(
            cluster,
            next_offsets,
            put,
            progress,
            counters,
            stop,
            groups,
            fetch_timeout_ms,
            max_records,
            owners,
            warned,
            limits,
            clock=clock,
            turn=turn,
            keys=keys,
        ),
        stop,
        counters,
        cluster=cluster,
        what="offsets-topic reader",
        counter="offsets_topic",
        hint="check that the brokers are reachable and that lagd may read " + cluster.offsets_topic,
        progress=progress,
    )


async def _session(
    cluster: ClusterSettings,
    next_offsets: dict[int, int],
    put: Emit,
    progress: ReaderProgress,
    counters: IngestCounters,
    stop: asyncio.Event,
    groups: GroupFilter,
    fetch_timeout_ms: int,
    max_records: int,
    kip848: ConsumerGroupOwners | None = None,
    warned: set[str] | None = None,
    limits: EdgeLimits | None = None,
    *,
    clock: Clock = wall_ms,
    turn: Turn = plain_turn,
    keys: CommitKeys,
) -> None:
    topic = cluster.offsets_topic
    warned = set() if warned is None else warned
    limits = EdgeLimits.for_cluster(cluster) if limits is None else limits
    # Metadata of every topic (the consumer's own covers only what is assigned to it).
    metadata = await start_client(cluster)
    try:
        consumer = await start_consumer(
            cluster,
            isolation_level="read_committed",
            exclude_internal_topics=False,
            metadata_max_age_ms=int(cluster.topic_refresh * 1000),
        )
    except BaseException:
        await close_quietly(metadata.close)
        raise
    try:
        known: set[int] = set()
        loop = asyncio.get_running_loop()
        refresh_at = 0.0
        early_at = 0.0
        positions_at = 0.0
        # The consumer's own positions, asked at most every POSITIONS_EVERY_S (_positions_to_ask):
        # past a transaction marker at a partition's end, which no record shows.
        asked: dict[int, int] = {}
        reading = _Reading(consumer, topic, next_offsets, asked, progress, counters, warned)
        while not stop.is_set():
            if limits.stale_counts and loop.time() >= early_at:
                # A commit named a partition beyond the known count: partitions may have been added.
                limits.stale_counts = False
                early_at = loop.time() + STALE_COUNTS_REFRESH_S
                refresh_at = 0.0
            if loop.time() >= refresh_at:
                refresh_at = loop.time() + cluster.topic_refresh
                reread = await _discover(
                    metadata, consumer, cluster, known, next_offsets, progress, counters, limits, warned
                )
                for p in reread:
                    asked.pop(p, None)  # read again from its start: its last asked position is past it
                if reread:
                    await put([OffsetsPartitionReset(cluster.name, p, len(known)) for p in sorted(reread)])
            if not known:
                # No offsets topic (a new cluster: Kafka creates it at the first group's commit):
                # nothing to read, so nothing missed and nothing to catch up with.
                progress.mark_fresh(clock())
                progress.mark_caught_up()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), min(cluster.topic_refresh, 5.0))
                refresh_at = 0.0
                continue
            fetched = await consumer.getmany(timeout_ms=fetch_timeout_ms, max_records=max_records)
            short = sum(len(records) for records in fetched.values()) < max_records
            if fetched:
                await _apply_batch(
                    cluster.name,
                    fetched,
                    put,
                    next_offsets,
                    progress,
                    groups,
                    counters,
                    kip848,
                    limits,
                    clock=clock,
                    turn=fetch_turn(consumer, fetched, turn),
                    keys=keys,
                )
            catching_up = not progress.caught_up
            due = loop.time() >= positions_at
            if await reading.note(fetched, short, due, known, clock()):
                positions_at = loop.time() + POSITIONS_EVERY_S
            if catching_up and progress.caught_up:
                _caught_up_now(consumer, next_offsets, asked, progress, clock())
    finally:
        await close_quietly(consumer.stop)
        await close_quietly(metadata.close)


@dataclass
class _Reading:
    """What a reader's session notes after each fetch: how current it is, and, where that needs
    them, the consumer's own positions (read_committed positions pass control records:
    transaction markers, which never reach us as records)."""

    consumer: Any
    topic: str
    next_offsets: dict[int, int]
    asked: dict[int, int]  # the consumer's positions as last asked
    progress: ReaderProgress
    counters: IngestCounters
    warned: set[str]

    async def note(
        self,
        fetched: dict[Any, list[Any]],
        short: bool,
        due: bool,
        partitions: Collection[int],
        observed: int,
        owned: Collection[int] | None = None,
    ) -> bool:
        """Note a fetch (`_note_fetch`) and ask the positions `_positions_to_ask` names (of
        `partitions`): while catching up they also move the reader's progress on. Returns
        whether positions were asked (the caller's POSITIONS_EVERY_S starts again)."""
        progress = self.progress
        behind = _note_fetch(self.consumer, fetched, self.next_offsets, self.asked, progress, observed, owned)
        ask = _positions_to_ask(progress.caught_up, short, due, partitions, behind)
        if not ask:
            return False
        positions = await consumer_positions(self.consumer, self.topic, ask, self.counters, self.warned)
        self.asked.update(positions)
        if not progress.caught_up:
            for p, pos in positions.items():
                progress.advance(p, pos)
        return True


def _positions_to_ask(
    caught_up: bool, short: bool, due: bool, known: Collection[int], behind: Collection[int]
) -> Collection[int]:
    """Which partitions' consumer positions to ask now: while catching up, all of them after a
    short fetch (the end is near) or when due; once caught up, when due, those that look behind
    the end (past a transaction marker the records read do not show, they are at it)."""
    if not caught_up:
        return known if short or due else ()
    return behind if due else ()


def _caught_up_now(
    consumer: Any,
    next_offsets: dict[int, int],
    asked: dict[int, int],
    progress: ReaderProgress,
    observed: int,
    owned: Collection[int] | None = None,
) -> None:
    """The reader just caught up: every partition has moved (read to where it ended at start),
    and those at their end by the positions just asked stand there now, so the sight starts
    from what is true at this moment, not from the catch-up's older notes."""
    progress.moved_all(observed)
    _note_fetch(consumer, {}, next_offsets, asked, progress, observed, owned)


def _note_fetch(
    consumer: Any,
    fetched: dict[Any, list[Any]],
    next_offsets: dict[int, int],
    asked: dict[int, int],
    progress: ReaderProgress,
    observed: int,
    owned: Collection[int] | None = None,
) -> set[int]:
    """After a fetch, how current the reader is, per partition: one read to the end the broker
    last reported (its last stable offset, or high watermark) stands there as of that answer;
    one with more to read was read through its newest record's time. So a reader working through
    a backlog still tells how current its view is and that it moves (lagd is behind, not blind),
    and one whose broker stopped answering does not move. Whether the fetch came back short says
    nothing of a partition: aiokafka hands out a buffer's tail short while more waits. (An empty
    fetch proves nothing either: aiokafka returns one while the broker is unreachable, and then
    a partition's last answer is old.) `asked`: the consumer's positions as last asked, which
    pass a transaction marker at a partition's end. `owned`: the partitions this reader answers
    for, when not all it is assigned (a worker's share, lagd.scale). Returns the partitions that
    look behind their end."""
    newest: dict[int, int] = {}
    for tp, records in fetched.items():
        if records and (owned is None or tp.partition in owned):
            at = records[-1].timestamp  # None: a record of message format 0 carries no time
            newest[tp.partition] = at if isinstance(at, int) else -1
    if newest:
        progress.read_records(newest, observed)
    ends: dict[int, int] = {}
    behind: set[int] = set()
    assigned: list[int] = []
    for tp in consumer.assignment():
        p = tp.partition
        if owned is not None and p not in owned:
            continue
        assigned.append(p)
        end = consumer.last_stable_offset(tp)
        if end is None or end < 0:  # read_uncommitted, or a broker too old to say
            end = consumer.highwater(tp)
        polled = consumer.last_poll_timestamp(tp)
        if end is None or polled is None:
            continue  # no answer for it yet
        if max(next_offsets.get(p, -1), asked.get(p, -1)) >= end:
            ends[p] = polled
        else:
            behind.add(p)
    if ends:
        progress.reached_end(ends)
    progress.track(assigned, observed)
    return behind


async def _apply_batch(
    cluster: str,
    fetched: dict[Any, list[Any]],
    put: Emit,
    next_offsets: dict[int, int],
    progress: ReaderProgress,
    groups: GroupFilter,
    counters: IngestCounters,
    kip848: ConsumerGroupOwners | None = None,
    limits: EdgeLimits | None = None,
    *,
    clock: Clock = wall_ms,
    turn: Turn = plain_turn,
    keys: CommitKeys,
) -> None:
    """Emit one fetch's events (with positions), then move the reader's own positions on.
    `keys`: the reader's memory of the offset keys it has read (`codec.CommitKeys`)."""
    observed = clock()
    out: list[Event] = []
    advanced: list[tuple[int, int]] = []
    for tp, records in fetched.items():
        for i in range(0, len(records), DECODE_SLICE):
            # A fetch is decoded in slices, the loop getting a turn before each (the first comes
            # after aiokafka built the fetch's records, itself a few ms), requests first.
            await turn()
            part = records[i : i + DECODE_SLICE]
            pos = build_batch(cluster, tp.partition, part, observed, groups, counters, out, kip848, limits, keys)
            if pos is not None:
                advanced.append((tp.partition, pos))
    if out:
        await put(out)
    for p, pos in advanced:
        next_offsets[p] = pos
        progress.advance(p, pos)


async def consumer_positions(
    consumer: Any, topic: str, partitions: Iterable[int], counters: IngestCounters, warned: set[str]
) -> dict[int, int]:
    """The consumer's fetch positions (`AIOKafkaConsumer.position`) of `partitions`.

    A position is unknown only while the consumer resets it; `position()` would wait for
    that, so all of them together wait at most POSITION_WAIT_S (a known position is returned
    without waiting) and an unknown one is left out, asked again next fetch. Any other
    failure is counted, logged once at warning, and left out too: readiness then relies on
    the positions of the records read.
    """
    out: dict[int, int] = {}
    deadline = asyncio.get_running_loop().time() + POSITION_WAIT_S
    for p in sorted(partitions):
        try:
            async with asyncio.timeout_at(deadline):
                out[p] = int(await consumer.position(TopicPartition(topic, p)))
        except TimeoutError:
            continue
        except Exception as exc:
            name = exc.__class__.__name__
            counters.count_failure(f"offsets_topic_position_{name}")
            if name not in warned:
                warned.add(name)
                log.warning(
                    "cannot read the consumer's position; readiness may stay 'catching up', or the reader look behind",
                    topic=topic,
                    partition=p,
                    error=f"{name}: {exc}",
                    hint="a partition ending in a transaction marker is then never reported at its end; "
                    "check the aiokafka version (lagd is tested with 0.14) and report this",
                )
    return out


# The `warned` key of a missing offsets topic (warned about once until it appears).
MISSING = "offsets_topic_missing"


async def _discover(
    client: Any,
    consumer: Any,
    cluster: ClusterSettings,
    known: set[int],
    next_offsets: dict[int, int],
    progress: ReaderProgress,
    counters: IngestCounters | None = None,
    limits: EdgeLimits | None = None,
    warned: set[str] | None = None,
) -> set[int]:
    """Assign every partition of the offsets topic (again, when partitions were added); returns
    the partitions whose stored position lay outside them, now read again from their start.
    A missing topic is warned about once in `warned` (till it appears), not every refresh.

    Also tells `limits` every topic's partition count, so commits for partitions a topic
    does not have are refused at the edge.
    """
    topic = cluster.offsets_topic
    metadata = await client.fetch_all_metadata()
    if limits is not None:
        limits.partition_counts = partition_counts(metadata)
    found = metadata.partitions_for_topic(topic) or set()
    if not found:
        if warned is not None and MISSING not in warned:
            warned.add(MISSING)
            log.warning(
                "offsets topic not found: no group has committed yet, or lagd may not describe it",
                cluster=cluster.name,
                topic=topic,
                hint="Kafka creates it when the first group commits, and lagd reads it from then on; if groups "
                "do commit, check offsets-topic and that lagd may describe and read it, or set offsets-source = "
                "'auto' (the default), which polls committed offsets through the admin API where the topic "
                "cannot be read",
            )
        return set()
    if warned is not None and MISSING in warned:
        warned.discard(MISSING)
        log.info("offsets topic found", cluster=cluster.name, topic=topic, partitions=len(found))
    new = set(found) - known
    if not new:
        return set()
    known |= new
    tps = [TopicPartition(topic, p) for p in sorted(known)]
    consumer.assign(tps)
    new_tps = [TopicPartition(topic, p) for p in sorted(new)]
    begin = {tp.partition: off for tp, off in (await consumer.beginning_offsets(new_tps)).items()}
    end = {tp.partition: off for tp, off in (await consumer.end_offsets(new_tps)).items()}
    outside = reread_outside(cluster.name, topic, next_offsets, begin, end, counters)
    for p in outside:
        del next_offsets[p]
    fresh = [tp for tp in tps if tp.partition not in next_offsets]
    for tp in tps:
        if tp.partition in next_offsets:
            consumer.seek(tp, next_offsets[tp.partition])
    if fresh:
        await consumer.seek_to_beginning(*fresh)
    for p in new:
        progress.position.setdefault(p, next_offsets.get(p, begin.get(p, 0)))
    progress.measure(begin, end)
    log.info("offsets topic assigned", cluster=cluster.name, topic=topic, partitions=len(known), new=len(new))
    return set(outside)


def partition_counts(metadata: Any) -> dict[str, int]:
    """Partition count of every topic the metadata names (highest partition + 1)."""
    out: dict[str, int] = {}
    for t in metadata.topics():
        parts = metadata.partitions_for_topic(t)
        if parts:
            out[t] = max(parts) + 1
    return out


def reread_outside(
    cluster: str,
    topic: str,
    positions: dict[int, int],
    begin: dict[int, int],
    end: dict[int, int],
    counters: IngestCounters | None,
) -> dict[int, int]:
    """The stored positions outside their partitions (see outside_range), each counted and
    logged: the offsets topic was recreated or truncated, and the caller reads those partitions
    again from their start (a lone reader and a worker alike)."""
    outside = outside_range(positions, begin, end)
    for p, pos in outside.items():
        if counters is not None:
            counters.offsets_topic_rereads += 1
        log.warning(
            "stored offsets-topic position outside the partition: reading it again from its start",
            cluster=cluster,
            topic=topic,
            partition=p,
            stored_position=pos,
            log_start=begin.get(p),
            log_end=end.get(p),
            hint="the offsets topic was recreated or truncated; lagd re-reads it, which is safe. "
            "If this repeats, check that offsets-topic names the right topic",
        )
    return outside


def outside_range(positions: dict[int, int], begin: dict[int, int], end: dict[int, int]) -> dict[int, int]:
    """Stored positions of the partitions in `begin`/`end` that lie outside [log start, log end]."""
    return {p: pos for p, pos in positions.items() if p in begin and p in end and not begin[p] <= pos <= end[p]}
