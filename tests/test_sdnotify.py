"""The systemd notify protocol: datagrams reach the socket, and a receiver that stops reading
never blocks the sender (it is the daemon's event loop)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from lagd.runtime import sdnotify


def test_messages_reach_the_socket_and_a_full_queue_drops_them_without_waiting(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(path)
        env = {"NOTIFY_SOCKET": path}
        assert sdnotify.notify("READY=1", env)
        assert receiver.recv(64) == b"READY=1"
        # nobody reads any more: once the queue is full each message is dropped at once
        started = time.monotonic()
        sent = [sdnotify.notify("WATCHDOG=1", env) for _ in range(10_000)]
        assert time.monotonic() - started < 5.0
        assert sent[0] and not sent[-1]
        receiver.setblocking(False)
        assert receiver.recv(64) == b"WATCHDOG=1"  # the ones that fit were delivered
    assert not sdnotify.notify("READY=1", {"NOTIFY_SOCKET": ""})  # outside systemd: nothing sent
