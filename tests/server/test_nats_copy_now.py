"""A stored copy written to the socket at once (NatsLink.send_stored_copy) keeps the
order of publishes and the one write per loop turn under load: after it, the turn's other
publishes on that connection wait for the turn's end, together."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import nats
import pytest
from nats.aio.msg import Msg

from jetserver.broker.stored_copy import stored_header_block
from jetserver.config import NatsConfig
from jetserver.nats_link import NatsLink
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio


@pytest.fixture
async def link(nats_server: NatsServer) -> AsyncIterator[NatsLink]:
    """A NatsLink connected to ``nats_server``; closed after the test."""
    link = NatsLink(NatsConfig(servers=(nats_server.url,)))
    await link.connect(attempts=3)
    try:
        yield link
    finally:
        await link.close()


async def test_one_copy_a_turn_goes_at_once_and_the_rest_at_its_end_in_order(
    nats_server: NatsServer, link: NatsLink
) -> None:
    seen: list[bytes] = []
    got = anyio.Event()

    async def on_msg(msg: Msg) -> None:
        seen.append(msg.data)
        if len(seen) == 5:
            got.set()

    nc = await nats.connect(nats_server.url)
    try:
        await nc.subscribe("c.x", cb=on_msg)
        await nc.flush()
        header = stored_header_block("c", 0)
        owner = object()
        # The subject's bytes are cached by a first publish (the general path).
        await link.publish_stored_copies([("c.x", b"p0")], header, owner)
        await link.flush(5.0, ingest=True)
        ingest = link._ingest_nc
        assert ingest is not None
        assert not ingest._pending_data_size
        # One loop turn (no await that yields between): the first goes to the socket
        # now; the next one is refused (its caller publishes it: pending, for the turn's
        # end), and so is the one after, behind it.
        sent = [link.send_stored_copy("c.x", b"p1", header, owner)]
        sent.append(link.send_stored_copy("c.x", b"p2", header, owner))
        assert not ingest._pending_data_size
        await link.publish_stored_copies([("c.x", b"p2")], header, owner)
        sent.append(link.send_stored_copy("c.x", b"p3", header, owner))
        assert sent == [True, False, False]
        assert ingest._pending_data_size > 0  # p2 waits for the turn's end
        await link.publish_stored_copies([("c.x", b"p3"), ("c.x", b"p4")], header, owner)
        with anyio.fail_after(10):
            await got.wait()
    finally:
        await nc.close()
    assert seen == [b"p0", b"p1", b"p2", b"p3", b"p4"]
