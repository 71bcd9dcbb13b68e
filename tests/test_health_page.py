"""lagd's own health on the status page (`/`): what it says of its store and its MQTT link when
they are failing or off, as an operator reads it. The page is fetched from a real server; the
store's status is what the daemon notes at start against the real Postgres (lagd.daemon._noting)."""

from __future__ import annotations

import dataclasses

import aiohttp
import pytest
from sqlalchemy.engine import make_url

from lagd.core.config import Settings
from lagd.daemon import _noting
from lagd.notify.mqtt import PublisherStatus
from lagd.state.persister import PersisterStatus
from lagd.state.store import Store
from lagd.state.windows import State
from tests.http_state import build_context, build_settings, serve


async def page(settings: Settings | None = None, **health: object) -> str:
    ctx = build_context(settings or build_settings())
    for name, value in health.items():
        setattr(ctx.health, name, value)
    async with serve(ctx) as base, aiohttp.ClientSession(base) as s, s.get("/") as resp:
        assert resp.status == 200
        return await resp.text()


async def restore_noted(status: PersisterStatus, url: str) -> None:
    store = Store.from_url(url)
    try:
        await _noting(status, store.restore(State()))
    finally:
        await store.close()


async def test_a_store_postgres_refuses_at_start_is_failing_not_healthy(database_url: str) -> None:
    """A role that does not exist: restoring fails, and the store is shown failing (it was shown
    healthy, with nothing written yet); once Postgres takes lagd, healthy again."""
    status = PersisterStatus()
    refused = make_url(database_url).set(username="no_such_role_lagd").render_as_string(hide_password=False)
    with pytest.raises(Exception, match="no_such_role_lagd"):
        await restore_noted(status, refused)
    assert not status.healthy and "no_such_role_lagd" in (status.last_error or "")
    text = await page(persister=status)
    assert "store failing: Postgres does not answer lagd or refuses it" in text and "store healthy" not in text
    await restore_noted(status, database_url)
    assert status.healthy and status.last_error is None
    assert "store healthy" in await page(persister=status)


async def test_notifications_turned_off_are_not_shown_as_an_mqtt_error() -> None:
    """With [notify] enabled = false the daemon reports no MQTT link (lagd.daemon): the page says
    notifications are off, not that MQTT is down; with them on, a lost link is an error."""
    settings = build_settings()
    off = await page(dataclasses.replace(settings, notify=dataclasses.replace(settings.notify, enabled=False)))
    assert "notifications off ([notify] enabled = false)" in off and "MQTT" not in off
    on = await page(settings, publisher=PublisherStatus(connected=False))
    assert "MQTT not connected" in on and "notifications off" not in on
    # MQTT alone off: incidents go on to the sinks, and the page says so rather than "not connected"
    no_mqtt = await page(dataclasses.replace(settings, notify=dataclasses.replace(settings.notify, mqtt_enabled=False)))
    assert "MQTT off (notify.mqtt-enabled = false); incidents go to the sinks" in no_mqtt
    assert "not connected" not in no_mqtt and "notifications off" not in no_mqtt
