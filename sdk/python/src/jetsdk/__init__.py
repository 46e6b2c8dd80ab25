"""jetsdk: the Python SDK for jet streams (durable, replicated streams for NATS).

The async API (anyio: runs under asyncio and trio)::

    from jetsdk import Client, Producer, Consumer

    async with Client(["127.0.0.1:9292"]) as client:
        await client.create_stream("orders", "orders", partitions=3)
        async with Producer(client, "orders") as producer:
            ack = await producer.send(b"hello", key=b"user-1")
        async with Consumer(client, "orders", start="earliest") as consumer:
            async for msg in consumer:
                ...
        async with Consumer(client, group="billing", streams=["orders"]) as consumer:
            async for msg in consumer:      # this member's share; offsets committed
                ...

The same API for threads and scripts, without async: :mod:`jetsdk.sync`.
Errors: :mod:`jetsdk.errors` (every one is a :class:`JetError` with ``code`` and
``retriable``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetsdk._version import __version__
from jetsdk.lazy_names import lazy_names

if TYPE_CHECKING:
    from jetsdk.client import Client
    from jetsdk.codec.error_codes import AckPolicy, ErrorCode
    from jetsdk.consumer import Consumer, OffsetAndMetadata, StartAt
    from jetsdk.consumer.share_consumer import LostOutcome, ShareConsumer, ShareSettings
    from jetsdk.consumer.share_message import AcknowledgeType, ShareMessage
    from jetsdk.errors import (
        ClientClosed,
        InvalidArgument,
        JetConnectionError,
        JetError,
        MessageTooLarge,
        NotEnoughReplicas,
        NotLeader,
        OffsetOutOfRange,
        PartitionNotFound,
        PermissionDenied,
        ProtocolError,
        StreamExists,
        StreamNotFound,
        Timeout,
        Unavailable,
        WrongExpectedKeyOffset,
    )
    from jetsdk.group.errors import CommitFailed, GroupError, MemberFenced, NoCommittedOffset
    from jetsdk.group.member import MemberConfig
    from jetsdk.group.stream_partition import StreamPartition
    from jetsdk.message import Ack, Message
    from jetsdk.metadata import OffsetInfo, PartitionInfo, StreamInfo
    from jetsdk.partitioner import DefaultPartitioner, Partitioner, RoundRobinPartitioner
    from jetsdk.producer import Producer, SendHandle
    from jetsdk.retry import RetryPolicy
    from jetsdk.table import Table

_LAZY = {
    "Client": "jetsdk.client",
    "AckPolicy": "jetsdk.codec.error_codes",
    "ErrorCode": "jetsdk.codec.error_codes",
    "Consumer": "jetsdk.consumer",
    "OffsetAndMetadata": "jetsdk.consumer",
    "StartAt": "jetsdk.consumer",
    "ShareConsumer": "jetsdk.consumer.share_consumer",
    "ShareSettings": "jetsdk.consumer.share_consumer",
    "LostOutcome": "jetsdk.consumer.share_consumer",
    "ShareMessage": "jetsdk.consumer.share_message",
    "AcknowledgeType": "jetsdk.consumer.share_message",
    "ClientClosed": "jetsdk.errors",
    "InvalidArgument": "jetsdk.errors",
    "JetConnectionError": "jetsdk.errors",
    "JetError": "jetsdk.errors",
    "MessageTooLarge": "jetsdk.errors",
    "NotEnoughReplicas": "jetsdk.errors",
    "NotLeader": "jetsdk.errors",
    "OffsetOutOfRange": "jetsdk.errors",
    "PartitionNotFound": "jetsdk.errors",
    "PermissionDenied": "jetsdk.errors",
    "ProtocolError": "jetsdk.errors",
    "StreamExists": "jetsdk.errors",
    "StreamNotFound": "jetsdk.errors",
    "Timeout": "jetsdk.errors",
    "Unavailable": "jetsdk.errors",
    "WrongExpectedKeyOffset": "jetsdk.errors",
    "CommitFailed": "jetsdk.group.errors",
    "GroupError": "jetsdk.group.errors",
    "MemberFenced": "jetsdk.group.errors",
    "NoCommittedOffset": "jetsdk.group.errors",
    "MemberConfig": "jetsdk.group.member",
    "StreamPartition": "jetsdk.group.stream_partition",
    "Ack": "jetsdk.message",
    "Message": "jetsdk.message",
    "OffsetInfo": "jetsdk.metadata",
    "PartitionInfo": "jetsdk.metadata",
    "StreamInfo": "jetsdk.metadata",
    "DefaultPartitioner": "jetsdk.partitioner",
    "Partitioner": "jetsdk.partitioner",
    "RoundRobinPartitioner": "jetsdk.partitioner",
    "Producer": "jetsdk.producer",
    "SendHandle": "jetsdk.producer",
    "RetryPolicy": "jetsdk.retry",
    "Table": "jetsdk.table",
}
"""Where each public name lives: imported on first use, so that ``import jetsdk.codec``
(the server's wire codec) does not import the whole client (the server imported 70
SDK modules at every start, most of them never used there)."""

__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = [
    "Ack",
    "AckPolicy",
    "AcknowledgeType",
    "Client",
    "ClientClosed",
    "CommitFailed",
    "Consumer",
    "DefaultPartitioner",
    "ErrorCode",
    "GroupError",
    "InvalidArgument",
    "JetConnectionError",
    "JetError",
    "LostOutcome",
    "MemberConfig",
    "MemberFenced",
    "Message",
    "MessageTooLarge",
    "NoCommittedOffset",
    "NotEnoughReplicas",
    "NotLeader",
    "OffsetAndMetadata",
    "OffsetInfo",
    "OffsetOutOfRange",
    "PartitionInfo",
    "PartitionNotFound",
    "Partitioner",
    "PermissionDenied",
    "Producer",
    "ProtocolError",
    "RetryPolicy",
    "RoundRobinPartitioner",
    "SendHandle",
    "ShareConsumer",
    "ShareMessage",
    "ShareSettings",
    "StartAt",
    "StreamExists",
    "StreamInfo",
    "StreamNotFound",
    "StreamPartition",
    "Table",
    "Timeout",
    "Unavailable",
    "WrongExpectedKeyOffset",
    "__version__",
]
