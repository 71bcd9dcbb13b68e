"""bench.lean_get, the benchmark's lean GET client, against a real aiohttp server: what it
reads is what the server sent, connections are kept and reused, and what it cannot read
(chunked bodies, a connection closed mid-response, a timeout) fails instead of passing for
an answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bench.lean_get import BadResponse, lean_client


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, int, list[str]]]:
    peers: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        peers.append(str(request.transport.get_extra_info("peername") if request.transport else None))
        n = int(request.match_info["n"])
        return web.Response(status=200 if n % 7 else 404, body=b"x" * n + request.path_qs.encode())

    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"part")
        await resp.write_eof()
        return resp

    async def hang_up(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()
        return web.Response(body=b"never")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.Response(body=b"late")

    app = web.Application()
    app.router.add_get("/echo/{n}", echo)
    app.router.add_get("/chunked", chunked)
    app.router.add_get("/hang-up", hang_up)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield "127.0.0.1", port, peers
    finally:
        await runner.cleanup()


async def test_reads_each_response_whole_over_kept_connections(server: tuple[str, int, list[str]]) -> None:
    host, port, peers = server
    async with lean_client(host, port) as client:
        # one at a time: every request reuses the one connection
        for n in (0, 1, 7, 65_536, 300_000):
            status, body = await client.get(f"/echo/{n}?q={n}")
            assert status == (404 if n % 7 == 0 else 200)
            assert body == b"x" * n + f"/echo/{n}?q={n}".encode()
        assert len(set(peers)) == 1
        # many at once: as many connections as were in flight, each answer its own request's
        answers = await asyncio.gather(*(client.get(f"/echo/{n}") for n in range(1, 41)))
        assert [body for _, body in answers] == [b"x" * n + f"/echo/{n}".encode() for n in range(1, 41)]
        assert 1 < len(set(peers)) <= 41
        assert len(client.idle) == len(set(peers))


async def test_what_it_cannot_read_fails(server: tuple[str, int, list[str]]) -> None:
    host, port, _ = server
    async with lean_client(host, port) as client:
        with pytest.raises(BadResponse, match="Content-Length"):
            await client.get("/chunked")
        with pytest.raises(ConnectionError):
            await client.get("/hang-up")
        with pytest.raises(TimeoutError):
            await client.get("/slow", timeout=0.2)
        assert client.idle == []  # none of those connections is used again
        status, body = await client.get("/echo/3")  # a new connection after them
        assert (status, body) == (200, b"xxx/echo/3")


async def test_a_garbled_content_length_fails() -> None:
    async def garbled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: zz\r\n\r\nbody")
        await writer.drain()

    server = await asyncio.start_server(garbled, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with lean_client("127.0.0.1", port) as client:
            with pytest.raises(BadResponse, match="Content-Length"):
                await client.get("/x")
            assert client.idle == []
    finally:
        server.close()
        await server.wait_closed()
