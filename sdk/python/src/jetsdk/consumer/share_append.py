"""A share-group member's appends to its share log (spec/share-groups.md §2, §5).

:class:`ShareAppender` sends claims, settles and settings records in order, up to
:data:`MAX_APPEND_BATCH` in one Produce request with ack ALL, keyed ``<member>/<sequence>``
(unique keys, spec §2). For each stored record it tells the member the server time and the
round trip (the lease clock and the stop margin); a claim that was not stored is forgotten at
once (lost appends are part of the protocol, spec §8).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio
import attrs

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.consumer.append_queue import AppendQueue
from jetsdk.errors import JetError
from jetsdk.share.member import ShareMember
from jetsdk.share.records import Claim, ShareRecord, encode_share_record

__all__ = ["MAX_APPEND_BATCH", "ShareAppender"]

MAX_APPEND_BATCH = 500
"""Most records in one Produce request."""


@attrs.define(eq=False)
class ShareAppender:
    """The ordered append queue of one member (see the module docstring)."""

    client: Client
    log: str
    member: ShareMember
    appended: Callable[[], None]
    """Called after each Produce request's results are applied."""
    _queue: AppendQueue[tuple[ShareRecord, bytes]] = attrs.field(
        factory=lambda: AppendQueue(MAX_APPEND_BATCH), init=False
    )
    _seq: int = attrs.field(default=0, init=False)
    sent: int = attrs.field(default=0, init=False)
    """Records queued so far."""
    done: int = attrs.field(default=0, init=False)
    """Records whose append finished (stored or not)."""
    stored_end: int = attrs.field(default=0, init=False)
    """The end of the share-log records this member stored."""
    _finished: anyio.Event = attrs.field(factory=anyio.Event, init=False)

    def enqueue(self, records: Sequence[ShareRecord]) -> None:
        member = self.member.config.member
        for record in records:
            self._seq += 1
            self._queue.put((record, f"{member}/{self._seq}".encode()))
        self.sent += len(records)

    async def wait_done(self, target: int) -> None:
        """Until the first ``target`` records queued have finished."""
        while self.done < target:
            self._finished = anyio.Event()
            await self._finished.wait()

    async def run(self) -> None:
        """Send forever (a task)."""
        member = self.member
        while True:
            batch = await self._queue.next_batch()
            request = ProduceRequest(
                stream=self.log,
                partition=0,
                ack_policy=AckPolicy.ALL,
                timeout_ms=10_000,
                messages=tuple(ProduceMessage(encode_share_record(r), key) for r, key in batch),
            )
            sent_at = time.monotonic()
            try:
                results = await self.client.produce(request)
            except JetError:
                results = []  # lost appends are part of the protocol (spec §8)
            acked_at = time.monotonic()
            for i, (record, _key) in enumerate(batch):
                if i < len(results) and results[i].error_code == ErrorCode.NONE:
                    member.on_appended(sent_at, results[i].timestamp, acked_at)
                    self.stored_end = max(self.stored_end, results[i].offset + 1)
                elif isinstance(record, Claim):
                    member.claim_failed(record.stream, record.partition, record.start)
            self.done += len(batch)
            self._finished.set()
            self.appended()
