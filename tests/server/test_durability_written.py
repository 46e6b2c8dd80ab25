"""Durability "written" (replication factor 1): records are committed, acknowledged and
visible once written, without waiting for their fsync; the default waits for it.

One `jet server` process runs with the fsync shim's gate (tests/support/fsync_fault.py):
while the gate file exists, every fsync of a segment file waits. With the gate closed, an
ALL ack and a consumer's read of a record in a ``written`` stream come while the fsync of
that record is held open; in a ``flushed`` stream (the default) the ack waits for the gate.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from cluster.harness import wait_until_async
from jetsdk import Client, Consumer, Producer
from jetsdk.codec.error_codes import AckPolicy
from support.fsync_fault import FsyncGate
from support.jet_server import start_server_process
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

BOUND_S = 30.0
HELD_S = 1.0
"""How long the flushed stream's ack is checked not to come while its fsync is held."""


async def test_written_commits_before_the_fsync_and_flushed_waits_for_it(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    gate = FsyncGate(tmp_path / "gate", match="/streams/")
    proc = start_server_process(
        nats_server.url, tmp_path / "data", "--log-level", "INFO", env=gate.env()
    )
    try:
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream("wr", "wr", durability="written")
                await client.create_stream("fl", "fl")
                gate.close()
                async with Producer(client, "wr", ack=AckPolicy.ALL, linger=0) as producer:
                    ack = await producer.send(b"seen before its fsync")
                # The fsync covering it is held at the gate, and still a consumer reads it.
                await wait_until_async(gate.blocked.exists, BOUND_S, "an fsync held open")
                async with Consumer(client, "wr", start="earliest") as consumer:
                    got = await consumer.fetch(max_records=10, timeout=5.0)
                assert [(m.offset, m.value) for m in got] == [
                    (ack.offset, b"seen before its fsync")
                ]
                assert gate.gate.exists()

                async with Producer(client, "fl", ack=AckPolicy.ALL, linger=0) as producer:
                    handle = await producer.send_soon(b"acked after its fsync")
                    with anyio.move_on_after(HELD_S) as held:
                        await handle
                    assert held.cancelled_caught, "a flushed stream acked before its fsync"
                    gate.open()
                    await handle
    finally:
        gate.open()
        assert proc.stop() == 0
