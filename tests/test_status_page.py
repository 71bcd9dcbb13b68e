"""The status pages, rendered by a real browser (headless Chromium).

A running `lagd run` (real Tansu, Postgres, Mosquitto) watches groups the simulator drives;
Chromium loads `/` (screenshot test-artifacts/status-page.png): the rendered DOM must show each
group in a row of its own with the status lagd's Burrow API gives it, and lagd's own health
(reader caught up, sampler fresh, store healthy). Then the lagging group's page (screenshot
test-artifacts/status-group-page.png): its partitions with status, rule, lag and owner, and
the two charts drawn from the stored history, checked in the DOM and in the screenshot's pixels.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from lagd.embedded import services as embedded

ROOT = Path(__file__).resolve().parent.parent
APT = "apt-get install -y chromium chromium-driver   (or: make system-deps)"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """The browser; its absence is a failure naming the package, never a skip."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail(f"headless Chromium is not installed: {APT}")
    return exe


def browse(url: str, *extra: str, timeout: float = 60.0) -> str:
    """Run headless Chromium once against `url` with a throwaway profile; return its stdout."""
    profile = tempfile.mkdtemp(prefix="lagd-chromium-")
    proc = subprocess.Popen(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "HOME": profile},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"chromium did not finish within {timeout}s for {url}") from None
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}"
    return out.decode(errors="replace")


class _Blocks(HTMLParser):
    """Every element's text (including its children's), innermost first when they close."""

    VOID = {"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "source", "wbr", "embed"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, list[str]]] = []
        self.blocks: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag not in self.VOID:
            self.stack.append((tag, []))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            name, parts = self.stack.pop()
            text = " ".join(" ".join(parts).split())
            self.blocks.append((name, text))
            if self.stack:
                self.stack[-1][1].append(text)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1][0] not in ("script", "style"):
            self.stack[-1][1].append(data)


def group_rows(dom: str, groups: list[str]) -> dict[str, list[str]]:
    """For each group, the texts of elements that name it and no other group (its own rows)."""
    parser = _Blocks()
    parser.feed(dom)
    parser.close()
    rows: dict[str, list[str]] = {g: [] for g in groups}
    for _, text in parser.blocks:
        named = [g for g in groups if g in text.split() or f" {g} " in f" {text} "]
        if len(named) == 1:
            rows[named[0]].append(text)
    return rows


def overview_groups(dom: str) -> list[str]:
    """The groups the overview lists, in its order (their rows, not the incidents' mentions)."""
    return [unquote(g) for g in re.findall(r'<tr class="group is-[a-z]+"><td><a href="/group/[^/"]+/([^"]+)"', dom)]


def png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Width, height and RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, chunk = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = chunk
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unsupported PNG: depth {depth} colour {colour}"
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 0xFF
        pixels.extend((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, bpp))
        prev = line
    return width, height, pixels


def near(pixel: tuple[int, int, int], colour: tuple[int, int, int], slack: int = 40) -> bool:
    return all(abs(a - b) <= slack for a, b in zip(pixel, colour, strict=True))


def path_points(dom: str, ident: str) -> int:
    """How many points the line of chart `ident` has in the rendered DOM (0: no line)."""
    svg = re.search(rf'<svg[^>]*id="{ident}".*?</svg>', dom, re.S)
    assert svg, f"no chart {ident} on the page"
    line = re.search(r'<path class="line"[^>]*d="([^"]*)"', svg.group(0))
    return 0 if line is None else len(re.findall(r"-?[0-9.]+,-?[0-9.]+", line.group(1)))


def _parsed(dom: str) -> list[tuple[str, str]]:
    parser = _Blocks()
    parser.feed(dom)
    parser.close()
    return parser.blocks


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except (OSError, ValueError):
        return 0, None


def start_lagd(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`lagd run` with the example settings and `env`'s overrides, logging to `log`."""
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "lagd", "run", "--config", str(ROOT / "config" / "lagd.example.toml")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def stop_lagd(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _is(answer: Any, want: dict[str, str]) -> bool:
    return bool(await answer == want)


def test_png_decoder_reads_what_chromium_writes(tmp_path: Path) -> None:
    # a 3x2 RGB image encoded here by hand: row 1 unfiltered, row 2 filter Up
    rows = [bytes([0, 255, 0, 0, 0, 255, 0, 0, 0, 255]), bytes([2, 1, 2, 3, 0, 0, 0, 4, 5, 6])]
    raw = b"".join(rows)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    width, height, pixels = png_pixels(png)
    assert (width, height) == (3, 2)
    # row 2 is filter Up: each byte adds the one above
    assert pixels == [(255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 2, 3), (0, 255, 0), (4, 5, 5)]


def test_dom_parser_finds_each_groups_own_row() -> None:
    dom = (
        "<html><body><h1>lagd</h1><table><tr><td>alpha-1</td><td><span>OK</span></td></tr>"
        "<tr><td>beta-1</td><td>ERR</td><td>STOP</td></tr></table><script>alpha-1 WARN</script></body></html>"
    )
    rows = group_rows(dom, ["alpha-1", "beta-1"])
    assert any("OK" in r for r in rows["alpha-1"])
    assert not any("ERR" in r or "WARN" in r for r in rows["alpha-1"])
    assert any("ERR" in r and "STOP" in r for r in rows["beta-1"])


@pytest.mark.slow
async def test_status_page_in_headless_chromium(
    tmp_path: Path,
    kafka: str,
    database_url: str,
    mqtt_broker: tuple[str, int],
    unique: str,
    artifacts: Path,
    settle: Any,
) -> None:
    exe = chromium()
    from lagd.sim.driver import Driver
    from lagd.sim.scenario import GroupSpec, Scenario, TopicSpec

    topic = f"page-{unique}"
    healthy, lagging = f"ok-{unique}", f"slow-{unique}"
    scenario = Scenario(
        topics=(TopicSpec(topic, 2, rate=4.0),),
        groups=(GroupSpec(healthy, (topic,), "healthy"), GroupSpec(lagging, (topic,), "lagging", speed=0.5)),
        start_ms=int(time.time() * 1000),
    )
    driver = Driver(kafka, scenario, mode="topic")
    await driver.start()
    port = embedded.free_port()
    env = {
        **os.environ,
        "LAGD_CLUSTERS_LOCAL_BOOTSTRAP_SERVERS": kafka,
        "LAGD_CLUSTERS_LOCAL_OFFSET_REFRESH": "1",
        "LAGD_CLUSTERS_LOCAL_TOPIC_REFRESH": "1",
        "LAGD_STORAGE_DATABASE_URL": database_url,
        "LAGD_HTTP_LISTEN": f"127.0.0.1:{port}",
        "LAGD_NOTIFY_MQTT_URL": f"mqtt://{mqtt_broker[0]}:{mqtt_broker[1]}",
        "LAGD_EVALUATOR_CACHE_TTL": "0.5",
        # lagd's rules with their time knobs scaled to this seconds-long scenario
        "LAGD_EVALUATOR_WINDOW_STEP": "0",
        "LAGD_EVALUATOR_MIN_HISTORY": "5",
        "LAGD_EVALUATOR_STOP_AFTER": "10",
        "LAGD_EVALUATOR_ALLOWED_LAG_SECONDS": "2",
        "LAGD_LOG_FORMAT": "json",
    }
    env.pop("NOTIFY_SOCKET", None)
    log = tmp_path / "lagd.log"
    lagd = start_lagd(env, log)
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    done = asyncio.Event()

    async def ticks() -> None:
        """One commit round a second on the wall clock, for as long as the test looks."""
        t = 0.0
        while not done.is_set():
            await driver.advance(t)
            t += 1.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), max(0.0, started + t - time.monotonic()))

    async def statuses() -> dict[str, str] | None:
        assert not ticker.done() or ticker.exception() is None, f"simulator failed: {ticker.exception()!r}"
        assert lagd.poll() is None, f"lagd exited {lagd.returncode}:\n{log.read_text()[-3000:]}"
        # what /lagd/v1/groups says: the verdict watch's snapshots, which the page reads too
        code, body = await asyncio.to_thread(_get, f"{base}/lagd/v1/groups?cluster=local")
        if code != 200:
            return None
        found = {g["group"]: g["status"] for g in body["groups"] if g["group"] in (healthy, lagging)}
        return found if len(found) == 2 else None

    ticker = asyncio.create_task(ticks())
    try:
        # wait for the window rules to tell the two apart: OK and WARN
        await settle(
            lambda: _is(statuses(), {healthy: "OK", lagging: "WARN"}),
            timeout=60,
            interval=0.2,
            what="both groups judged (OK and WARN)",
        )
        shot = artifacts / "status-page.png"
        shot.unlink(missing_ok=True)
        await asyncio.to_thread(browse, f"{base}/", f"--screenshot={shot}", "--window-size=1280,900")
        assert shot.exists() and shot.stat().st_size > 1000, "chromium wrote no screenshot"
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        before = await statuses()
        dom = await asyncio.to_thread(browse, f"{base}/", "--dump-dom")
        after = await statuses()
        assert exe and "<html" in dom.lower()
        assert before is not None and after is not None
        rows = group_rows(dom, [healthy, lagging])
        for group in (healthy, lagging):
            assert rows[group], f"the page does not show group {group}:\n{dom[:3000]}"
            # the page was rendered between the two reads of the list: it shows one of their answers
            shown = {before[group], after[group]}
            own = [r for r in rows[group] if r.split()[0] == group and len(r.split()) > 1]  # its row, not an incident's
            assert any(shown & set(r.split()) for r in own), (
                f"group {group} is {shown} in the API but its row on the page says {rows[group][:3]}"
            )
        (artifacts / "status-page.html").write_text(dom)

        # lagd's own health, as /lagd/v1/clusters and /metrics tell it
        health = " ".join(t for tag, t in _parsed(dom) if tag == "tr" and t.startswith("local "))
        assert "sees the cluster" in health and "reader caught up" in health and "sampler fresh" in health, health
        assert "store healthy" in dom and "MQTT connected" in dom
        assert f'href="/group/local/{lagging}"' in dom

        # triage: the group not OK is listed first (its name sorts after the healthy one's), says
        # why, and a status filter and a search narrow the list (a plain GET form, no scripts)
        listed = overview_groups(dom)
        if before[lagging] == after[lagging] == "WARN" and before[healthy] == after[healthy] == "OK":
            assert listed.index(lagging) < listed.index(healthy), listed
            why = [r for r in rows[lagging] if r.split()[0] == lagging and "WARN" in r.split()]
            assert any(re.search(r"\b\d+ partitions? WARN\b", r) for r in why), rows[lagging]
        assert re.search(r'<select name="status">', dom) and re.search(r'<input[^>]*name="q"', dom), dom[:3000]
        bad_only = await asyncio.to_thread(browse, f"{base}/?status=bad", "--dump-dom")
        found = await statuses()
        assert found is not None
        if found == {healthy: "OK", lagging: "WARN"}:
            assert healthy not in overview_groups(bad_only) and lagging in overview_groups(bad_only)
        searched = overview_groups(await asyncio.to_thread(browse, f"{base}/?q=OK-{unique.upper()}", "--dump-dom"))
        assert healthy in searched and lagging not in searched, searched
        (artifacts / "status-page-filtered.html").write_text(bad_only)

        # the lagging group's page: charts from the stored history, once it holds a few buckets
        async def history_points() -> bool:
            url = f"{base}/lagd/v1/consumer/local/{lagging}/history?from={scenario.start_ms}&step=1"
            code, body = await asyncio.to_thread(_get, url)
            points = body.get("points", []) if code == 200 else []
            return sum(1 for p in points if p["lag"] is not None and p["lag_seconds_max"] is not None) >= 5

        await settle(history_points, timeout=30, interval=0.2, what="five buckets of stored history")
        page = f"{base}/group/local/{lagging}"
        shot = artifacts / "status-group-page.png"
        shot.unlink(missing_ok=True)
        await asyncio.to_thread(browse, page, f"--screenshot={shot}", "--window-size=1280,1000")
        assert shot.exists(), "chromium wrote no screenshot of the group page"
        dom = await asyncio.to_thread(browse, page, "--dump-dom")
        (artifacts / "status-group-page.html").write_text(dom)
        assert path_points(dom, "chart-lag") >= 5 and path_points(dom, "chart-lag-seconds") >= 5, dom[:3000]
        partitions = [t for tag, t in _parsed(dom) if tag == "tr" and t.startswith(f"{topic} ")]
        assert len(partitions) == 2, partitions
        for row in partitions:
            words = row.split()
            assert words[1] in ("0", "1") and set(words) & {"OK", "WARN"}, row
            assert any(
                w in row for w in ("falling-behind", "still-behind", "keeping-up", "catching-up", "caught-up", "within")
            ), row
            assert "UTC" in row and "ago" in row, f"no last commit in human time: {row}"
        assert any("WARN" in row.split() for row in partitions), partitions

        # the screenshot shows the page, not a blank: text, and both chart lines in their colours
        width, height, pixels = png_pixels(shot.read_bytes())
        assert (width, height) == (1280, 1000)
        ink = sum(1 for px in pixels if not near(px, (255, 255, 255), 8))
        blue = sum(1 for px in pixels if near(px, (0x15, 0x65, 0xC0)))
        purple = sum(1 for px in pixels if near(px, (0x6A, 0x1B, 0x9A)))
        assert ink > 20_000, f"the group page's screenshot is nearly blank ({ink} non-white pixels)"
        assert blue > 100 and purple > 100, f"chart lines not drawn: {blue} blue, {purple} purple pixels"
    finally:
        done.set()
        with contextlib.suppress(Exception):
            await ticker
        await asyncio.to_thread(stop_lagd, lagd)
        await driver.close()
