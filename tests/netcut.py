"""A cuttable TCP forwarder: the outage tests put it between lagd and a real service.

A labelled stand-in for a network failure, not for the service: the service itself (Postgres,
the Kafka broker) stays real and keeps running while the path to it is cut.
"""

from __future__ import annotations

import asyncio
import contextlib


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy `src` to `dst` until either side ends, then drop `dst`."""
    with contextlib.suppress(OSError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    dst.transport.abort()


class Cuttable:
    """A TCP forwarder that a test cuts (connections dropped, new ones refused) and restores."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.up = True
        self._pipes: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1:`port` (0: any free port); returns the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pipes.add(pair)

        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._pipes.discard(pair)

    def cut(self) -> None:
        self.up = False
        for a, b in list(self._pipes):
            a.transport.abort()
            b.transport.abort()

    def restore(self) -> None:
        self.up = True

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class KafkaClientCut(Cuttable):
    """A Cuttable in front of a Kafka broker that cuts only the connections of one Kafka client
    id (lagd's), read from the first request's header; every other client's connections (the
    simulator's producer) go on through a cut. A broker outage as lagd sees it while the
    consumers it watches still reach the broker and commit: after the outage lagd reads what
    they committed meanwhile."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        super().__init__(host, port)
        self.client_id = client_id
        self._victims: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # request header: size int32, api_key int16, api_version int16, correlation_id int32,
            # client_id nullable string (int16 length, then its bytes)
            head = await reader.readexactly(14)
            n = int.from_bytes(head[12:14], "big", signed=True)
            client = await reader.readexactly(n) if n > 0 else b""
        except (asyncio.IncompleteReadError, OSError):
            writer.transport.abort()
            return
        victim = client.decode(errors="replace") == self.client_id
        if victim and not self.up:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        up_writer.write(head + client)
        pair = (writer, up_writer)
        (self._victims if victim else self._pipes).add(pair)

        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._pipes.discard(pair)
            self._victims.discard(pair)

    def cut(self) -> None:
        self.up = False
        for a, b in list(self._victims):
            a.transport.abort()
            b.transport.abort()

    async def close(self) -> None:
        super().cut()  # every connection, spared or not
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
