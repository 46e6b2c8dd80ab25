"""The console's errors in a real Chromium (issue 35): on every route an error replaces the
page in place, in red, whether the page was reached from another one or loaded fresh; the
header's status turns red too; bad partitions, offsets, limits and times are errors, never a
stale page or "Loading..." forever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from jetsdk import Client
from support.browser import SharedChromium, wait_js
from support.jet_console import JetConsole
from support.jet_dev import JetDev

from .test_console_browser import goto, text
from .test_offline_views import keep

RED = "rgb(185, 28, 28)"
"""--bad in app.css."""
HEADER_RED = "rgb(252, 165, 165)"


async def _create(servers: list[str]) -> None:
    async with Client(servers) as client:
        await client.create_stream("conErr", partitions=1, replication_factor=1)


def error_shown(driver: Any, route: str, fragment: str) -> str:
    """Go to ``route`` and wait for the in-place error naming ``fragment``; check it is red,
    alone on the page, and in the header in red."""
    driver.execute_script(f"location.hash = {route!r}")
    message = wait_js(
        driver, text("#page-error"), lambda v: v is not None and fragment in v, fragment
    )
    styles = driver.execute_script(
        "return [getComputedStyle(document.querySelector('#page-error')).color,"
        " getComputedStyle(document.querySelector('#status')).color,"
        " document.querySelectorAll('main table').length,"
        " document.querySelector('#status').textContent]"
    )
    assert styles[0] == RED, (route, styles)
    assert styles[1] == HEADER_RED, (route, styles)
    assert styles[2] == 0, f"{route}: the previous page is still shown"
    assert fragment in styles[3]
    return str(message)


def test_errors_show_in_place_and_in_red(
    dev3: JetDev, console: JetConsole, tmp_path: Path, chromium: SharedChromium
) -> None:
    anyio.run(_create, dev3.servers)
    with chromium.page() as driver:
        # A fresh load of a bad route: the error, not "Loading..." forever.
        driver.get(console.url + "#/partition/nosuch/0")
        wait_js(driver, text("#page-error"), lambda v: v is not None and "nosuch" in v, "error")
        assert "Loading" not in driver.execute_script(
            "return document.querySelector('main').textContent"
        )
        # From a page with tables: the error replaces it.
        goto(driver, console, "streams", "streams")
        wait_js(driver, "return document.querySelectorAll('main table').length", bool, "tables")
        error_shown(driver, "#/partition/nosuch/0", "nosuch")
        path = tmp_path / "console-error.png"
        assert driver.save_screenshot(str(path))
        keep(path)
        for route, fragment in (
            ("#/partition/conErr/-1", "partition must be a non-negative integer"),
            ("#/partition/conErr/abc", "partition must be a non-negative integer"),
            ("#/partition/conErr/NaN", "partition must be a non-negative integer"),
            ("#/partition/conErr/7", "has no partition 7"),
            ("#/partition/conErr/0?offset=-5", "offset must be a non-negative integer"),
            ("#/partition/conErr/0?offset=abc", "offset must be a non-negative integer"),
            ("#/partition/conErr/0?limit=0", "limit must be at least 1"),
            ("#/partition/conErr/0?time=yesterday", "time must be ISO-8601"),
        ):
            goto(driver, console, "cluster", "cluster")
            wait_js(driver, text("#metadata-leader"), bool, "the cluster page")
            error_shown(driver, route, fragment)
        # A good route afterwards: the page, and the error gone.
        goto(driver, console, "partition/conErr/0", "partition")
        wait_js(driver, text("#range"), bool, "the records page")
        assert driver.execute_script("return document.querySelector('#page-error')") is None
