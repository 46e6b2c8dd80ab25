"""A plain NATS subscriber's view of a subject (what any NATS client sees of jet's copies).

copies = await Subscriber.of(nc, "orders.x")     # subscribed and flushed
await copies.wait_for(3)                         # bounded by the caller (fail_after)
copies.messages                                  # every message, in arrival order
await copies.next()                              # or one at a time
"""

from __future__ import annotations

import anyio
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from jetserver.testing import nats_flushed


class Subscriber:
    """Every message a subscription got, in order, and a wait for more."""

    def __init__(self) -> None:
        self.messages: list[Msg] = []
        """Every message received so far."""
        self._taken = 0
        self._arrived = anyio.Event()

    async def on_msg(self, msg: Msg) -> None:
        """The subscription's callback."""
        self.messages.append(msg)
        self._arrived.set()

    @classmethod
    async def of(cls, nc: NatsClient, subject: str) -> Subscriber:
        """A subscriber of ``subject`` on ``nc`` (flushed: it sees what is sent from now)."""
        subscriber = cls()
        await nc.subscribe(subject, cb=subscriber.on_msg)
        await nats_flushed(nc)
        return subscriber

    async def wait_for(self, count: int) -> list[Msg]:
        """Every message, once there are ``count`` or more (bounded by the caller)."""
        while len(self.messages) < count:
            self._arrived = anyio.Event()
            await self._arrived.wait()
        return self.messages

    async def next(self) -> Msg:
        """The first message :meth:`next` has not returned yet (bounded by the caller)."""
        await self.wait_for(self._taken + 1)
        self._taken += 1
        return self.messages[self._taken - 1]
