# generated — do not edit: made by tools/gen_sync.py from jetsdk/producer/producer.py

"""Blocking :class:`Producer` (generated from :mod:`jetsdk.producer.producer`)."""

from __future__ import annotations

from datetime import datetime

from jetsdk._sync_sends import SendHandle
from jetsdk._sync_support import SyncWrapper
from jetsdk.codec.compression import DEFAULT_MIN_COMPRESS_BYTES
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.message import Ack, HeadersInput
from jetsdk.partitioner import Partitioner
from jetsdk.producer.accumulator import (
    DEFAULT_LINGER,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_MESSAGES,
)
from jetsdk.producer.outcomes import DEFAULT_MAX_PENDING_BYTES
from jetsdk.producer.producer import (
    DEFAULT_ACK_TIMEOUT,
    DEFAULT_DELIVERY_TIMEOUT,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_PENDING,
)
from jetsdk.producer.producer import Producer as _AsyncProducer
from jetsdk.sync.client import Client


class Producer(SyncWrapper[_AsyncProducer]):
    """Sends messages to one stream. Use as ``with Producer(client, stream) as p:``.

    Blocking version of :class:`jetsdk.producer.producer.Producer` (generated): each
    method runs the async one it names, documented there, in the client's private
    event-loop thread. Thread-safe.
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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        partitioner: Partitioner | None = None,
        idempotent: bool = False,
        delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
        compression: str | None = None,
        compression_min_bytes: int = DEFAULT_MIN_COMPRESS_BYTES,
        compression_offload_bytes: int | None = None,
    ) -> None:
        """Arguments as for :class:`jetsdk.producer.producer.Producer`."""
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

    @property
    def num_partitions(self) -> int:
        """As :attr:`jetsdk.producer.producer.Producer.num_partitions`."""
        return self._obj.num_partitions

    @property
    def pending(self) -> int:
        """As :attr:`jetsdk.producer.producer.Producer.pending`."""
        return self._obj.pending

    @property
    def retries(self) -> int:
        """As :attr:`jetsdk.producer.producer.Producer.retries`."""
        return self._obj.retries

    @property
    def producer_id(self) -> int | None:
        """As :attr:`jetsdk.producer.producer.Producer.producer_id`."""
        return self._obj.producer_id

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
        """Blocking :meth:`jetsdk.producer.producer.Producer.send`."""
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
        """Blocking :meth:`jetsdk.producer.producer.Producer.send_soon`."""
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
        """Blocking :meth:`jetsdk.producer.producer.Producer.flush`."""
        self._queued().flush()
