"""A table's compare-and-set with an ALL ack on a server alone (durability ``flushed``)
is appended, fsynced and answered in one step (``broker/produce_cas.py``,
``appended_lean``), with the general path's answers: its offset, a retry of its
sequence answered as its duplicate, a refusal with the key's value, the later record
(latest values), its NATS copy, and a cut by a failed fsync retried by the table until
every increment is stored once (tests/support/fsync_fault.py)."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import nats
import pytest

from jetsdk import Client, Table
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, ProduceResult
from jetserver.broker.append_checks import AppendChecks
from jetserver.testing import nats_flushed
from support.fsync_fault import FsyncFault
from support.jet_server import records_after_restart, running_server, start_server_process
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

HEADER = "Jet-Expected-Key-Offset"
REFUSED = ErrorCode.WRONG_EXPECTED_KEY_OFFSET
BOUND_S = 60.0
TABLE_TIMEOUT_S = 30.0


def cas(key: bytes, value: bytes, expected: int) -> ProduceMessage:
    return ProduceMessage(value=value, key=key, headers=((HEADER, str(expected).encode()),))


@contextlib.asynccontextmanager
async def served(
    nats_server: NatsServer, tmp_path: Path, stream: str
) -> AsyncIterator[tuple[Client, AppendChecks]]:
    """A server alone with the compacted stream ``stream`` on subject ``stream``: a client
    and the checks of its partition 0."""
    async with (
        running_server(nats_server.url, tmp_path / "data") as server,
        Client([server.address]) as client,
    ):
        await client.create_stream(stream, stream, compact=True)
        yield client, server.streams.local_replica(stream, 0).sequencer.checks


async def test_a_won_compare_and_set_goes_in_one_step(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    copies: list[bytes] = []
    two = anyio.Event()

    async def on_copy(msg: nats.aio.msg.Msg) -> None:
        copies.append(msg.data)
        if len(copies) == 2:
            two.set()

    nc = await nats.connect(nats_server.url)
    try:
        await nc.subscribe("lean", cb=on_copy)
        await nats_flushed(nc)
        async with served(nats_server, tmp_path, "lean") as (client, checks):

            async def send(message: ProduceMessage, seq: int) -> ProduceResult:
                request = ProduceRequest(
                    "lean",
                    0,
                    AckPolicy.ALL,
                    5000,
                    (message,),
                    77,
                    seq,
                    current_values=True,
                    latest_values=True,
                )
                (result,) = await client.produce(request)
                return result

            first = await send(cas(b"k", b"v1", -1), 0)
            assert (first.error_code, first.offset, first.latest_offset) == (ErrorCode.NONE, 0, -1)
            assert checks.appended_lean == 1
            again = await send(cas(b"k", b"v1", -1), 0)  # a retry: its duplicate
            assert (again.error_code, again.offset) == (ErrorCode.DUPLICATE_SEQUENCE, 0)
            second = await send(cas(b"k", b"v2", 0), 1)
            assert (second.error_code, second.offset) == (ErrorCode.NONE, 1)
            assert checks.appended_lean == 2
            lost = await send(cas(b"k", b"v3", 0), 2)  # a lone writer's: the general path
            assert (lost.error_code, lost.offset, lost.current_value) == (REFUSED, 1, b"v2")
            lost = await send(cas(b"k", b"v3", 0), 3)  # writers race now: refused here
            assert (lost.error_code, lost.offset, lost.current_value) == (REFUSED, 1, b"v2")
            assert checks.appended_lean == 2
            assert (await client.list_offsets("lean", 0, "latest")).offset == 2
            with anyio.fail_after(10):
                await two.wait()
            assert len(copies) == 2
            assert all(b"v%d" % (i + 1) in copy for i, copy in enumerate(copies))
    finally:
        await nc.close()


async def test_a_cut_compare_and_set_is_stored_again(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    """One fsync of the partition's segment fails under a table's lone writer's
    increments: each one still ends stored exactly once (the cut one answered
    STORAGE_ERROR and written again by the table), and a restart reads them all back."""
    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match="/0/00000000000000000000.log", at=5, marker=marker)
    proc = start_server_process(nats_server.url, data, "--log-level", "INFO", env=fault.env())
    count = 40
    try:
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream("cut", "cut", compact=True)
                async with Table(client, "cut", timeout=TABLE_TIMEOUT_S) as table:
                    slowest = 0.0
                    for _ in range(count):
                        started = time.monotonic()
                        await table.modify(b"n", lambda v: b"%d" % (int(v or b"0") + 1))
                        slowest = max(slowest, time.monotonic() - started)
                    await table.sync()
                    assert table.get(b"n") == b"%d" % count
    finally:
        assert proc.stop() == 0
    # The cut one is answered when the cut is made, not at its request's timeout.
    assert slowest < TABLE_TIMEOUT_S / 3, slowest
    assert marker.exists(), "the injected fsync failure never fired"
    assert "fsync failed: cut the log back" in proc.log_path.read_text(errors="replace")
    records = await records_after_restart(nats_server.url, data, "cut", BOUND_S)
    values = [r.value for r in records]
    assert values == [b"%d" % (i + 1) for i in range(count)]
    assert not [v for v, n in collections.Counter(values).items() if n > 1]
