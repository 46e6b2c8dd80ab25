"""Several Produce requests in flight per partition keep their order (issue 32): an
idempotent producer with 5 in flight on a one-replica partition; when one of them is lost (its
request never reaches the server, or the connection breaks under it) the ones behind it
are refused OUT_OF_ORDER_SEQUENCE until it is stored again, so the log holds every
acknowledged message once, in send order (spec/protocol.md, "Sequences")."""

from __future__ import annotations

import struct
import uuid

import anyio
import pytest

from jetsdk import Client, Consumer, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.frames import Api
from jetsdk.transport import READ_CHUNK_BYTES, Address, ByteStream, tcp_dialer
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio

_LENGTH = struct.Struct(">I")
DROPPED = 3
"""The Produce request (counted from 1) that never reaches the server."""


class _DropOneProduce:
    """A dialer whose first connection loses its ``DROPPED``-th Produce request (``cut``:
    and breaks there, as a server gone away would), while later requests on it go on."""

    def __init__(self, *, cut: bool) -> None:
        self.cut = cut
        self.produces = 0
        self.dropped = 0
        self.dials = 0

    async def dial(self, address: Address, timeout: float) -> ByteStream:  # noqa: ASYNC109
        self.dials += 1
        inner = await tcp_dialer(address, timeout)
        return _Dropping(inner, self) if self.dials == 1 else inner


class _Dropping:
    def __init__(self, inner: ByteStream, owner: _DropOneProduce) -> None:
        self.inner = inner
        self.owner = owner
        self.pending = bytearray()

    async def read(self, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
        return await self.inner.read(max_bytes)

    async def write(self, data: bytes | memoryview) -> None:
        """Forward whole frames, all but the one dropped (requests: api after the length)."""
        owner = self.owner
        self.pending += data
        out = bytearray()
        while len(self.pending) >= 4:
            (length,) = _LENGTH.unpack_from(self.pending)
            if len(self.pending) < 4 + length:
                break
            frame = bytes(self.pending[: 4 + length])
            del self.pending[: 4 + length]
            if frame[4] in (Api.PRODUCE, Api.PRODUCE_MANY):
                owner.produces += 1
                if owner.produces == DROPPED:
                    owner.dropped += 1
                    if owner.cut:
                        if out:
                            await self.inner.write(bytes(out))
                        await self.inner.aclose()
                        return
                    continue
            out += frame
        if out:
            await self.inner.write(bytes(out))

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("cut", [False, True], ids=["request-lost", "connection-cut"])
async def test_five_in_flight_keep_order_when_one_request_is_lost(
    jet_dev: JetDev, cut: bool
) -> None:
    name = f"order-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as admin:
        await admin.create_stream(name, name)
    dialer = _DropOneProduce(cut=cut)
    values = [b"v%03d" % i for i in range(60)]
    async with Client(jet_dev.servers, dialer=dialer.dial, request_timeout=1.0) as client:
        async with Producer(
            client,
            name,
            ack=AckPolicy.ALL,
            idempotent=True,
            linger=0.005,
            max_batch_messages=4,
            ack_timeout=0.5,
            max_in_flight=5,
        ) as producer:
            handles = [await producer.send_soon(v) for v in values]
            with anyio.fail_after(60):
                acks = [await h for h in handles]
        assert dialer.dropped == 1
        if not cut:  # requests behind the lost one went on that connection meanwhile
            assert dialer.produces > DROPPED + 1, dialer.produces
        assert producer.retries >= 1
        got: list[bytes] = []
        async with Consumer(client, name) as consumer:
            with anyio.fail_after(20):
                while len(got) < len(values):
                    got += [m.value for m in await consumer.fetch(timeout=1)]
                got += [m.value for m in await consumer.fetch(timeout=0.2)]
    # Every message acknowledged, stored once, in send order (offsets follow send order).
    assert got == values
    assert [a.offset for a in acks] == list(range(len(values)))
