"""The MQTT broker a benchmark's daemon notifies through, so that its notifier and MQTT publisher
run as in production (a benchmark without them leaves out part of what the daemon does).

The local Mosquitto when one listens on :1883 (the developer machine's service); else a private
Mosquitto started for the run (`lagd.embedded.services.start_mosquitto`: Debian's `mosquitto`),
stopped after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from lagd.embedded import services as embedded


@contextlib.contextmanager
def mqtt_broker() -> Iterator[str]:
    """The broker's URL for `notify.mqtt-url`, for the `with` block."""
    if embedded.port_open("127.0.0.1", 1883):
        yield "mqtt://127.0.0.1:1883"
        return
    broker = embedded.start_mosquitto()
    try:
        yield f"mqtt://127.0.0.1:{broker.port}"
    finally:
        broker.stop()
