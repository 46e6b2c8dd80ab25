"""Handing fetched messages to the application: the rules between the fetchers and the user.

A :class:`Delivery` holds a consumer's partition runs and the batches their fetchers
decoded, and hands messages out in fetch order per partition, skipping a batch (for now) when

- manual acks: ``max_unacked`` messages are un-acked (backpressure: iteration waits), or the
  partition's window from its first un-acked message reached ``WINDOW_FACTOR * max_unacked``;
- a group partition's lease does not allow processing it now (``may_process``);
- the application paused the partition (:meth:`Delivery.pause`: its batches wait in the
  buffer, and its fetcher stops once its prefetch credit is used up);

and dropping batches of runs that ended (seek, revoke, loss). Every message carries an acker
for its run, so ``msg.ack()`` works from any thread and is ignored once the run ended.

Not thread-safe except :meth:`_Acker.ack_offset`: the consumer's event loop owns it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.lowlevel import EventLoopToken

from jetsdk.codec.record import Record
from jetsdk.consumer.fetcher import Fetched, PartitionRun
from jetsdk.errors import ClientClosed, PartitionNotFound
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.message import Acker, Message, new_message

__all__ = ["WINDOW_FACTOR", "YIELD_INTERVAL", "Delivery", "Leases", "Marks"]

WINDOW_FACTOR = 10
"""Manual acks: a partition stops handing out once ``WINDOW_FACTOR * max_unacked`` messages
lie between its first un-acked message and its position (bounds memory and redelivery)."""
YIELD_INTERVAL = 0.005
"""Iteration yields to the event loop at least this often (seconds) while messages flow."""

Marks = list[tuple[PartitionRun, int]]
"""Positions of the runs with unsettled messages when a batch was taken (:meth:`Delivery.take`):
what settles once the application starts that batch (:meth:`Delivery.settle_to`)."""


class Leases(Protocol):
    """What a group member tells delivery (:class:`~jetsdk.consumer.group_side.GroupSide`)."""

    @property
    def draining(self) -> int:
        """Revocations waiting for in-flight work."""

    def may_process(self, key: StreamPartition, now: float) -> bool:
        """True if messages of ``key`` may be handed out now."""

    def check_fenced(self) -> None:
        """Raise MemberFenced when due."""

    def kick(self) -> None:
        """Ask the member to re-decide soon."""


class _Acker:
    """Takes ``msg.ack()`` of one partition run back to the delivery, from any thread."""

    __slots__ = ("delivery", "run")

    def __init__(self, delivery: Delivery, run: PartitionRun) -> None:
        self.delivery = delivery
        self.run = run

    @property
    def stale(self) -> bool:
        # Read from the sync API's threads: two attribute reads, at worst a moment late.
        return self.delivery.closed or not self.run.processed.alive

    def ack_offset(self, offset: int) -> None:
        delivery = self.delivery
        if threading.get_ident() == delivery.loop_thread:
            delivery.acked(self.run, offset)
        elif delivery.token is not None and not delivery.closed:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the consumer closed
                anyio.from_thread.run_sync(delivery.acked, self.run, offset, token=delivery.token)


class Delivery:
    """Partition runs, fetched batches, and the rules for handing messages out."""

    def __init__(self, *, manual_ack: bool, max_unacked: int) -> None:
        self.manual_ack = manual_ack
        self.max_unacked = max_unacked
        self.runs: dict[StreamPartition, PartitionRun] = {}
        """The partitions being read, by partition."""
        self.buffer: deque[Fetched] = deque()
        self.signal = anyio.Event()
        """Set (and replaced) whenever something changed: a batch, an ack, an error."""
        self.errors: deque[BaseException] = deque()
        self.unacked_total = 0
        self.closed = False
        self.ended = 0
        """Counts runs ended and the close: a reader holding messages checks them for
        staleness only when it changed (the sync API's buffer)."""
        self.leases: Leases | None = None
        self.loop_thread = 0
        self.token: EventLoopToken | None = None
        self._handed: list[PartitionRun] = []
        self._yield_at = 0.0
        self.readers_waiting = 0
        """Application calls (``fetch``, iteration) waiting for a batch now."""
        self.paused: set[StreamPartition] = set()
        """Partitions the application paused (kept across seeks until resumed)."""

    def start(self) -> None:
        """Bind to the running event loop (acks from other threads come back to it)."""
        self.loop_thread = threading.get_ident()
        self.token = anyio.lowlevel.current_token()
        self.signal = anyio.Event()

    # -- runs and batches ----------------------------------------------------------------

    def deliver(self, item: Fetched) -> bool:
        """A fetcher decoded a batch (or hit an error); True if the application is waiting
        for one (it runs at the next loop turn)."""
        if self.runs.get(item.key) is item.run:
            self.buffer.append(item)
            self.notify()
            return self.readers_waiting > 0
        return False

    def end_run(self, run: PartitionRun) -> None:
        """Stop a run: no more fetching, its buffered batches dropped, its acks ignored."""
        run.end()
        self.ended += 1
        if self.runs.get(run.key) is run:
            del self.runs[run.key]
        self.unacked_total -= run.processed.unacked
        self.drop_buffered(run)
        self.notify()

    def drop_buffered(self, run: PartitionRun) -> None:
        """Forget the batches ``run`` fetched and nobody got yet."""
        if any(item.run is run for item in self.buffer):
            self.buffer = deque(item for item in self.buffer if item.run is not run)

    def has_buffered(self, run: PartitionRun) -> bool:
        """True if batches of ``run`` wait to be handed out."""
        return any(item.run is run for item in self.buffer)

    def pause(self, keys: Sequence[StreamPartition]) -> None:
        """Hold ``keys``' messages until :meth:`resume` (assigned partitions only).

        Raises:
            PartitionNotFound: one of them is not assigned.
        """
        for key in keys:
            if key not in self.runs:
                raise PartitionNotFound(
                    f"partition {key} is not assigned to this consumer",
                    details={"stream": key.stream, "partition": key.partition},
                )
        self.paused.update(keys)

    def resume(self, keys: Sequence[StreamPartition]) -> None:
        """Hand out ``keys``' messages again (resuming one not paused does nothing)."""
        self.paused.difference_update(keys)
        self.notify()

    def close(self) -> None:
        """The consumer closes: nothing more is handed out, held messages are stale."""
        self.closed = True
        self.ended += 1
        self.notify()

    def notify(self) -> None:
        """Wake whoever waits for a change."""
        self.signal.set()
        self.signal = anyio.Event()

    def acked(self, run: PartitionRun, offset: int) -> None:
        """``msg.ack()`` arrived in the loop thread."""
        if run.processed.ack(offset):
            self.unacked_total -= 1
            self.notify()

    def fail(self, error: BaseException) -> None:
        """Raise ``error`` from the next ``__anext__``/``fetch`` call."""
        self.errors.append(error)
        self.notify()

    def give_back(self, messages: Sequence[Message]) -> None:
        """``messages`` (handed out here, in order) did not reach the application: the sync
        API's buffer gives them back. Their records go back to the front of the buffer, to
        be handed out again in the same order, and each run's position (and, with manual
        acks, its un-acked set) returns to the first of them, so positions, lag and
        commits count only what the application got. Messages of an ended run are
        dropped."""
        items: list[Fetched] = []
        first: dict[int, tuple[PartitionRun, int]] = {}
        for msg in messages:
            acker = msg._acker
            if not isinstance(acker, _Acker) or acker.delivery is not self or acker.stale:
                continue
            run = acker.run
            if self.runs.get(run.key) is not run:
                continue
            if items and items[-1].run is run:
                items[-1].records.append(msg.record)
            else:
                items.append(Fetched(run.key, run, [msg.record], credit=False))
            first.setdefault(id(run), (run, msg.offset))
        for run, offset in first.values():
            self.unacked_total -= run.processed.take_back(offset)
        if items:
            self.buffer.extendleft(reversed(items))
            self.notify()

    def settle(self) -> None:
        """Auto acks: what was handed out before this call is processed now."""
        if self._handed:
            for run in self._handed:
                run.processed.settle()
            self._handed.clear()
            if self.leases is not None and self.leases.draining:
                self.notify()

    def settle_to(self, marks: Marks) -> None:
        """Auto acks: what was handed out before the batch ``marks`` came with is processed
        (the sync API's caller started that batch; the batches after it are not)."""
        for run, position in marks:
            run.processed.settle_to(position)
        if self.leases is not None and self.leases.draining:
            self.notify()

    # -- handing out ---------------------------------------------------------------------

    async def next_message(self) -> Message:
        """The next message (waits as long as needed).

        Raises:
            ClientClosed: closed. JetError: an error of a fetcher or of the group.
        """
        if self._handed:
            self.settle()
        now = time.monotonic()
        if now >= self._yield_at:
            # Let the fetchers and the group member's tasks run even while messages are
            # buffered (a busy loop would starve heartbeats and lose the leases).
            self._yield_at = now + YIELD_INTERVAL
            await anyio.lowlevel.checkpoint()
        while True:
            buffer = self.buffer
            item = buffer[0] if buffer else None
            # The common case first: the front batch is current and nothing holds it back.
            if (
                item is None
                or item.error is not None
                or self.manual_ack
                or self.leases is not None
                or self.paused
                or self.errors
                or self.closed
                or self.runs.get(item.key) is not item.run
                or item.run.revoking
            ):
                item = None if self.closed else self._front_nowait(now)
                if item is None:
                    item = await self._front(None)
                    assert item is not None
            run = item.run
            record = item.records[item.index]
            item.index += 1
            if item.index == len(item.records):
                self._pop_front(item)
            count = run.processed.admit(record.offset)
            if count:
                return self._hand_out(run, record.offset, count, record)

    async def next_batch(self, max_records: int, timeout: float | None) -> list[Message]:
        """Up to ``max_records`` messages, waiting up to ``timeout`` for the first."""
        self.settle()
        if not self.buffer and (timeout is None or timeout > 0):
            pass  # _front waits for a batch, which yields to the loop
        elif not self.buffer or time.monotonic() >= self._yield_at:
            # See next_message; a fetch(timeout=0) loop must not spin without yielding.
            self._yield_at = time.monotonic() + YIELD_INTERVAL
            await anyio.lowlevel.checkpoint()
        deadline = None if timeout is None else time.monotonic() + timeout
        item = await self._front(deadline)
        return [] if item is None else self._hand_batch(item, max_records)

    async def take(self, max_records: int) -> tuple[list[Message], Marks]:
        """Up to ``max_records`` messages, waiting as long as needed for the first, without
        settling what was handed out before (the sync API's reads: its caller settles a
        batch's :data:`Marks` when it starts the batch).

        Raises:
            ClientClosed: closed. JetError: an error of a fetcher or of the group.
        """
        item = await self._front(None)
        marks = self.marks()  # before this batch moves the positions
        return self._hand_batch(item, max_records), marks

    def take_nowait(self, max_records: int) -> tuple[list[Message], Marks]:
        """:meth:`take` of what may be handed out now (no messages: nothing is)."""
        item = self._front_nowait()
        if item is None:
            return [], []
        marks = self.marks()
        return self._hand_batch(item, max_records), marks

    def marks(self) -> Marks:
        """Positions of the runs whose hand-outs are not settled (see :data:`Marks`)."""
        if len(self._handed) > len(self.runs):  # seeks and revocations ended some
            self._handed = [run for run in self._handed if run.processed.alive]
        return [(run, run.processed.position) for run in self._handed]

    def _hand_batch(self, item: Fetched | None, max_records: int) -> list[Message]:
        """Hand out up to ``max_records`` messages from ``item`` on."""
        out: list[Message] = []
        handed = self._handed
        while item is not None and len(out) < max_records:
            run, records, start = item.run, item.records, item.index
            end = min(len(records), start + max_records - len(out))
            if self.manual_ack:
                end = min(end, start + max(1, self.max_unacked - self.unacked_total))
            if not self.manual_ack and run.processed.is_plain(records[start].offset):
                stream, partition, acker = run.key.stream, run.key.partition, self._acker(run)
                out.extend(
                    [new_message(stream, partition, r, 1, acker) for r in records[start:end]]
                )
                run.processed.advance(records[end - 1].offset + 1)
                if run not in handed:
                    handed.append(run)
            else:
                for record in records[start:end]:
                    count = run.processed.admit(record.offset)
                    if count:
                        out.append(self._hand_out(run, record.offset, count, record))
            item.index = end
            if end == len(records):
                self._pop_front(item)
            try:
                item = self._front_nowait()
            except Exception as exc:  # raised by the next call: these messages go out first
                if not out:
                    raise
                self.errors.appendleft(exc)
                break
        return out

    def _hand_out(self, run: PartitionRun, offset: int, count: int, record: Record) -> Message:
        if self.manual_ack:
            run.processed.handed_out(offset, count)
            self.unacked_total += 1
        elif run not in self._handed:  # (a list of a run or two: settled per call)
            self._handed.append(run)  # (admit already moved the position)
        key = run.key
        return new_message(key.stream, key.partition, record, count, run.acker or self._acker(run))

    def _acker(self, run: PartitionRun) -> Acker:
        if run.acker is None:
            run.acker = _Acker(self, run)
        return run.acker

    def _pop_front(self, item: Fetched) -> None:
        if self.buffer and self.buffer[0] is item:
            self.buffer.popleft()
            if item.credit:
                item.run.credit.release()

    def _eligible(self, item: Fetched, now: float) -> bool | None:
        """True: hand it out; False: not now; None: stale, drop it."""
        run = item.run
        if self.runs.get(item.key) is not run or run.revoking:
            return None
        if item.key in self.paused:
            return False
        if item.error is not None:
            return True
        if self.manual_ack and (
            self.unacked_total >= self.max_unacked
            or run.processed.window >= WINDOW_FACTOR * self.max_unacked
        ):
            return False
        return self.leases is None or self.leases.may_process(item.key, now)

    def _front_nowait(self, now: float | None = None) -> Fetched | None:
        """The first buffered batch that may be handed out now, moved to the front."""
        if self.errors:
            raise self.errors.popleft()
        if self.leases is not None:
            self.leases.check_fenced()
        if now is None:
            now = time.monotonic()
        buffer = self.buffer
        for i, item in enumerate(buffer):
            ok = self._eligible(item, now)
            if ok is None:
                continue
            if not ok:
                if self.leases is not None and item.key not in self.paused:
                    self.leases.kick()
                continue
            if i:
                del buffer[i]
                buffer.appendleft(item)
            if item.error is not None:
                self._pop_front(item)
                self.end_run(item.run)
                raise item.error
            return item
        if any(self._eligible(item, now) is None for item in buffer):
            self.buffer = deque(item for item in buffer if self._eligible(item, now) is not None)
        return None

    async def _front(self, deadline: float | None) -> Fetched | None:
        """Wait for a batch to hand out (None once ``deadline`` passed)."""
        while True:
            if self.closed:
                # A reader cancelled in the same moment sees that, not the close its
                # cancellation may have caused (the consumer's tasks ending in its scope).
                await anyio.lowlevel.checkpoint_if_cancelled()
                raise ClientClosed("the consumer is closed")
            item = self._front_nowait()
            if item is not None:
                return item
            signal = self.signal
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return None
            self.readers_waiting += 1
            try:
                if wait is None:
                    await signal.wait()
                else:
                    with anyio.move_on_after(wait):
                        await signal.wait()
            finally:
                self.readers_waiting -= 1
