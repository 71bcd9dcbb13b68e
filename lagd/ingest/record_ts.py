"""The timestamp of the first unconsumed record, where lag in seconds is only a bound.

Where a group's committed offset is older than every kept log-end sample (after a restart,
or on a topic whose producer went idle), lag in seconds is only "at least". The record at
the committed offset (or the first one above it: compaction, transaction markers) was
appended at its timestamp: the log end passed it then. The log-end sampler asks for at most
`record-timestamp-fetches` such records per round (State.record_candidates picks them) and
emits RecordTimestamp events, which State keeps as the partition's oldest log-end sample
(LogEnd.from_record), so every reader of lag in seconds gets the exact figure.

With workers (lagd.scale) each worker reads the records of its own groups' candidates, also
on topics another worker samples; those records are kept for evaluation but not stored
(`marked_for`), so the stored samples of a topic stay its sampler's.

`valid_records` is pure; `fetch_record_timestamps` is the thin async adapter (its own
consumer without a group, one record per partition, bounded by a deadline). A failure is
counted and logged, never raised: the sampler goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka.structs import TopicPartition

from lagd.core.config import ClusterSettings
from lagd.core.model import IngestCounters, RecordTimestamp
from lagd.ingest.kafka_client import close_quietly, start_consumer
from lagd.runtime import logs

log = logs.get(__name__)

LOG_APPEND_TIME = 1  # Kafka's timestampType of a record stamped by the broker (0: CreateTime)
FUTURE_TOLERANCE_MS = 60_000  # a record stamped further ahead of lagd's clock is refused
RETRY_AFTER_MS = 600_000  # a candidate answered (or refused) is not asked again this soon
FETCH_BYTES = 64 * 1024  # per partition: one record is wanted, the broker sends at least one batch


Candidate = tuple[str, int, int]  # topic, partition, committed offset


def valid_records(
    cluster: str,
    wanted: Iterable[Candidate],
    answers: Mapping[tuple[str, int], tuple[int, int, int]],
    now_ms: int,
    counters: IngestCounters,
) -> list[RecordTimestamp]:
    """RecordTimestamp events of the answers (topic, partition) -> (offset, timestamp,
    timestamp type) that can be the first record at or above the committed offset; every
    other answer is counted (record_ts_<why>) and skipped."""
    out: list[RecordTimestamp] = []
    for topic, partition, committed in wanted:
        answer = answers.get((topic, partition))
        if answer is None:
            counters.count_failure("record_ts_no_record")
            continue
        offset, ts, ts_type = answer
        if offset < committed:
            counters.count_failure("record_ts_below_committed")
        elif ts < 0:
            counters.count_failure("record_ts_no_timestamp")
        elif ts > now_ms + FUTURE_TOLERANCE_MS:
            counters.count_failure("record_ts_in_future")
        else:
            append_time = ts_type == LOG_APPEND_TIME
            counters.count_record("record_ts_log_append_time" if append_time else "record_ts_create_time")
            out.append(RecordTimestamp(cluster, topic, partition, committed, offset, ts, append_time, now_ms))
    return out


def marked_for(records: list[RecordTimestamp], samples: Callable[[str], bool] | None) -> list[RecordTimestamp]:
    """`records` with those of topics this process does not sample marked relayed (a worker
    reads records for its own groups, but the stored samples of another worker's topic are
    that worker's to write); `samples` None: one process samples every topic."""
    if samples is None:
        return records
    return [r if samples(r.topic) else dataclasses.replace(r, relayed=True) for r in records]


class RecordFetcher:
    """Reads the first record at given offsets, one per partition, with its own consumer
    (started on first use, closed by `close`)."""

    def __init__(self, cluster: ClusterSettings, counters: IngestCounters, *, deadline_s: float = 5.0) -> None:
        self.cluster = cluster
        self.counters = counters
        self.deadline_s = deadline_s
        self._consumer: Any = None
        self._asked: dict[tuple[str, int, int], int] = {}  # candidate -> when asked (ms)
        self._answered: dict[Candidate, RecordTimestamp] = {}  # the valid answers of those asked

    def due(self, candidates: Iterable[Candidate], now_ms: int) -> list[Candidate]:
        """The candidates not asked within RETRY_AFTER_MS (an answer State refused, or no record,
        is not asked again every round)."""
        self._asked = {k: at for k, at in self._asked.items() if now_ms - at < RETRY_AFTER_MS}
        self._answered = {k: r for k, r in self._answered.items() if k in self._asked}
        return [c for c in candidates if c not in self._asked]

    def answered(self, candidates: Iterable[Candidate]) -> list[RecordTimestamp]:
        """The answers kept of candidates asked recently that are candidates again: State lost the
        record (a worker given a group back restores the topic's samples from the store, which has
        no record its sampler did not read) or refused it. Given again from memory, not read again: a record
        and its timestamp do not change, and State takes it or refuses it again at no cost."""
        return [self._answered[c] for c in candidates if c in self._answered]

    async def fetch(self, candidates: list[Candidate], now_ms: int) -> list[RecordTimestamp]:
        """RecordTimestamp events for the candidates (answers kept from earlier rounds first);
        none read after any failure (counted, logged)."""
        wanted = self.due(candidates, now_ms)
        again = self.answered(candidates)
        if not wanted:
            return again
        for c in wanted:
            self._asked[c] = now_ms
        try:
            answers = await self._first_records(wanted)
        except Exception as exc:  # a failure never stops the sampler
            self.counters.count_failure(f"record_ts_{exc.__class__.__name__}")
            log.warning(
                "could not read the first unconsumed records; lag in seconds stays a bound there "
                "(check that lagd may Read the topics; record-timestamp-fetches = 0 turns this off)",
                cluster=self.cluster.name,
                partitions=len(wanted),
                error=repr(exc),
            )
            await self.close()
            return again
        found = valid_records(self.cluster.name, wanted, answers, now_ms, self.counters)
        self._answered.update(((r.topic, r.partition, r.committed), r) for r in found)
        return again + found

    async def _first_records(self, wanted: list[Candidate]) -> dict[tuple[str, int], tuple[int, int, int]]:
        if self._consumer is None:
            self._consumer = await start_consumer(
                self.cluster, max_partition_fetch_bytes=FETCH_BYTES, fetch_max_bytes=FETCH_BYTES * 16
            )
        consumer = self._consumer
        tps = {TopicPartition(t, p): c for t, p, c in wanted}
        consumer.assign(list(tps))
        for tp, committed in tps.items():
            consumer.seek(tp, committed)
        answers: dict[tuple[str, int], tuple[int, int, int]] = {}
        loop = asyncio.get_running_loop()
        until = loop.time() + self.deadline_s
        try:
            while len(answers) < len(tps):
                left = until - loop.time()
                if left <= 0:
                    break
                batch = await consumer.getmany(timeout_ms=int(min(left, 1.0) * 1000))
                for tp, records in batch.items():
                    key = (tp.topic, tp.partition)
                    if records and key not in answers:
                        r = records[0]
                        answers[key] = (r.offset, r.timestamp, r.timestamp_type)
                        consumer.pause(tp)
        finally:
            consumer.assign([])
        return answers

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await close_quietly(consumer.stop)
