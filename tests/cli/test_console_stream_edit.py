"""`jet console --allow-writes`: edit a stream's settings and purge it (issue 36, item 6);
a read-only console refuses both."""

from __future__ import annotations

import anyio

from jetsdk import AckPolicy, Client, Producer
from support.jet_console import JetConsole
from support.jet_dev import JetDev

WRITE = {"X-Jet-Console": "1"}


def _setup(jet_dev: JetDev) -> None:
    async def run() -> None:
        async with Client(jet_dev.servers) as client:
            await client.create_stream("conEdit", partitions=2)
            async with Producer(client, "conEdit", ack=AckPolicy.ALL) as producer:
                for i in range(6):
                    await producer.send(b"%d" % i, partition=i % 2)

    anyio.run(run)


def test_edit_and_purge_from_the_console(jet_dev: JetDev) -> None:
    _setup(jet_dev)
    with JetConsole.start(jet_dev) as ro:
        status, _, _ = ro.request("POST", "/api/streams/conEdit/purge", {}, WRITE)
        assert status == 403
    with JetConsole.start(jet_dev, "--allow-writes") as rw:
        path = "/api/streams/conEdit/settings"
        assert rw.request("POST", path, {"retention_max_messages": "9"})[0] == 403  # no header
        status, body, _ = rw.request(
            "POST",
            path,
            {"retention_max_messages": "100", "retention_max_age": "3600", "segment_max_bytes": ""},
            WRITE,
        )
        assert status == 200, body
        assert body["updated"]["config"]["retention_max_messages"] == 100
        assert body["updated"]["config"]["retention_max_age_s"] == 3600.0
        status, body, _ = rw.request("POST", path, {"retention_max_messages": "none"}, WRITE)
        assert status == 200, body
        assert body["updated"]["config"]["retention_max_messages"] is None
        for field, value in (("partitions", "4"), ("retention_max_bytes", "x")):
            status, body, _ = rw.request("POST", path, {field: value}, WRITE)
            assert status == 400, (field, body)
            assert field in str(body)

        purge = "/api/streams/conEdit/purge"
        status, body, _ = rw.request("POST", purge, {"partition": 0, "before": 2}, WRITE)
        assert (status, body["log_start"]) == (200, {"0": 2}), body
        status, body, _ = rw.request("POST", purge, {}, WRITE)
        assert (status, body["log_start"]) == (200, {"0": 3, "1": 3}), body
        status, body, _ = rw.request("POST", purge, {"before": 99}, WRITE)
        assert status == 400, body
