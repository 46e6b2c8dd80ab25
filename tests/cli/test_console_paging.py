"""The console's streams page in a real Chromium: a stream filter (text or glob), an
"only offline or under-replicated" switch, and partitions paged 20 at a time (issue 35: it
listed every partition of every stream)."""

from __future__ import annotations

from pathlib import Path

import anyio

from jetsdk import Client
from support.browser import SharedChromium, wait_js
from support.jet_console import JetConsole
from support.jet_dev import JetDev

from .test_console_browser import goto, text

PARTITIONS = 45


async def _create(servers: list[str]) -> None:
    async with Client(servers) as client:
        await client.create_stream("zpage", partitions=PARTITIONS, replication_factor=1)


ROWS = (
    "return [...document.querySelectorAll('tr[data-partition^=\"zpage/\"]')]"
    ".map((r) => r.dataset.partition)"
)
STREAMS = "return [...document.querySelectorAll('tr[data-stream]')].map((r) => r.dataset.stream)"


def test_filter_and_paging(
    dev3: JetDev, console: JetConsole, tmp_path: Path, chromium: SharedChromium
) -> None:
    anyio.run(_create, dev3.servers)
    with chromium.page() as driver:
        goto(driver, console, "streams", "streams")
        rows = wait_js(driver, ROWS, lambda v: len(v) == 20, "the first page of zpage")
        assert rows == [f"zpage/{p}" for p in range(20)]
        assert driver.execute_script(text('[data-pager="zpage"] .rows')) == (
            f"partitions 1-20 of {PARTITIONS}"
        )
        driver.execute_script("document.querySelector('[data-pager=\"zpage\"] .next').click()")
        rows = wait_js(driver, ROWS, lambda v: v and v[0] == "zpage/20", "the second page")
        assert rows == [f"zpage/{p}" for p in range(20, 40)]
        driver.execute_script("document.querySelector('[data-pager=\"zpage\"] .next').click()")
        rows = wait_js(driver, ROWS, lambda v: v and v[0] == "zpage/40", "the last page")
        assert rows == [f"zpage/{p}" for p in range(40, PARTITIONS)]
        assert driver.execute_script(
            "return document.querySelector('[data-pager=\"zpage\"] .next').disabled"
        )
        # Filter by typing: only matching streams, and the page survives the refreshes.
        driver.find_element("id", "stream-filter").send_keys("zpa")
        streams = wait_js(driver, STREAMS, lambda v: v == ["zpage"], "only zpage")
        # Each key re-draws the page: the box keeps the focus and every key typed.
        assert driver.execute_script("return document.activeElement.id") == "stream-filter"
        assert (
            driver.execute_script("return document.getElementById('stream-filter').value") == "zpa"
        )
        for typed, want in (("z*e", ["zpage"]), ("nomatch", []), ("zpage", ["zpage"])):
            driver.execute_script(
                "const e = document.getElementById('stream-filter');"
                f"e.value = {typed!r}; e.dispatchEvent(new Event('input'));"
            )
            wait_js(driver, STREAMS, lambda v, want=want: v == want, f"the filter {typed}")
        # Only unhealthy partitions: every zpage partition is healthy, so none is listed.
        driver.find_element("id", "unhealthy-only").click()
        wait_js(driver, ROWS, lambda v: v == [], "no healthy partition listed")
        assert streams == ["zpage"]
        assert driver.save_screenshot(str(tmp_path / "console-filter.png"))
