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

from jetsdk._version import __version__
from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.consumer import Consumer, OffsetAndMetadata, StartAt
from jetsdk.consumer.share import ShareConsumer
from jetsdk.consumer.share_message import ShareMessage
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
)
from jetsdk.group.errors import CommitFailed, GroupError, MemberFenced, NoCommittedOffset
from jetsdk.group.member import MemberConfig
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.message import Ack, Message
from jetsdk.metadata import OffsetInfo, PartitionInfo, StreamInfo
from jetsdk.partitioner import DefaultPartitioner, Partitioner, RoundRobinPartitioner
from jetsdk.producer import Producer, SendHandle
from jetsdk.retry import RetryPolicy

__all__ = [
    "Ack",
    "AckPolicy",
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
    "StartAt",
    "StreamExists",
    "StreamInfo",
    "StreamNotFound",
    "StreamPartition",
    "Timeout",
    "Unavailable",
    "__version__",
]
