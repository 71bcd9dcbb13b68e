"""One API across workers (lagd.http.routing): real HTTP servers, ownership in a real Postgres.

Instance "a" holds every group of tests/http_state.py; instance "x" holds none. Ownership is
published in `offsets_owners` as workers publish it, so x must forward or merge.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from lagd.core.config import Secret
from lagd.embedded.services import free_low_port
from lagd.evaluate import Evaluator
from lagd.http.routing import ANSWERED_BY, FORWARDED, PARTIAL
from lagd.scale import ownership
from lagd.scale.ownership import Me, OwnerMap
from lagd.state.store import Store
from lagd.state.windows import State, offsets_partition
from tests.http_state import CLUSTER, GROUPS, build_context, build_settings, serve

N = 4  # offsets partitions


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store.from_url(database_url)
    yield s
    await s.close()


async def get(url: str, **headers: str) -> tuple[int, Any, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as answer:
        text = await answer.text()
        body = json.loads(text) if "json" in answer.headers.get("Content-Type", "") else text
        return answer.status, body, dict(answer.headers)


def strip_request(body: Any) -> Any:
    """Burrow's envelope names the host and path that answered: leave it out of comparisons."""
    return {k: v for k, v in body.items() if k != "request"} if isinstance(body, dict) else body


async def test_a_group_is_answered_by_its_owner_and_lists_merge(store: Store) -> None:
    a_ctx = build_context(build_settings(listen="127.0.0.1:0", auth_token=Secret("")))
    empty = build_context(build_settings(listen="127.0.0.1:0", auth_token=Secret("")))
    empty.state = State(intervals=3)
    empty.evaluator = Evaluator(empty.state)
    async with serve(a_ctx) as a_url, serve(empty) as x_url:
        a_me, x_me = Me("host:a", a_url), Me("host:x", x_url)
        a_ctx.owners = OwnerMap(store.engine, a_me, refresh_s=0.0)
        empty.owners = OwnerMap(store.engine, x_me, refresh_s=0.0)
        await ownership.publish(store.engine, CLUSTER, a_me, range(N), N)

        for path in (
            "/v3/kafka/prod/consumer/g-warn/lag",
            "/v3/kafka/prod/consumer/g-warn",
            "/lagd/v1/consumer/prod/g-warn",
        ):
            direct = await get(a_url + path)
            via_x = await get(x_url + path)
            assert via_x[0] == direct[0] == 200
            assert strip_request(via_x[1]) == strip_request(direct[1])
            assert via_x[2][ANSWERED_BY] == "host:a"

        # a forwarded request is answered where it arrives, never sent on: x does not hold the
        # group's partition, so the group is in transit to it, not unknown
        status, _, headers = await get(x_url + "/v3/kafka/prod/consumer/g-warn/lag", **{FORWARDED: "host:a"})
        assert (status, headers[ANSWERED_BY], headers["Retry-After"]) == (503, "host:x", "1")
        empty.owners.held.take(CLUSTER, range(N), N)  # x holds every partition: the group is unknown there
        status, _, headers = await get(x_url + "/v3/kafka/prod/consumer/g-warn/lag", **{FORWARDED: "host:a"})
        assert status == 404 and headers[ANSWERED_BY] == "host:x"
        empty.owners.held.drop(CLUSTER, range(N))

        # lists: x's own part (nothing) merged with a's
        status, body, headers = await get(x_url + "/v3/kafka/prod/consumer")
        assert status == 200 and body["consumers"] == GROUPS
        assert set(headers[ANSWERED_BY].split(",")) == {"host:a", "host:x"} and PARTIAL not in headers
        status, body, _ = await get(x_url + "/lagd/v1/groups")
        assert sorted(g["group"] for g in body["groups"]) == GROUPS

        # an owner that does not answer: 503, Retry-After, and what to do
        dead = Me("host:dead", f"http://127.0.0.1:{free_low_port()}")
        await ownership.publish(store.engine, CLUSTER, dead, {offsets_partition("g-ok", N)}, N)
        status, body, headers = await get(x_url + "/v3/kafka/prod/consumer/g-ok/status")
        assert status == 503 and headers["Retry-After"] == "1"
        assert "host:dead" in body["message"] and "scale.session-timeout" in body["message"]
        # and a list says whose part is missing
        status, body, headers = await get(x_url + "/v3/kafka/prod/consumer")
        assert status == 200 and headers[PARTIAL] == "host:dead" and body["consumers"] == GROUPS

        # during a rebalance (no owner published for the partition): 503 as well
        await ownership.release(store.engine, CLUSTER, dead, {offsets_partition("g-ok", N)})
        status, body, headers = await get(x_url + "/v3/kafka/prod/consumer/g-ok/status")
        assert status == 503 and "rebalancing" in body["message"]
        # the owner's own state answers where it holds the group
        status, _, headers = await get(a_url + "/v3/kafka/prod/consumer/g-ok/status")
        assert status == 200 and headers[ANSWERED_BY] == "host:a"


async def test_a_group_moving_to_or_from_its_owner_is_503_never_unknown(store: Store) -> None:
    """The owners table names this worker, but it does not hold the group's partition now: it
    is letting the group go, or restoring it (issue 50: a worker SIGKILLed, the survivor
    answered 404 for groups that exist). 503 + Retry-After; once held, an unknown group is 404."""
    ctx = build_context(build_settings(listen="127.0.0.1:0", auth_token=Secret("")))
    ctx.state = State(intervals=3)  # none of the groups here (yet, or any more)
    ctx.evaluator = Evaluator(ctx.state)
    async with serve(ctx) as url:
        me = Me("host:me", url)
        ctx.owners = OwnerMap(store.engine, me, refresh_s=60.0)  # a cached map, as between refreshes
        await ownership.publish(store.engine, CLUSTER, me, range(N), N)
        for path in ("/v3/kafka/prod/consumer/g-warn/status", "/lagd/v1/consumer/prod/g-warn", "/group/prod/g-warn"):
            status, _, headers = await get(url + path)
            assert (status, headers["Retry-After"]) == (503, "1"), path
        ctx.owners.held.take(CLUSTER, range(N), N)  # restored: what is not here now is unknown
        status, _, _ = await get(url + "/v3/kafka/prod/consumer/g-warn/status")
        assert status == 404
        ctx.owners.held.drop(CLUSTER, [offsets_partition("g-warn", N)])  # letting it go
        status, _, _ = await get(url + "/v3/kafka/prod/consumer/g-warn/status")
        assert status == 503


async def test_single_instance_is_untouched() -> None:
    ctx = build_context(build_settings(listen="127.0.0.1:0", auth_token=Secret("")))
    async with serve(ctx) as url:
        status, body, headers = await get(url + "/v3/kafka/prod/consumer")
        assert status == 200 and body["consumers"] == GROUPS and ANSWERED_BY not in headers
