"""`lagd replay`: the daemon's own state and evaluator over a trace, verdict changes out.

The contract is shared/spec/replay-format.md. Operators replay a night to see what lagd
would have said and to tune settings; the quality benchmark and tests score verdicts with
it. Nothing here judges anything: events go into the State and groups are judged by the
Evaluator that `lagd.evaluate.build.build_core` builds for the daemon, so there is no second copy of
the rules.

Time comes only from the trace: every `every_ms` of trace time (ticks aligned to the epoch)
every group seen so far is judged with exactly the events whose ts is at or before the
tick. Lines may be up to TS_TOLERANCE_MS out of order, so events wait in a small heap until
no later line can still precede them; memory grows with the state, not with the trace.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any, NamedTuple

import psycopg2  # type: ignore[import-untyped]

from lagd.core.config import ConfigError, Secret, Settings, parse, sync_database_url
from lagd.core.model import Commit, GroupStatus, LogEndSample, LogStartSample, PartitionStatus, RecordTimestamp
from lagd.core.times import epoch_ms
from lagd.evaluate.build import build_core
from lagd.evaluate.retention_view import STATUS_OF
from lagd.evaluate.verdict_types import GroupVerdict
from lagd.ingest.codec import fast_constructor

# A line's ts may be this much older than the newest ts before it (clocks of the recording
# hosts, commits and samples written by different threads); anything older is an error.
TS_TOLERANCE_MS = 1000
# Groups idle beyond storage.expire-group are forgotten this often, as the daemon does.
EXPIRE_EVERY_MS = 60_000
# History rows per round trip of the server-side cursor (--from-db).
FETCH_ROWS = 5_000
INT64_MAX = 2**63 - 1
# Sections only the daemon uses: a replay config may omit them, and they are not checked.
DAEMON_ONLY_SECTIONS = ("clusters", "mirrors", "http", "notify")

TraceEvent = Commit | LogEndSample | LogStartSample | RecordTimestamp
# (ts, order, event): the heap entry. `order` is the line (or row) number in the whole input:
# it breaks ts ties in input order and is the commit's order in the State.
Timed = tuple[int, int, TraceEvent]


class TraceError(ValueError):
    """A malformed input line: where it is and what is wrong with it."""

    def __init__(self, source: str, line: int, problem: str) -> None:
        super().__init__(f"{source}:{line}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


# --- input: JSON lines -------------------------------------------------------------------

_COMMIT_FIELDS = "ts, cluster, group, topic, partition and offset"
_LOG_END_FIELDS = "ts, cluster, topic, partition and offset"
_RECORD_TS_FIELDS = "ts, cluster, topic, partition, offset and record_ts"
# What a trace line costs, read: json.loads runs this scanner under three layers of Python
# (about 1 us a line of 2.4), and a frozen dataclass's __init__ sets each field through
# object.__setattr__ (about 1.5 us an event); a trace has tens of thousands of lines a group.
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_new_log_end = fast_constructor(LogEndSample)  # every field positional: relayed last


def _text(record: dict[str, Any], name: str, needs: str) -> str:
    value = record.get(name)
    if type(value) is str and value:
        return value
    if value is None and name not in record:
        raise ValueError(f"missing field {name!r}: this line type needs {needs}")
    raise ValueError(f"field {name!r} is {json.dumps(value)}, expected a non-empty string")


def _count(record: dict[str, Any], name: str, needs: str) -> int:
    value = record.get(name)
    if type(value) is int and 0 <= value <= INT64_MAX:
        return value
    if value is None and name not in record:
        raise ValueError(f"missing field {name!r}: this line type needs {needs}")
    raise ValueError(f"field {name!r} is {json.dumps(value)}, expected a whole number from 0 to 2^63-1")


class WithLogStart(NamedTuple):
    """A log_end line that carries its partition's log start (the optional `log_start` field)."""

    end: LogEndSample
    start: LogStartSample


def parse_line(raw: bytes | str, order: int) -> TraceEvent | WithLogStart | None:
    """One trace line as an event (a log_end line with a `log_start` field: both samples), or
    None for a blank or comment line.

    Raises ValueError with the problem (the caller adds where). `order` becomes the commit's
    order: the State keeps the newest commit by it, so it must grow line after line.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start}): write the trace as UTF-8") from None
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    try:
        record, end = _scan_json(stripped, 0)
        if end != len(stripped):
            raise ValueError("extra data")
    except (StopIteration, ValueError):
        try:  # json.loads says what is wrong
            record = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc.msg} at column {exc.colno}): each line must be one JSON object") from None
    if type(record) is not dict:
        raise ValueError(f"a JSON {type(record).__name__}, not an object: each line must be one JSON object")
    kind = record.get("type")
    if kind == "commit":
        ts = _count(record, "ts", _COMMIT_FIELDS)
        return Commit(
            _text(record, "cluster", _COMMIT_FIELDS),
            _text(record, "group", _COMMIT_FIELDS),
            _text(record, "topic", _COMMIT_FIELDS),
            _count(record, "partition", _COMMIT_FIELDS),
            _count(record, "offset", _COMMIT_FIELDS),
            order,
            ts,
            ts,
        )
    if kind == "log_end":
        sample = _new_log_end(
            _text(record, "cluster", _LOG_END_FIELDS),
            _text(record, "topic", _LOG_END_FIELDS),
            _count(record, "partition", _LOG_END_FIELDS),
            _count(record, "offset", _LOG_END_FIELDS),
            _count(record, "ts", _LOG_END_FIELDS),
            False,
        )
        if "log_start" not in record:
            return sample
        start = _count(record, "log_start", _LOG_END_FIELDS)
        if start > sample.offset:
            raise ValueError(f"field 'log_start' is {start}, above the line's log-end offset {sample.offset}")
        return WithLogStart(sample, LogStartSample(sample.cluster, sample.topic, sample.partition, start, sample.ts))
    if kind == "log_start":
        return LogStartSample(
            _text(record, "cluster", _LOG_END_FIELDS),
            _text(record, "topic", _LOG_END_FIELDS),
            _count(record, "partition", _LOG_END_FIELDS),
            _count(record, "offset", _LOG_END_FIELDS),
            _count(record, "ts", _LOG_END_FIELDS),
        )
    if kind == "record_ts":
        # the record at `offset` (the first unconsumed one of a group committed there), read at `ts`
        offset = _count(record, "offset", _RECORD_TS_FIELDS)
        return RecordTimestamp(
            _text(record, "cluster", _RECORD_TS_FIELDS),
            _text(record, "topic", _RECORD_TS_FIELDS),
            _count(record, "partition", _RECORD_TS_FIELDS),
            offset,
            offset,
            _count(record, "record_ts", _RECORD_TS_FIELDS),
            True,
            _count(record, "ts", _RECORD_TS_FIELDS),
        )
    if "type" not in record:
        raise ValueError('missing field \'type\': expected "commit", "log_end", "log_start" or "record_ts"')
    raise ValueError(f'field \'type\' is {json.dumps(kind)}, expected "commit", "log_end", "log_start" or "record_ts"')


def parse_trace(sources: Iterable[tuple[str, Iterable[bytes | str]]]) -> Iterator[Timed]:
    """Every event of the sources, read one after the other as one trace.

    Checks what the replay relies on: no line is more than TS_TOLERANCE_MS older than the
    newest before it (in this file or an earlier one). Raises TraceError naming the line.
    """
    order = 0
    newest = -1
    newest_at = ""
    for source, lines in sources:
        for number, raw in enumerate(lines, 1):
            order += 1
            try:
                got = parse_line(raw, order)
            except ValueError as exc:
                raise TraceError(source, number, str(exc)) from None
            if got is None:
                continue
            extra: LogStartSample | None = None
            event: TraceEvent
            if isinstance(got, WithLogStart):
                event, extra = got.end, got.start
            else:
                event = got
            ts = event.timestamp if isinstance(event, Commit) else event.ts
            if ts > newest:
                newest = ts
                newest_at = f"{source}:{number}"
            elif ts < newest - TS_TOLERANCE_MS:
                raise TraceError(
                    source,
                    number,
                    f"ts {ts} is {newest - ts} ms before ts {newest} at {newest_at}; lines must come in "
                    f"ascending ts (at most {TS_TOLERANCE_MS} ms out of order): sort the trace by ts, "
                    "and give several files oldest first",
                )
            yield ts, order, event
            if extra is not None:
                order += 1  # each event its own order: the heap never compares two events
                yield ts, order, extra


# --- the replay loop -----------------------------------------------------------------------


def change_line(verdict: GroupVerdict, tick: int) -> str:
    """The spec's output line for a group whose status changed at `tick`."""
    partitions = [
        {
            "topic": p.topic,
            "partition": p.partition,
            "status": p.status.value,
            "rule": getattr(p, "rule", None) or p.reason,
        }
        for p in verdict.partitions
        if p.status is not PartitionStatus.OK
    ]
    line: dict[str, Any] = {
        "ts": tick,
        "cluster": verdict.cluster,
        "group": verdict.group,
        "status": verdict.status.value,
        "partitions": partitions,
    }
    # Partitions with records lost or at risk (a trace with log-start samples), only when any:
    # a line of a trace without them is as before.
    retention = [
        {"topic": n.topic, "partition": n.partition, "retention": n.state.value, "reason": n.reason}
        for n in verdict.retention
        if n.state in STATUS_OF
    ]
    if retention:
        line["retention"] = retention
    return json.dumps(line)


class Replay:
    """One replay: the daemon's State and Evaluator, the pending events and the statuses printed."""

    def __init__(self, settings: Settings, every_ms: int, out: IO[str]) -> None:
        if every_ms < 1:
            raise ValueError(f"every_ms must be at least 1, got {every_ms}")
        self.state, self.evaluator = build_core(settings)
        self.state.record_history = False  # a replay persists nothing: keep no history rows
        self.every_ms = every_ms
        self.out = out
        self.statuses: dict[tuple[str, str], GroupStatus] = {}
        self.pending: list[Timed] = []
        self.tick: int | None = None  # the next tick to judge
        self.expire_at = 0
        self.events = 0

    def run(self, events: Iterable[Timed], until_ms: int | None = None) -> int:
        """Replay `events` (ts ascending, at most TS_TOLERANCE_MS out of order); returns their count.

        Ticks run through the one that covers the last event, or through `until_ms` when later.
        """
        pending = self.pending
        newest = -1
        for item in events:
            heapq.heappush(pending, item)
            self.events += 1
            if item[0] > newest:
                newest = item[0]
                # Every later event is at most the tolerance older than this one, so the ticks
                # before that point hold all their events: judge them.
                self.judge_before(newest - TS_TOLERANCE_MS)
        if self.events:
            last = -(-newest // self.every_ms) * self.every_ms
            if until_ms is not None and until_ms > last:
                last = until_ms
            self.judge_before(last + 1)
        return self.events

    def judge_before(self, limit: int) -> None:
        """Judge every tick before `limit`, each after applying the events at or before it."""
        pending = self.pending
        if self.tick is None:
            if not pending:
                return
            self.tick = -(-pending[0][0] // self.every_ms) * self.every_ms
        apply = self.state.apply
        tick = self.tick
        while tick < limit:
            while pending and pending[0][0] <= tick:
                apply(heapq.heappop(pending)[2])
            self.judge(tick)
            tick += self.every_ms
        self.tick = tick

    def judge(self, tick: int) -> None:
        """Judge every known group at `tick` and print each status change (first one included)."""
        state = self.state
        evaluator = self.evaluator
        statuses = self.statuses
        if tick >= self.expire_at:
            state.expire_groups(tick)
            self.expire_at = tick + EXPIRE_EVERY_MS
        seen: set[tuple[str, str]] = set()
        for cluster in state.clusters():
            for group in state.groups(cluster):
                key = (cluster, group)
                seen.add(key)
                verdict = evaluator.group(cluster, group, tick)
                if statuses.get(key) is not verdict.status:
                    statuses[key] = verdict.status
                    self.out.write(change_line(verdict, tick) + "\n")
        if len(seen) < len(statuses):
            for key in sorted(k for k in statuses if k not in seen):  # expired: NOTFOUND, as in the daemon
                verdict = evaluator.group(key[0], key[1], tick)
                if statuses.pop(key) is not verdict.status:
                    self.out.write(change_line(verdict, tick) + "\n")


def replay(
    events: Iterable[Timed], settings: Settings, every_ms: int, out: IO[str], until_ms: int | None = None
) -> int:
    """Replay `events` with `settings`, writing verdict changes to `out`; returns the event count."""
    return Replay(settings, every_ms, out).run(events, until_ms)


# --- --from-db: the history tables ----------------------------------------------------------


def history_events(
    database_url: Secret | str, start_ms: int, end_ms: int, cluster: str | None, group: str | None
) -> Iterator[Timed]:
    """Commit and log-end history rows with start_ms <= ts <= end_ms, merged in ts order.

    One server-side cursor streams them. At one ts, log-end samples come before commits (a
    commit's lag is then measured against the sample of its own moment). With `group`, only
    the log ends of the topics the group committed to in the range are read.
    """
    url = sync_database_url(database_url).replace("postgresql+psycopg2://", "postgresql://", 1)
    params: dict[str, Any] = {"start": start_ms, "end": end_ms, "cluster": cluster, "group": group}
    commits = 'SELECT ts, 1 AS kind, cluster, topic, partition, "offset", group_name, observed FROM commit_history'
    log_ends = (
        'SELECT ts, 0 AS kind, cluster, topic, partition, "offset", NULL AS group_name, ts AS observed '
        "FROM log_end_history"
    )
    where = "ts BETWEEN %(start)s AND %(end)s" + (" AND cluster = %(cluster)s" if cluster is not None else "")
    from lagd.db.schema import history_of_group  # SQLAlchemy is needed only when reading from the database

    of_group = history_of_group("%(group)s")
    conn = psycopg2.connect(url)
    try:
        conn.set_session(readonly=True)
        log_end_where = where
        if group is not None:
            with conn.cursor() as cur:
                cur.execute(f"SELECT DISTINCT topic FROM commit_history WHERE {where} AND {of_group}", params)
                params["topics"] = [row[0] for row in cur.fetchall()]
            log_end_where += " AND topic = ANY(%(topics)s::text[])"
        query = (
            f"{log_ends} WHERE {log_end_where} UNION ALL "
            f"{commits} WHERE {where}{f' AND {of_group}' if group is not None else ''} "
            'ORDER BY ts, kind, cluster, topic, partition, group_name, "offset"'
        )
        with conn.cursor(name="lagd_replay") as cur:
            cur.itersize = FETCH_ROWS
            cur.execute(query, params)
            for order, (ts, kind, row_cluster, topic, partition, offset, row_group, observed) in enumerate(cur, 1):
                if kind == 0:
                    yield ts, order, LogEndSample(row_cluster, topic, partition, offset, ts)
                else:
                    yield ts, order, Commit(row_cluster, row_group, topic, partition, offset, order, ts, observed)
    finally:
        conn.close()


# --- the command ------------------------------------------------------------------------------


def load_settings(path: str) -> Settings:
    """Evaluator and storage settings from a config file, read and checked as the daemon reads them.

    `lagd.core.config.load` insists on a cluster because the daemon needs one; a replay needs none,
    so the daemon-only sections are left out (and unchecked) and a placeholder cluster stands
    in for parse()'s check, then is dropped. LAGD_* overrides of the other sections apply.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            str(p), f"cannot read the file ({exc.strerror}); pass an existing file with --config"
        ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(p), f"not valid TOML: {exc}") from None
    kept = {section: body for section, body in raw.items() if section not in DAEMON_ONLY_SECTIONS}
    kept["clusters"] = {"replay": {"bootstrap-servers": ["replay.invalid:9092"]}}
    ignored = tuple(f"LAGD_{section.upper()}_" for section in DAEMON_ONLY_SECTIONS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(ignored)}
    return dataclasses.replace(parse(kept, env), clusters={}, mirrors={})


def parse_time(text: str, flag: str) -> int:
    """Epoch milliseconds from `--from`/`--to` (lagd.core.times.epoch_ms), the flag named on error."""
    try:
        return epoch_ms(text)
    except ValueError as exc:
        raise ValueError(f"{flag} {exc}") from None


def _fail(message: str) -> int:
    print(f"lagd replay: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """`lagd replay`: 0 when the whole input was replayed, 2 for bad input or usage, 1 if the database fails."""
    if not (math.isfinite(args.every) and round(args.every * 1000) >= 1):
        return _fail(f"--every {args.every}: give the evaluation period in seconds, at least 0.001")
    every_ms = round(args.every * 1000)
    try:
        settings = load_settings(args.config) if args.config else Settings()
    except ConfigError as exc:
        return _fail(str(exc))
    try:
        if args.from_db:
            return _run_from_db(args, settings, every_ms)
        return _run_traces(args.traces, settings, every_ms)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run_traces(traces: list[str], settings: Settings, every_ms: int) -> int:
    with ExitStack() as stack:
        sources: list[tuple[str, Iterable[bytes]]] = []
        for name in traces or ["-"]:
            if name == "-":
                sources.append(("<stdin>", sys.stdin.buffer))
                continue
            try:
                sources.append((name, stack.enter_context(open(name, "rb"))))
            except OSError as exc:
                return _fail(f"{name}: cannot read it ({exc.strerror}); check the path")
        try:
            replay(parse_trace(sources), settings, every_ms, sys.stdout)
        except TraceError as exc:
            sys.stdout.flush()
            return _fail(str(exc))
    return 0


def _run_from_db(args: argparse.Namespace, settings: Settings, every_ms: int) -> int:
    if args.traces:
        return _fail("--from-db reads the database: give no TRACE files")
    if not args.config or args.start is None or args.end is None:
        return _fail("--from-db needs --config FILE (for storage.database-url), --from T and --to T")
    try:
        start = parse_time(args.start, "--from")
        end = parse_time(args.end, "--to")
    except ValueError as exc:
        return _fail(str(exc))
    if start > end:
        return _fail(f"--from {args.start} is after --to {args.end}: give the range oldest first")
    events = history_events(settings.storage.database_url, start, end, args.cluster, args.group)
    try:
        count = replay(events, settings, every_ms, sys.stdout, until_ms=end)
    except psycopg2.Error as exc:
        first = (str(exc).strip() or exc.__class__.__name__).splitlines()[0]
        print(
            f"lagd replay: cannot read the history ({exc.__class__.__name__}: {first}); check storage.database-url "
            "and that the database accepts connections and is migrated (lagd db upgrade)",
            file=sys.stderr,
        )
        return 1
    if count == 0:
        scope = " ".join(
            f"{flag} {value}" for flag, value in (("--cluster", args.cluster), ("--group", args.group)) if value
        )
        print(
            f"lagd replay: no history between {args.start} and {args.end}"
            f"{' for ' + scope if scope else ''}: check the range and names "
            "(history is kept storage.history-retention-days days)",
            file=sys.stderr,
        )
    return 0
