"""A TCP proxy in front of Tansu that turns ListOffsets v0 into v1 (for Burrow 1.2.1).

Burrow 1.2.1 asks for log-end offsets with ListOffsets v0 whatever its client profile says;
Tansu 0.6 answers v0 without the old-style offsets array, so Burrow never learns a log end
and drops every commit. This proxy forwards Kafka frames both ways unchanged, except:

- a request with api_key 2 (ListOffsets) and api_version 0 is rewritten to version 1
  (the per-partition `max_num_offsets` field dropped), and its correlation id remembered;
- the answer to such a request (v1: partition, error_code, timestamp, offset) is rewritten
  to v0's layout (partition, error_code, [offset]; an empty array when error_code != 0).

Everything else (Metadata, Fetch, ...) passes through frame by frame. Tansu must advertise
the proxy's port, so every client (Burrow and lagd alike) talks to the broker through it.
Run: `python -m bench.kafka_shim --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import struct

LIST_OFFSETS = 2

_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")


class _Reader:
    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def i16(self) -> int:
        (v,) = _i16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        (v,) = _i32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def i64(self) -> int:
        (v,) = _i64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def string(self) -> bytes:
        """A (non-compact) string, returned with its length prefix, ready to copy out."""
        start = self.pos
        n = self.i16()
        self.pos += max(n, 0)
        return self.buf[start : self.pos]


def rewrite_request_v0(frame: bytes) -> bytes:
    """A ListOffsets v0 request body (after the size prefix) as the same request in v1."""
    r = _Reader(frame)
    r.i16()  # api_key
    r.i16()  # api_version
    correlation = r.i32()
    client_id = r.string()
    out = [_i16.pack(LIST_OFFSETS), _i16.pack(1), _i32.pack(correlation), client_id]
    out.append(_i32.pack(r.i32()))  # replica_id
    topics = r.i32()
    out.append(_i32.pack(topics))
    for _ in range(max(topics, 0)):
        out.append(r.string())
        parts = r.i32()
        out.append(_i32.pack(parts))
        for _ in range(max(parts, 0)):
            partition = r.i32()
            timestamp = r.i64()
            r.i32()  # max_num_offsets: v1 always answers one offset
            out.append(_i32.pack(partition) + _i64.pack(timestamp))
    return b"".join(out)


def rewrite_response_v1_to_v0(frame: bytes) -> bytes:
    """A ListOffsets v1 response body (after the size prefix) in v0's layout."""
    r = _Reader(frame)
    out = [_i32.pack(r.i32())]  # correlation id (response header v0)
    topics = r.i32()
    out.append(_i32.pack(topics))
    for _ in range(max(topics, 0)):
        out.append(r.string())
        parts = r.i32()
        out.append(_i32.pack(parts))
        for _ in range(max(parts, 0)):
            partition = r.i32()
            error = r.i16()
            r.i64()  # timestamp
            offset = r.i64()
            offsets = _i32.pack(0) if error else _i32.pack(1) + _i64.pack(offset)
            out.append(_i32.pack(partition) + _i16.pack(error) + offsets)
    return b"".join(out)


async def _frames(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readexactly(4)
        (n,) = _i32.unpack(head)
        return await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def _pipe_requests(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, rewritten: set[int], counts: dict[str, int]
) -> None:
    while (frame := await _frames(src)) is not None:
        api_key, version, correlation = struct.unpack_from(">hhi", frame)
        if api_key == LIST_OFFSETS and version == 0:
            frame = rewrite_request_v0(frame)
            rewritten.add(correlation)
            counts["rewritten"] += 1
        dst.write(_i32.pack(len(frame)) + frame)
        await dst.drain()


async def _pipe_responses(src: asyncio.StreamReader, dst: asyncio.StreamWriter, rewritten: set[int]) -> None:
    while (frame := await _frames(src)) is not None:
        if rewritten:
            (correlation,) = _i32.unpack_from(frame)
            if correlation in rewritten:
                rewritten.discard(correlation)
                frame = rewrite_response_v1_to_v0(frame)
        dst.write(_i32.pack(len(frame)) + frame)
        await dst.drain()


async def serve(listen: tuple[str, int], upstream: tuple[str, int], stop: asyncio.Event) -> None:
    counts = {"connections": 0, "rewritten": 0}

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        counts["connections"] += 1
        try:
            server_r, server_w = await asyncio.open_connection(*upstream)
        except OSError:
            client_w.close()
            return
        rewritten: set[int] = set()
        tasks = [
            asyncio.create_task(_pipe_requests(client_r, server_w, rewritten, counts)),
            asyncio.create_task(_pipe_responses(server_r, client_w, rewritten)),
        ]
        with contextlib.suppress(Exception):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        for w in (client_w, server_w):
            with contextlib.suppress(Exception):
                w.close()

    server = await asyncio.start_server(handle, *listen, limit=1 << 22)
    async with server:
        await stop.wait()
    print(f"kafka_shim: {counts['connections']} connections, {counts['rewritten']} ListOffsets v0 requests rewritten")


def _addr(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host or "127.0.0.1", int(port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--listen", required=True, help="host:port to accept clients on")
    ap.add_argument("--upstream", required=True, help="host:port of the broker")
    a = ap.parse_args()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(_addr(a.listen), _addr(a.upstream), stop)

    asyncio.run(run())


if __name__ == "__main__":
    main()
