# generated — do not edit: made by tools/gen_sync.py from jetsdk/producer/producer.py

"""Blocking :class:`Producer` (generated from :mod:`jetsdk.producer.producer`)."""

from __future__ import annotations

from datetime import datetime

from jetsdk._sync_sends import SendHandle
from jetsdk._sync_support import Forwarded, SyncWrapper
from jetsdk.codec.compression import DEFAULT_MIN_COMPRESS_BYTES
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.message import Ack, HeadersInput
from jetsdk.partitioner import Partitioner
from jetsdk.producer.accumulator import (
    DEFAULT_LINGER,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_MESSAGES,
)
from jetsdk.producer.compression_stage import DEFAULT_OFFLOAD_BYTES
from jetsdk.producer.outcomes import DEFAULT_MAX_PENDING_BYTES
from jetsdk.producer.producer import (
    DEFAULT_ACK_TIMEOUT,
    DEFAULT_DELIVERY_TIMEOUT,
    DEFAULT_MAX_PENDING,
)
from jetsdk.producer.producer import Producer as _AsyncProducer
from jetsdk.sync.client import Client


class Producer(SyncWrapper[_AsyncProducer]):
    """Sends messages to one stream. Use as ``with Producer(client, stream) as p:``.

    Blocking version of :class:`jetsdk.producer.producer.Producer`
    (generated); every call runs in the client's private event-loop thread. Thread-safe.
    """

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
        """Configure a producer; it starts in ``__enter__``.

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
        self._factory = lambda: _AsyncProducer(
            client._obj,
            stream,
            ack=ack,
            linger=linger,
            max_batch_messages=max_batch_messages,
            max_batch_bytes=max_batch_bytes,
            max_in_flight=max_in_flight,
            max_pending=max_pending,
            max_pending_bytes=max_pending_bytes,
            ack_timeout=ack_timeout,
            partitioner=partitioner,
            idempotent=idempotent,
            delivery_timeout=delivery_timeout,
            compression=compression,
            compression_min_bytes=compression_min_bytes,
            compression_offload_bytes=compression_offload_bytes,
        )
        self._owner = client

    num_partitions = Forwarded(_AsyncProducer.num_partitions)
    """Partitions of the stream (known once entered)."""

    pending = Forwarded(_AsyncProducer.pending)
    """Messages queued or awaiting their ack."""

    retries = Forwarded(_AsyncProducer.retries)
    """Produce requests sent again so far (whole or partial batches)."""

    producer_id = Forwarded(_AsyncProducer.producer_id)
    """The idempotent producer id (None unless ``idempotent``; set once entered)."""

    def send(
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
        prepared = self._obj._prepare(
            value,
            key,
            headers,
            ack=ack,
            partition=partition,
            subject=subject,
            msg_id=msg_id,
            expected_offset=expected_offset,
            timestamp=timestamp,
        )
        return self._queued().send_soon(prepared).result()

    def send_soon(
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
        prepared = self._obj._prepare(
            value,
            key,
            headers,
            ack=ack,
            partition=partition,
            subject=subject,
            msg_id=msg_id,
            expected_offset=expected_offset,
            timestamp=timestamp,
        )
        return self._queued().send_soon(prepared)

    def flush(self) -> None:
        """Send everything queued now (ignoring linger) and wait until every message sent
        before the call is acknowledged or failed. Does not raise for failed messages
        (their handles do).
        """
        self._queued().flush()
