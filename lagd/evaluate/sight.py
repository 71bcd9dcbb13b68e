"""Does lagd see a cluster well enough to judge it? Blind verdicts are held, not turned into STOP.

When the offsets reader or the log-end sampler fails or falls behind, commits and log ends
stop arriving although the consumers may be fine: judged "now", every lagging group would
go STOP. Instead the time-driven rules are judged as of the moment lagd last saw the
cluster whole (`blind_since`), the cluster is reported degraded, and the incident engine
gets one "cluster unreachable" member instead of one incident per group.

Pure: the readers' progress and the newest data times in, a ClusterSight out.
"""

from __future__ import annotations

from dataclasses import dataclass

STALE_FACTOR = 3  # data older than this many offset-refreshes (plus the slack) means lagd is blind
STALE_SLACK_MS = 10_000


@dataclass(frozen=True, slots=True)
class ClusterSight:
    """`blind_since` is None when lagd sees the cluster; `unreachable` when it cannot read it
    (as opposed to still catching up after a start); `behind` when its offsets reader reads but
    runs further behind the topic than the limit (lagd's own load, not the cluster's); `reason`
    says why, for operators. `seen_through`: while lagd sees the cluster, how far its reader had
    read at its last answer (everything committed before then is read); verdicts are judged as of
    then (`judged_as_of`), never counting silence lagd has not read: between the moment brokers
    are cut off and the moment lagd can tell it is blind, no commit arrives, yet no STOP is due."""

    cluster: str
    blind_since: int | None
    unreachable: bool
    reason: str
    behind: bool = False
    seen_through: int | None = None

    @property
    def judged_as_of(self) -> int | None:
        """The time the cluster's time-driven verdicts are judged as of (None: now)."""
        return self.blind_since if self.blind_since is not None else self.seen_through


def judge_sight(
    cluster: str,
    now_ms: int,
    *,
    caught_up: bool,
    reader_fresh_at: int | None,
    newest_commit: int | None,
    newest_sample: int | None,
    offset_refresh_ms: int,
    reader_moving_at: int | None = None,
    reader_started_at: int | None = None,
    reader_answered: bool = True,
    reader_problem: str = "",
) -> ClusterSight:
    """Blind while the reader has not caught up since start (judged as of the newest data
    restored or read so far), while what it has read is older than a while (`reader_fresh_at`:
    it read every record there was before then), or while no log-end sample came for several
    offset-refreshes. A reader still moving (`reader_moving_at`: it read records, or stood at
    the end, of every partition that recently) is behind, not cut off: the verdicts are held
    all the same, but the cluster is not reported unreachable. One partition that stopped
    moving cuts lagd off, however current the others are. A reader the cluster has not
    answered at all (`reader_answered`) for longer than that since it started
    (`reader_started_at`) cuts lagd off too: a broker address that is wrong, or brokers down
    when lagd starts, is reported as such, not as a catch-up that never ends. The reader's
    latest failure (`reader_problem`: a refused password, say) ends the reason of a cluster cut off."""
    cause = f": {reader_problem}" if reader_problem else ""
    limit = STALE_FACTOR * offset_refresh_ms + STALE_SLACK_MS
    if not caught_up:
        # Complete up to the newest data restored or read so far (the samples go on until a
        # stop, so after a restart that is about when the last run stopped judging).
        known = [t for t in (newest_commit, newest_sample) if t is not None]
        since = max(known) if known else (reader_started_at if reader_started_at is not None else now_ms)
        if not reader_answered and reader_started_at is not None and now_ms - reader_started_at > limit:
            return ClusterSight(
                cluster,
                min(since, now_ms),
                True,
                f"no answer from the cluster's brokers in the {(now_ms - reader_started_at) // 1000} s "
                f"since the offsets reader started{cause}",
            )
        return ClusterSight(cluster, min(since, now_ms), False, "offsets reader still catching up")
    reader_stale = reader_fresh_at is not None and now_ms - reader_fresh_at > limit
    # cut off: a partition stopped moving (even while the others are current), or, where the
    # reader does not tell (admin polling), what it read is stale
    stopped = now_ms - reader_moving_at > limit if reader_moving_at is not None else reader_stale
    if stopped:
        since = min(t for t in (reader_fresh_at, reader_moving_at) if t is not None)
        return ClusterSight(
            cluster,
            since,
            True,
            f"offsets reader has not reached the end of the offsets topic for {(now_ms - since) // 1000} s{cause}",
        )
    if newest_sample is not None and now_ms - newest_sample > limit:
        since = newest_sample + offset_refresh_ms
        return ClusterSight(
            cluster,
            min(since, reader_fresh_at) if reader_stale and reader_fresh_at is not None else since,
            True,
            f"no log-end sample for {(now_ms - newest_sample) // 1000} s",
        )
    if reader_stale and reader_fresh_at is not None:
        return ClusterSight(
            cluster,
            reader_fresh_at,
            False,
            f"offsets reader is {(now_ms - reader_fresh_at) // 1000} s behind the offsets topic: "
            "it reads slower than commits arrive",
            behind=True,
        )
    return ClusterSight(cluster, None, False, "", seen_through=reader_fresh_at)
