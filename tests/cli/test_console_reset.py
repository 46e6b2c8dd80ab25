"""Writing from the console in Chromium (issue 35): resetting a group's offsets shows a
dry-run preview first (the offsets now and after), nothing written until Confirm, Cancel
writes nothing; the records page produces a message."""

from __future__ import annotations

import anyio

from jetsdk import Client, StreamPartition
from jetsdk.consumer.group_admin import commit_offsets, group_offsets
from support.browser import SharedChromium, wait_js
from support.jet_console import JetConsole
from support.jet_dev import JetDev

from .test_console_browser import goto, text

FORM = 'form[data-reset="conReset"]'


async def _offsets(servers: list[str]) -> dict[int, int]:
    async with Client(servers) as client:
        got = await group_offsets(client, "conReset")
        return {k.partition: v.offset for k, v in got.items()}


async def _commit(servers: list[str]) -> None:
    async with Client(servers) as client:
        await client.create_stream("conRst", partitions=2, replication_factor=1)
        await commit_offsets(
            client, "conReset", {StreamPartition("conRst", 0): 0, StreamPartition("conRst", 1): 0}
        )


PREVIEW = (
    f"return [...document.querySelectorAll('{FORM} tr[data-preview]')]"
    ".map((r) => [r.dataset.preview, r.querySelector('.now').textContent,"
    " r.querySelector('.after').textContent])"
)


def test_reset_previews_then_confirms(dev3: JetDev, chromium: SharedChromium) -> None:
    anyio.run(_commit, dev3.servers)
    with JetConsole.start(dev3, "--allow-writes") as rw, chromium.page() as driver:
        goto(driver, rw, "groups", "groups")
        wait_js(driver, f"return !!document.querySelector('{FORM}')", bool, "the reset form")

        def preview(to: str) -> list[list[str]]:
            driver.execute_script(
                f"const f = document.querySelector('{FORM}');"
                f"f.querySelector('input').value = {to!r};"
                "f.querySelector('button[type=submit]').click();"
            )
            return list(wait_js(driver, PREVIEW, lambda v: len(v) == 2, "the preview"))

        assert preview("7") == [["conRst/0", "0", "7"], ["conRst/1", "0", "7"]]
        assert anyio.run(_offsets, dev3.servers) == {0: 0, 1: 0}  # a preview writes nothing
        driver.execute_script(f"document.querySelector('{FORM} .cancel-reset').click()")
        wait_js(driver, text(f"{FORM} .reset-result"), lambda v: v == "cancelled", "cancelled")
        assert anyio.run(_offsets, dev3.servers) == {0: 0, 1: 0}
        assert preview("3") == [["conRst/0", "0", "3"], ["conRst/1", "0", "3"]]
        driver.execute_script(f"document.querySelector('{FORM} .confirm-reset').click()")
        wait_js(driver, text(f"{FORM} .reset-result"), lambda v: v == "reset", "reset")
        assert anyio.run(_offsets, dev3.servers) == {0: 3, 1: 3}


def test_produce_from_the_records_page(dev3: JetDev, chromium: SharedChromium) -> None:
    async def create() -> None:
        async with Client(dev3.servers) as client:
            await client.create_stream("conSend", partitions=1, replication_factor=1)

    async def read() -> list[tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]]:
        from jetsdk.codec.record import iter_records

        async with Client(dev3.servers) as client:
            _, raw = await client.fetch("conSend", 0, 0, max_bytes=65536, max_wait=0)
            return [
                (None if r.key is None else bytes(r.key), bytes(r.value), tuple(r.headers))
                for r in iter_records(raw)
            ]

    anyio.run(create)
    with JetConsole.start(dev3, "--allow-writes") as rw, chromium.page() as driver:
        goto(driver, rw, "partition/conSend/0", "partition")
        driver.find_element("id", "produce-key").send_keys("k1")
        driver.find_element("id", "produce-value").send_keys("from the page")
        driver.find_element("id", "produce-header").send_keys("trace=abc")
        driver.find_element("id", "produce").click()
        wait_js(driver, text("#produce-result"), lambda v: v == "produced at offset 0", "the ack")
    assert anyio.run(read) == [(b"k1", b"from the page", (("trace", b"abc"),))]
