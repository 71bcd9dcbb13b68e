"""Postgres persistence of State: batched write-behind, restore at start, history retention.

The hot path never waits for Postgres: State records Changes, the persister hands them here.
One `write` is one transaction, so reader positions land together with the windows they
cover and a restart resumes exactly where the stored state ends. Writes go through asyncpg
directly (COPY into per-connection staging tables, then one `INSERT ... ON CONFLICT` per
table): that is an order of magnitude faster than row-by-row statements.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import itertools
import json
import os
import re
import time
from array import array
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from lagd.core.config import Secret, async_database_url
from lagd.core.model import GroupMembers, PartitionOwner
from lagd.runtime import compiled, logs
from lagd.runtime.turns import Turn, plain_turn
from lagd.state.changes import Changes, CommitRow, LogEndRow, WindowKey
from lagd.state.checkpoints import HAS_CHECKPOINTER_SQL, CheckpointSample, counters_sql
from lagd.state.history import CommitRows, as_commit_rows
from lagd.state.windows import State, group_hash, offsets_partition, window_from_bytes

log = logs.get(__name__)

# The windows table's rows written as binary COPY by compiled code (_apply.c: copy_windows), or
# None where the Python builds them for asyncpg's encoder (lagd.runtime.compiled). In bench_http at 1M
# group-partitions the persister was 12.6% of the loop (py-spy), asyncpg encoding those rows 44%
# of it and building them in Python 25%.
_apply_c = (
    compiled.load("lagd.state._apply", Path(__file__).with_name("_apply.c"))
    # issue 52's spike: lagd.state.windows.APPLY_CODE ("python": none of _apply.c)
    if os.environ.get("SPIKE_APPLY", os.environ.get("LAGD_APPLY", "cython")) != "python"
    else None
)
_copy_windows: Callable[..., tuple[bytes, int, int, bool] | None] | None = (
    _apply_c.copy_windows if _apply_c is not None else None
)

# Commit history rows the same way (copy_history): the persister's largest part at 20,000
# commits/s once windows were compiled (bench_http at 100k group-partitions, py-spy: asyncpg
# encoding the rows and building their tuples, 7% of the loop).
_copy_history: Callable[..., bytes | None] | None = _apply_c.copy_history if _apply_c is not None else None
_history_days: Callable[[array[int]], tuple[int, int, set[int]] | None] | None = (
    _apply_c.history_days if _apply_c is not None else None
)
HISTORY_COLUMNS = ["ts", "cluster", "group_name", "topic", "partition", "offset", "lag", "observed"]

DAY_MS = 86_400_000
COPY_CHUNK = 1_000  # rows per COPY call; the loop gets a turn between them (a flush never stalls it long)
# The same for windows written by the compiled code: up to this many rows or about this many bytes
# (a window's size grows with the intervals: 400 B at 10, 4 KB at 100), about 1 ms to build.
COPY_WINDOWS_ROWS = 10_000
COPY_WINDOWS_BYTES = 1 << 20
COPY_HISTORY_ROWS = 5_000  # compiled history rows per COPY call: about 500 KB, 0.3 ms to build (best of five)
LOG_END_CHUNK = 200  # log-end rows per COPY call: each holds a partition's samples (hundreds of numbers)
FETCH_CHUNK = 5_000  # rows per server-side cursor round trip on restore
PARTITIONED = ("commit_history", "log_end_history")
_PARTITION_NAME = re.compile(r"^(commit_history|log_end_history)_(\d{8})$")
_EPOCH = dt.date(1970, 1, 1)
_MIN_DAY = (dt.date.min - _EPOCH).days
_MAX_DAY = (dt.date.max - _EPOCH).days

# Keyed tables: name -> (columns, primary key columns). Staged by COPY, then upserted.
_KEYED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "windows": (
        ("cluster", "group_name", "topic", "partition", "entries", "group_hash"),
        ("cluster", "group_name", "topic", "partition"),
    ),
    "group_members": (
        ("cluster", "group_name", "member_order", "state", "owners", "group_hash"),
        ("cluster", "group_name"),
    ),
    "group_tombstones": (("cluster", "group_name", "tombstone_order", "group_hash"), ("cluster", "group_name")),
    "group_pauses": (("cluster", "group_name", "history", "group_hash"), ("cluster", "group_name")),
    "log_end": (("cluster", "topic", "partition", "offsets", "ts"), ("cluster", "topic", "partition")),
    "reader_positions": (("cluster", "partition", "next_offset"), ("cluster", "partition")),
}
_KEY_TYPES = {"cluster": "text", "group_name": "text", "topic": "text", "partition": "int"}
_WINDOW_COLUMNS = list(_KEYED["windows"][0])  # a window's row, in the keyed table and in the log alike


def create_engine(url: str | Secret, **kwargs: Any) -> AsyncEngine:
    """An asyncpg-backed engine for any postgresql:// form, embedded socket URLs included.

    Connections are pinged on checkout, so after a database restart the pool heals itself
    instead of handing out dead sockets.
    """
    connect_args = {"timeout": 5.0, "command_timeout": 300.0}
    connect_args.update(kwargs.pop("connect_args", {}))
    return create_async_engine(
        async_database_url(url),
        pool_pre_ping=True,
        pool_size=kwargs.pop("pool_size", 4),
        max_overflow=kwargs.pop("max_overflow", 4),
        connect_args=connect_args,
        **kwargs,
    )


def day_of(ts: int) -> int:
    """Days since the epoch of a millisecond timestamp (the history partition it lands in)."""
    return ts // DAY_MS


def days_of(ts: array[int]) -> set[int]:
    """The days (day_of) of a column of timestamps; at most two min/max lookups in the usual
    case of rows from one or two adjacent days, not a call per row."""
    if not ts:
        return set()
    first, last = day_of(min(ts)), day_of(max(ts))
    if last - first <= 1:
        return {first, last}
    return {day_of(t) for t in set(ts)}


def history_days(ts: array[int]) -> tuple[int, int, set[int]]:
    """The earliest and latest of a column of timestamps (not empty) and their days (day_of):
    one pass of compiled code where it is built (_apply.c: history_days; 500,000 rows 1.4 ms
    against 58 ms, and at 1M group-partitions these passes held the loop 20-30 ms before a
    backlogged write), else `min`, `max` and `days_of`."""
    got = _history_days(ts) if _history_days is not None else None
    return got if got is not None else (min(ts), max(ts), days_of(ts))


def partition_name(table: str, day: int) -> str:
    return f"{table}_{(_EPOCH + dt.timedelta(days=day)).strftime('%Y%m%d')}"


def _upsert_sql(table: str) -> str:
    cols, key = _KEYED[table]
    updates = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in cols if c not in key)
    collist = ", ".join(f'"{c}"' for c in cols)
    return (
        f'INSERT INTO "{table}" ({collist}) SELECT {collist} FROM "_stage_{table}" '
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )


def _delete_sql(table: str) -> str:
    _, key = _KEYED[table]
    args = ", ".join(f"${i + 1}::{_KEY_TYPES[c]}[]" for i, c in enumerate(key))
    return f'DELETE FROM "{table}" WHERE ({", ".join(key)}) IN (SELECT * FROM unnest({args}))'


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [[r[i] for r in rows] for i in range(width)]


def _owners_json(members: GroupMembers) -> str:
    return json.dumps([[o.topic, o.partition, o.host, o.client_id, o.member_id] for o in members.owners])


def _window_rows(
    windows: dict[WindowKey, bytes | None], hashed: Callable[[str], int], gone: list[WindowKey]
) -> Iterator[tuple[Any, ...]]:
    """The rows of the changed windows, built as they are copied; removed ones go to `gone`."""
    for key, data in windows.items():
        if data:
            yield (*key, data, hashed(key[1]))
        else:
            gone.append(key)


class Store:
    """Reads and writes lagd's live state and history in Postgres (one engine, many calls).

    `windows_log`: changed windows are appended to the generation of window_log that
    `generation` names (opened at the first write), not upserted into `windows`; the persister
    copies every window into a new generation now and then (`open_generation`, `append_copy`,
    `complete_generation`). Workers (lagd.scale) share a cluster's windows and upsert them.
    """

    def __init__(self, engine: AsyncEngine, *, windows_log: bool = True) -> None:
        self.engine = engine
        self.windows_log = windows_log
        self.generation: int | None = None  # the window_log generation writes append to
        self._known_partitions: set[str] = set()
        self.skipped_history = 0  # history rows with timestamps no calendar day holds

    @classmethod
    def from_url(cls, url: str | Secret, *, windows_log: bool = True) -> Store:
        return cls(create_engine(url), windows_log=windows_log)

    async def close(self) -> None:
        await self.engine.dispose()

    @contextlib.asynccontextmanager
    async def _raw(self) -> AsyncIterator[Any]:
        """The asyncpg connection under a pooled SQLAlchemy one; broken ones leave the pool."""
        async with self.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            try:
                yield raw.driver_connection
            except BaseException:
                await _invalidate(conn)
                raise

    # --- writes -------------------------------------------------------------------------
    async def write(self, changes: Changes, *, turn: Turn = plain_turn) -> None:
        """Write everything in `changes` in one transaction (idempotent: a retry is harmless),
        awaiting `turn` between the chunks it copies (lagd.runtime.turns)."""
        if not changes:
            return
        commit_rows, commit_days = self._placeable_commits(as_commit_rows(changes.commit_history))
        log_end_rows = self._placeable(changes.log_end_history)
        async with self._raw() as apg:
            try:
                if self.windows_log and changes.windows and self.generation is None:
                    await self._open_generation(apg)
                await self._ensure_partitions(apg, "commit_history", commit_days)
                await self._ensure_partitions(apg, "log_end_history", {day_of(r[0]) for r in log_end_rows})
                async with apg.transaction():
                    # No wait for the WAL flush: a Postgres crash can lose the last fraction of
                    # a second of writes, but whole transactions only, and reader positions
                    # travel with the windows they cover, so a restart reads those records
                    # again (only their history rows would be missing). Incidents and the
                    # outbox are written elsewhere, synchronously.
                    await apg.execute("SET LOCAL synchronous_commit = off")
                    await self._write_keyed(apg, changes, turn)
                    await self._copy_history(apg, commit_rows, turn)
                    for i in range(0, len(log_end_rows), COPY_CHUNK):
                        await apg.copy_records_to_table(
                            "log_end_history",
                            records=log_end_rows[i : i + COPY_CHUNK],
                            columns=["ts", "cluster", "topic", "partition", "offset"],
                        )
                        await turn()
                    if changes.status_history:
                        await apg.copy_records_to_table(
                            "status_history",
                            records=changes.status_history,
                            columns=["ts", "cluster", "group_name", "status"],
                        )
            except BaseException:
                self._known_partitions.clear()  # someone may have dropped one: check again next time
                raise

    async def write_isolating(self, changes: Changes, now_ms: int) -> int:
        """Write what Postgres accepts, quarantine each row it refuses; returns how many were.

        For a batch `write` failed on with `is_poison`: it is split in halves until each
        refused row stands alone (about 2 log2(n) writes per poison row). Rows are upserts, so
        writing the good halves in separate transactions is safe. Reader positions go last,
        once everything they cover is written or quarantined, so the readers move past it.
        """
        units = units_of(changes)
        quarantined = await self._isolate(units, now_ms)
        if changes.positions:
            await self.write(Changes(positions=dict(changes.positions)))
        return quarantined

    async def _isolate(self, units: list[Unit], now_ms: int) -> int:
        pending = [units]
        quarantined = 0
        while pending:
            part = pending.pop()
            if not part:
                continue
            try:
                await self.write(changes_of(part))
                continue
            except Exception as exc:
                if not is_poison(exc):
                    raise
                if len(part) > 1:
                    half = len(part) // 2
                    pending.extend((part[half:], part[:half]))
                    continue
                await self._quarantine(part[0], exc, now_ms)
                quarantined += 1
        return quarantined

    async def _quarantine(self, unit: Unit, exc: Exception, now_ms: int) -> None:
        table, cluster, key, data = quarantine_row(unit)
        error = f"{exc.__class__.__name__}: {exc}".replace("\x00", "\\x00")[:1000]
        log.error(
            "postgres refused a row: quarantined, the rest of the batch is written",
            table=table,
            cluster=cluster,
            key=key[:200],
            error=error,
            hint="see GET /lagd/v1/quarantine; DELETE /lagd/v1/quarantine/<id> once understood",
        )
        async with self._raw() as apg:
            await apg.execute(
                "INSERT INTO quarantine (table_name, cluster, row_key, key_hash, error, row_data, first_at, last_at) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (table_name, key_hash) DO UPDATE SET "
                "error = EXCLUDED.error, row_data = EXCLUDED.row_data, last_at = EXCLUDED.last_at, "
                "times = quarantine.times + 1",
                table,
                cluster,
                key[:QUARANTINE_KEY_CHARS],
                hashlib.sha256(key.encode("utf-8", "backslashreplace")).hexdigest(),
                error,
                data,
                now_ms,
            )

    def _placeable_commits(self, rows: CommitRows) -> tuple[CommitRows, set[int]]:
        """As `_placeable`, for the commit history's columns (checked without building rows),
        with the days they fall on."""
        if not rows:
            return rows, set()
        earliest, latest, days = history_days(rows.ts)
        lo, hi = _MIN_DAY * DAY_MS, (_MAX_DAY + 1) * DAY_MS
        if lo <= earliest and latest < hi:
            return rows, days
        kept = CommitRows(r for r in rows if lo <= r[0] < hi)
        skipped = len(rows) - len(kept)
        self.skipped_history += skipped
        log.warning("history rows with impossible timestamps skipped", count=skipped)
        return kept, days_of(kept.ts)

    def _placeable(self, rows: list[Any]) -> list[Any]:
        """History rows whose timestamp falls on a calendar day (garbage times are counted, not written)."""
        lo, hi = _MIN_DAY * DAY_MS, (_MAX_DAY + 1) * DAY_MS
        if all(lo <= r[0] < hi for r in rows):
            return rows
        kept = [r for r in rows if lo <= r[0] < hi]
        skipped = len(rows) - len(kept)
        self.skipped_history += skipped
        log.warning("history rows with impossible timestamps skipped", count=skipped)
        return kept

    @staticmethod
    async def _copy_history(apg: Any, rows: CommitRows, turn: Turn) -> None:
        """Append the commit history rows, a chunk at a time: binary COPY data built by compiled
        code where it is built, else (or for a chunk it leaves to the Python) tuples for
        asyncpg's encoder."""
        step = COPY_HISTORY_ROWS if _copy_history is not None else COPY_CHUNK
        for i in range(0, len(rows), step):
            stop = min(i + step, len(rows))
            data = None
            if _copy_history is not None:
                data = _copy_history(
                    rows.ts, rows.cluster, rows.group, rows.topic, rows.partition, rows.offset, rows.lag,
                    rows.observed, i, stop,
                )  # fmt: skip
            if data is not None:
                source = memoryview(data)  # bytes would be taken for a path
                await apg.copy_to_table("commit_history", source=source, columns=HISTORY_COLUMNS, format="binary")
                await turn()
                continue
            for j in range(i, stop, COPY_CHUNK):
                records = rows.rows(j, min(j + COPY_CHUNK, stop))  # tuples a chunk at a time
                await apg.copy_records_to_table("commit_history", records=records, columns=HISTORY_COLUMNS)
                await turn()

    async def _write_keyed(self, apg: Any, ch: Changes, turn: Turn) -> None:
        hashed = functools.cache(group_hash)  # each group this write names, hashed once
        # rows built as they are copied (an owners list is JSON per group: thousands of groups)
        members = (
            (k[0], k[1], m.order, m.state, _owners_json(m), hashed(k[1]))
            for k, m in ch.members.items()
            if m is not None
        )
        gone_members = [k for k, m in ch.members.items() if m is None]
        tombstones = [(c, g, o, hashed(g)) for (c, g), o in ch.tombstones.items()]
        pauses = [(c, g, list(h), hashed(g)) for (c, g), h in ch.pauses.items() if h is not None]
        gone_pauses = [k for k, h in ch.pauses.items() if h is None]
        log_end = ((*k, v[0], v[1]) for k, v in ch.log_end.items() if v is not None)
        gone_log_end = [k for k, v in ch.log_end.items() if v is None]
        positions = [(c, p, o) for (c, p), o in ch.positions.items()]
        gone_windows: list[WindowKey] = []
        if self.windows_log:
            await self._append_windows(apg, ch.windows, hashed, turn)
        elif not await self._upsert_compiled_windows(apg, ch.windows, gone_windows, turn):
            await self._upsert(apg, "windows", _window_rows(ch.windows, hashed, gone_windows), turn)
        for table, gone in (
            ("windows", gone_windows),
            ("group_members", gone_members),
            ("group_pauses", gone_pauses),
            ("log_end", gone_log_end),
        ):
            if gone:
                await apg.execute(_delete_sql(table), *_columns(gone, len(_KEYED[table][1])))
        for table, rows in (
            ("group_members", members),
            ("group_tombstones", tombstones),
            ("group_pauses", pauses),
            ("log_end", log_end),
            ("reader_positions", positions),
        ):
            await self._upsert(apg, table, rows, turn)

    async def _append_windows(
        self, apg: Any, windows: dict[WindowKey, bytes | None], hashed: Callable[[str], int], turn: Turn
    ) -> None:
        """Append `windows` to the current generation of window_log, a removed one as an empty
        `entries`: COPY built by compiled code where it is built, else (or from a row it leaves to
        the Python on) tuples for asyncpg's encoder. A row appended twice is harmless: the newest
        of a key wins."""
        if not windows:
            return
        table = f"window_log_{self.generation}"
        gone: list[WindowKey] = []
        if await self._copy_compiled_windows(apg, windows, table, gone, turn):
            rows: Iterable[tuple[Any, ...]] = [(*k, b"", hashed(k[1])) for k in gone]
        else:  # every row again, those copied included
            rows = ((*k, v or b"", hashed(k[1])) for k, v in windows.items())
        it = iter(rows)
        while chunk := list(itertools.islice(it, COPY_CHUNK)):
            await apg.copy_records_to_table(table, records=chunk, columns=_WINDOW_COLUMNS)
            await turn()

    @staticmethod
    async def _copy_compiled_windows(
        apg: Any, windows: dict[WindowKey, bytes | None], table: str, gone: list[WindowKey], turn: Turn
    ) -> bool:
        """COPY the rows of `windows` into `table` as binary data built by compiled code, a chunk
        at a time (removed ones go to `gone`); False where it is not built, or a row is one it
        leaves to the Python: then what it copied stays in `table` and `gone` is empty."""
        if _copy_windows is None:
            return False
        pos, size = 0, len(windows)
        while True:
            got = _copy_windows(windows, pos, size, COPY_WINDOWS_ROWS, COPY_WINDOWS_BYTES, gone)
            if got is None:
                gone.clear()
                return False
            data, rows, pos, done = got
            if rows:
                # bytes would be taken for a path
                await apg.copy_to_table(table, source=memoryview(data), columns=_WINDOW_COLUMNS, format="binary")
                await turn()
            if done:
                return True

    async def _open_generation(self, apg: Any) -> int:
        """Start the next generation of window_log (its own transaction: DDL); writes append to it."""
        async with apg.transaction():
            generation = await apg.fetchval("SELECT coalesce(max(generation), 0) + 1 FROM window_generations")
            # started_at is Postgres' time: a record for operators, nothing reads it
            await apg.execute(
                "INSERT INTO window_generations (generation, started_at) "
                "VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)",
                generation,
            )
            await apg.execute(
                f'CREATE TABLE "window_log_{generation}" PARTITION OF window_log '
                f"(generation DEFAULT {int(generation)}) FOR VALUES IN ({int(generation)})"
            )
        self.generation = int(generation)
        return self.generation

    async def open_generation(self) -> int:
        """Start the next generation of window_log, which writes then append to; returns it."""
        async with self._raw() as apg:
            return await self._open_generation(apg)

    async def append_copy(self, windows: dict[WindowKey, bytes | None], *, turn: Turn = plain_turn) -> int:
        """Append a slice of the copy of every window (lagd.state.window_log) to the current
        generation, in a transaction of its own. Rows Postgres refuses for what they hold (the
        write that carried them quarantined them) are left out, found by halving the slice as
        `write_isolating` does; returns how many were."""
        pending = [windows]
        skipped = 0
        while pending:
            part = pending.pop()
            try:
                await self._append_copy(part, turn)
            except Exception as exc:
                if not is_poison(exc):
                    raise
                if len(part) == 1:
                    skipped += 1
                    continue
                items = list(part.items())
                half = len(items) // 2
                pending.extend((dict(items[half:]), dict(items[:half])))
        return skipped

    async def _append_copy(self, windows: dict[WindowKey, bytes | None], turn: Turn) -> None:
        hashed = functools.cache(group_hash)
        async with self._raw() as apg, apg.transaction():
            await apg.execute("SET LOCAL synchronous_commit = off")
            await self._append_windows(apg, windows, hashed, turn)

    async def complete_generation(self, generation: int) -> int:
        """Mark `generation` complete (every window was copied into it) and drop the ones
        before it, and what `windows` still held from before the log; returns how many
        generations were dropped."""
        async with self._raw() as apg, apg.transaction():
            await apg.execute(
                "UPDATE window_generations SET completed_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
                "WHERE generation = $1",
                generation,
            )
            older = await apg.fetch("SELECT generation FROM window_generations WHERE generation < $1", generation)
            for (g,) in older:
                await apg.execute(f'DROP TABLE IF EXISTS "window_log_{int(g)}"')
            await apg.execute("DELETE FROM window_generations WHERE generation < $1", generation)
            if await apg.fetchval("SELECT EXISTS (SELECT 1 FROM windows)"):
                await apg.execute("TRUNCATE windows")
        return len(older)

    async def fold_log(self) -> int:
        """Move what window_log holds into `windows` and drop the log; returns how many windows
        it held. A worker (lagd.scale) calls it before restoring: workers write `windows`, and a
        log left by a single daemon before them would otherwise be newer than what they write.
        Workers starting together take turns (an advisory lock); the first one folds."""
        async with self._raw() as apg, apg.transaction():
            await apg.execute("SELECT pg_advisory_xact_lock(hashtext('lagd.window_log'))")
            generations = [r[0] for r in await apg.fetch("SELECT generation FROM window_generations")]
            if not generations:
                return 0
            # the view current_windows (migration 0009) says which window each key holds
            await apg.execute("CREATE TEMP TABLE _folded ON COMMIT DROP AS SELECT * FROM current_windows")
            await apg.execute("TRUNCATE windows")
            folded = await apg.fetchval(
                "WITH kept AS (INSERT INTO windows (cluster, group_name, topic, partition, entries, group_hash) "
                "SELECT * FROM _folded RETURNING 1) SELECT count(*) FROM kept"
            )
            for g in generations:
                await apg.execute(f'DROP TABLE IF EXISTS "window_log_{int(g)}"')
            await apg.execute("DELETE FROM window_generations")
        log.info("windows moved from the log into the windows table for workers", windows=folded)
        return int(folded)

    async def _upsert_compiled_windows(
        self, apg: Any, windows: dict[WindowKey, bytes | None], gone: list[WindowKey], turn: Turn
    ) -> bool:
        """Upsert the changed windows through binary COPY built by compiled code, a chunk at a
        time; False where it is not built, or a row is one it leaves to the Python (then nothing
        stays staged and `gone` is empty: `_upsert` writes them all)."""
        if _copy_windows is None:
            return False
        if not windows:
            return True
        await self._stage(apg, "windows")
        if not await self._copy_compiled_windows(apg, windows, "_stage_windows", gone, turn):
            await apg.execute('DELETE FROM "_stage_windows"')
            return False
        await apg.execute(_upsert_sql("windows"))
        return True

    async def _upsert(self, apg: Any, table: str, rows: Iterable[tuple[Any, ...]], turn: Turn) -> None:
        """Upsert `rows` (none: nothing), built and copied a chunk at a time; a log-end row
        carries a partition's samples, so its chunks are smaller."""
        size = LOG_END_CHUNK if table == "log_end" else COPY_CHUNK
        staged = False
        it = iter(rows)
        while chunk := list(itertools.islice(it, size)):
            if not staged:
                await self._stage(apg, table)
                staged = True
            await apg.copy_records_to_table(f"_stage_{table}", records=chunk, columns=list(_KEYED[table][0]))
            await turn()
        if staged:
            await apg.execute(_upsert_sql(table))

    @staticmethod
    async def _stage(apg: Any, table: str) -> None:
        # Staging tables live per connection and empty themselves at commit.
        await apg.execute(f'CREATE TEMP TABLE IF NOT EXISTS "_stage_{table}" (LIKE "{table}") ON COMMIT DELETE ROWS')

    async def _ensure_partitions(self, apg: Any, table: str, days: Iterable[int]) -> None:
        """Create the day partitions a batch needs (outside the write transaction: DDL locks)."""
        for day in sorted(days):
            name = partition_name(table, day)
            if name in self._known_partitions:
                continue
            await apg.execute(
                f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{table}" '
                f"FOR VALUES FROM ({day * DAY_MS}) TO ({(day + 1) * DAY_MS})"
            )
            self._known_partitions.add(name)

    async def apply_retention(self, now_ms: int, days: int) -> int:
        """Drop history day partitions whose whole day is older than `days`; returns how many."""
        cutoff = now_ms - days * DAY_MS
        dropped = 0
        async with self._raw() as apg:
            rows = await apg.fetch(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = ANY($1::text[])",
                list(PARTITIONED),
            )
            for (name,) in sorted(rows):
                m = _PARTITION_NAME.match(name)
                if m is None:
                    continue
                day = (dt.datetime.strptime(m.group(2), "%Y%m%d").date() - _EPOCH).days
                if (day + 1) * DAY_MS <= cutoff:
                    await apg.execute(f'DROP TABLE IF EXISTS "{name}"')
                    self._known_partitions.discard(name)
                    dropped += 1
            await apg.execute("DELETE FROM status_history WHERE ts < $1", cutoff)
        if dropped:
            log.info("history partitions dropped", count=dropped, retention_days=days)
        return dropped

    # --- reads --------------------------------------------------------------------------
    async def restore(self, state: State, *, groups: bool = True, log_end: bool = True) -> dict[tuple[str, int], int]:
        """Load windows, members, tombstones and log-end samples into `state` from one snapshot.

        Returns the reader positions ((cluster, offsets partition) -> next offset), so the
        readers resume exactly after what the restored state already contains. A worker
        (lagd.scale) starts with `groups=False` and restores its groups as it is assigned them
        (`restore_owned`).
        """
        async with self._raw() as apg, apg.transaction(isolation="repeatable_read", readonly=True):
            if groups:
                await self._restore_groups(apg, state, "", lambda cluster, group: True)
                await self._restore_log(apg, state)
            if log_end:
                async for r in apg.cursor(
                    "SELECT cluster, topic, partition, offsets, ts FROM log_end", prefetch=FETCH_CHUNK
                ):
                    state.restore_log_end((r[0], r[1], r[2]), list(r[3]), list(r[4]))
            rows = await apg.fetch("SELECT cluster, partition, next_offset FROM reader_positions")
        return {(r[0], r[1]): r[2] for r in rows}

    async def restore_owned(
        self, state: State, cluster: str, partitions: Collection[int], count: int
    ) -> dict[int, int]:
        """Load the groups of `cluster` whose offsets partition (of `count`) is in `partitions`,
        from one snapshot; returns those partitions' reader positions (partition -> next offset).

        Postgres selects the rows by the stored group_hash (Kafka's placement of the name,
        which it cannot compute); rows from before migration 0006 have none yet and are read
        and filtered here.
        """
        wanted = set(partitions)

        def owned(_cluster: str, group: str) -> bool:
            return offsets_partition(group, count) in wanted

        async with self._raw() as apg, apg.transaction(isolation="repeatable_read", readonly=True):
            await self._restore_groups(apg, state, cluster, owned, placed=(count, sorted(wanted)))
            rows = await apg.fetch(
                "SELECT partition, next_offset FROM reader_positions WHERE cluster = $1 AND partition = ANY($2::int[])",
                cluster,
                sorted(wanted),
            )
        return {r[0]: r[1] for r in rows}

    async def restore_log_ends(self, state: State, cluster: str, topics: Collection[str]) -> int:
        """Load the stored log-end samples of `topics` of `cluster`; returns how many partitions.

        A worker given groups whose topics it has not sampled yet starts from what the worker
        that sampled them stored, so lag in time is known at once (lagd.scale.handover).
        """
        if not topics:
            return 0
        n = 0
        async with self._raw() as apg:
            for r in await apg.fetch(
                "SELECT topic, partition, offsets, ts FROM log_end WHERE cluster = $1 AND topic = ANY($2::text[])",
                cluster,
                sorted(topics),
            ):
                state.restore_log_end((cluster, r[0], r[1]), list(r[2]), list(r[3]))
                n += 1
        return n

    async def latest_log_ends(self, cluster: str, topics: Collection[str]) -> list[tuple[str, int, int, int]]:
        """The newest stored log-end sample of every partition of `topics`: (topic, partition, offset, ts)."""
        if not topics:
            return []
        async with self._raw() as apg:
            rows = await apg.fetch(
                "SELECT topic, partition, offsets[array_upper(offsets, 1)], ts[array_upper(ts, 1)] FROM log_end "
                "WHERE cluster = $1 AND topic = ANY($2::text[]) AND cardinality(offsets) > 0",
                cluster,
                sorted(topics),
            )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    @staticmethod
    async def _restore_log(apg: Any, state: State) -> None:
        """The windows of window_log, over what `windows` held: the newest row of each key in
        the generations from the last complete one on (Postgres finds them: at 1M
        group-partitions the log holds a few million rows); an empty one removes the window."""
        base = await apg.fetchval(_BASE_GENERATION_SQL)
        async for r in apg.cursor(_NEWEST_LOGGED_SQL, base, prefetch=FETCH_CHUNK):
            key = (r[0], r[1], r[2], r[3])
            if r[4]:
                state.restore_flat(key, window_from_bytes(r[4]))
            else:
                state.restore_removal(key)

    @staticmethod
    async def _restore_groups(
        apg: Any,
        state: State,
        cluster: str,
        keep: Callable[[str, str], bool],
        placed: tuple[int, list[int]] | None = None,
    ) -> None:
        """Windows, members and tombstones of the groups `keep` accepts (of `cluster`, or every
        one when ""); `placed` (partition count, partitions) has Postgres select the rows of
        those offsets partitions first, by group_hash."""
        args: list[Any] = [cluster] if cluster else []
        where = "WHERE cluster = $1" if cluster else ""
        if cluster and placed is not None:
            where += " AND (group_hash IS NULL OR group_hash % $2 = ANY($3::int[]))"
            args += [placed[0], placed[1]]
        async for r in apg.cursor(
            f"SELECT cluster, group_name, topic, partition, entries FROM windows {where}", *args, prefetch=FETCH_CHUNK
        ):
            if keep(r[0], r[1]):
                state.restore_flat((r[0], r[1], r[2], r[3]), window_from_bytes(r[4]))
        async for r in apg.cursor(
            f"SELECT cluster, group_name, member_order, state, owners FROM group_members {where}",
            *args,
            prefetch=FETCH_CHUNK,
        ):
            if keep(r[0], r[1]):
                raw = json.loads(r[4]) if isinstance(r[4], str) else r[4]  # SQLAlchemy's codec decodes jsonb
                owners = tuple(PartitionOwner(o[0], int(o[1]), o[2], o[3], o[4]) for o in raw)
                state.restore_members(GroupMembers(r[0], r[1], r[2], owners, r[3]))
        async for r in apg.cursor(
            f"SELECT cluster, group_name, tombstone_order FROM group_tombstones {where}", *args, prefetch=FETCH_CHUNK
        ):
            if keep(r[0], r[1]):
                state.restore_tombstone(r[0], r[1], r[2])
        async for r in apg.cursor(
            f"SELECT cluster, group_name, history FROM group_pauses {where}", *args, prefetch=FETCH_CHUNK
        ):
            if keep(r[0], r[1]):
                state.restore_pauses(r[0], r[1], tuple(r[2]))

    async def positions(self, cluster: str) -> dict[int, int]:
        """Next offset to read per offsets partition of `cluster`."""
        async with self._raw() as apg:
            rows = await apg.fetch("SELECT partition, next_offset FROM reader_positions WHERE cluster = $1", cluster)
        return {r[0]: r[1] for r in rows}

    async def checkpoint_sample(self) -> CheckpointSample:
        """Postgres' checkpoint counters and WAL settings now (lagd.state.checkpoints); the
        statistics views are readable by any role. Postgres 17 moved the counters to
        pg_stat_checkpointer."""
        async with self._raw() as apg:
            counters = counters_sql(await apg.fetchval(HAS_CHECKPOINTER_SQL))
            requested, timed, size, compression = await apg.fetchrow(
                f"SELECT c.*, current_setting('max_wal_size'), current_setting('wal_compression') FROM ({counters}) c"
            )
        return CheckpointSample(time.monotonic(), int(requested), int(timed), str(size), str(compression))

    async def ping(self, timeout: float = 2.0) -> bool:
        """True when Postgres answers a trivial query within `timeout` seconds."""
        try:
            async with self._raw() as apg:
                await apg.fetchval("SELECT 1", timeout=timeout)
        except Exception:
            return False
        return True


# The first generation of window_log the restore reads: the last complete one (0: none yet,
# every generation is read, over what `windows` holds).
_BASE_GENERATION_SQL = "SELECT coalesce(max(generation), 0) FROM window_generations WHERE completed_at IS NOT NULL"
# The newest row of each key from generation $1 on. The log is read twice, not through a
# common table expression: that would be materialised, entries and all.
_NEWEST_LOGGED_SQL = (
    "SELECT l.cluster, l.group_name, l.topic, l.partition, l.entries FROM window_log l JOIN ("
    "SELECT max(seq) AS seq FROM window_log WHERE generation >= $1 "
    "GROUP BY cluster, group_name, topic, partition) newest ON l.seq = newest.seq WHERE l.generation >= $1"
)

# Postgres refuses these for what a row holds, not because it is away; retrying cannot help:
# 22 data exception (NUL in text, bad encoding, out of range), 23 integrity constraint
# violation, 54 program limit exceeded (an index row too long).
POISON_SQLSTATE_CLASSES = ("22", "23", "54")
QUARANTINE_KEY_CHARS = 1000

# One row of a Changes: (field of Changes, key or history row, value; None for history rows).
Unit = tuple[str, Any, Any]
_KEYED_FIELDS = {
    "windows": "windows",
    "members": "group_members",
    "pauses": "group_pauses",
    "tombstones": "group_tombstones",
    "log_end": "log_end",
}
_HISTORY_FIELDS = ("commit_history", "log_end_history", "status_history")


def is_poison(exc: BaseException) -> bool:
    """True when Postgres (or the driver, encoding the row) refused the data itself."""
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate[:2] in POISON_SQLSTATE_CLASSES
    # asyncpg's client-side encoding errors: a value that does not fit its column type
    return isinstance(exc, asyncpg.exceptions.DataError | ValueError | OverflowError)


def units_of(ch: Changes) -> list[Unit]:
    """Every row of `ch` except reader positions, one unit each."""
    out: list[Unit] = []
    for name in _KEYED_FIELDS:
        out.extend((name, k, v) for k, v in getattr(ch, name).items())
    for name in _HISTORY_FIELDS:
        out.extend((name, row, None) for row in getattr(ch, name))
    return out


def changes_of(units: Iterable[Unit]) -> Changes:
    ch = Changes()
    for name, key, value in units:
        target = getattr(ch, name)
        if isinstance(target, dict):
            target[key] = value
        else:
            target.append(key)
    return ch


def quarantine_row(unit: Unit) -> tuple[str, str, str, bytes]:
    """(table, cluster, key, row data) of a refused row, escaped so Postgres can hold them."""
    name, key, value = unit
    if name in _KEYED_FIELDS:
        table, cluster, shown, data = _KEYED_FIELDS[name], key[0], key, (key, value)
    else:  # a history row: (ts, cluster, ...)
        table, cluster, shown, data = name, key[1], key[:-1] if name == "commit_history" else key, key
    return table, _escaped(cluster)[:200], _escaped(shown), _escaped(data).encode("utf-8", "backslashreplace")


def _escaped(value: object) -> str:
    """repr escapes NUL and lone surrogates; a plain str is shown without quotes."""
    text = value if isinstance(value, str) and value.isprintable() else repr(value)
    return text


async def _invalidate(conn: AsyncConnection) -> None:
    with contextlib.suppress(Exception):
        await conn.invalidate()


__all__ = ["DAY_MS", "CommitRow", "LogEndRow", "Store", "create_engine", "day_of", "partition_name"]
