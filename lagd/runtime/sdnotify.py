"""The systemd notify protocol (READY=1, STOPPING=1, WATCHDOG=1, STATUS=...) in a few lines.

Does nothing when $NOTIFY_SOCKET is unset, so lagd runs the same outside systemd.
"""

from __future__ import annotations

import os
import socket


def notify(message: str, env: dict[str, str] | None = None) -> bool:
    """Send one datagram to $NOTIFY_SOCKET; returns whether it was sent.

    Never waits: it is called from the event loop, and a datagram socket's sender blocks while
    the receiver's queue is full (a supervisor that stopped reading it). Such a message is
    dropped, as one sent with no supervisor listening is."""
    path = (env if env is not None else os.environ).get("NOTIFY_SOCKET", "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.connect(address)
            sock.send(message.encode())
    except OSError:  # BlockingIOError included: the receiver's queue is full
        return False
    return True


def watchdog_interval(env: dict[str, str] | None = None) -> float | None:
    """Half of systemd's WatchdogSec in seconds, or None when the watchdog is off."""
    e = env if env is not None else os.environ
    usec = e.get("WATCHDOG_USEC")
    pid = e.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
