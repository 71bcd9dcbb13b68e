"""A lean HTTP/1.1 GET client for open-loop load: keep-alive connections, nothing else.

bench_http's client process shares the machine's two cores with the daemon it measures. With
aiohttp's client, 200 requests a second took that process 16-18% of a core on a slow box while
measuring; with this one about 9% (apart: 184-195 us of its CPU per 25 KB answer against
288-332 us). Its own lateness (p99 about 10 ms there) comes from waiting for a core, and stayed.
This client writes a prebuilt request and reads one response whose length
Content-Length gives (what lagd's JSON endpoints send) on a connection taken from a pool of
idle ones, or a new one when none is idle: an open loop never waits for a free connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class BadResponse(Exception):
    """A response this client does not read: no Content-Length (chunked), or garbled."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.status = 0
        self.size = -1  # bytes of the response in progress (head and body), -1 until its head is read
        self.head = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            if self.size < 0 and not self._read_head():
                return
        except BadResponse as exc:
            self.waiter = None
            waiter.set_exception(exc)
            return
        if len(self.buf) >= self.size:
            body = bytes(self.buf[self.head : self.size])
            del self.buf[: self.size]
            self.size = -1
            self.waiter = None
            waiter.set_result((self.status, body))

    def _read_head(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = bytes(self.buf[:end]).split(b"\r\n")
        try:
            self.status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise BadResponse(f"not an HTTP status line: {lines[0][:80]!r}") from None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise BadResponse(f"not a Content-Length: {value[:40]!r}") from None
                self.head = end + 4
                self.size = self.head + length
                return True
        raise BadResponse("a response without Content-Length (chunked?): use aiohttp for this endpoint")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(f"connection closed mid-response: {exc}"))

    async def get(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None and self.waiter is None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


class LeanClient:
    """GETs to one host:port over a pool of keep-alive connections."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.idle: list[_Connection] = []

    async def get(self, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
        """(status, body) of GET `path`; raises ConnectionError, BadResponse or TimeoutError."""
        conn = self.idle.pop() if self.idle else None
        if conn is None or conn.closed:
            _, conn = await asyncio.get_running_loop().create_connection(_Connection, self.host, self.port)
        request = f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n".encode()
        try:
            async with asyncio.timeout(timeout):
                answer = await conn.get(request)
        except BaseException:
            if conn.transport is not None:
                conn.transport.close()  # a response may still come: never reuse it
            raise
        self.idle.append(conn)
        return answer

    def close(self) -> None:
        for conn in self.idle:
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()


@contextlib.asynccontextmanager
async def lean_client(host: str, port: int) -> AsyncIterator[LeanClient]:
    """A LeanClient closed on exit."""
    client = LeanClient(host, port)
    try:
        yield client
    finally:
        client.close()
