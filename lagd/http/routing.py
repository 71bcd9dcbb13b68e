"""Workers (lagd.scale): one API whichever worker owns a group.

Each worker holds only its own groups. A request about one group that this instance does not
hold goes to the group's owner, as published in `offsets_owners` (lagd.scale.ownership), and
its answer is relayed; a list (consumers, topics, groups) is this instance's part merged with
every other worker's. A forwarded request carries FORWARDED, and is answered locally by its
receiver, never forwarded again. Every answer says which worker gave it (ANSWERED_BY).

When the owner cannot be reached (killed, before the group protocol moves its partitions), no
worker owns the group's partition (a rebalance in progress), or the owner is this worker but
it does not hold the partition now (restoring it, or letting it go: OwnerMap.held), the
answer is 503 with
Retry-After: the groups move within `scale.session-timeout`. Trend and history read Postgres,
which every instance reads alike: they are answered where they are asked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from lagd.http.context import CTX, Handler, HttpContext, envelope
from lagd.runtime import logs
from lagd.scale.ownership import Owner

log = logs.get(__name__)

FORWARDED = "X-Lagd-Forwarded"  # set on a request one instance sends another: answer it locally
ANSWERED_BY = "X-Lagd-Answered-By"  # the worker whose state gave the answer
PARTIAL = "X-Lagd-Partial"  # on a merged list: workers that did not answer (their groups are missing)
CONNECT_TIMEOUT_S = 1.0
TOTAL_TIMEOUT_S = 3.0
WARN_EVERY_S = 60.0
IN_TRANSIT = "this group is moving between workers (a rebalance): retry"

# Routes about one group (match_info "cluster" and "group"), answered by the group's owner.
_GROUP_ROUTES = frozenset(
    {
        "/v3/kafka/{cluster}/consumer/{group}",
        "/v3/kafka/{cluster}/consumer/{group}/status",
        "/v3/kafka/{cluster}/consumer/{group}/lag",
        "/lagd/v1/consumer/{cluster}/{group}",
        "/lagd/v1/consumer/{cluster}/{group}/window/{topic}/{partition}",
        "/group/{cluster}/{group}",
    }
)
_TOPIC_ROUTES = frozenset({"/v3/kafka/{cluster}/topic/{topic}"})
# Lists: the JSON key that holds the list.
_LIST_ROUTES = {
    "/v3/kafka/{cluster}/consumer": "consumers",
    "/v3/kafka/{cluster}/topic": "topics",
    "/v3/kafka/{cluster}/topic/{topic}/consumers": "consumers",
    "/lagd/v1/groups": "groups",
}
_SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("lagd_forward_session", aiohttp.ClientSession)
_WARNED: web.AppKey[dict[str, float]] = web.AppKey("lagd_forward_warned", dict)


def install(app: web.Application) -> None:
    """Add the routing middleware (innermost: auth and the rest apply first) and its client."""
    app.middlewares.append(route_to_owner)
    app[_WARNED] = {}

    async def client(app: web.Application) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=TOTAL_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            app[_SESSION] = session
            yield

    app.cleanup_ctx.append(client)


@web.middleware
async def route_to_owner(request: web.Request, handler: Handler) -> web.StreamResponse:
    ctx: HttpContext = request.app[CTX]
    owners = ctx.owners
    if owners is None:
        return await handler(request)
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else ""
    info = request.match_info
    if FORWARDED in request.headers:
        if route in _GROUP_ROUTES and _let_go(ctx, info["cluster"], info["group"]):
            return _stamp(_unavailable(request, IN_TRANSIT), ctx)
        return _stamp(await handler(request), ctx)
    if route in _GROUP_ROUTES:
        cluster, group = info["cluster"], info["group"]
        if ctx.state.has_group(cluster, group):
            return _stamp(await handler(request), ctx)
        return await _to_owner(request, handler, ctx, cluster, group)
    if route in _TOPIC_ROUTES:
        cluster, topic = info["cluster"], info["topic"]
        if ctx.state.topic_offsets(cluster, topic) is not None:
            return _stamp(await handler(request), ctx)
        return await _to_owner(request, handler, ctx, cluster, topic)
    if route in _LIST_ROUTES and request.method == "GET":
        return await _merged(request, handler, ctx, _LIST_ROUTES[route], info.get("cluster"))
    return _stamp(await handler(request), ctx)


def _let_go(ctx: HttpContext, cluster: str, group: str) -> bool:
    """Asked of this worker as the group's owner: not here, and its partition not held now (let
    go, or not restored yet): in transit, not unknown."""
    assert ctx.owners is not None
    return not ctx.state.has_group(cluster, group) and not ctx.owners.held.holds(cluster, group)


def _stamp(response: web.StreamResponse, ctx: HttpContext) -> web.StreamResponse:
    if ctx.owners is not None and not response.prepared:
        response.headers.setdefault(ANSWERED_BY, ctx.owners.me.worker)
    return response


async def _to_owner(
    request: web.Request, handler: Handler, ctx: HttpContext, cluster: str, name: str
) -> web.StreamResponse:
    """Forward to the worker that owns `name` (a group, or a topic by the same hash)."""
    assert ctx.owners is not None
    owner = await ctx.owners.owner(cluster, name)
    if owner is None:  # read during a rebalance, maybe: look again before saying so
        await ctx.owners.refresh(force=True)
        owner = await ctx.owners.owner(cluster, name)
    if owner is None:
        if not await ctx.owners.any_owner(cluster):
            return _stamp(await handler(request), ctx)  # no worker has joined yet: say what this one knows
        return _unavailable(request, "no worker owns this group right now (the workers are rebalancing)")
    if ctx.owners.is_me(owner):
        if not ctx.owners.held.holds(cluster, name):
            # the row is this worker's, the partition is not (yet, or any more): in transit
            await ctx.owners.refresh(force=True)
            return _unavailable(request, IN_TRANSIT)
        return _stamp(await handler(request), ctx)  # held, and not here: this instance's answer is the answer
    answer = await _ask(request, owner)
    if answer is not None and answer.status == 404:
        # The owner may have just let the group go: look again once.
        await ctx.owners.refresh(force=True)
        again = await ctx.owners.owner(cluster, name)
        if again is not None and again != owner:
            if ctx.owners.is_me(again):
                if not ctx.owners.held.holds(cluster, name):
                    return _unavailable(request, IN_TRANSIT)
                return _stamp(await handler(request), ctx)
            owner, answer = again, await _ask(request, again)
    if answer is None:
        await ctx.owners.refresh(force=True)
        return _unavailable(
            request,
            f"the worker owning this group ({owner.worker} at {owner.url}) does not answer; its groups move to "
            "another worker within scale.session-timeout: retry",
        )
    return answer


async def _ask(request: web.Request, owner: Owner, path: str | None = None) -> web.Response | None:
    """The owner's answer to the same request (or to GET `path`), or None when it cannot be reached."""
    ctx: HttpContext = request.app[CTX]
    assert ctx.owners is not None
    headers = {FORWARDED: ctx.owners.me.worker}
    for name in ("Authorization", "Accept", "Content-Type"):
        if name in request.headers and (path is None or name == "Authorization"):
            headers[name] = request.headers[name]
    body = await request.read() if request.can_read_body and path is None else None
    method, url = ("GET", owner.url + path) if path is not None else (request.method, owner.url + str(request.rel_url))
    try:
        async with request.app[_SESSION].request(
            method, url, headers=headers, data=body, allow_redirects=False
        ) as answer:
            data = await answer.read()
            out = web.Response(status=answer.status, body=data)
            for name in ("Content-Type", "Retry-After", "Allow", "Cache-Control"):
                if name in answer.headers:
                    out.headers[name] = answer.headers[name]
            out.headers[ANSWERED_BY] = answer.headers.get(ANSWERED_BY, owner.worker)
            return out
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        _warn(request.app, owner, exc)
        return None


def _warn(app: web.Application, owner: Owner, exc: BaseException) -> None:
    warned = app[_WARNED]
    now = time.monotonic()
    if now - warned.get(owner.worker, -WARN_EVERY_S) >= WARN_EVERY_S:
        warned[owner.worker] = now
        log.warning(
            "another worker does not answer",
            worker=owner.worker,
            url=owner.url,
            error=f"{exc.__class__.__name__}: {exc}",
            hint="if it was stopped or died its groups move within scale.session-timeout; "
            "else check that this instance can reach it (scale.advertise-host)",
        )


def _unavailable(request: web.Request, message: str) -> web.Response:
    if request.path.startswith("/v3/") or request.path.startswith("/lagd/"):
        response = envelope(request, 503, True, message, {})
    else:
        response = web.Response(status=503, text=message + "\n")
    response.headers["Retry-After"] = "1"
    return response


async def peer_groups(request: web.Request) -> tuple[list[dict[str, Any]], list[str]]:
    """Every other worker's own groups (their GET /lagd/v1/groups summaries), and the workers
    that did not answer: for pages that show every group but are not JSON lists (the status page)."""
    ctx: HttpContext = request.app[CTX]
    if ctx.owners is None:
        return [], []
    peers = [o for o in await ctx.owners.instances(None) if not ctx.owners.is_me(o)]
    answers = await asyncio.gather(*(_ask(request, o, "/lagd/v1/groups") for o in peers))
    groups: list[dict[str, Any]] = []
    missing: list[str] = []
    for owner, answer in zip(peers, answers, strict=True):
        if answer is None or answer.status != 200 or not isinstance(answer.body, bytes):
            missing.append(owner.worker)
            continue
        listed = json.loads(answer.body).get("groups", [])
        groups.extend(g for g in listed if isinstance(g, dict))
    return groups, missing


async def _merged(
    request: web.Request, handler: Handler, ctx: HttpContext, key: str, cluster: str | None
) -> web.StreamResponse:
    """This instance's list merged with every other worker's (asked with FORWARDED, so each
    gives its own part)."""
    assert ctx.owners is not None
    local = await handler(request)
    if not isinstance(local, web.Response) or local.status not in (200, 404) or local.body is None:
        return _stamp(local, ctx)
    peers = [o for o in await ctx.owners.instances(cluster) if not ctx.owners.is_me(o)]
    if not peers:
        return _stamp(local, ctx)
    answers = await asyncio.gather(*(_ask(request, o) for o in peers))
    parts: list[dict[str, Any]] = []
    missing: list[str] = []
    for response in [local, *answers]:
        if response is None:
            continue
        if response.status == 200 and isinstance(response.body, bytes):
            parts.append(json.loads(response.body))
    for owner, answer in zip(peers, answers, strict=True):
        if answer is None or answer.status not in (200, 404):
            missing.append(owner.worker)
    if not parts:
        return _stamp(local, ctx)
    merged = dict(parts[0])
    items: list[Any] = [item for part in parts for item in part.get(key, [])]
    if items and isinstance(items[0], dict):
        seen: dict[tuple[Any, Any], Any] = {}
        for item in items:
            seen.setdefault((item.get("cluster"), item.get("group")), item)
        merged[key] = [seen[k] for k in sorted(seen, key=lambda k: (str(k[0]), str(k[1])))]
    else:
        merged[key] = sorted(set(items))
    out = web.Response(status=200, body=json.dumps(merged).encode(), content_type="application/json")
    out.headers[ANSWERED_BY] = ",".join([ctx.owners.me.worker, *(o.worker for o in peers if o.worker not in missing)])
    if missing:
        out.headers[PARTIAL] = ",".join(missing)
    return out
