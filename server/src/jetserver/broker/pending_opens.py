"""Partitions a server alone has not opened yet: opened after it is ready, and on first use.

A server alone with many partitions (``[storage] open_in_background_from``) does not open
(recover) their logs before it answers: opening every log and starting its replica took
about 0.4 CPU-ms per partition, 20 s at 50,000 (issue 34). It writes its ready file once it
listens, then one background task opens them in batches, oldest streams first. A request
that names a partition not open yet moves it to the front (:meth:`PendingOpens.check`
raises :class:`PartitionOpening`, whose :meth:`~PartitionOpening.opened` the dispatcher
waits on, bounded, before serving the request again); every request for it waits on the
same open. Nothing is read from or written to a partition before its log was opened, so
recovery (spec/storage.md §9: a torn tail cut, checkpoints clamped) always comes first.

Until it is opened a partition is not subscribed to its NATS subject: messages published
to it then reach no subscriber, as while the server was down (Produce through the server
waits for the open instead).

Task safety: the server's event loop.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.broker.gc_pause import collector_paused
from jetserver.errors import ApiError
from jetserver.logs import fields
from jetserver.metadata.model import PartitionAssignment, StreamMeta

log = logging.getLogger(__name__)

Key = tuple[str, int]
Wanted = tuple[StreamMeta, PartitionAssignment]

OPEN_BATCH = 128
"""Partitions the background task opens per turn: four worker-thread calls of 32, as a
start's, so that a worker thread opens the next 32 while the event loop starts the
replicas of the last (a request waits for at most about two turns: some 0.1 s)."""
OPEN_WAIT_S = 5.0
"""How long a request waits for the open of the partition it names."""

__all__ = ["OPEN_BATCH", "OPEN_WAIT_S", "PartitionOpening", "PendingOpens"]


class PartitionOpening(ApiError):
    """UNAVAILABLE (retriable): the partition is not open yet; it opens next."""

    def __init__(self, name: str, partition: int, done: anyio.Event) -> None:
        super().__init__(
            ErrorCode.UNAVAILABLE,
            f"partition {name}/{partition} is being opened on this server; retry",
            {"stream": name, "partition": partition},
        )
        self._done = done

    async def opened(self, timeout_s: float = OPEN_WAIT_S) -> bool:
        """Wait for the open (or its failure); False if it did not end within ``timeout_s``."""
        with anyio.move_on_after(timeout_s):
            await self._done.wait()
            return True
        return False


@attrs.define(eq=False)
class PendingOpens:
    """The partitions not opened yet, in the order they open unless one is asked for."""

    wanted: dict[Key, Wanted] = attrs.field(factory=dict)
    """The partitions not open yet (empty once all are: the Produce path checks that)."""
    _order: deque[Key] = attrs.field(factory=deque)
    _urgent: deque[Key] = attrs.field(factory=deque)
    _done: dict[Key, anyio.Event] = attrs.field(factory=dict)
    """Set when the partition's open ended (made when a request first waits for it)."""
    opened: int = 0
    """Partitions whose open ended (opened, or found offline)."""
    asked: int = 0
    """Partitions a request asked for before the background task reached them."""
    _turn: anyio.Event | None = None
    """Set when the batch being opened is done (None: none being opened)."""

    @property
    def opening(self) -> bool:
        """True while a batch is being opened."""
        return self._turn is not None

    def __len__(self) -> int:
        """Partitions not opened yet."""
        return len(self.wanted)

    def add(self, wanted: list[Wanted]) -> None:
        """Partitions to open (in this order)."""
        for meta, a in wanted:
            key = (meta.name, a.partition)
            self.wanted[key] = (meta, a)
            self._order.append(key)

    def check(self, name: str, partition: int) -> None:
        """Raise :class:`PartitionOpening` if the partition is not open yet (and move it to
        the front)."""
        if (name, partition) in self.wanted:
            raise PartitionOpening(name, partition, self._urge((name, partition)))

    def _urge(self, key: Key) -> anyio.Event:
        done = self._done.get(key)
        if done is None:
            done = self._done[key] = anyio.Event()
            self._urgent.append(key)
            self.asked += 1
        return done

    def drop_stream(self, name: str) -> None:
        """The stream is deleted: its partitions are no longer to open (requests waiting
        for them are released)."""
        for key in [k for k in self.wanted if k[0] == name]:
            del self.wanted[key]
            self._release(key)

    async def close(self) -> None:
        """No more opens (the server stops): drop what is pending, release the requests
        waiting, and return once a batch being opened is open (so it is closed with the
        others). The partitions never opened keep their files as the last stop left them."""
        for key in list(self.wanted):
            self._release(key)
        self.wanted.clear()
        if self._turn is not None:
            await self._turn.wait()

    def _release(self, key: Key) -> None:
        done = self._done.pop(key, None)
        if done is not None:
            done.set()

    def _next_batch(self) -> list[Wanted]:
        batch: list[Wanted] = []
        for queue in (self._urgent, self._order):
            while queue and len(batch) < OPEN_BATCH:
                wanted = self.wanted.pop(queue.popleft(), None)  # None: taken or dropped
                if wanted is not None:
                    batch.append(wanted)
        return batch

    async def run(self, open_batch: Callable[[list[Wanted]], Awaitable[None]]) -> None:
        """Open every pending partition, ``open_batch`` (which opens what it is handed, or
        marks it offline) one batch at a time, those asked for first; then return."""
        started, total = time.monotonic(), len(self.wanted)
        with collector_paused(total):  # as a start's opening: see gc_pause
            while self.wanted:
                batch = self._next_batch()
                keys = [(m.name, a.partition) for m, a in batch]
                # Still counted as pending while it opens: a request for it waits too.
                for (meta, a), key in zip(batch, keys, strict=True):
                    self.wanted[key] = (meta, a)
                self._turn = turn = anyio.Event()
                try:
                    await open_batch(batch)
                finally:
                    for key in keys:
                        if self.wanted.pop(key, None) is not None:
                            self.opened += 1
                        self._release(key)
                    self._turn = None
                    turn.set()
                await anyio.lowlevel.checkpoint()  # requests between batches
        log.info(
            "partitions opened in the background",
            extra=fields(
                count=total, asked_first=self.asked, seconds=round(time.monotonic() - started, 2)
            ),
        )
