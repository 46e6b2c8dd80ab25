"""A table's writes: Produce messages through the public :meth:`jetsdk.Client.produce`, ack
ALL, as an idempotent producer (so a retry after an unknown outcome is answered
DUPLICATE_SEQUENCE with the stored offset instead of being stored twice or, for a
compare-and-set, refused by its own success).

Writes to one partition that are called while a request to it is in flight are sent
together in the next request (one Produce request of up to :data:`MAX_BATCH_MESSAGES`
messages, in call order, consecutive sequences): concurrent ``put`` calls share a round
trip and an fsync instead of queueing one request each behind the previous one. Nothing
waits to fill a batch (no linger): a write that finds its partition idle goes at once. The
caller of the first write in the queue sends the batch; when it is answered the next
queued write's caller sends the next one.

A compare-and-set carries ``Jet-Expected-Key-Offset`` (spec/envelope.md, "Per-key
compare-and-set"); the server checks the messages of a request in order, each against the
ones before it, and refuses it with WRONG_EXPECTED_KEY_OFFSET naming the key's current
offset, raised here as :class:`~jetsdk.errors.WrongExpectedKeyOffset`. A request holding
a compare-and-set asks for the key's current value too (the Produce flag "current values",
spec/protocol.md §6): the refusal then carries it (``current_value``), so the writer can
retry at once on it instead of reading the key first.
"""

from __future__ import annotations

import asyncio
import secrets

import anyio
import attrs

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode, is_retriable
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, ProduceResult, new_produce_message
from jetsdk.codec.ttl import TTL_HEADER
from jetsdk.errors import JetError, WrongExpectedKeyOffset, error_from_code
from jetsdk.partitioner import partition_for_key
from jetsdk.transport import running_asyncio_loop

EXPECTED_KEY_OFFSET = "Jet-Expected-Key-Offset"
"""The header of a per-key compare-and-set."""
ABSENT = -1
"""Expected revision meaning "the key has no live value" (create)."""
MAX_WRITE_ATTEMPTS = 200
"""Tries of one write whose result is retriable (TIMEOUT, NOT_LEADER, UNAVAILABLE while a
new leader rebuilds its key index from a long log...), :data:`RETRY_PAUSE_S` apart."""
RETRY_PAUSE_S = 0.1
"""Pause between such tries (a leader election takes a moment)."""
MAX_BATCH_MESSAGES = 1000
"""Most writes sent in one Produce request."""
MAX_BATCH_BYTES = 1024 * 1024
"""Most key and value bytes in one Produce request (a single larger write goes alone)."""
_FINAL = frozenset(
    {ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE, ErrorCode.WRONG_EXPECTED_KEY_OFFSET}
)
"""Per-message results never tried again."""


@attrs.define(eq=False)
class _Write:
    """One call's message, waiting for its result or for its turn to send a batch."""

    key: bytes
    expected: int | None
    message: ProduceMessage
    seq: int = -1
    _woken: bool = False
    _future: asyncio.Future[None] | None = None
    """What a waiting caller awaits under asyncio (a future: a tenth of an anyio event's
    cost, as :class:`jetsdk.connection.PendingResponse`); made only if it waits."""
    _event: anyio.Event | None = None
    """The same under another event loop (trio)."""
    result: ProduceResult | None = None
    error: BaseException | None = None
    sends: bool = False
    """Its caller sends the next batch (set before it is woken)."""
    retry_error: JetError | None = None
    """Why its last try must be repeated (raised if the tries run out)."""

    def wake(self) -> None:
        """Its result is known or its turn to send came (idempotent)."""
        self._woken = True
        future = self._future
        if future is not None:
            if not future.done():
                future.set_result(None)
        elif self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once :meth:`wake` was called (cancellable)."""
        if self._woken:
            return
        loop = running_asyncio_loop()
        if loop is not None:
            self._future = loop.create_future()
            await self._future
        else:
            self._event = anyio.Event()
            await self._event.wait()


@attrs.define(eq=False)
class TableWriter:
    """Writes the keys of one stream (module docstring)."""

    client: Client
    stream: str
    partitions: int
    timeout_s: float
    producer_id: int = attrs.field(factory=lambda: secrets.randbits(63))
    _seq: int = 0
    _queues: dict[int, list[_Write]] = attrs.field(factory=dict)
    """Writes waiting per partition; present while a request to it is in flight."""
    requests: int = 0
    """Produce requests sent (a metric and a test hook)."""

    def partition_of(self, key: bytes) -> int:
        """The partition a key lives in (the SDK's default partitioner)."""
        return partition_for_key(key, self.partitions)

    async def write(
        self, key: bytes, value: bytes, expected: int | None, ttl_ms: int | None = None
    ) -> int:
        """Store ``value`` (empty: a tombstone) under ``key``, if ``expected`` is None or
        the key's revision, expiring ``ttl_ms`` after it is stored (``Jet-TTL``, None:
        never); return the record's offset.

        Raises:
            WrongExpectedKeyOffset: the key is at another revision (``current_revision``).
            JetError: the write failed (retriable errors after :data:`MAX_WRITE_ATTEMPTS`).
        """
        headers: tuple[tuple[str, bytes], ...] = ()
        if expected is not None:
            headers = ((EXPECTED_KEY_OFFSET, str(expected).encode()),)
        if ttl_ms is not None:
            headers = (*headers, (TTL_HEADER, b"%d" % ttl_ms))
        write = _Write(key, expected, new_produce_message(value, key, headers, ""))
        partition = self.partition_of(key)
        queue = self._queues.get(partition)
        if queue is None:
            self._queues[partition] = queue = []
            write.sends = True
        queue.append(write)
        if not write.sends:
            try:
                await write.wait()
            except BaseException:  # cancelled: never sent, or sent by another caller
                self._withdraw(partition, queue, write)
                raise
        if write.sends:
            await self._send_next(partition, queue)
        return self._outcome(partition, write)

    def _withdraw(self, partition: int, queue: list[_Write], write: _Write) -> None:
        """Take a cancelled caller's write out of the queue if it was not sent yet, and
        hand its turn to send on if it had it."""
        if write in queue:
            queue.remove(write)
            if write.sends:
                self._hand_on(partition, queue)

    def _hand_on(self, partition: int, queue: list[_Write]) -> None:
        if queue:
            nxt = queue[0]
            nxt.sends = True
            nxt.wake()
        else:
            del self._queues[partition]

    async def _send_next(self, partition: int, queue: list[_Write]) -> None:
        """Send the first writes of ``queue`` as one request; then hand the turn on."""
        try:
            size = 0
            count = 0
            for w in queue[:MAX_BATCH_MESSAGES]:
                size += len(w.message.value) + len(w.key)
                if count and size > MAX_BATCH_BYTES:
                    break
                count += 1
            batch = queue[:count]
            del queue[:count]
            with anyio.CancelScope(shield=True):  # its writes' callers wait for the answer
                await self._send(partition, batch)
        finally:
            self._hand_on(partition, queue)

    async def _send(self, partition: int, batch: list[_Write]) -> None:
        """Send ``batch`` (consecutive sequences) until every write has a final result;
        writes whose result is retriable are tried again with their own sequences (each
        run of consecutive ones in one request), :data:`RETRY_PAUSE_S` apart."""
        base = self._seq
        self._seq += len(batch)
        for i, w in enumerate(batch):
            w.seq = base + i
        try:
            again = await self._try(partition, batch, base)
            for _ in range(MAX_WRITE_ATTEMPTS - 1):
                if not again:
                    break
                await anyio.sleep(RETRY_PAUSE_S)
                retried: list[_Write] = []
                for run in _runs(again):
                    retried += await self._try(partition, run, run[0].seq)
                again = retried
            for w in again:
                w.error = w.retry_error
        except BaseException as exc:  # the request itself failed for good
            for w in batch:
                if w.result is None and w.error is None:
                    w.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for w in batch:
                w.wake()

    async def _try(self, partition: int, batch: list[_Write], base: int) -> list[_Write]:
        """One request with ``batch``; the writes whose result was retriable."""
        request = ProduceRequest(
            self.stream,
            partition,
            AckPolicy.ALL,
            int(self.timeout_s * 1000),
            tuple(w.message for w in batch),
            self.producer_id,
            base,
            current_values=any(w.expected is not None for w in batch),
        )
        self.requests += 1
        try:
            results = await self.client.produce(request)
        except JetError as exc:
            if not exc.retriable:
                raise
            for w in batch:
                w.retry_error = exc
            return list(batch)
        again = []
        for w, result in zip(batch, results, strict=True):
            code = result.error_code
            if code not in _FINAL and is_retriable(code):
                details = {"stream": self.stream, "partition": partition}
                text = f"table write to {self.stream}/{partition}"
                w.retry_error = error_from_code(code, text, details)
                again.append(w)
            else:
                w.result = result
        return again

    def _outcome(self, partition: int, w: _Write) -> int:
        if w.error is not None:
            raise w.error
        result = w.result
        assert result is not None
        code = result.error_code
        if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE):
            return result.offset
        details = {"stream": self.stream, "partition": partition, "expected": w.expected}
        if code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
            current = result.offset
            now = "has no value" if current == ABSENT else f"is at revision {current}"
            raise WrongExpectedKeyOffset(
                f"key {w.key[:40]!r} {now}, not {w.expected}",
                details={
                    **details,
                    "current_revision": current,
                    "current_value": result.current_value,
                },
            )
        raise error_from_code(code, f"table write to {self.stream}/{partition}", details)


def _runs(writes: list[_Write]) -> list[list[_Write]]:
    """``writes`` (in sequence order) cut into runs of consecutive sequences."""
    runs: list[list[_Write]] = []
    for w in writes:
        if runs and runs[-1][-1].seq + 1 == w.seq:
            runs[-1].append(w)
        else:
            runs.append([w])
    return runs
