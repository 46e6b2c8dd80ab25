"""``nats_flushed`` puts a SUB (or PUB) just made on the wire before its PING.

nats-py (2.16) writes a flush's PING straight to the socket while the SUB made just before
waits in its pending buffer for the flusher task: the PONG could come back before the
nats-server saw the SUB, and a copy jet published right after was not delivered to that
"flushed" subscriber (tests/server/test_copy_fast_path.py failed so in a fresh-clone CI,
and 2 of 2 `written` runs of a 100-round repro at load 15). What goes out is recorded at
the connection's transport, in order, against a real nats-server.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio
import nats
import pytest

from jetserver.testing import nats_flushed
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


async def test_a_sub_goes_out_before_the_ping_of_its_flush(nats_server: NatsServer) -> None:
    with anyio.fail_after(BOUND_S):
        nc = await nats.connect(nats_server.url, allow_reconnect=False)
        try:
            transport = nc._transport
            assert transport is not None
            sent: list[bytes] = []
            write, writelines = transport.write, transport.writelines

            def recorded_write(data: bytes) -> None:
                sent.append(bytes(data))
                write(data)

            def recorded_writelines(parts: Iterable[bytes]) -> None:
                parts = list(parts)
                sent.extend(bytes(p) for p in parts)
                writelines(parts)

            transport.write = recorded_write  # type: ignore[method-assign]
            transport.writelines = recorded_writelines  # type: ignore[method-assign]
            await nc.subscribe("kit.flushed", cb=_ignore)
            await nats_flushed(nc)
            wire = b"".join(sent)
            assert wire.index(b"SUB kit.flushed") < wire.index(b"PING\r\n")
        finally:
            await nc.close()


async def _ignore(_msg: object) -> None:
    return None
