"""HTTP under hostile request patterns: memory stays bounded, slow clients are cut off.

A real server (start_http) on a free port, driven by raw sockets from the same event loop,
so the requests are exactly what a hostile client would send.
"""

from __future__ import annotations

import asyncio
import gc
import re
from pathlib import Path

from lagd.evaluate.verdicts import not_found
from lagd.http.app import bound_port, start_http
from lagd.http.burrow_v3 import STATUS_BODIES, StatusBodies, _Body, detail_partitions
from tests.http_state import CLUSTER, NOW, build_context, build_settings, serve

MB = 1024 * 1024


def rss_bytes() -> int:
    """This process's resident set size, from /proc/self/status."""
    m = re.search(r"^VmRSS:\s+(\d+) kB$", Path("/proc/self/status").read_text(), re.M)
    assert m is not None
    return int(m.group(1)) * 1024


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def pipelined_gets(port: int, paths: list[str], depth: int = 200) -> dict[int, int]:
    """GET every path over one keep-alive connection, `depth` requests in flight; status counts."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    statuses: dict[int, int] = {}
    try:
        for i in range(0, len(paths), depth):
            chunk = paths[i : i + depth]
            writer.write(b"".join(f"GET {p} HTTP/1.1\r\nHost: lagd\r\n\r\n".encode() for p in chunk))
            await writer.drain()
            for _ in chunk:
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
                await reader.readexactly(length)
                statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()
    return statuses


async def test_100k_unknown_group_requests_keep_rss_bounded() -> None:
    ctx = build_context()
    async with serve(ctx) as base:
        port = port_of(base)
        pad = "x" * 400  # long names: a cache that keeps 404 bodies would keep ~2 KB per request
        warmup = [f"/v3/kafka/{CLUSTER}/consumer/warm-{i}-{pad}/lag" for i in range(2_000)]
        await pipelined_gets(port, warmup)
        paths = [f"/v3/kafka/{CLUSTER}/consumer/unknown-{i:06d}-{pad}/status" for i in range(100_000)]
        gc.collect()
        before = rss_bytes()
        results = await asyncio.gather(*(pipelined_gets(port, paths[i::4]) for i in range(4)))
        gc.collect()
        grown = rss_bytes() - before
    assert sum(r.get(404, 0) for r in results) == 100_000
    # Keeping every answer costs well over 200 MB here; a bounded server stays flat.
    assert grown < 40 * MB, f"RSS grew by {grown / MB:.0f} MB over 100,000 unknown-group requests"


def body(at: int, size: int) -> _Body:
    return _Body(at, not_found(CLUSTER, "g", at), 200, b"x" * size, size + 100)


def test_status_bodies_are_bounded_in_bytes_and_by_age() -> None:
    cache = StatusBodies(max_bytes=10_000)
    for i in range(100):
        cache.put(f"/p{i}", body(NOW + i, 900), NOW + i, ttl=5_000)
        assert cache.bytes <= 10_000
    assert len(cache) == 10 and cache.get("/p99") is not None and cache.get("/p89") is None
    hit = cache.get("/p90")
    assert hit is not None
    cache.refresh("/p90", hit, NOW + 4_000)  # refreshed: now the newest
    cache.prune(NOW + 5_095, ttl=5_000)
    assert len(cache) == 5 and cache.get("/p90") is not None and cache.get("/p94") is None
    cache.prune(NOW + 10_000, ttl=5_000)
    assert len(cache) == 0 and cache.bytes == 0


async def test_answers_for_unknown_groups_are_not_kept_but_known_ones_are() -> None:
    runner = await start_http(build_context())
    try:
        paths = [f"/v3/kafka/{CLUSTER}/consumer/g-rewind/lag", f"/v3/kafka/{CLUSTER}/consumer/nobody/lag"]
        assert await pipelined_gets(bound_port(runner), paths) == {200: 1, 404: 1}
        cache = runner.app[STATUS_BODIES]
        assert len(cache) == 1 and cache.get(paths[0]) is not None and cache.get(paths[1]) is None
    finally:
        await runner.cleanup()


async def test_a_connection_that_never_finishes_its_headers_is_closed() -> None:
    ctx = build_context(build_settings(idle_timeout=0.5))
    async with serve(ctx) as base:
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(base))
        writer.write(b"GET /v3/kafka HTTP/1.1\r\nHost: lag")  # ... and nothing more
        await writer.drain()
        # The server closes it: EOF well before aiohttp's default of an hour.
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()


async def test_a_body_that_never_arrives_times_out_and_an_oversized_one_is_refused() -> None:
    ctx = build_context(build_settings(request_timeout=0.5, max_request_bytes=1024))
    token = "Authorization: Bearer " + str(ctx.settings.http.auth_token.reveal())
    async with serve(ctx) as base:
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(base))
        head = f"POST /v3/admin/loglevel HTTP/1.1\r\nHost: lagd\r\n{token}\r\nContent-Length: 100\r\n\r\n"
        writer.write(head.encode() + b'{"level":')  # 9 of 100 bytes
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert answer.startswith(b"HTTP/1.1 503")
        writer.close()

        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(base))
        big = b'{"level": "' + b"x" * 4096 + b'"}'
        head = f"POST /v3/admin/loglevel HTTP/1.1\r\nHost: lagd\r\n{token}\r\nContent-Length: {len(big)}\r\n\r\n"
        writer.write(head.encode() + big)
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert answer.startswith(b"HTTP/1.1 413")
        writer.close()


def test_detail_rows_are_not_padded_up_to_a_hostile_partition() -> None:
    assert detail_partitions([0, 2], 0) == [0, 1, 2]  # Burrow's layout: index = partition
    assert detail_partitions([1], 4) == [0, 1, 2, 3]
    assert detail_partitions([0, 5], 4) == [0, 1, 2, 3, 4, 5]
    assert detail_partitions([0, 2**31 - 1], 4) == [0, 1, 2, 3, 2**31 - 1]
    assert detail_partitions([99_999], 0) == [99_999]
