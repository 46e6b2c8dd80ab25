"""`jet share status GROUP` as a subprocess against a share group left in a known state."""

from __future__ import annotations

import subprocess

import anyio
import orjson

from jetsdk import Client, Producer, ShareConsumer
from support.jet_cli import jet
from support.jet_dev import JetDev


async def leave_state(dev: JetDev) -> subprocess.CompletedProcess[str]:
    """30 messages; of the first 10: 6 acked, 2 rejected (dead-lettered), 2 still held; the
    status is read while the member is open (closing releases what it holds). The member may
    have acquired more ahead of its application."""
    async with Client(dev.servers) as client:
        await client.create_stream("sharecli", "sharecli")
        async with Producer(client, "sharecli") as producer:
            for i in range(30):
                await producer.send_soon(b"%d" % i)
        async with ShareConsumer(
            client, "sharecli", group="clig", batch=10, max_held=1
        ) as consumer:
            for i in range(10):
                msg = await consumer.next(timeout=30)
                assert msg is not None
                if i < 6:
                    await msg.ack()
                elif i < 8:
                    await msg.reject()
            await consumer.flush()
            with anyio.fail_after(30):  # the rejected ones are dead-lettered by the driver
                while consumer.state.partition("sharecli", 0).dead_total < 2:
                    await anyio.sleep(0.05)
                    await consumer.flush()
            return await anyio.to_thread.run_sync(
                lambda: jet(dev, "share", "status", "clig", "--json")
            )


def test_share_status(jet_dev: JetDev) -> None:
    proc = anyio.run(leave_state, jet_dev)
    assert proc.returncode == 0, proc.stderr
    (part,) = orjson.loads(proc.stdout)["partitions"]
    assert part["stream"] == "sharecli"
    assert part["hw"] == 30
    assert part["acked"] == 6
    assert part["dead_lettered"] == 2
    assert part["acquired"] >= 2  # handed out, not settled: held until the 30 s deadline
    assert part["acquired"] + part["pending"] == 22
    assert part["spso"] == 0
    # Closed: what it held is released at once, not at the deadline.
    closed = jet(jet_dev, "share", "status", "clig", "--json")
    (part,) = orjson.loads(closed.stdout)["partitions"]
    assert (part["acked"], part["dead_lettered"], part["acquired"]) == (6, 2, 0)
    assert part["pending"] == 22
    table = jet(jet_dev, "share", "status", "clig")
    assert table.returncode == 0
    assert "ACQUIRED" in table.stdout
    assert "sharecli" in table.stdout
    missing = jet(jet_dev, "share", "status", "nosuchgroup")
    assert missing.returncode == 1
    assert "no share group" in missing.stderr
