"""A real Prometheus (Debian `prometheus`) scrapes lagd's /metrics, sent in chunks, and
stores every series of it: the exposition is what Prometheus' own parser takes."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lagd.embedded.services import free_low_port
from lagd.evaluate.snapshot import Snapshots
from lagd.http import metrics
from lagd.ingest.progress import ReaderProgress
from lagd.notify.watch import VerdictWatch
from tests.http_state import CLUSTER, GROUPS, NOW, build_context, serve
from tests.test_http_metrics import parse

Settle = Callable[..., Awaitable[Any]]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Starts a Prometheus scraping the given host:port every second; yields its base URL."""
    exe = shutil.which("prometheus")
    assert exe is not None, "Prometheus is not installed: run scripts/system-deps.sh (apt-get install prometheus)"
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        port = free_low_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
            f"scrape_configs: [{{job_name: lagd, static_configs: [{{targets: ['{target}']}}]}}]\n"
        )
        log = (tmp_path / "prometheus.log").open("wb")
        procs.append(
            subprocess.Popen(
                [
                    exe,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


async def test_prometheus_stores_every_series_of_a_scrape(
    prometheus: Callable[[str], str], settle: Settle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "CHUNK_CHARS", 500)  # many chunks
    monkeypatch.setattr(metrics, "BLOCK_LINES", 7)  # and lines joined into many blocks as they render
    ctx = build_context()
    ctx.snapshots = Snapshots()
    progress = ReaderProgress()
    progress.mark_caught_up()
    progress.mark_fresh(NOW)
    watch = VerdictWatch(ctx.state, ctx.evaluator, ctx.settings.clusters, {CLUSTER: progress}, None, lambda: NOW)
    watch.snapshots = ctx.snapshots
    watch.scan(NOW)
    async with serve(ctx) as base, aiohttp.ClientSession() as session:
        async with session.get(f"{base}/metrics") as resp:
            assert resp.headers.get("Transfer-Encoding") == "chunked"
            ours, _ = parse(await resp.text())
        api = prometheus(base.removeprefix("http://"))

        async def stored() -> dict[str, Any] | None:
            """Prometheus' view of the last scrape, once it has taken one without error."""
            try:
                async with session.get(f"{api}/api/v1/targets") as r:
                    targets = (await r.json())["data"]["activeTargets"]
                if not targets or targets[0]["health"] != "up":
                    return None
                q = {"query": 'count({job="lagd",__name__!~"up|scrape_.*"})'}
                async with session.get(f"{api}/api/v1/query", params=q) as r:
                    result = (await r.json())["data"]["result"]
                return {"count": int(result[0]["value"][1])} if result else None
            except (aiohttp.ClientError, KeyError, IndexError):
                return None

        got = await settle(stored, timeout=60, interval=0.25, what="Prometheus scraped lagd")
        assert got["count"] == len(ours)
        q = {"query": 'burrow_kafka_consumer_status{job="lagd"}'}
        async with session.get(f"{api}/api/v1/query", params=q) as r:
            result = (await r.json())["data"]["result"]
        statuses = {s["metric"]["consumer_group"]: float(s["value"][1]) for s in result}
        assert statuses == {
            dict(labels)["consumer_group"]: value
            for (name, labels), value in ours.items()
            if name == "burrow_kafka_consumer_status"
        }
        assert set(statuses) == set(GROUPS)
