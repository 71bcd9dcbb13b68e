"""The end-to-end probe judged: is each broker taking writes and serving reads, and how fast?

Pure: probe observations in (sent at, acknowledged at or failed with an error, read back at, per
broker and partition; the canary partitions' leaders), a `BrokerVerdict` per broker out. The
adapter (`lagd.ingest.probe`) produces one probe record every interval to the canary partition
each broker leads and reads it back.

A probe is *settled for writes* once acknowledged, failed, or sent `timeout` ago without an
acknowledgement (a failure: "no ack within ..."); *settled for reads* once read back, or
acknowledged and sent `timeout` ago without being read (lost). The verdict of a broker is judged
from its newest settled probes:
- NOT_TAKING_WRITES: the newest write failed, or its canary partition has no leader or is led by
  another broker (then the probes test that one, not this);
- NOT_SERVING_READS: the newest write was acknowledged, but the newest probe settled for reads
  was not read back within `timeout` (lost), and a later one was acknowledged (until then a
  broker that just stopped cannot be told from one that stopped serving reads: the verdict waits
  for the next probe's write to settle);
- SLOW: the newest acknowledgement, or the newest read back, took longer than `slow_after`;
- OK otherwise.
A broker none of whose probes has settled yet has no verdict. Since the timeout is at most one
interval, a broker that stops is named at most one interval plus one timeout after it stopped.
The figures (latencies, counts, loss) are over the probes of the trailing `window`.

Bounded: each broker keeps at most `max_probes` probes (the newest), and none older than the window.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

BrokerStatus = Literal["OK", "SLOW", "NOT_TAKING_WRITES", "NOT_SERVING_READS"]
BROKER_STATUSES: tuple[BrokerStatus, ...] = ("OK", "SLOW", "NOT_TAKING_WRITES", "NOT_SERVING_READS")
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ProbeLimits:
    timeout_ms: int = 5_000
    slow_after_ms: int = 1_000
    window_ms: int = 300_000


@dataclass(slots=True)
class Probe:
    """One probe record and what became of it."""

    seq: int
    broker: int
    partition: int
    sent_ms: int
    acked_ms: int | None = None
    error: str | None = None
    received_ms: int | None = None

    def write_failure(self, now_ms: int, timeout_ms: int) -> str | None:
        """Why the write failed, None if it did not (or is not settled yet)."""
        if self.error is not None:
            return self.error.rstrip(". ") or "failed"  # a client's message may end with a full stop
        if self.acked_ms is None and now_ms - self.sent_ms >= timeout_ms:
            return f"no ack within {timeout_ms / 1000:g} s"
        return None

    def write_settled(self, now_ms: int, timeout_ms: int) -> bool:
        return self.acked_ms is not None or self.write_failure(now_ms, timeout_ms) is not None

    def read_settled(self, now_ms: int, timeout_ms: int) -> bool:
        return self.acked_ms is not None and (self.received_ms is not None or now_ms - self.sent_ms >= timeout_ms)

    def lost(self, now_ms: int, timeout_ms: int) -> bool:
        return self.read_settled(now_ms, timeout_ms) and (
            self.received_ms is None or self.received_ms - self.sent_ms > timeout_ms
        )


@dataclass(frozen=True, slots=True)
class BrokerVerdict:
    cluster: str
    broker: int
    partition: int
    leader: int  # the canary partition's leader as last seen (NO_LEADER: none)
    status: BrokerStatus
    reason: str
    observed_ms: int
    ack_s: float | None  # the newest acknowledged probe's produce-ack latency
    ack_max_s: float | None  # the largest in the window
    e2e_s: float | None  # the newest probe read back: sent to read
    e2e_max_s: float | None
    sent: int  # probes in the window
    failed: int  # of them, writes that failed
    lost: int  # acknowledged but not read back within the timeout
    last_ack_ms: int | None
    last_read_ms: int | None

    @property
    def loss_ratio(self) -> float:
        settled = self.sent - self.failed
        return self.lost / settled if settled > 0 else 0.0


@dataclass
class ProbeLog:
    """The probes of one cluster, per broker, bounded (see the module's docstring)."""

    limits: ProbeLimits
    max_probes: int = 256
    probes: dict[int, deque[Probe]] = field(default_factory=dict)
    by_seq: dict[int, Probe] = field(default_factory=dict)

    def sent(self, seq: int, broker: int, partition: int, at_ms: int) -> None:
        q = self.probes.setdefault(broker, deque())
        if len(q) >= self.max_probes:
            self.by_seq.pop(q.popleft().seq, None)
        probe = Probe(seq, broker, partition, at_ms)
        q.append(probe)
        self.by_seq[seq] = probe

    def acked(self, seq: int, at_ms: int) -> None:
        probe = self.by_seq.get(seq)
        if probe is not None and probe.error is None:
            probe.acked_ms = at_ms

    def failed(self, seq: int, error: str) -> None:
        probe = self.by_seq.get(seq)
        if probe is not None and probe.acked_ms is None:
            probe.error = error

    def received(self, seq: int, at_ms: int) -> None:
        """A probe read back (one not known here, from before a restart or another lagd: ignored)."""
        probe = self.by_seq.get(seq)
        if probe is not None and probe.received_ms is None:
            probe.received_ms = at_ms
            if probe.acked_ms is None and probe.error is None:
                probe.acked_ms = at_ms  # read before its ack arrived: it was written

    def forget_before(self, now_ms: int) -> None:
        horizon = now_ms - self.limits.window_ms
        for q in self.probes.values():
            while q and q[0].sent_ms < horizon:
                self.by_seq.pop(q.popleft().seq, None)

    def judge(self, cluster: str, now_ms: int, leaders: dict[int, tuple[int, int]]) -> dict[int, BrokerVerdict]:
        """Every broker's verdict now; `leaders`: broker -> (its canary partition, that partition's leader)."""
        self.forget_before(now_ms)
        out: dict[int, BrokerVerdict] = {}
        for broker, q in sorted(self.probes.items()):
            partition, leader = leaders.get(broker, (q[-1].partition if q else -1, broker))
            verdict = judge_broker(cluster, broker, partition, leader, list(q), now_ms, self.limits)
            if verdict is not None:
                out[broker] = verdict
        return out


def judge_broker(
    cluster: str, broker: int, partition: int, leader: int, probes: list[Probe], now_ms: int, limits: ProbeLimits
) -> BrokerVerdict | None:
    """One broker's verdict from its probes (oldest first), None while none has settled."""
    t = limits.timeout_ms
    writes = [p for p in probes if p.write_settled(now_ms, t)]
    if not writes:
        return None
    reads = [p for p in probes if p.read_settled(now_ms, t)]
    acks = [(p.acked_ms - p.sent_ms) / 1000 for p in probes if p.acked_ms is not None]
    e2es = [(p.received_ms - p.sent_ms) / 1000 for p in probes if p.received_ms is not None]
    failed = sum(1 for p in writes if p.write_failure(now_ms, t) is not None)
    lost = sum(1 for p in reads if p.lost(now_ms, t))
    newest_write = writes[-1]
    write_failure = newest_write.write_failure(now_ms, t)
    newest_read = reads[-1] if reads else None
    where = f"canary partition {partition}"
    name = f"broker {broker} of {cluster}"
    status: BrokerStatus
    if leader != broker:
        status = "NOT_TAKING_WRITES"
        led = "has no leader" if leader == NO_LEADER else f"is led by broker {leader}"
        reason = f"{name} not taking writes: its {where} {led}"
        if write_failure:
            reason += f" ({write_failure})"
    elif write_failure is not None:
        status = "NOT_TAKING_WRITES"
        reason = f"{name} not taking writes: {write_failure} ({where}, {failed} of the last {len(writes)} failed)"
    elif newest_read is not None and newest_read.lost(now_ms, t) and newest_write.sent_ms > newest_read.sent_ms:
        status = "NOT_SERVING_READS"
        reason = (
            f"{name} not serving reads: a probe acknowledged {_ago(newest_read.sent_ms, now_ms)} "
            f"was not read back within {t / 1000:g} s ({where}, {lost} lost)"
        )
    else:
        ack = acks[-1] if acks else None
        e2e = e2es[-1] if e2es else None
        slow = [f"{what} {v:.2f} s" for what, v in (("ack", ack), ("end-to-end", e2e)) if v is not None]
        if any(v is not None and v * 1000 > limits.slow_after_ms for v in (ack, e2e)):
            status = "SLOW"
            reason = f"{name} slow: {', '.join(slow)} (above {limits.slow_after_ms / 1000:g} s)"
        else:
            status = "OK"
            reason = f"{name}: {', '.join(slow) or 'written'}"
    return BrokerVerdict(
        cluster=cluster,
        broker=broker,
        partition=partition,
        leader=leader,
        status=status,
        reason=reason,
        observed_ms=now_ms,
        ack_s=round(acks[-1], 3) if acks else None,
        ack_max_s=round(max(acks), 3) if acks else None,
        e2e_s=round(e2es[-1], 3) if e2es else None,
        e2e_max_s=round(max(e2es), 3) if e2es else None,
        sent=len(probes),
        failed=failed,
        lost=lost,
        last_ack_ms=max((p.acked_ms for p in probes if p.acked_ms is not None), default=None),
        last_read_ms=max((p.received_ms for p in probes if p.received_ms is not None), default=None),
    )


def _ago(at_ms: int, now_ms: int) -> str:
    return f"{(now_ms - at_ms) / 1000:.0f} s ago"


def canary_assignment(brokers: list[int], existing: dict[int, list[int]]) -> dict[int, list[int]]:
    """Partitions to add so that each of `brokers` is the only replica of one canary partition:
    new partition number -> [broker], numbered after `existing` (partition -> replicas)."""
    pinned = {replicas[0] for replicas in existing.values() if replicas}
    missing = [b for b in sorted(brokers) if b not in pinned]
    start = max(existing, default=-1) + 1
    return {start + i: [b] for i, b in enumerate(missing)}


def partition_of_broker(replicas: dict[int, list[int]]) -> dict[int, int]:
    """broker -> the canary partition whose first (preferred) replica it is (the lowest, if several)."""
    out: dict[int, int] = {}
    for partition, rs in sorted(replicas.items()):
        if rs:
            out.setdefault(rs[0], partition)
    return out
