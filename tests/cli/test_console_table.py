"""The console's table page (issue 38, item 8): a compacted stream's latest value per key,
paged in key order, filtered by prefix, showing every write acknowledged before the page
was asked for; over HTTP and in a real Chromium."""

from __future__ import annotations

import anyio

from jetsdk import Client, Table
from support.browser import SharedChromium, wait_js
from support.jet_console import JetConsole
from support.jet_dev import JetDev

from .test_console_browser import goto, text

STREAM = "conPrices"
KEYS = {f"fruit.{name}": f"{i}" for i, name in enumerate(("apple", "banana", "cherry", "date"))}
ROW_KEYS = "return [...document.querySelectorAll('tr[data-key]')].map((r) => atob(r.dataset.key))"


async def _fill(servers: list[str]) -> None:
    async with Client(servers) as client:
        await client.create_stream(STREAM, compact=True, partitions=2, replication_factor=1)
        await client.create_stream("conPlain", partitions=1, replication_factor=1)
        async with Table(client, STREAM) as table:
            for key, value in KEYS.items():
                await table.put(key.encode(), value.encode())
            await table.put(b"veg.kale", b"old")
            await table.put(b"veg.kale", b"new")  # the page shows the latest only
            await table.put(b"veg.leek", b"x")
            await table.delete(b"veg.leek")  # and no deleted key


async def _put(servers: list[str], key: bytes, value: bytes) -> int:
    async with Client(servers) as client, Table(client, STREAM) as table:
        return await table.put(key, value)


def test_table_page(dev3: JetDev, console: JetConsole, chromium: SharedChromium) -> None:
    anyio.run(_fill, dev3.servers)
    first = console.get(f"/api/tables/{STREAM}?limit=3")
    assert (first["keys"], first["matching"]) == (5, 5)
    shown = [e["key_text"] for e in first["entries"]]
    assert shown == ["fruit.apple", "fruit.banana", "fruit.cherry"]
    assert first["next"] is not None
    rest = console.get(f"/api/tables/{STREAM}?limit=3&after={first['next']}")
    assert [(e["key_text"], e["value_text"]) for e in rest["entries"]] == [
        ("fruit.date", "3"),
        ("veg.kale", "new"),
    ]
    assert rest["next"] is None
    veg = console.get(f"/api/tables/{STREAM}?prefix=veg.")
    assert [e["key_text"] for e in veg["entries"]] == ["veg.kale"]
    assert veg["matching"] == 1
    # A write acknowledged before the request is on the page (the view syncs first).
    revision = anyio.run(_put, dev3.servers, b"fruit.apple", b"pie")
    again = console.get(f"/api/tables/{STREAM}?prefix=fruit.apple")
    assert [(e["value_text"], e["revision"]) for e in again["entries"]] == [("pie", revision)]
    # Clear refusals; the console keeps serving.
    for path, status, words in (
        ("/api/tables/conPlain", 400, "not compacted"),
        ("/api/tables/noSuchTable", 404, "noSuchTable"),
        (f"/api/tables/{STREAM}?limit=0", 400, "limit"),
        (f"/api/tables/{STREAM}?after=%25%25", 400, "cursor"),
    ):
        code, body, _ = console.request("GET", path)
        assert code == status, (path, code, body)
        assert words in body["error"], (path, body)
    with chromium.page() as driver:
        goto(driver, console, "streams", "streams")
        wait_js(driver, text(f"a[data-table='{STREAM}']"), lambda v: v == "table", "table link")
        goto(driver, console, f"table/{STREAM}?limit=2", "table")
        wait_js(driver, ROW_KEYS, lambda v: v == ["fruit.apple", "fruit.banana"], "first page")
        assert "5 keys" in driver.execute_script(text("#table-summary"))
        driver.execute_script("document.getElementById('table-next').click()")
        wait_js(driver, ROW_KEYS, lambda v: v == ["fruit.cherry", "fruit.date"], "second page")
        goto(driver, console, f"table/{STREAM}?prefix=veg", "table")
        wait_js(driver, ROW_KEYS, lambda v: v == ["veg.kale"], "prefix")
        assert driver.execute_script(text("td.value")) == "new"
