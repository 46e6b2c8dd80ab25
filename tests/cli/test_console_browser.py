"""`jet console` in a real headless browser (Chromium via Selenium) against a 3-server
`jet dev` with traffic: each page loads, and the numbers it shows are the SDK's. A screenshot
of each page is saved in the test's tmp dir (and in $JET_DOCS_DIR when set: the README's
pictures come from here)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import orjson

from jetsdk import Client
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.consumer.group_admin import group_offsets
from support.browser import SharedChromium, wait_js
from support.jet_console import JetConsole
from support.jet_dev import JetDev

from .conftest import Traffic


async def _metadata_leader(client: Client) -> str:
    """The metadata Raft leader the cluster names, once it names one (bounded)."""
    with anyio.fail_after(20):
        while True:
            raw = decode_json(
                await client.request_any(Api.METADATA, encode_json({"streams": None}))
            )
            if raw["metadata_leader"] is not None:
                return str(raw["metadata_leader"])
            await anyio.sleep(0.1)


async def _figures(servers: list[str]) -> dict[str, Any]:
    async with Client(servers) as client:
        leader = await _metadata_leader(client)
        info = await client.stream_info("conA", refresh=True)
        committed = await group_offsets(client, "conGrp")
        return {
            "leader": leader,
            "leaders": {p.partition: p.leader for p in info.partitions},
            "hw": {p: (await client.list_offsets("conA", p)).hw for p in range(2)},
            "committed": {k.partition: v.offset for k, v in committed.items()},
        }


def text(css: str) -> str:
    """A script returning the text of the first element matching ``css`` (or null)."""
    query = orjson.dumps(css).decode()
    return f"const e = document.querySelector({query}); return e ? e.textContent : null;"


def shoot(driver: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    assert driver.save_screenshot(str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"
    docs = os.environ.get("JET_DOCS_DIR")
    if docs:
        shutil.copy(path, Path(docs) / name)


def goto(driver: Any, console: JetConsole, route: str, page: str) -> None:
    driver.get(console.url + "#/" + route)
    wait_js(driver, "return document.body.dataset.loaded || null", lambda v: v == page, page)


def test_every_page_in_chromium(
    dev3: JetDev, console: JetConsole, traffic: Traffic, tmp_path: Path, chromium: SharedChromium
) -> None:
    sdk = anyio.run(_figures, dev3.servers)
    with chromium.page() as driver:
        # Cluster: servers up, metadata leader.
        goto(driver, console, "cluster", "cluster")
        wait_js(driver, text("#servers-up"), lambda v: v == "3/3", "3/3 servers up")
        # The page polls on its own clock: it names the same leader once it has refreshed.
        wait_js(driver, text("#metadata-leader"), lambda v: v == sdk["leader"], sdk["leader"])
        ups = driver.execute_script(
            "return [...document.querySelectorAll('[data-server] [data-up]')]"
            ".map(e => e.dataset.up)"
        )
        assert ups == ["true", "true", "true"]
        shoot(driver, tmp_path, "console-cluster.png")

        # Streams: each partition's leader and HW.
        goto(driver, console, "streams", "streams")
        for p in (0, 1):
            row = f'tr[data-partition="conA/{p}"]'
            wait_js(driver, text(f"{row} td.hw"), lambda v, p=p: v == f"{sdk['hw'][p]:,}", "HW")
            assert driver.execute_script(text(f"{row} td.leader")) == sdk["leaders"][p]
            assert driver.execute_script(text(f"{row} td.isr")).count(",") == 2
        retention = driver.execute_script(text('tr[data-stream="conA"] td.retention'))
        assert "max_messages=100000" in retention
        shoot(driver, tmp_path, "console-streams.png")

        # A partition's records from an offset, as JSON, then as hex.
        goto(driver, console, "partition/conA/0?offset=2&limit=3&format=json", "partition")
        offsets = wait_js(
            driver,
            "return [...document.querySelectorAll('tr[data-offset]')].map(e => e.dataset.offset)",
            lambda v: v == ["2", "3", "4"],
            "offsets 2, 3, 4",
        )
        assert offsets == ["2", "3", "4"]
        sent = traffic.partition0[2]
        assert driver.execute_script(text('tr[data-offset="2"] td.key')) == sent["key"]
        value = driver.execute_script(text('tr[data-offset="2"] td.value'))
        assert orjson.loads(value) == orjson.loads(sent["value"])
        assert "\n" in value  # pretty-printed JSON
        assert driver.execute_script(text('tr[data-offset="2"] td.headers')) == f"h: {sent['h']}"
        shoot(driver, tmp_path, "console-records.png")
        goto(driver, console, "partition/conA/0?offset=2&limit=1&format=hex", "partition")
        hex_key = " ".join(f"{b:02x}" for b in sent["key"].encode())
        wait_js(driver, text('tr[data-offset="2"] td.key'), lambda v: v == hex_key, "a hex key")

        # Consumer groups: committed offsets and lag.
        goto(driver, console, "groups", "groups")
        for p, committed in sdk["committed"].items():
            row = f'tr[data-group-partition="conGrp/conA/{p}"]'
            wait_js(
                driver,
                text(f"{row} td.committed"),
                lambda v, c=committed: v == f"{c:,}",
                "committed",
            )
            lag = sdk["hw"][p] - committed
            assert driver.execute_script(text(f"{row} td.lag")) == f"{lag:,}"
        shoot(driver, tmp_path, "console-groups.png")

        # Live plots: a line per stream, with points.
        goto(driver, console, "plots", "plots")
        points = wait_js(
            driver,
            "const l = document.querySelector('#plot-in polyline[data-series=\"conA\"]');"
            "return l ? l.getAttribute('points').split(' ').length : 0;",
            lambda v: v >= 2,
            "conA's line in the in-rate plot",
        )
        assert points >= 2
        assert driver.execute_script(
            "return !!document.querySelector('#plot-lag polyline[data-series=\"conGrp\"]')"
        )
        shoot(driver, tmp_path, "console-plots.png")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
