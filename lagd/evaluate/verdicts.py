"""Verdicts: a group's statuses, lags and lag-in-time, cached briefly per group.

The HTTP layer, metrics and the notifier all read verdicts through one Evaluator, so a
group is judged once per change (or per TTL, since STOP depends on the clock), not once
per reader. Reads the state's flat windows directly: entry objects are only built for
each partition's start and end. A group's partitions are every partition of each topic it
has committed to (the partition count known from the broker samples): those without
commits are OK with complete 0, as Burrow reports them.

Where the compiled rules code is built, the loop over a topic's partitions runs compiled
(`_trend.judge_topic`, lagd's rules and Burrow's), handing back to the Python loop here each
partition only it answers exactly (tests/test_trend_c.py compares the two).
"""

from __future__ import annotations

import dataclasses
import importlib
from array import array
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, TypeAlias

from lagd.core.model import GroupStatus, PartitionOwner, PartitionStatus
from lagd.core.ruleset import RuleSet
from lagd.evaluate.lagd_fast import _C_SAID, Answer, GroupFacts, LagdJudge, judge_reference
from lagd.evaluate.lagd_fast import compiled_pass as _judge_topic
from lagd.evaluate.lagd_rules import NEVER, LagdParams
from lagd.evaluate.lagtime import reached_in
from lagd.evaluate.retention import DEFAULT_HORIZON_MS, RetentionState
from lagd.evaluate.retention_view import STATUS_OF, OutOfReach, RetentionNote, group_retention, latch, worst_of
from lagd.evaluate.rules import (
    J_CAUGHT_UP,
    J_EMPTY,
    J_INCOMPLETE,
    J_PROGRESSING,
    J_RECENT_LOW_LAG,
    J_REWIND,
    J_STALL,
    J_STOP,
    J_WARN,
    SEVERITY,
    judge_flat,
)
from lagd.evaluate.snapshot import GroupSnapshot, Rows, not_ok_of, snapshot_of
from lagd.evaluate.verdict_types import GroupVerdict, PartitionVerdict
from lagd.state.layout import FIELDS, LAST, OFFSET, TS
from lagd.state.pauses import PauseSettings, stop_floor
from lagd.state.windows import LogEnd, State

_NO_LOG_END = LogEnd()  # read only: a partition without samples
# Burrow's judgements in the order the compiled pass answers them (_trend.c's FLAT_*).
_FLAT = (J_STOP, J_REWIND, J_RECENT_LOW_LAG, J_STALL, J_WARN, J_PROGRESSING)
MAX_PADDING = 1024  # empty slots listed beyond a topic's sampled partitions, up to a committed one


def _fills(cls: type, compiled: Callable[..., int] | None) -> Callable[..., int] | None:
    """The compiled pass, where it fills `cls` as the Python builds it (in place, field by field):
    the fields it knows, in their order, each set by __init__ and nothing run after it. Else
    None: the Python loop judges (_trend.c refuses another layout too, but loudly)."""
    if compiled is None:
        return None
    known = getattr(importlib.import_module(compiled.__module__), "VERDICT_FIELDS", None)
    given = fields(cls)
    plain = all(f.init and not f.kw_only for f in given) and not hasattr(cls, "__post_init__")
    return compiled if plain and tuple(f.name for f in given) == known else None


compiled_pass = _fills(PartitionVerdict, _judge_topic)


@dataclass(slots=True)
class _Cached:
    version: int
    at: int
    verdict: GroupVerdict


# Since-tracking packs (first seen ms, status) into one int per partition to stay small.
_CODE = {status: i for i, status in enumerate(PartitionStatus)}
_STATUS_OF = list(PartitionStatus)
_SHIFT = 8
# By topic: one int per partition, 0 for none; native int64s indexed by partition (bytes) when
# the topic's partitions are listed densely (8 bytes a partition, where a dict entry and its int
# took about 100), a dict when a hostile partition number makes them sparse. Bytes, not an
# array: a dict of bytes is nothing the cyclic garbage collector tracks, where a dict of arrays
# was two objects per group in each of its full passes (20,000 at a million group-partitions).
Since: TypeAlias = "dict[str, bytes | dict[int, int]]"


def _slots(before: bytes | dict[int, int] | None, n: int) -> array[int]:
    """A topic's previous since-values as slots for partitions 0..n-1 (0: none), to read."""
    slots = array("q")
    if isinstance(before, bytes):
        slots.frombytes(before)
        if len(slots) < n:
            slots.frombytes(bytes(8 * (n - len(slots))))
        return slots
    slots.frombytes(bytes(8 * n))
    if before is None:
        return slots
    for partition, value in before.items():
        if 0 <= partition < n:
            slots[partition] = value
    return slots


def _sparse(before: bytes | dict[int, int] | None) -> defaultdict[int, int]:
    """A topic's previous since-values by partition (0 for none), to read."""
    if isinstance(before, bytes):
        return defaultdict(int, ((p, v) for p, v in enumerate(memoryview(before).cast("q")) if v))
    return defaultdict(int, before or {})


# What an evaluation depended on: the group's version (windows and samples), when a time-driven
# rule could next change it (ms), and the time it was judged as of (ms: now, or the time through
# which lagd had read the cluster whole).
Stamp = tuple[int, int, int]
# Group severity rank of a partition status, and the group status of a rank (rules.group_status).
_WORST = (GroupStatus.OK, GroupStatus.WARN, GroupStatus.ERR)
_RANK_OF = {status: _WORST.index(SEVERITY[status]) for status in PartitionStatus}


def _seen_now(cluster: str, now_ms: int) -> int | None:
    return None


def _judge_reference(
    p: LagdParams,
    partition: int,
    arr: array[int],
    le: LogEnd,
    current_lag: int,
    at_ms: int,
    prior: PartitionStatus | None,
) -> Answer:
    """LagdJudge.judge's signature over the slow path (judge_lagd at every evaluation)."""
    return judge_reference(arr, le, current_lag, at_ms, prior, p)


def not_found(cluster: str, group: str, now_ms: int) -> GroupVerdict:
    """Burrow's answer for an unknown or expired group."""
    return GroupVerdict(cluster, group, GroupStatus.NOTFOUND, 1.0, [], 0, None, 0, 0.0, now_ms)


def not_found_snapshot(cluster: str, group: str, now_ms: int) -> GroupSnapshot:
    """The snapshot of `not_found`'s verdict."""
    return GroupSnapshot(cluster, group, GroupStatus.NOTFOUND, 1.0, 0, 0, 0.0, False, now_ms, (), (), b"", b"")


class Evaluator:
    def __init__(
        self,
        state: State,
        *,
        rules: RuleSet | None = None,
        allowed_lag: int = 0,
        allowed_lag_seconds: float = 5.0,
        minimum_complete: float = 0.0,
        cache_ttl_ms: int = 5000,
        min_history_ms: int = 60_000,
        stop_after_ms: int = 60_000,
        fast: bool = True,
        pauses: PauseSettings | None = None,
    ) -> None:
        self.state = state
        # The rules to judge by (None: those the state keeps its windows for); of them the
        # Evaluator needs only which judge runs: lagd's (LagdJudge) or Burrow's (judge_flat).
        self.rules = rules if rules is not None else state.rules
        self._lagd = self.rules.lagd_judge
        self.lagd_params = LagdParams(
            allowed_lag=allowed_lag,
            allowed_lag_seconds=allowed_lag_seconds,
            min_history_ms=min_history_ms,
            stop_after_ms=stop_after_ms,
            stall_after_ms=stop_after_ms // 2,
        )
        # lagd rules: judged through LagdJudge, which keeps per partition what a window and its
        # samples imply between evaluations; fast=False re-derives everything each time through
        # judge_lagd (the reference the fast path is tested against).
        self.fast = fast
        self._judge = LagdJudge(self.lagd_params)
        # Each group's STOP limit from its history of pauses (lagd.state.pauses), or None: stop-after.
        self.pauses = pauses
        self._limits: dict[tuple[int, float], LagdParams] = {}  # (floor ms, basis) -> the settings judged by
        self._facts_under: dict[tuple[str, str], LagdParams] = {}  # the settings each group's facts were kept under
        # (cluster, now) -> the time through which lagd has read the cluster whole (since when it
        # has been blind to it, or how far its reader had read at its last answer), or None: now.
        # Time-driven verdicts (STOP, STALL) are judged as of that moment, not now, so silence
        # lagd has not read (brokers cut off, before lagd can tell it is blind) never counts.
        # Asked at each evaluation, so a verdict never lags behind lagd's own sight.
        self.seen_through: Callable[[str, int], int | None] = _seen_now
        # Per cluster: WARN "at risk" when a consumer falls off the log within this (ms).
        self.retention_horizon_ms: dict[str, int] = {}
        # Per group: its partitions at risk when last judged (retention's hysteresis); only
        # groups with one at risk are kept.
        self._at_risk: dict[tuple[str, str], set[tuple[str, int]]] = {}
        # Per group: its partitions seen with records lost lately (retention_view.latch).
        self._lost: dict[tuple[str, str], dict[tuple[str, int], tuple[RetentionNote, int]]] = {}
        # Per topic: the committed offsets out of the log start's reach (retention_view.OutOfReach).
        self._out_of_reach = OutOfReach()
        self.allowed_lag = allowed_lag
        self.minimum_complete = minimum_complete
        self.cache_ttl_ms = cache_ttl_ms
        # Insertion order is evaluation order, so expired verdicts are dropped from the front.
        self._cache: dict[tuple[str, str], _Cached] = {}
        self._since: dict[tuple[str, str], Since] = {}
        self._facts: dict[tuple[str, str], GroupFacts] = {}  # lagd rules: what each group's LagdJudge kept
        # Each group's last evaluation's stamp: until it changes, the group's status cannot (see `changed`).
        self._due: dict[tuple[str, str], Stamp] = {}
        # What the compiled pass over a topic's partitions reads of this module (_trend.judge_topic).
        self._pass_context = (
            PartitionVerdict,
            tuple(_STATUS_OF),
            tuple(_RANK_OF[status] for status in _STATUS_OF),
            _CODE[PartitionStatus.OK],
            (J_EMPTY.reason, J_EMPTY.rule),
            (J_CAUGHT_UP.status, J_CAUGHT_UP.rule, J_CAUGHT_UP.reason),
            _NO_LOG_END,
            array("q", bytes(16 * FIELDS)),
            _C_SAID,
            "",
            tuple((j.status, j.rule, j.reason) for j in _FLAT),
        )

    def group(self, cluster: str, group: str, now_ms: int, *, cache: bool = True) -> GroupVerdict:
        """The group's verdict, recomputed when its version changes or the TTL passes.

        `cache=False` (the verdict scan, which judges every group in turn) leaves the response
        cache alone: holding every group's full verdict for a TTL costs ~700 B per
        group-partition, and the collector's full passes over those objects stall the loop."""
        version = self.state.group_version(cluster, group)
        cached = self._cached(cluster, group, version, now_ms)
        if cached is not None:
            return cached
        self._evict(now_ms)
        verdict = self._judged(cluster, group, now_ms, version, None)
        if not isinstance(verdict, GroupVerdict):
            return not_found(cluster, group, now_ms)
        if cache and self.cache_ttl_ms > 0:  # with the cache off nothing is kept, nor evicted again
            self._cache[(cluster, group)] = _Cached(version, now_ms, verdict)
        return verdict

    def _cached(self, cluster: str, group: str, version: int, now_ms: int) -> GroupVerdict | None:
        """The cached verdict while it stands: the group's version unchanged, within the TTL, and
        the time it would be judged as of between the last judgement and its re-check."""
        cached = self._cache.get((cluster, group))
        if cached is not None and cached.version == version and 0 <= now_ms - cached.at < self.cache_ttl_ms:
            due = self._due.get((cluster, group))
            # a time-driven rule's moment ends the reuse early, and so does lagd's sight turning blind
            if due is None or due[2] <= self._as_of(cluster, now_ms) < due[1]:
                return cached.verdict
        return None

    def snapshot(self, cluster: str, group: str, now_ms: int) -> GroupSnapshot:
        """The group judged anew, as a snapshot (what the verdict watch and the list pages keep):
        its partitions become rows as they are judged, and no PartitionVerdict is built where the
        compiled pass judges them (two objects per partition built, then read into rows and freed:
        a third of the watch's pass, bench_watch). Judged as `group` judges (the same
        since-tracking, kept facts and stamp); a cached verdict that stands is read into its
        snapshot instead, and one judged anew here leaves the cache (see `_judged`)."""
        version = self.state.group_version(cluster, group)
        cached = self._cached(cluster, group, version, now_ms)
        if cached is not None:
            return snapshot_of(cached)
        snap = self._judged(cluster, group, now_ms, version, Rows())
        if not isinstance(snap, GroupSnapshot):
            return not_found_snapshot(cluster, group, now_ms)
        return snap

    def _judged(
        self, cluster: str, group: str, now_ms: int, version: int, rows: Rows | None
    ) -> GroupVerdict | GroupSnapshot | None:
        """Judge the group anew, as a verdict, or as a snapshot into `rows`, keeping since when
        each partition holds its status, the facts of its trends and the stamp; None (all of it
        dropped) where the group is unknown or expired. A cached verdict leaves the cache: the
        stamp it was reused under is replaced by this judgement's, under which it could pass
        for current after a time-driven rule changed the status."""
        key = (cluster, group)
        self._cache.pop(key, None)
        last = self.state.last_commit(cluster, group)
        if last is None or last < now_ms - self.state.expire_group_ms:
            self.forget(cluster, group)
            return None
        p = self._group_params(cluster, group, now_ms)
        self._judge.use(p)
        old = self._facts.get(key)
        if old is not None and self._facts_under.get(key, self.lagd_params) is not p:
            old = None  # kept under another STOP limit
        self._judge.begin(old)
        judged, since, recheck, judged_at = self._evaluate(cluster, group, now_ms, self._since.get(key) or {}, rows)
        self._due[key] = (version, recheck, judged_at)
        self._since[key] = since
        kept = self._judge.kept()
        if kept:
            self._facts[key] = kept
            if p is not self.lagd_params:
                self._facts_under[key] = p
            else:
                self._facts_under.pop(key, None)
        else:
            self._facts.pop(key, None)
            self._facts_under.pop(key, None)
        self._judge.begin(None)  # hold no group's facts twice
        return judged

    def _group_params(self, cluster: str, group: str, now_ms: int) -> LagdParams:
        """The settings the group is judged by: stop-after replaced by its STOP limit from its
        history of pauses (lagd.state.pauses.stop_floor) where pause limits are on."""
        if self.pauses is None or not self._lagd:
            return self.lagd_params
        at = self._as_of(cluster, now_ms)
        floor, basis = stop_floor(self.state.group_pauses(cluster, group), at, self.pauses)
        p = self._limits.get((floor, basis))
        if p is None:
            if len(self._limits) >= 4096:  # bounded: limits are few (a ms each between floor and ceiling)
                self._limits.clear()
            p = self._limits[(floor, basis)] = dataclasses.replace(
                self.lagd_params, stop_after_ms=floor, pause_ms=basis
            )
        return p

    def take_over(
        self, cluster: str, group: str, partitions: Iterable[tuple[str, int, PartitionStatus]], since_ms: int
    ) -> None:
        """Start a group another process judged until now (lagd.scale) from the statuses it
        published for its partitions that were not OK, as if this evaluator had judged them:
        a partition held WARN by hysteresis (still behind, no longer falling behind) stays
        WARN, where a first judgement would call it OK and clear the group's alert at
        failover. Ignored for a group this evaluator has judged itself."""
        key = (cluster, group)
        if key in self._since:
            return
        by_topic: dict[str, dict[int, int]] = {}
        for topic, partition, status in partitions:
            by_topic.setdefault(topic, {})[partition] = (since_ms << _SHIFT) | _CODE[status]
        self._since[key] = dict(by_topic)

    def stamp(self, cluster: str, group: str) -> Stamp | None:
        """What the group's last evaluation depended on (None: never judged or forgotten). A
        caller that acts on status changes keeps the stamp of the verdict it acted on and asks
        `changed` with it: any caller's evaluation (a dashboard's request) renews the evaluator's
        own, so "judged since it changed" is per caller."""
        return self._due.get((cluster, group))

    def changed(self, cluster: str, group: str, stamp: Stamp | None, now_ms: int) -> bool:
        """Could the group's status differ from the verdict judged under `stamp`? Only when its
        windows or samples changed, or the time it would be judged as of (now, or when lagd last
        saw the cluster whole) reached a time-driven rule's moment or went back: the verdict scan
        skips the others (their status stands), so a pass over many groups costs a lookup per
        unchanged group, also while a reader behind moves that time on with every fetch."""
        if stamp is None:
            return True
        version, recheck, judged_at = stamp
        if version != self.state.group_version(cluster, group):
            return True
        at = self._as_of(cluster, now_ms)
        return at >= recheck or at < judged_at

    def _as_of(self, cluster: str, now_ms: int) -> int:
        """The time a group of `cluster` is judged as of now: `now_ms`, or the time through which
        lagd has read the cluster whole where that is earlier (lagd's rules: see seen_through)."""
        if self._lagd:
            seen = self.seen_through(cluster, now_ms)
            if seen is not None and seen < now_ms:
                return seen
        return now_ms

    def _evict(self, now_ms: int) -> None:
        """Drop verdicts past their TTL (oldest first) so the cache holds only live ones."""
        cache = self._cache
        ttl = self.cache_ttl_ms
        while cache:
            key = next(iter(cache))
            if 0 <= now_ms - cache[key].at < ttl:
                break
            del cache[key]

    def forget(self, cluster: str, group: str) -> None:
        """Drop the cached verdict and status history of a removed group."""
        self._cache.pop((cluster, group), None)
        self._since.pop((cluster, group), None)
        self._at_risk.pop((cluster, group), None)
        self._lost.pop((cluster, group), None)
        self._facts.pop((cluster, group), None)
        self._facts_under.pop((cluster, group), None)
        self._due.pop((cluster, group), None)

    def _evaluate(
        self,
        cluster: str,
        group: str,
        now_ms: int,
        since_before: Since,
        rows: Rows | None = None,
    ) -> tuple[GroupVerdict | GroupSnapshot, Since, int, int]:
        """Judge every partition of the group: a verdict, or with `rows` a snapshot (see `snapshot`)."""
        state = self.state
        windows = state.group_windows(cluster, group) or {}
        owners = state.group_owners(cluster, group)
        partitions: list[PartitionVerdict] = []
        since: dict[str, array[int] | dict[int, int]] = {}
        judged_at = self._as_of(cluster, now_ms)
        # The group summary (rules.group_status), folded into the pass over its partitions: the
        # worst rank, the total lag, where the partition with the highest lag is and its lag, how
        # many windows are full, the highest lag in seconds and the earliest re-check due. A list
        # in this order (as _trend.judge_topic reads and writes it): a pass per topic updates it.
        # Then, of the partitions the compiled pass judged, a bit per status held (bit k: the k-th)
        # and whether a lagging one's lag in seconds is only a bound.
        tally: list[Any] = [0, 0, -1, -1, 0, 0.0, NEVER, 0, 0]
        compiled = self._compiled_pass()
        judged = partitions  # where the Python's verdicts go: with rows, each becomes a row (Rows.add_all)
        for topic in sorted(windows):
            if rows is not None:  # the topic is listed once it has rows, at this index
                topic_index, had = len(rows.topics), rows.count()
                judged = []
            parts = windows[topic]
            log_ends = state.topic_log_ends(cluster, topic)
            self._judge.topic(topic)
            # Every partition of the topic (Burrow keeps a slot per partition): the count is
            # known from the broker samples; a commit beyond it proves the topic is wider.
            # Unknown count: only the partitions with commits.
            # A hostile partition number must not make the evaluator build millions of slots:
            # past MAX_PADDING beyond the sampled count, committed partitions are listed alone.
            if log_ends:
                known = max(log_ends) + 1
                top = max(known - 1, max(parts, default=-1))
                if top < known + MAX_PADDING:
                    ids: Sequence[int] = range(top + 1)
                else:
                    ids = [*range(known), *sorted(p for p in parts if p >= known)]
            else:
                ids = sorted(parts)
            if type(ids) is range:  # one int64 per partition
                before = _slots(since_before.get(topic), len(ids))
                get_since: Callable[[int], int] = before.__getitem__
                since_t: array[int] | dict[int, int] = array("q", bytes(8 * len(ids)))
            else:  # a hostile partition number: no slot for each partition below it
                get_since = _sparse(since_before.get(topic)).__getitem__
                since_t = {}
            since[topic] = since_t
            if compiled is None or type(ids) is not range:
                self._judge_partitions(
                    tally, topic, ids, parts, log_ends, owners, get_since, since_t, judged, now_ms, judged_at
                )
                if rows is not None:
                    rows.add_all(judged, topic_index)
                    if rows.count() > had:
                        rows.topics.append(topic)
                continue
            # The compiled pass judges the partitions it can answer exactly as the Python, and
            # hands each other one back for the Python to judge (a coarse-tier read, a window
            # below minimum-complete, numbers past int64 or a double's exact range).
            k, stop = 0, len(ids)
            lean = () if rows is None else (rows.rows, rows.seconds, topic_index)
            while k < stop:
                k = compiled(
                    self._pass_context,
                    self._judge,
                    tally,
                    topic,
                    k,
                    stop,
                    parts,
                    log_ends,
                    owners,
                    before,
                    since_t,
                    partitions,
                    now_ms,
                    judged_at,
                    state.intervals,
                    self.minimum_complete,
                    self._lagd,
                    *lean,
                )
                if k < stop:
                    self._judge_partitions(
                        tally, topic, (k,), parts, log_ends, owners, get_since, since_t, judged, now_ms, judged_at
                    )
                    if rows is not None:
                        rows.add_all(judged, topic_index)
                    k += 1
            if rows is not None and rows.count() > had:
                rows.topics.append(topic)
        worst, totallag, maxlag, _, full, max_seconds, recheck, mask, bound = tally
        # Records lost to retention (ERR) or at risk (WARN), beside the window rules' verdict.
        key = (cluster, group)
        latched = self._lost.get(key, {})
        notes = group_retention(
            state,
            cluster,
            windows,
            judged_at,
            self.retention_horizon_ms.get(cluster, DEFAULT_HORIZON_MS),
            self._at_risk.get(key, frozenset()),
            self._out_of_reach,
            latched.keys(),
            notable_only=rows is not None,  # the watch keeps the lost and at-risk partitions only
        )
        notes, lost = latch(notes, latched, judged_at)
        if lost:
            self._lost[key] = lost
        else:
            self._lost.pop(key, None)
        risky = {(n.topic, n.partition) for n in notes if n.state is RetentionState.AT_RISK}
        if risky:
            self._at_risk[key] = risky
        else:
            self._at_risk.pop(key, None)
        worst = max(worst, _WORST.index(worst_of(notes)))
        kept: Since = {topic: s.tobytes() if isinstance(s, array) else s for topic, s in since.items()}
        if rows is not None:
            count = rows.count()
            snap = GroupSnapshot(
                cluster,
                group,
                _WORST[worst],
                full / count if count else 0.0,
                count,
                totallag,
                max_seconds,
                bool(bound) or rows.bound,
                now_ms,
                not_ok_of(mask | rows.mask),
                tuple(rows.topics),
                bytes(rows.rows),
                bytes(rows.seconds),
                tuple(n for n in notes if n.state in STATUS_OF),
            )
            return snap, kept, recheck, judged_at
        count = len(partitions)
        verdict = GroupVerdict(
            cluster,
            group,
            _WORST[worst],
            full / count if count else 0.0,
            partitions,
            count,
            partitions[maxlag] if maxlag >= 0 else None,
            totallag,
            max_seconds,
            now_ms,
            notes,
        )
        return verdict, kept, recheck, judged_at

    def _compiled_pass(self) -> Callable[..., int] | None:
        """The compiled pass over a topic's partitions (`_trend.judge_topic`) where it judges as
        the Python would: on the fast path, with settings the compiled judgements read
        (LagdJudge._cparams) and a minimum-complete that is a float; else None."""
        if (
            compiled_pass is None
            or not self.fast
            or self._judge._cparams is None
            or type(self.minimum_complete) is not float
        ):
            return None
        return compiled_pass

    def _judge_partitions(
        self,
        tally: list[Any],
        topic: str,
        ids: Iterable[int],
        parts: dict[int, array[int]],
        log_ends: dict[int, LogEnd],
        owners: dict[tuple[str, int], PartitionOwner],
        get_since: Callable[[int], int],
        since_t: array[int] | dict[int, int],
        partitions: list[PartitionVerdict],
        now_ms: int,
        judged_at: int,
    ) -> None:
        """Judge the partitions `ids` of `topic` in Python, appending their verdicts to
        `partitions`, their statuses to `since_t` and folding them into `tally` (its first seven)."""
        worst, totallag, maxlag, best_lag, full, max_seconds, recheck = tally[:7]
        intervals = self.state.intervals
        allowed = self.allowed_lag
        minimum = self.minimum_complete
        append = partitions.append
        code_of = _CODE
        rank_of = _RANK_OF
        mask = (1 << _SHIFT) - 1
        get_owner = owners.get
        no_samples: tuple[int, ...] = ()
        ok = PartitionStatus.OK
        ok_code = code_of[ok]
        empty_reason = J_EMPTY.reason
        empty_rule = J_EMPTY.rule
        lagd = self._lagd
        judge = self._judge.judge if self.fast else partial(_judge_reference, self._judge.p)
        status_of = _STATUS_OF
        # One tight loop: this runs for every partition of every evaluated group.
        for partition in ids:
            arr = parts.get(partition)
            le = log_ends.get(partition)
            owner = get_owner((topic, partition)) if owners else None
            if not arr:
                # no commits: OK, complete 0, no lag (Burrow's empty ring)
                prior = get_since(partition)
                seen = prior >> _SHIFT if prior and prior & mask == ok_code else now_ms
                since_t[partition] = (seen << _SHIFT) | ok_code
                if best_lag < 0:
                    maxlag, best_lag = len(partitions), 0
                append(
                    PartitionVerdict(
                        topic,
                        partition,
                        ok,
                        None,
                        0,
                        0.0,
                        owner.host if owner is not None else "",
                        owner.client_id if owner is not None else "",
                        0.0,
                        le is None,
                        empty_reason,
                        seen,
                        empty_rule,
                    )
                )
                continue
            n = len(arr) // FIELDS
            committed = arr[LAST + OFFSET]
            current_lag = 0
            seconds = 0.0
            reached = 0.0  # when the log end reached the committed offset (with a current lag)
            prior = get_since(partition)
            if le is None:
                estimated = True
                leo: Sequence[int] = no_samples
            else:
                estimated = False
                leo = le.offsets
                if leo:
                    current_lag = leo[-1] - committed
                    if current_lag < 0:
                        current_lag = 0
            if n < intervals:
                complete = n / intervals
            else:
                complete = 1.0
                full += 1
            if lagd and complete >= minimum:
                prior_status = status_of[prior & mask] if prior else None
                status, rule, reason, at, reached, bound = judge(
                    partition, arr, le or _NO_LOG_END, current_lag, judged_at, prior_status
                )
                if current_lag:
                    estimated = bound
                if at < recheck:
                    recheck = at
            else:
                if current_lag <= allowed and not lagd:
                    j = J_CAUGHT_UP
                elif complete < minimum:
                    j = J_INCOMPLETE
                else:
                    j = judge_flat(arr, leo, current_lag, now_ms, allowed, intervals)
                    if j.status is not PartitionStatus.STOP and current_lag > allowed:
                        # Burrow's STOP: silent for longer than the window spans
                        at = 2 * arr[LAST + TS] - arr[TS] + 1
                        if at < recheck:
                            recheck = at
                status, rule, reason = j.status, j.rule, j.reason
                if current_lag and le is not None:  # a current lag implies samples
                    lo = le.run_start
                    if committed > leo[lo]:
                        # within the newest run of samples: lagtime.reached_at, inlined
                        i = bisect_left(leo, committed, lo)
                        o0, t0 = leo[i - 1], le.ts[i - 1]
                        reached = t0 + (le.ts[i] - t0) * (committed - o0) / (leo[i] - o0)
                    else:
                        reached, estimated = reached_in(le, committed)
            if current_lag:
                totallag += current_lag
                if now_ms > reached:
                    seconds = (now_ms - reached) / 1000.0
                    if seconds > max_seconds:
                        max_seconds = seconds
            if current_lag > best_lag:
                maxlag, best_lag = len(partitions), current_lag
            if status is not ok:
                rank = rank_of[status]
                if rank > worst:
                    worst = rank
                code = code_of[status]
            else:
                code = ok_code
            seen = prior >> _SHIFT if prior and prior & mask == code else now_ms
            since_t[partition] = (seen << _SHIFT) | code
            append(
                PartitionVerdict(
                    topic,
                    partition,
                    status,
                    arr[:FIELDS] + arr[LAST:],
                    current_lag,
                    complete,
                    owner.host if owner is not None else "",
                    owner.client_id if owner is not None else "",
                    seconds,
                    estimated,
                    reason,
                    seen,
                    rule,
                )
            )
        tally[:7] = [worst, totallag, maxlag, best_lag, full, max_seconds, recheck]
