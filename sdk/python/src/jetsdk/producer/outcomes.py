"""What a producer's messages came to: their handles settled, and the count of those not
settled yet, in messages and in bytes, which the producer's backpressure and ``flush``
wait on.

The :class:`~jetsdk.producer.sender.Sender` (and the direct sends through it) count each
message queued or written, and settle it here once it is acknowledged or failed. The
producer's ``send_soon`` waits while ``max_pending`` messages or ``max_pending_bytes``
bytes (their estimated sizes, as the accumulator counts them: Kafka's ``buffer.memory``)
are unsettled: with small messages spread over many partitions the byte bound lets many
more wait, so each partition's batches grow instead of shrinking with the number of
partitions.

Task safety: one event loop.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.errors import JetError, error_from_code
from jetsdk.message import Ack
from jetsdk.producer.in_flight import Pending
from jetsdk.producer.retry_rules import IDEMPOTENT_RETRY_CODES, RETRY_CODES

__all__ = ["DEFAULT_MAX_PENDING_BYTES", "Outcomes"]

DEFAULT_MAX_PENDING_BYTES = 16 * 1024 * 1024
"""Most estimated bytes of messages queued or in flight per producer before ``send_soon``
waits (Kafka's ``buffer.memory`` is 32 MiB)."""


class Outcomes:
    """Settles one producer's messages and counts those not settled yet."""

    def __init__(self, stream: str, *, max_pending: int, max_pending_bytes: int) -> None:
        self._stream = stream
        self._max_pending = max_pending
        self._max_bytes = max_pending_bytes
        self.unresolved = 0
        """Messages queued or in flight, not acknowledged or failed yet."""
        self.unresolved_bytes = 0
        """Their estimated sizes (:attr:`Pending.size`)."""
        self._space: anyio.Event | None = None
        """Set when room frees up (made by the first caller waiting for room, then again
        after each set: nothing to set, no event built, while nobody waits)."""
        self._idle: anyio.Event | None = None
        """Set when nothing is unresolved (made by :meth:`wait_idle` when it has to wait)."""
        self.closed = False

    def full(self, held: int = 0) -> bool:
        """True if no message may be added now (``held``: more messages counted against
        ``max_pending``, those a compression stage holds)."""
        return (
            self.unresolved + held >= self._max_pending or self.unresolved_bytes >= self._max_bytes
        )

    def added(self, size: int) -> None:
        """One more message of ``size`` estimated bytes is queued or written."""
        self.unresolved += 1
        self.unresolved_bytes += size

    async def wait_for_room(self) -> None:
        """Wait until some message was settled (the caller checks :meth:`full` again), or
        :meth:`close`."""
        if self.closed:
            return
        if self._space is None:
            self._space = anyio.Event()
        await self._space.wait()

    async def wait_idle(self) -> None:
        """Wait until nothing is unresolved."""
        while self.unresolved:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def close(self) -> None:
        """The producer closes: wake the callers waiting for room (they see the close)."""
        self.closed = True
        if self._space is not None:
            self._space.set()

    def fail(self, items: Iterable[Pending], error: JetError) -> None:
        """Fail every one of ``items`` not settled yet with ``error``."""
        for pending in items:
            self.resolve(pending, None, error)

    def resolve(self, pending: Pending, ack: Ack | None, error: JetError | None) -> None:
        """Settle ``pending`` (unless it is already)."""
        if pending.handle.done():
            return
        pending.handle._set(ack, error)
        self.settled(1, pending.size)

    def resolve_results(
        self,
        partition: int,
        items: tuple[Pending, ...],
        results: list[tuple[int, int, int]],
        idempotent: bool,
    ) -> JetError | None:
        """Settle ``items`` by their (error_code, offset, timestamp) results; return the error
        of the first that failed retriably (left unresolved, to go again), else None."""
        stream = self._stream
        acked = size = 0
        retry: JetError | None = None
        for pending, (code, offset, timestamp) in zip(items, results):
            if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE:
                if pending.handle._set_acked(stream, partition, offset, timestamp):
                    acked += 1
                    size += pending.size
                continue
            error = error_from_code(
                code,
                f"send to {stream}/{partition} failed",
                {"stream": stream, "partition": partition},
            )
            if code in (IDEMPOTENT_RETRY_CODES if idempotent else RETRY_CODES):
                if retry is None:
                    retry = error
            else:
                self.resolve(pending, None, error)
        if acked:
            self.settled(acked, size)
        return retry

    def settled(self, count: int, size: int) -> None:
        """``count`` more messages (``size`` estimated bytes) are acknowledged or failed."""
        self.unresolved -= count
        self.unresolved_bytes -= size
        space = self._space
        if space is not None and not self.full():
            self._space = None
            space.set()
        idle = self._idle
        if idle is not None and self.unresolved == 0:
            self._idle = None
            idle.set()
