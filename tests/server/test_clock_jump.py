"""A wall-clock jump in a real server process deletes nothing early and misorders nothing.

One `jet server` process runs with the clock test hook (``JET_TEST_CLOCK_SHIFT_FILE``,
jetserver/storage/clock.py): writing a number of nanoseconds into the file shifts the
process's wall clock, as a bad NTP step or ``date -s`` would. The stream keeps records for
an hour (time-based retention) in small segments, and maintenance runs every 0.2 s.

- Forward by two days: every sealed segment now looks two days old. Nothing may be
  deleted; the server says that it holds deletion back to the monotonic clock.
- Back by two days: new records must not get timestamps below the ones already stored.

On the code before the fix the forward jump made retention delete every sealed segment:
the log start moved from 0 to the active segment and the acked records below it were gone.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import pytest

from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from support.jet_server import start_server_process
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

DAY_NS = 86_400 * 10**9
BOUND_S = 60.0
COUNT = 400
HOLDING_BACK = "the wall clock jumped ahead of the monotonic clock"


def value(i: int) -> bytes:
    return b"clock-%05d-" % i + b"x" * 100


async def send(client: Client, values: range) -> dict[int, bytes]:
    acked: dict[int, bytes] = {}
    async with Producer(client, "clk", ack=AckPolicy.ALL, linger=0.001) as producer:
        handles = [(i, await producer.send_soon(value(i))) for i in values]
        for i, handle in handles:
            acked[(await handle).offset] = value(i)
    return acked


async def test_a_wall_clock_jump_deletes_nothing_early_and_keeps_timestamps_in_order(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    shift = tmp_path / "clock-shift"
    shift.write_text("0")
    proc = start_server_process(
        nats_server.url,
        tmp_path / "data",
        "--log-level",
        "INFO",
        env={"JET_TEST_CLOCK_SHIFT_FILE": str(shift)},
        settings={"storage": {"maintenance_interval_s": 0.2, "hw_checkpoint_interval_s": 0.2}},
    )
    try:
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream(
                    "clk", "clk", retention_max_age=3600.0, segment_max_bytes=4096
                )
                acked = await send(client, range(COUNT))
                async with await RawClient.connect(proc.address) as raw:
                    before = (await raw.describe("clk"))["partitions"][0]
                    assert before["log_start"] == 0

                    # Two days forward: wait for the server to notice (or, on buggy code,
                    # for retention to delete), then for a few more maintenance rounds.
                    shift.write_text(str(2 * DAY_NS))
                    while HOLDING_BACK not in proc.log_path.read_text(errors="replace"):
                        info = (await raw.describe("clk"))["partitions"][0]
                        if info["log_start"] > 0:
                            break
                        await anyio.sleep(0.05)
                    acked |= await send(client, range(COUNT, COUNT + 50))
                    after = (await raw.describe("clk"))["partitions"][0]
                    assert after["log_start"] == 0, (
                        f"retention deleted records below {after['log_start']} after the "
                        "clock jumped forward"
                    )

                    # Back to the real time: timestamps must not go back.
                    shift.write_text("0")
                    acked |= await send(client, range(COUNT + 50, COUNT + 100))
                    records = await raw.fetch_all("clk", 0)
    finally:
        assert proc.stop() == 0
    stored = {r.offset: r.value for r in records}
    missing = [o for o, v in acked.items() if stored.get(o) != v]
    assert not missing, f"{len(missing)} acked records missing, first {missing[:5]}"
    assert [r.offset for r in records] == list(range(len(records)))
    stamps = [r.timestamp for r in records]
    assert all(a <= b for a, b in itertools.pairwise(stamps)), "timestamps went back"
    # The records after the forward jump carry the jumped time (the wall clock), and
    # the ones after the jump back are not stamped below them.
    assert stamps[-1] >= stamps[COUNT] > stamps[COUNT - 1] + DAY_NS
    assert before["size_bytes"] > 4 * 4096  # several sealed segments were at stake
