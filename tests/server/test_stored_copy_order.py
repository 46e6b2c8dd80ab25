"""The NATS copy of a message its leader stored directly goes out once the record is
committed, after the Produce response: never ahead of its fsync, never for a record an
fsync failure cut back.

One `jet server` process runs with the fsync shim (tests/support/fsync_fault.py). With the
gate closed, a LEADER-acked Produce to a ``flushed`` stream is answered while its fsync is
held, and a plain NATS subscriber of the subject sees no copy until the gate opens; in a
``written`` stream (committed once written) the copy comes while its fsync is held. With
an armed fault, the fsync covering an ALL-acked Produce fails: the request gets an error
and no copy of the message ever reaches NATS.

Before the change the copy was published right after the append, so the first and the
last check failed: the subscriber saw the copy while the fsync was held, and saw the copy
of a record the failed fsync had cut.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from nats.aio.client import Client as NatsClient

from cluster.harness import wait_until_async
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetserver.broker.stored_copy import STORED_HEADER
from support.fsync_fault import ArmableFault, FsyncGate
from support.jet_server import start_server_process
from support.nats_server import NatsServer
from support.raw_client import RawClient
from support.subscriber import Subscriber

pytestmark = pytest.mark.anyio

BOUND_S = 30.0
HELD_S = 0.5
"""How long a copy is checked not to come (a copy that may come arrives in milliseconds)."""


@asynccontextmanager
async def _served(
    nats_server: NatsServer, tmp_path: Path, env: dict[str, str]
) -> AsyncIterator[tuple[RawClient, NatsClient]]:
    """A `jet server` process with ``env`` (the fsync shim's), a raw client of it and a
    plain NATS client; the process must stop cleanly at the end."""
    proc = start_server_process(nats_server.url, tmp_path / "data", env=env)
    nc = NatsClient()
    try:
        with anyio.fail_after(BOUND_S):
            await nc.connect(nats_server.url)
            raw = await RawClient.connect(proc.address)
        async with raw as c:
            yield c, nc
    finally:
        await nc.close()
        assert proc.stop() == 0


async def test_the_copy_waits_for_the_commit_not_the_response(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    gate = FsyncGate(tmp_path / "gate", match="/streams/")
    async with _served(nats_server, tmp_path, gate.env()) as (c, nc):
        try:
            with anyio.fail_after(BOUND_S):
                await c.create_stream(name="fl", subject="fl")
                await c.create_stream(name="wr", subject="wr", durability="written")
                flushed = await Subscriber.of(nc, "fl")
                written = await Subscriber.of(nc, "wr")

                gate.close()
                # Committed once written: its copy does not wait for its fsync, which a
                # worker thread holds at the gate.
                await c.produce("wr", 0, [ProduceMessage(b"seen")], ack_policy=AckPolicy.LEADER)
                copy = await written.next()
                assert copy.data.endswith(b"seen")
                await wait_until_async(gate.blocked.exists, BOUND_S, "an fsync held open")

                results = await c.produce(
                    "fl", 0, [ProduceMessage(b"held")], ack_policy=AckPolicy.LEADER
                )
                # Answered before the fsync that commits it, which waits at the gate.
                assert [(r.error_code, r.offset) for r in results] == [(ErrorCode.NONE, 0)]
                with anyio.move_on_after(HELD_S) as quiet:
                    await flushed.next()
                assert quiet.cancelled_caught, "the NATS copy went out before its fsync"
                assert gate.gate.exists()

                gate.open()
                copy = await flushed.next()
                assert copy.data.endswith(b"held")
                assert copy.headers is not None
                assert copy.headers[STORED_HEADER] == "fl 0"
        finally:
            gate.open()


async def test_no_copy_of_a_record_a_failed_fsync_cut(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    fault = ArmableFault(tmp_path / "control", tmp_path / "fired")
    async with _served(nats_server, tmp_path, fault.env()) as (c, nc):
        with anyio.fail_after(BOUND_S):
            await c.create_stream(name="cut", subject="cut")
            copies = await Subscriber.of(nc, "cut")
            # The first fsync of its segment from now on passes, the second fails.
            fault.arm("/streams/cut-", 2)
            results = await c.produce("cut", 0, [ProduceMessage(b"kept")])
            assert results[0].error_code == ErrorCode.NONE
            assert (await copies.next()).data.endswith(b"kept")

            results = await c.produce("cut", 0, [ProduceMessage(b"lost")], ack_policy=AckPolicy.ALL)
            assert fault.fired
            assert results[0].error_code != ErrorCode.NONE
            with anyio.move_on_after(HELD_S) as quiet:
                copy = await copies.next()
                raise AssertionError(f"a copy of a record the cut removed: {copy.data!r}")
            assert quiet.cancelled_caught
