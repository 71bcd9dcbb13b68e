"""Workers' pieces (lagd.scale): letting groups go, restoring a share, settings, ownership rows."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lagd.core.config import ConfigError, parse
from lagd.core.model import Commit, GroupMembers, LogEndSample, PartitionOwner, ReaderPosition
from lagd.ingest.offsets_group import Assignment
from lagd.ingest.progress import ReaderProgress
from lagd.scale import barrier, ownership
from lagd.scale.ownership import Me, OwnerMap
from lagd.scale.processes import worker_env, worker_listen
from lagd.state.store import Store
from lagd.state.windows import State, group_hash, offsets_partition

C, N = "c1", 4  # cluster, offsets partitions


def groups_in(partition: int, count: int = 3) -> list[str]:
    """`count` group names that Kafka places in offsets `partition` (of N)."""
    out = [f"g{i}" for i in range(1000) if offsets_partition(f"g{i}", N) == partition]
    return out[:count]


def filled_state(groups: list[str]) -> State:
    state = State(intervals=5)
    for i, g in enumerate(groups):
        for o in range(3):
            state.apply(Commit(C, g, "t", 0, 10 * o + i, o + 1, 1000 * (o + 1), 1000 * (o + 1)))
        state.apply(GroupMembers(C, g, 5, (PartitionOwner("t", 0, "/h", "app", "m"),), "Stable"))
    state.apply(LogEndSample(C, "t", 0, 100, 5000))
    for p in range(N):
        state.apply(ReaderPosition(C, p, 77))
    return state


def test_let_go_forgets_only_the_groups_of_the_revoked_partitions_and_their_pending_changes() -> None:
    kept, gone = groups_in(0), groups_in(1)
    state = filled_state(kept + gone)
    assert state.partitions_tracked() == 6

    assert state.let_go(C, {1}, N) == sorted(gone)

    assert state.groups(C) == sorted(kept)
    assert state.partitions_tracked() == 3
    assert state.topic_consumers(C, "t") == sorted(kept)
    assert state.latest_log_end(C, "t", 0) == 100  # the cluster's log ends stay
    ch = state.drain_changes()
    assert {k[1] for k in ch.windows} == set(kept)
    assert {k[1] for k in ch.members} == set(kept)
    assert {r[2] for r in ch.commit_history} == set(kept)
    assert set(ch.positions) == {(C, 0), (C, 2), (C, 3)}  # the revoked partition's position is not written


def test_let_go_of_nothing_owned_changes_nothing() -> None:
    state = filled_state(groups_in(0))
    assert state.let_go(C, {2, 3}, N) == []
    assert state.let_go("other", {0}, N) == []
    assert state.partitions_tracked() == 3


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store.from_url(database_url, windows_log=False)  # as workers write windows
    yield s
    await s.close()


async def test_restore_owned_loads_only_the_share_and_its_positions(store: Store) -> None:
    mine, theirs = groups_in(2), groups_in(3)
    await store.write(filled_state(mine + theirs).drain_changes())

    state = State(intervals=5)
    positions = await store.restore_owned(state, C, {2}, N)

    assert positions == {2: 77}
    assert state.groups(C) == sorted(mine)
    assert [m.group for m in state.group_members(C)] == sorted(mine)
    assert len(state.window(C, mine[0], "t", 0)) == 3
    # a worker starts with log ends only
    fresh = State(intervals=5)
    everything = await store.restore(fresh, groups=False)
    assert fresh.groups(C) == [] and fresh.latest_log_end(C, "t", 0) == 100
    assert everything[(C, 3)] == 77


async def test_postgres_selects_a_workers_groups_by_their_stored_hash(store: Store) -> None:
    """Rows carry group_hash, so `group_hash % n` in SQL is the offsets partition Kafka places
    the group in (for every group, negative Java hashes included); rows written before
    migration 0006 have none and are still restored when owned, and only then."""
    names = [*groups_in(0, 20), *groups_in(1, 20), *groups_in(2), *groups_in(3), "polygenelubricants", "é€😀"]
    await store.write(filled_state(names).drain_changes())
    async with store._raw() as apg:
        rows = await apg.fetch(
            "SELECT DISTINCT group_name, group_hash, group_hash % $1 FROM windows WHERE cluster = $2", N, C
        )
        assert {r[0]: r[1] for r in rows} == {g: group_hash(g) for g in names}
        assert all(r[2] == offsets_partition(r[0], N) for r in rows)
        # as if written before the column existed
        await apg.execute("UPDATE windows SET group_hash = NULL WHERE group_name = ANY($1::text[])", names[:2])
        await apg.execute("UPDATE group_members SET group_hash = NULL")
    state = State(intervals=5)
    await store.restore_owned(state, C, {0}, N)
    owned = sorted(g for g in names if offsets_partition(g, N) == 0)
    assert sorted(state.groups(C)) == owned and len(owned) == 21  # groups_in(0, 20) and the MIN_VALUE hash
    assert sorted(m.group for m in state.group_members(C)) == owned


async def test_ownership_rows_name_each_groups_owner(store: Store) -> None:
    a, b = Me("host:1", "http://127.0.0.1:1"), Me("host:2", "http://127.0.0.1:2")
    await ownership.publish(store.engine, C, a, {0, 1}, N)
    await ownership.publish(store.engine, C, b, {2, 3}, N)
    owners = OwnerMap(store.engine, a, refresh_s=0.0)

    assert await owners.owner(C, groups_in(1)[0]) == ownership.Owner(a.worker, a.url)
    assert await owners.owner(C, groups_in(3)[0]) == ownership.Owner(b.worker, b.url)
    assert [o.worker for o in await owners.instances(C)] == [a.worker, b.worker]
    assert await owners.owner("unknown", "g") is None

    # b leaves partition 3; a taking it over later overwrites whatever is left
    await ownership.release(store.engine, C, b, {3})
    assert await owners.owner(C, groups_in(3)[0]) is None
    await ownership.publish(store.engine, C, a, {2}, N)  # b's row for 2 is a's now
    await ownership.release(store.engine, C, b, {2})  # b cannot withdraw a row that is not its own
    assert await owners.owner(C, groups_in(2)[0]) == ownership.Owner(a.worker, a.url)


def test_assignment_shares_names_like_kafka_places_groups() -> None:
    share = Assignment(count=N, owned={1})
    assert share.owns(groups_in(1)[0]) and not share.owns(groups_in(2)[0])
    assert not Assignment().owns("anything")  # nothing assigned yet


def test_progress_forgets_revoked_partitions() -> None:
    progress = ReaderProgress()
    progress.measure({0: 0, 1: 0}, {0: 10, 1: 10})
    progress.advance(0, 10)
    assert not progress.caught_up
    progress.forget({1})
    progress.advance(0, 10)
    assert progress.caught_up


def base(**scale: object) -> dict[str, object]:
    return {
        "clusters": {"k": {"bootstrap-servers": ["k:9092"]}},
        "http": {"listen": "127.0.0.1:8000"},
        "scale": scale,
    }


def test_scale_settings_defaults_and_checks() -> None:
    assert not parse(base(), env={}).scale.enabled
    two = parse(base(workers=2), env={}).scale
    assert two.enabled and two.group == "lagd"
    assert parse(base(**{"group-id": "mine"}), env={}).scale.group == "mine"
    with pytest.raises(ConfigError, match=r"scale\.workers"):
        parse(base(workers=0), env={})
    with pytest.raises(ConfigError, match=r"scale\.session-timeout"):
        parse(base(**{"session-timeout": 1}), env={})
    admin = base(workers=2)
    admin["clusters"] = {"k": {"bootstrap-servers": ["k:9092"], "offsets-source": "admin"}}
    with pytest.raises(ConfigError, match="offsets-source"):
        parse(admin, env={})
    zero = base(workers=2)
    zero["http"] = {"listen": "127.0.0.1:0"}
    with pytest.raises(ConfigError, match=r"http\.listen"):
        parse(zero, env={})


def test_each_worker_process_gets_its_own_port_and_the_shared_group() -> None:
    settings = parse(base(workers=3), env={})
    assert [worker_listen("0.0.0.0:8000", i) for i in range(3)] == ["0.0.0.0:8000", "0.0.0.0:8001", "0.0.0.0:8002"]
    env = worker_env(settings, 2, {"PATH": "/bin", "NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1"}, "/tmp/j:3")
    assert env == {
        "PATH": "/bin",
        "LAGD_HTTP_LISTEN": "127.0.0.1:8002",
        "LAGD_SCALE_WORKERS": "1",
        "LAGD_SCALE_GROUP_ID": "lagd",
        "LAGD_JOIN_BARRIER": "/tmp/j:3",  # not a setting: parse() below reads past it
    }
    # what a worker reads back from that environment
    worker = parse(base(workers=3), env=env).scale
    assert worker.workers == 1 and worker.enabled and worker.group == "lagd"
    assert parse(base(workers=3), env=env).http.listen == "127.0.0.1:8002"


async def test_restore_log_ends_of_named_topics_only(store: Store) -> None:
    state = filled_state(groups_in(0))
    state.apply(LogEndSample(C, "other", 0, 7, 5000))
    await store.write(state.drain_changes())
    fresh = State(intervals=5)
    assert await store.restore_log_ends(fresh, C, {"t"}) == 1
    assert fresh.latest_log_end(C, "t", 0) == 100 and fresh.latest_log_end(C, "other", 0) is None
    assert await store.restore_log_ends(fresh, C, set()) == 0


async def test_relayed_log_ends_come_from_the_store_and_are_not_stored_again(store: Store) -> None:
    """A worker's groups consume a topic another worker samples: its newest stored samples are
    applied as relayed samples, newer ones only, and recorded nowhere a second time."""
    from lagd.scale.relay import relayed_samples

    sampler = State(intervals=5)
    sampler.apply(LogEndSample(C, "t", 0, 100, 5000))
    sampler.apply(LogEndSample(C, "t", 1, 70, 5000))
    sampler.apply(LogEndSample(C, "t", 0, 120, 6000))
    await store.write(sampler.drain_changes())
    assert sorted(await store.latest_log_ends(C, {"t", "absent"})) == [("t", 0, 120, 6000), ("t", 1, 70, 5000)]

    worker = State(intervals=5)
    worker.apply(LogEndSample(C, "t", 1, 70, 5000))  # already has partition 1's newest
    worker.drain_changes()
    relayed = relayed_samples(worker, C, await store.latest_log_ends(C, {"t"}))
    assert [(e.partition, e.offset, e.ts, e.relayed) for e in relayed] == [(0, 120, 6000, True)]
    worker.apply_many(relayed)
    assert worker.latest_log_end(C, "t", 0) == 120
    ch = worker.drain_changes()
    assert ch.log_end == {} and ch.log_end_history == []  # its sampler stores it, not this worker


async def test_workers_wait_at_the_join_barrier_for_each_other(tmp_path: Path) -> None:
    """Each worker marks itself ready and joins once all have (lagd.scale.barrier); the last to
    arrive lets every one through, and one that comes back after a crash does not wait."""
    stop = asyncio.Event()
    text = barrier.value(str(tmp_path), 2)
    first = asyncio.create_task(barrier.arrive(text, stop, timeout=30))
    for _ in range(200):  # until the first has marked itself ready
        if await asyncio.to_thread(os.listdir, tmp_path):
            break
        await asyncio.sleep(0.01)
    assert len(await asyncio.to_thread(os.listdir, tmp_path)) == 1
    # it waits for the second: nothing lets it through in two of its polls
    await asyncio.wait({first}, timeout=barrier.POLL_S * 2)
    assert not first.done()
    (tmp_path / "another-worker").touch()  # the second worker, another process, ready
    assert await asyncio.wait_for(first, 5) is True
    assert await asyncio.wait_for(barrier.arrive(text, stop, timeout=30), 1) is True  # passed: no wait again


async def test_a_worker_that_never_comes_holds_the_join_back_only_so_long(tmp_path: Path) -> None:
    stop = asyncio.Event()
    started = asyncio.get_running_loop().time()
    assert await barrier.arrive(barrier.value(str(tmp_path), 3), stop, timeout=0.3) is False
    assert 0.3 <= asyncio.get_running_loop().time() - started < 5
    assert await barrier.arrive(None, stop) is True  # no supervisor: nothing to wait for
