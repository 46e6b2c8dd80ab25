"""The Consumer: long-poll fetchers per partition, one response prefetched ahead.

Usage::

    async with Client(servers) as client, Consumer(client, "orders", start="earliest") as c:
        async for msg in c:                       # one message at a time, forever
            print(msg.partition, msg.offset, msg.key, msg.value)
        batch = await c.fetch(max_records=500, timeout=1.0)  # or in batches

How it works: for each assigned partition a fetcher task (in the consumer's task group)
sends Fetch long polls to the partition leader, decodes the records with
:func:`jetsdk.codec.record.iter_records` (a trailing partial record is ignored and fetched
again) and hands each batch to the consumer through a bounded channel. Each partition may
have one decoded batch waiting besides the one being read, so the next response is always
on its way while the application works through the current one.

:meth:`Consumer.position` is the next offset the application will get (the offset after
the last message returned). :meth:`Consumer.seek` discards what was prefetched for the
partition and restarts its fetcher. An out-of-range offset is handled by the reset policy
(:mod:`jetsdk.consumer.positions`).

Errors: retriable ones (leader moves, lost connections) are retried by the client and
then by the fetcher with backoff, without surfacing. Non-retriable ones (the stream was
deleted, corrupt records, OffsetOutOfRange with ``reset="raise"``) are raised from the next
``__anext__``/``fetch`` call; the partition's fetcher stops until :meth:`seek`.

Extension point for consumer groups (issue 5): the assignment is changed only through
``_assign``/``_revoke``, and every handed-out run of messages passes through ``_delivered``, so a
group member can drive the assignment and track offsets to commit without touching the
fetch logic.

Task safety: one event loop; iterate from one task at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from types import TracebackType

import anyio
import anyio.abc
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from jetsdk.client import Client
from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER_SIZE, Record, iter_records, peek_header
from jetsdk.consumer.positions import (
    ResetPolicy,
    StartPosition,
    parse_reset,
    parse_start,
    reset_offset,
    start_offset,
)
from jetsdk.errors import (
    ClientClosed,
    JetError,
    MalformedFrame,
    OffsetOutOfRange,
    PartitionNotFound,
)
from jetsdk.message import Message
from jetsdk.retry import RetryPolicy

__all__ = ["DEFAULT_FETCH_MAX_BYTES", "DEFAULT_FETCH_MAX_WAIT", "Consumer"]

DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
"""Soft bound on the record bytes of one Fetch response."""
DEFAULT_FETCH_MAX_WAIT = 0.5
"""Seconds a Fetch long poll waits for new records before answering empty."""
_FETCHER_BACKOFF = RetryPolicy(attempts=1_000_000, backoff=0.1, backoff_max=2.0)


@attrs.define(eq=False)
class _Fetched:
    partition: int
    generation: int
    records: list[Record]
    hw: int
    error: JetError | None = None


@attrs.define(eq=False, slots=True)
class _Ready:
    """Decoded records of one partition, handed out from ``index`` on."""

    partition: int
    records: list[Record]
    index: int = 0


@attrs.define(eq=False)
class _PartitionState:
    position: int
    generation: int = 0
    hw: int = -1
    log_start: int = -1
    scope: anyio.CancelScope | None = None
    credit: anyio.Semaphore | None = None
    stopped: bool = False


class Consumer:
    """Reads one stream's partitions in offset order. Use as ``async with Consumer(...)``."""

    def __init__(
        self,
        client: Client,
        stream: str,
        *,
        partitions: Iterable[int] | None = None,
        start: StartPosition = "earliest",
        reset: ResetPolicy = "earliest",
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_wait: float = DEFAULT_FETCH_MAX_WAIT,
    ) -> None:
        """Configure a consumer; it resolves positions and starts fetching in ``__aenter__``.

        Args:
            client: an entered :class:`~jetsdk.client.Client`.
            stream: the stream to read.
            partitions: partition numbers to read (default: all).
            start: where to start: ``"earliest"``, ``"latest"``, ``"new-only"``, an offset
                (int), a datetime, or a :class:`~jetsdk.consumer.positions.StartAt`.
            reset: what to do with an out-of-range offset: ``"earliest"``, ``"latest"`` or
                ``"raise"``.
            max_bytes: soft bound on one Fetch response's record bytes.
            max_wait: long-poll wait of one Fetch, seconds.

        Raises:
            InvalidArgument: a bad start or reset value.
        """
        if max_bytes < 1 or max_wait < 0:
            raise ValueError("max_bytes must be >= 1 and max_wait >= 0")
        self.client = client
        self.stream = stream
        self._wanted = None if partitions is None else sorted(set(partitions))
        self._start = parse_start(start)
        self.reset: ResetPolicy = parse_reset(reset)
        self.max_bytes = max_bytes
        self.max_wait = max_wait
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._states: dict[int, _PartitionState] = {}
        self._send: MemoryObjectSendStream[_Fetched] | None = None
        self._receive: MemoryObjectReceiveStream[_Fetched] | None = None
        self._buffer: deque[_Ready] = deque()

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        if self._tg is not None or self._closed:
            raise ClientClosed("a Consumer can be entered once")
        info = await self.client.stream_info(self.stream, refresh=True)
        available = [p.partition for p in info.partitions]
        partitions = available if self._wanted is None else self._wanted
        for p in partitions:
            if p not in available:
                raise PartitionNotFound(
                    f"stream {self.stream!r} has no partition {p}",
                    details={"stream": self.stream, "partition": p},
                )
        positions = {p: await self._resolve_start(p) for p in partitions}
        self._send, self._receive = anyio.create_memory_object_stream[_Fetched](
            max(1, len(partitions))
        )
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._assign(positions)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._closed = True
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            if self._send is not None:
                self._send.close()
            if self._receive is not None:
                self._receive.close()
        return None

    async def _resolve_start(self, partition: int) -> int:
        start = self._start
        if start.kind == "offset":
            return start.value
        if start.kind == "timestamp":
            found = await self.client.list_offsets(self.stream, partition, start.value)
            return start_offset(start, log_start=found.log_start, hw=found.hw, at_time=found.offset)
        found = await self.client.list_offsets(self.stream, partition, "earliest")
        return start_offset(start, log_start=found.log_start, hw=found.hw)

    # -- assignment (the extension point for consumer groups) ------------------------------

    def assignment(self) -> tuple[int, ...]:
        """The partitions this consumer reads, ascending."""
        return tuple(sorted(self._states))

    def _assign(self, positions: dict[int, int]) -> None:
        """Start reading partitions from the given offsets (replaces current positions)."""
        for partition, offset in positions.items():
            state = self._states.get(partition)
            if state is None:
                state = self._states[partition] = _PartitionState(position=offset)
            else:
                state.position = offset
            self._restart(partition, state)

    def _revoke(self, partitions: Iterable[int]) -> None:
        """Stop reading partitions and drop what was prefetched for them."""
        for partition in partitions:
            state = self._states.pop(partition, None)
            if state is not None and state.scope is not None:
                state.scope.cancel()
        self._drop_buffered(set(partitions))

    def _delivered(self, partition: int, last_offset: int) -> None:
        """Called whenever messages of ``partition`` up to ``last_offset`` were handed to the
        application (advances its position)."""
        self._states[partition].position = last_offset + 1

    # -- public API ----------------------------------------------------------------------

    def position(self, partition: int) -> int:
        """The next offset the application will receive from ``partition``.

        Raises:
            PartitionNotFound: the partition is not assigned.
        """
        return self._state(partition).position

    def high_watermark(self, partition: int) -> int | None:
        """The partition's high watermark as of the last fetch (None before any)."""
        hw = self._state(partition).hw
        return None if hw < 0 else hw

    def lag(self, partition: int) -> int | None:
        """Committed messages not yet received: HW minus position (None before a fetch)."""
        state = self._state(partition)
        return None if state.hw < 0 else max(0, state.hw - state.position)

    def seek(self, partition: int, offset: int) -> None:
        """Continue ``partition`` from ``offset``; prefetched messages are discarded.

        Raises:
            PartitionNotFound: the partition is not assigned.
            ValueError: a negative offset.
        """
        if offset < 0:
            raise ValueError("offset must be >= 0")
        state = self._state(partition)
        self._check_open()
        state.position = offset
        self._drop_buffered({partition})
        self._restart(partition, state)

    async def seek_to(self, partition: int, start: StartPosition) -> int:
        """Resolve a start position (as in the constructor) and :meth:`seek` there;
        return the offset."""
        self._check_open()
        self._state(partition)
        saved, self._start = self._start, parse_start(start)
        try:
            offset = await self._resolve_start(partition)
        finally:
            self._start = saved
        self.seek(partition, offset)
        return offset

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        """The next message (waits as long as needed).

        Raises:
            JetError: a non-retriable error of a partition's fetcher.
            StopAsyncIteration: the consumer is closed.
        """
        if not self._buffer:
            if self._tg is None:
                self._check_open()
            try:
                await self._fill(None)
            except ClientClosed:
                raise StopAsyncIteration from None
        ready = self._buffer[0]
        record = ready.records[ready.index]
        ready.index += 1
        if ready.index == len(ready.records):
            self._buffer.popleft()
        self._delivered(ready.partition, record.offset)
        return Message(self.stream, ready.partition, record)

    async def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[Message]:
        """Up to ``max_records`` messages: what is already here, or the first batch to
        arrive within ``timeout`` seconds (None: wait as long as needed; 0: do not wait).

        Returns an empty list if nothing arrived in time.

        Raises:
            JetError: a non-retriable error of a partition's fetcher.
            ClientClosed: the consumer is closed.
        """
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        out: list[Message] = []
        if not self._buffer:
            await self._fill(timeout)
        stream = self.stream
        while len(out) < max_records:
            if not self._buffer and not self._fill_nowait():
                break
            ready = self._buffer[0]
            end = min(len(ready.records), ready.index + max_records - len(out))
            partition = ready.partition
            out.extend([Message(stream, partition, r) for r in ready.records[ready.index : end]])
            self._delivered(partition, ready.records[end - 1].offset)
            ready.index = end
            if end == len(ready.records):
                self._buffer.popleft()
        return out

    # -- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the consumer is closed")
        if self._tg is None:
            raise ClientClosed("use the consumer inside `async with Consumer(...) as c:`")

    def _state(self, partition: int) -> _PartitionState:
        state = self._states.get(partition)
        if state is None:
            raise PartitionNotFound(
                f"partition {partition} of {self.stream!r} is not assigned to this consumer",
                details={"stream": self.stream, "partition": partition},
            )
        return state

    def _restart(self, partition: int, state: _PartitionState) -> None:
        assert self._tg is not None
        if state.scope is not None:
            state.scope.cancel()
        state.generation += 1
        state.stopped = False
        state.scope = anyio.CancelScope()
        state.credit = anyio.Semaphore(1)
        self._tg.start_soon(
            self._fetch_loop, partition, state, state.generation, state.position, state.scope
        )

    def _drop_buffered(self, partitions: set[int]) -> None:
        if any(r.partition in partitions for r in self._buffer):
            self._buffer = deque(r for r in self._buffer if r.partition not in partitions)

    async def _fill(self, timeout: float | None) -> bool:
        """Wait for the next current batch and put it in the buffer; False on timeout."""
        self._check_open()
        assert self._receive is not None
        while not self._buffer:
            if timeout is None:
                item = await self._receive_item()
            else:
                with anyio.move_on_after(timeout):
                    item = await self._receive_item()
                    self._accept(item)
                    continue
                return False
            self._accept(item)
        return True

    async def _receive_item(self) -> _Fetched:
        assert self._receive is not None
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ClientClosed("the consumer is closed") from None

    def _fill_nowait(self) -> bool:
        assert self._receive is not None
        while not self._buffer:
            try:
                item = self._receive.receive_nowait()
            except anyio.WouldBlock:
                return False
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise ClientClosed("the consumer is closed") from None
            self._accept(item)
        return True

    def _accept(self, item: _Fetched) -> None:
        state = self._states.get(item.partition)
        if state is None or item.generation != state.generation:
            return  # from before a seek or revoke
        if state.credit is not None:
            state.credit.release()
        if item.error is not None:
            raise item.error
        if item.records:
            self._buffer.append(_Ready(item.partition, item.records))

    async def _fetch_loop(
        self,
        partition: int,
        state: _PartitionState,
        generation: int,
        offset: int,
        scope: anyio.CancelScope,
    ) -> None:
        assert self._send is not None
        send = self._send
        credit = state.credit
        assert credit is not None
        failures = 0
        max_bytes = self.max_bytes
        with scope:
            while True:
                try:
                    header, raw = await self.client.fetch(
                        self.stream,
                        partition,
                        offset,
                        max_bytes=max_bytes,
                        max_wait=self.max_wait,
                    )
                    records = [r for r in iter_records(raw) if r.offset >= offset]
                    if not records and len(raw) >= HEADER_SIZE:
                        # Only a partial record came back: ask for at least its size.
                        max_bytes = max(self.max_bytes, peek_header(raw)[3])
                    else:
                        max_bytes = self.max_bytes
                except OffsetOutOfRange as exc:
                    log_start = exc.log_start if exc.log_start is not None else 0
                    hw = exc.hw if exc.hw is not None else 0
                    resume = reset_offset(offset, self.reset, log_start=log_start, hw=hw)
                    if resume is None or resume == offset:
                        await self._deliver_error(send, credit, partition, generation, exc)
                        return
                    offset = resume
                    state.position = resume if not self._buffer_has(partition) else state.position
                    continue
                except CodecError as exc:
                    error = MalformedFrame(f"corrupt records in {self.stream}/{partition}: {exc}")
                    await self._deliver_error(send, credit, partition, generation, error)
                    return
                except JetError as exc:
                    if not exc.retriable:
                        await self._deliver_error(send, credit, partition, generation, exc)
                        return
                    failures += 1
                    await anyio.sleep(_FETCHER_BACKOFF.delay(failures))
                    continue
                failures = 0
                state.hw, state.log_start = header.hw, header.log_start
                if not records:
                    continue
                offset = records[-1].offset + 1
                await credit.acquire()
                await send.send(_Fetched(partition, generation, records, header.hw))

    def _buffer_has(self, partition: int) -> bool:
        return any(r.partition == partition for r in self._buffer)

    async def _deliver_error(
        self,
        send: MemoryObjectSendStream[_Fetched],
        credit: anyio.Semaphore,
        partition: int,
        generation: int,
        error: JetError,
    ) -> None:
        await credit.acquire()
        await send.send(_Fetched(partition, generation, [], -1, error))
