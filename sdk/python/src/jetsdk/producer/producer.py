"""The Producer: partitioning, batching with a linger bound, an in-flight window, acks.

Usage::

    async with Client(servers) as client, Producer(client, "orders") as producer:
        ack = await producer.send(b"hello", key=b"user-1")       # wait for this ack
        handles = [await producer.send_soon(b"x%d" % i) for i in range(1000)]  # pipeline
        acks = [await h for h in handles]
    # leaving the block flushes: every message sent before is acknowledged or failed

How it works: :meth:`Producer.send_soon` picks the partition (explicit, the
partitioner's choice for the key, or round-robin), queues the message in the
:class:`~jetsdk.producer.accumulator.Accumulator` and returns a
:class:`~jetsdk.producer.handle.SendHandle`. The
:class:`~jetsdk.producer.sender.Sender` runs one task per partition (started on first
use, in the producer's task group) that cuts batches when they are full, ``linger``
seconds old or flushed, and sends each as one Produce request to the partition leader
through the :class:`~jetsdk.client.Client`, which retries after leader changes. The
producer is these two objects composed, as aiokafka's (accumulator + sender): it checks
and partitions messages and owns the lifecycle; the accumulator owns the queues, the
sender the requests, retries and the count of unsettled messages.

Backpressure: at most ``max_pending`` messages, and ``max_pending_bytes`` bytes of them
(estimated sizes: Kafka's ``buffer.memory``), may be queued or in flight; ``send_soon``
waits for room beyond that. The byte bound is what holds small messages back: a producer
spread over many partitions then still has many messages queued per partition, so its
batches stay large. Ordering: with ``max_in_flight=1`` one Produce request per partition
is outstanding at a time, so messages of one partition are stored in send order, retries
included. A larger window pipelines requests (more throughput, and less waiting when the
round trip is longer than the time between sends); a retried batch may then land after a
later one, except for an idempotent producer whose ack is LEADER or ALL (not on a stream
in a queue group): there the leader refuses a sequence that skips one
(OUT_OF_ORDER_SEQUENCE, retried), on the direct path and through NATS alike (a failover's
copies and forwarded requests carry ``Jet-Seq`` marks), and the oldest batch not settled
carries the sequence-start flag (spec/protocol.md, "Sequences"), as Kafka's idempotent
producer with ``max.in.flight.requests.per.connection`` <= 5. So an idempotent producer
may have up to 5 requests in flight (``max_in_flight``); the default is
:data:`DEFAULT_IDEMPOTENT_MAX_IN_FLIGHT` (1, measured there), as for any other producer.

Retries: a batch that fails with a retriable error (the partition leader moved or died:
NOT_LEADER, a lost connection, UNAVAILABLE, SHUTTING_DOWN, NOT_ENOUGH_REPLICAS,
STORAGE_ERROR, TOO_MANY_REQUESTS; also TIMEOUT for idempotent producers), as a whole or
for some of its messages, is sent again after a metadata refresh and a backoff, to the
partition's current leader, until ``delivery_timeout`` seconds after its first send (Kafka's
``delivery.timeout.ms``). Only then do its messages fail: with the last error, or
:class:`~jetsdk.errors.Timeout` if the deadline cut an attempt short. The retry of a batch
finishes before the partition's next batch is sent (with ``max_in_flight=1``).

Delivery is at-least-once: a message whose outcome is unknown (lost connection, leader
change while waiting for its ack) is sent again. With ``idempotent=True`` each message
carries a producer id and sequence, and a retry re-sends the same sequences, so the leader
(the new one too: it rebuilds its producer table from its log when it takes over) recognises
a copy it already stores and answers DUPLICATE_SEQUENCE with the stored offset (treated as
success): exactly once across failovers.

Task safety: one event loop; any number of tasks may send concurrently.
"""

from __future__ import annotations

import secrets
import time
from datetime import datetime

import anyio
import anyio.abc
import anyio.lowlevel

from jetsdk.background import BackgroundTasks
from jetsdk.client import Client
from jetsdk.codec.compression import DEFAULT_MIN_COMPRESS_BYTES, ValueCompressor
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import (
    new_produce_message,
)
from jetsdk.errors import (
    ClientClosed,
    MessageTooLarge,
    PartitionNotFound,
)
from jetsdk.message import Ack, HeadersInput
from jetsdk.partitioner import DefaultPartitioner, Partitioner
from jetsdk.producer.accumulator import (
    DEFAULT_LINGER,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_MESSAGES,
    Accumulator,
)
from jetsdk.producer.checks import checked_message, compressed, control_headers, message_size
from jetsdk.producer.compression_stage import (
    DEFAULT_OFFLOAD_BYTES,
    CompressionStage,
    compressed_messages,
)
from jetsdk.producer.direct import DirectSends
from jetsdk.producer.handle import SendHandle
from jetsdk.producer.in_flight import Pending, Prepared
from jetsdk.producer.outcomes import DEFAULT_MAX_PENDING_BYTES
from jetsdk.producer.sender import Sender

__all__ = [
    "DEFAULT_ACK_TIMEOUT",
    "DEFAULT_DELIVERY_TIMEOUT",
    "DEFAULT_IDEMPOTENT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_MAX_PENDING_BYTES",
    "Producer",
]

DEFAULT_ACK_TIMEOUT = 30.0
"""Seconds the server waits for the acks of a batch before answering TIMEOUT."""
DEFAULT_DELIVERY_TIMEOUT = 120.0
"""Seconds from a batch's first send until its messages must be acknowledged; retriable
failures are retried until then (Kafka's ``delivery.timeout.ms``)."""
DEFAULT_MAX_PENDING = 100_000
"""Most messages queued or in flight per producer before send_soon waits (10,000 until
issue 34: at 500 partitions that left ~10 messages per partition's batch; the byte bound,
:data:`DEFAULT_MAX_PENDING_BYTES`, now holds back all but small messages first)."""
DEFAULT_MAX_IN_FLIGHT = 1
"""Outstanding Produce requests per partition (1 keeps per-partition order on retries)."""
DEFAULT_IDEMPOTENT_MAX_IN_FLIGHT = 1
"""Outstanding Produce requests per partition of an idempotent producer whose ack is ALL by
default. Up to 5 keep their order (the leader's sequence check: module doc), but 5 made
RF 3's p50 worse on a quiet 2-core machine (`bench cluster --quick`, 10.6-16.1 ms against
6.3-11.4 ms at 1, 2026-11-30): each message went as its own request, and the servers' CPU
per request was the wait. Pass ``max_in_flight`` to choose."""

_PER_MESSAGE_OVERHEAD = 16


_new_tuple = tuple.__new__
"""Builds a NamedTuple from a tuple without its Python-level ``__new__`` (hot path)."""


def _is_deferred(prepared: Prepared) -> bool:
    return prepared.deferred


class Producer:
    """Sends messages to one stream. Use as ``async with Producer(client, stream) as p:``."""

    def __init__(
        self,
        client: Client,
        stream: str,
        *,
        ack: AckPolicy = AckPolicy.LEADER,
        linger: float = DEFAULT_LINGER,
        max_batch_messages: int = DEFAULT_MAX_BATCH_MESSAGES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_in_flight: int | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        partitioner: Partitioner | None = None,
        idempotent: bool = False,
        delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
        compression: str | None = None,
        compression_min_bytes: int = DEFAULT_MIN_COMPRESS_BYTES,
        compression_offload_bytes: int | None = DEFAULT_OFFLOAD_BYTES,
    ) -> None:
        """Configure a producer; it starts in ``__aenter__``.

        Args:
            client: an entered :class:`~jetsdk.client.Client`.
            stream: the stream to send to.
            ack: default ack policy (per-message override in :meth:`send`).
            linger: seconds a message may wait for others to share its batch (0: send as
                soon as the partition's sender is free).
            max_batch_messages: most messages per Produce request.
            max_batch_bytes: most (estimated) bytes per Produce request.
            max_in_flight: outstanding Produce requests per partition (None: 5 for an
                idempotent producer whose ack is ALL, else 1). 1 keeps each partition's
                messages in send order, retries included; more pipelines requests, and
                a retried batch may land after a later one unless the producer is
                idempotent and the leader appends its requests itself (module doc).
            max_pending: most messages queued or unacknowledged; send_soon waits beyond.
            max_pending_bytes: most bytes of messages queued or unacknowledged (their
                estimated sizes, as ``max_batch_bytes`` counts them; Kafka's
                ``buffer.memory``); send_soon waits beyond. A message larger than this
                still goes, alone.
            ack_timeout: seconds the server waits for acks before answering TIMEOUT.
            partitioner: ``(key, value, num_partitions) -> partition`` for messages without
                an explicit partition; default: murmur2 of the key, round-robin if keyless.
            idempotent: attach a producer id and sequences so retries can be deduplicated.
            delivery_timeout: seconds from a batch's first send during which retriable
                failures (leader moved, connection lost, ...) are retried on the
                partition's current leader (Kafka's ``delivery.timeout.ms``); then its
                messages fail with the last error.
            compression: ``"zstd"`` or ``"lz4"`` to store values compressed, with the
                header ``Jet-Compression`` naming the codec (spec/envelope.md, "Compressed
                values"; consumers of this SDK decompress them); None: as they are. Needs
                ``pip install jetsdk[compression]``. The key and headers stay readable
                (compaction and key lookups work), and ``max_message_bytes`` counts the
                compressed size.
            compression_min_bytes: values shorter than this are sent as they are, and so is
                one that would not get smaller (and, after such values, the next 1, 2, 4,
                ... up to 16 without trying; one that gets smaller starts over).
            compression_offload_bytes: the async producer compresses values at least
                this long (default 8 KiB) in a worker thread, off its event loop, a batch
                at a time, still stored in send order
                (:mod:`jetsdk.producer.compression_stage`: it measured faster than the
                loop, and less CPU, even with the server on the same 2 cores); None: every
                value in ``send_soon``, on the loop (the blocking producer compresses on
                its caller's thread either way).

        Raises:
            ValueError: a limit out of range; CompressionError (a ValueError) for an
                unknown codec or one whose package is not installed.
        """
        if max_in_flight is None:
            ordered = idempotent and AckPolicy(ack) == AckPolicy.ALL
            max_in_flight = DEFAULT_IDEMPOTENT_MAX_IN_FLIGHT if ordered else DEFAULT_MAX_IN_FLIGHT
        if max_in_flight < 1 or max_pending < 1 or max_pending_bytes < 1:
            raise ValueError("max_in_flight, max_pending and max_pending_bytes must be >= 1")
        if compression_offload_bytes is not None and compression_offload_bytes < 1:
            raise ValueError("compression_offload_bytes must be >= 1 (or None)")
        if ack_timeout <= 0 or delivery_timeout <= 0:
            raise ValueError("ack_timeout and delivery_timeout must be > 0")
        self.client = client
        self.stream = stream
        self.ack = AckPolicy(ack)
        self.max_in_flight = max_in_flight
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self.ack_timeout = ack_timeout
        self.idempotent = idempotent
        self.delivery_timeout = delivery_timeout
        self._compressor = (
            None if compression is None else ValueCompressor(compression, compression_min_bytes)
        )
        self.compression = compression
        self.compression_min_bytes = compression_min_bytes
        self.compression_offload_bytes = compression_offload_bytes
        self._partitioner: Partitioner = partitioner or DefaultPartitioner()
        self._acc: Accumulator[Pending] = Accumulator(
            linger=linger, max_batch_messages=max_batch_messages, max_batch_bytes=max_batch_bytes
        )
        self._sender = Sender(
            client,
            stream,
            self._acc,
            max_in_flight=max_in_flight,
            max_pending=max_pending,
            ack_timeout=ack_timeout,
            delivery_timeout=delivery_timeout,
            max_pending_bytes=max_pending_bytes,
        )
        self._outcomes = self._sender.outcomes
        self._direct = DirectSends(
            client,
            stream,
            self._acc,
            self._sender,
            max_in_flight=max_in_flight,
            ack_timeout=ack_timeout,
        )
        self._stage: CompressionStage[Prepared] | None = (
            None
            if self._compressor is None or compression_offload_bytes is None
            else CompressionStage(self._compress_deferred, self._append_all, _is_deferred)
        )
        self._offload_min = compression_offload_bytes or 0
        self._background = BackgroundTasks()
        self._started = False
        self._since_yield = 0
        self._closed = False
        self._num_partitions = 0
        self._max_message_bytes = 0

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        if self._started or self._closed:
            raise ClientClosed("a Producer can be entered once")
        info = await self.client.stream_info(self.stream, refresh=True)
        self._num_partitions = info.partition_count
        limit = self.client.max_message_bytes
        stream_limit = info.config.get("max_message_bytes")
        if isinstance(stream_limit, int) and stream_limit > 0:
            limit = min(limit, stream_limit)
        self._max_message_bytes = limit
        tg = await self._background.open()
        self._sender.start(tg, secrets.randbits(63) if self.idempotent else None)
        self._direct.start(self._acc.linger)
        if self._stage is not None:
            tg.start_soon(self._stage.run)
        self._started = True
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        assert self._started
        try:
            if exc_type is None:
                await self.flush()
        finally:
            self._closed = True
            # Callers blocked on backpressure see the close; what is queued fails.
            if self._stage is not None:
                self._stage.close()
            self._sender.close(self._acc.drain_all())
            await self._background.close()

    @property
    def num_partitions(self) -> int:
        """Partitions of the stream (known once entered)."""
        return self._num_partitions

    @property
    def pending(self) -> int:
        """Messages queued or awaiting their ack."""
        return self._sender.unresolved + (self._stage.held if self._stage else 0)

    @property
    def retries(self) -> int:
        """Produce requests sent again so far (whole or partial batches)."""
        return self._sender.retries

    @property
    def producer_id(self) -> int | None:
        """The idempotent producer id (None unless ``idempotent``; set once entered)."""
        return self._sender.producer_id

    # -- sending --------------------------------------------------------------------------

    async def send(
        self,
        value: bytes,
        key: bytes | None = None,
        headers: HeadersInput | None = None,
        *,
        ack: AckPolicy | None = None,
        partition: int | None = None,
        subject: str = "",
        msg_id: str | bytes | None = None,
        expected_offset: int | None = None,
        timestamp: int | datetime | None = None,
    ) -> Ack:
        """Send one message and wait for its ack.

        Args:
            value: the payload.
            key: the key (drives partitioning and compaction), or None.
            headers: a mapping or (name, value) pairs; str values are UTF-8 encoded.
            ack: ack policy for this message (default: the producer's).
            partition: explicit partition (default: the partitioner's choice).
            subject: NATS subject to publish on, which must match the partition's subject
                pattern (default: the partition subject).
            msg_id: an id for deduplication, sent as the ``Nats-Msg-Id`` header: a message
                whose id the partition stored within the stream's ``duplicate_window_s``
                is not stored again, and its ack is the stored copy's (same offset).
            expected_offset: store the message only if it gets this offset (optimistic
                concurrency; the ``Jet-Expected-Offset`` header), else it fails with
                :class:`~jetsdk.errors.WrongExpectedOffset` and is not stored.
            timestamp: the message's own time, ns since the epoch or an aware datetime,
                stored in the ``Jet-Timestamp`` header and read back as
                ``Message.producer_timestamp``; the record's timestamp (the ack's and the
                message's ``timestamp``) stays the server's
                (non-decreasing per partition, spec/storage.md).

        Returns:
            The :class:`~jetsdk.message.Ack` (offset -1 with ack policy NONE).

        Raises:
            MessageTooLarge: over the server's or stream's message limit.
            PartitionNotFound: ``partition`` out of range.
            InvalidArgument: a bad ``msg_id``, ``expected_offset`` or ``timestamp``, or a
                header that one of them writes given in ``headers`` too.
            WrongExpectedOffset: the message would not get ``expected_offset``.
            Timeout: no ack in time (the message may or may not be stored).
            JetError: any other failure (see :mod:`jetsdk.errors`).
        """
        # send_soon's steps without its call (one coroutine less per message), or the
        # direct send's (jetsdk.producer.direct) to an idle partition.
        prepared = self._prepare(
            value,
            key,
            headers,
            ack=ack,
            partition=partition,
            subject=subject,
            msg_id=msg_id,
            expected_offset=expected_offset,
            timestamp=timestamp,
            offload=True,
        )
        stage = self._stage  # nothing overtakes what the compression stage holds
        if (
            self._direct.enabled
            and (stage is None or not (prepared.deferred or stage.held))
            and (acked := await self._direct.send(prepared)) is not None
        ):
            return acked
        return await (await self._enqueue(prepared)).wait()

    async def send_soon(
        self,
        value: bytes,
        key: bytes | None = None,
        headers: HeadersInput | None = None,
        *,
        ack: AckPolicy | None = None,
        partition: int | None = None,
        subject: str = "",
        msg_id: str | bytes | None = None,
        expected_offset: int | None = None,
        timestamp: int | datetime | None = None,
    ) -> SendHandle:
        """Queue one message and return at once with a handle to its outcome.

        Waits only while ``max_pending`` messages (or ``max_pending_bytes``) are already
        pending (backpressure).
        Arguments as :meth:`send`; errors about the message itself (too large, bad
        partition, bad headers) are raised here, delivery errors by the handle.
        """
        return await self._enqueue(
            self._prepare(
                value,
                key,
                headers,
                ack=ack,
                partition=partition,
                subject=subject,
                msg_id=msg_id,
                expected_offset=expected_offset,
                timestamp=timestamp,
                offload=True,
            )
        )

    def _prepare(
        self,
        value: bytes,
        key: bytes | None = None,
        headers: HeadersInput | None = None,
        *,
        ack: AckPolicy | None = None,
        partition: int | None = None,
        subject: str = "",
        msg_id: str | bytes | None = None,
        expected_offset: int | None = None,
        timestamp: int | datetime | None = None,
        offload: bool = False,
    ) -> Prepared:
        """Check one message and choose its partition (pure: from any thread; the sync
        API calls it on the caller's thread so a bad message fails there). ``offload``: with
        a compression stage, a value of at least ``compression_offload_bytes`` within the
        limit, or any while the stage holds some (its compressor then sees values in send
        order, from one thread), is left to the stage (``deferred``)."""
        self._check_open()
        value, key, hdrs = checked_message(value, key, headers, subject)
        if msg_id is not None or expected_offset is not None or timestamp is not None:
            hdrs = control_headers(hdrs, msg_id, expected_offset, timestamp)
        stored = value
        size = message_size(stored, key, hdrs)
        stage = self._stage
        deferred = (
            offload
            and stage is not None
            and (len(value) >= self._offload_min or stage.held > 0)
            and size <= self._max_message_bytes
        )
        if self._compressor is not None and not deferred:
            stored, hdrs = compressed(self._compressor, value, hdrs)
            size = message_size(stored, key, hdrs)
        if size > self._max_message_bytes:
            raise MessageTooLarge(
                f"message of {size} bytes exceeds the limit of {self._max_message_bytes}",
                details={"max_message_bytes": self._max_message_bytes},
            )
        if partition is None:
            partition = self._partitioner(key, value, self._num_partitions)
        if not 0 <= partition < self._num_partitions:
            raise PartitionNotFound(
                f"stream {self.stream!r} has no partition {partition}",
                details={"stream": self.stream, "partition": partition},
            )
        policy = self.ack if ack is None else AckPolicy(ack)
        message = new_produce_message(stored, key, hdrs, subject)
        return _new_tuple(
            Prepared,
            (
                message,
                partition,
                policy,
                size + len(subject) + _PER_MESSAGE_OVERHEAD,
                deferred,
            ),
        )

    def _compress_deferred(self, items: list[Prepared]) -> list[Prepared]:
        """``items`` with their values compressed (or as they are): the compression stage's
        step, in its worker thread."""
        assert self._compressor is not None
        done = compressed_messages(self._compressor, [p.message for p in items])
        out = []
        for prepared, result in zip(items, done, strict=True):
            if result is None:
                out.append(prepared._replace(deferred=False))
                continue
            message, saved = result
            out.append(
                _new_tuple(
                    Prepared,
                    (message, prepared.partition, prepared.policy, prepared.size - saved, False),
                )
            )
        return out

    async def _enqueue(self, prepared: Prepared, handle: SendHandle | None = None) -> SendHandle:
        """Queue a message from :meth:`_prepare` (waits while the producer is full:
        ``max_pending``, ``max_pending_bytes``);
        ``handle``: the one to complete (default: a new one)."""
        sender, stage = self._sender, self._stage
        while self._outcomes.full(stage.held if stage else 0):
            await sender.wait_for_room()
            self._check_open()
        if handle is None:
            handle = SendHandle()
        self._since_yield += 1
        if stage is not None and (prepared.deferred or stage.held):
            full = stage.submit(prepared, handle)  # appended in order once compressed
        else:
            full = self._append(prepared, handle)
        if full or self._since_yield >= self._acc.max_batch_messages:
            # Let the senders ship full batches before queueing more.
            self._since_yield = 0
            await anyio.lowlevel.checkpoint()
        return handle

    def _append(self, prepared: Prepared, handle: SendHandle) -> bool:
        """Queue a message from :meth:`_prepare` in the accumulator, without waiting (the
        caller keeps ``max_pending`` and ``max_pending_bytes``: :meth:`_enqueue`, or the
        sync API's queue, which counts on its callers' side); True if it made its
        partition's head batch full."""
        if self._direct.writes and self._direct.write(prepared, handle):
            return False  # written at once to its idle partition (jetsdk.producer.direct)
        partition = prepared.partition
        full = self._acc.append(
            partition,
            Pending(prepared.message, handle, prepared.size),
            size=prepared.size,
            ack_policy=prepared.policy,
            now=time.monotonic(),
        )
        self._sender.queued(partition, prepared.size)
        return full

    def _append_all(self, items: list[tuple[Prepared, SendHandle]]) -> None:
        """Queue the compression stage's messages: all in the accumulator first, then
        counted, so that an idle partition sends them in one request, not one each."""
        acc, now = self._acc, time.monotonic()
        for prepared, handle in items:
            acc.append(
                prepared.partition,
                Pending(prepared.message, handle, prepared.size),
                size=prepared.size,
                ack_policy=prepared.policy,
                now=now,
            )
        queued = self._sender.queued
        for prepared, _ in items:
            queued(prepared.partition, prepared.size)

    async def flush(self) -> None:
        """Send everything queued now (ignoring linger) and wait until every message sent
        before the call is acknowledged or failed. Does not raise for failed messages
        (their handles do)."""
        self._check_open()
        if self._stage is not None:
            await self._stage.drained()
        await self._sender.flush()

    # -- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the producer is closed")
        if not self._started:
            raise ClientClosed("use the producer inside `async with Producer(...) as p:`")
