"""The console's records page in a real Chromium (issue 35): search by key and by header
(from the log start, with a bounded scan that says how far it read), and a live tail that
shows a record produced after it started."""

from __future__ import annotations

import anyio

from jetsdk import AckPolicy, Client, Producer
from support.browser import SharedChromium, wait_js
from support.jet_console import JetConsole
from support.jet_dev import JetDev

from .test_console_browser import goto, text

OFFSETS = (
    "return [...document.querySelectorAll('tr[data-offset]')].map((r) => Number(r.dataset.offset))"
)


async def _produce(servers: list[str], first: int, count: int) -> None:
    async with Client(servers) as client:
        if first == 0:
            await client.create_stream("conFind", partitions=1, replication_factor=1)
        async with Producer(client, "conFind", ack=AckPolicy.ALL) as producer:
            for i in range(first, first + count):
                headers = [("color", b"red" if i % 3 == 0 else b"blue")]
                await producer.send_soon(b"v%d" % i, b"k%d" % (i % 5), headers, partition=0)
            await producer.flush()


def test_search_and_tail(dev3: JetDev, console: JetConsole, chromium: SharedChromium) -> None:
    anyio.run(_produce, dev3.servers, 0, 30)
    # Over HTTP: matches only, from the log start, and how far the scan read.
    body = console.get("/api/records?stream=conFind&key=k2&limit=50")
    assert [r["offset"] for r in body["records"]] == [2, 7, 12, 17, 22, 27]
    assert (body["start"], body["next"], body["scanned"], body["search"]) == (0, 30, 30, True)
    body = console.get("/api/records?stream=conFind&header=color%3Dred&key=k0&limit=50")
    assert [r["offset"] for r in body["records"]] == [0, 15]
    body = console.get("/api/records?stream=conFind&header=color&offset=25&limit=2")
    assert [r["offset"] for r in body["records"]] == [25, 26]
    with chromium.page() as driver:
        goto(driver, console, "partition/conFind/0?key=k4&header=color%3Dblue", "partition")
        found = wait_js(driver, OFFSETS, lambda v: v is not None and len(v) > 0, "matches")
        assert found == [4, 14, 19, 29]  # k4 and blue (9 and 24 are red)
        assert "4 match(es)" in driver.execute_script(text("#range"))
        # Live tail: the last records, refreshed each second; a new record shows up.
        goto(driver, console, "partition/conFind/0?tail=1&limit=5", "partition")
        wait_js(driver, OFFSETS, lambda v: v == [25, 26, 27, 28, 29], "the last five")
        anyio.run(_produce, dev3.servers, 30, 1)
        wait_js(driver, OFFSETS, lambda v: v == [26, 27, 28, 29, 30], "the new record")
