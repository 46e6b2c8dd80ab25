"""Writing what a nats-py connection holds pending to its socket from the event loop.

nats-py's ``publish`` queues a command in the client's ``_pending`` list and wakes its
flusher task, which writes them all. :class:`PendingWriter` writes them without that task:
once at the end of the loop turn (:meth:`PendingWriter.write_soon`: every publish of the
turn in one write, no task wake-up and queue round trip), or at once
(:meth:`PendingWriter.send_now`: one command when nothing else waits, the NATS copy of a
request answered already, docs/latency.md).

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence

import attrs
from nats.aio.client import Client as NatsClient

from jetsdk.codec.transcode import EnvelopeBytes, SplitEnvelope
from jetserver.logs import fields
from jetserver.natslink.flush import socket_transport

__all__ = ["WRITE_BUFFER_LIMIT", "PendingWriter", "queue_commands"]

log = logging.getLogger(__name__)

_CONNECTED = NatsClient.CONNECTED
_CONNECTING = NatsClient.CONNECTING
_BAD_SUBJECT = re.compile(r"\s")
"""What nats-py refuses in a published subject (whitespace, CR, LF: no protocol injection)."""
_MAX_CACHED_SUBJECTS = 4096
WRITE_BUFFER_LIMIT = 64 * 1024
"""Above this many bytes waiting in a NATS connection's socket buffer, publishes go
through nats-py's flusher task, which waits for the buffer to drain."""


@attrs.define(eq=False)
class PendingWriter:
    """Writes nats-py connections' pending commands to their sockets (module docstring)."""

    _write_due: set[int] = attrs.field(factory=set)
    """ids of the connections whose pending publishes this loop turn writes
    (:meth:`write_soon`)."""
    _socket_transports: dict[int, tuple[object, asyncio.WriteTransport | None]] = attrs.field(
        factory=dict
    )
    """By connection id: its nats-py transport and the asyncio one under it."""
    _loop: asyncio.AbstractEventLoop | None = None
    """The running loop, once looked up (asyncio.get_running_loop costs a getpid system
    call per call on Python 3.11; the link lives on one loop)."""

    def write_soon(self, nc: NatsClient) -> None:
        """Have what ``nc`` holds pending written at the end of this loop turn, by a loop
        callback (:meth:`_write_pending`), as nats-py's flusher task would once woken: all
        publishes of the turn in one write, without the task's wake-up and queue round
        trip (one per Produce request at light load, docs/latency.md, "Hops")."""
        key = id(nc)
        if key not in self._write_due:
            self._write_due.add(key)
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._write_pending, nc)

    def send_now(self, nc: NatsClient, parts: Sequence[bytes | memoryview]) -> bool:
        """Write the commands ``parts`` to ``nc``'s socket now, if nothing is pending on
        it (so they keep their order) nor was written so this loop turn, it is connected
        and its socket buffer has room: True if written; False: nothing done (the caller
        publishes as always). What is published on ``nc`` later in the turn waits for
        its end (:meth:`write_soon`): one write per turn more at most, not one per
        message, under load; so do ``parts`` if that write is due already (queued behind
        what it writes, in order: True too)."""
        if nc._status != _CONNECTED:
            return False
        if id(nc) in self._write_due:
            size = sum(map(len, parts))
            if 0 < nc._max_pending_size < nc._pending_data_size + size:
                return False  # (nats-py's publish waits for its flush then)
            nc._pending.extend(parts)  # type: ignore[arg-type]  # (as _publish_on's views)
            nc._pending_data_size += size
            return True
        if nc._pending_data_size:
            return False
        raw = self._raw_transport(nc)
        if raw is None or raw.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
            return False
        raw.writelines(parts)
        self.write_soon(nc)  # the turn's later publishes: at its end, together
        return True

    def _raw_transport(self, nc: NatsClient) -> asyncio.WriteTransport | None:
        """The socket's transport, found once per nats-py transport (a reconnect makes a
        new one): not looked up through three objects for every write."""
        transport = nc._transport
        known = self._socket_transports.get(id(nc))
        if known is None or known[0] is not transport:
            known = self._socket_transports[id(nc)] = (transport, socket_transport(transport))
        return known[1]

    def _write_pending(self, nc: NatsClient) -> None:
        self._write_due.discard(id(nc))
        status = nc._status
        if not nc._pending_data_size or (status != _CONNECTED and not nc.is_connected):
            return  # written already, or nats-py writes it once reconnected
        if status == _CONNECTING:
            return
        try:
            raw = self._raw_transport(nc)
            if raw is not None and raw.get_write_buffer_size() <= WRITE_BUFFER_LIMIT:
                raw.writelines(nc._pending)
                nc._pending = []
                nc._pending_data_size = 0
                return
        except Exception as exc:  # the flusher meets it again and reconnects
            log.debug("NATS write failed", extra=fields(error=str(exc)))
        queue = nc._flush_queue
        if queue is not None and queue.empty():  # the flusher writes and drains
            queue.put_nowait(asyncio.get_running_loop().create_future())


def queue_commands(
    nc: NatsClient,
    subjects: dict[str, bytes],
    messages: Sequence[tuple[str, EnvelopeBytes]],
    header_block: bytes,
) -> int:
    """Add the publish commands of ``messages`` to ``nc``'s pending buffer, in order,
    with no wait (``subjects``: their encoded forms, a cache this fills): how many leading
    ones were queued (a bad subject or one over max_payload stops it)."""
    max_payload = int(nc._max_payload or 0)
    cmds: list[bytes | memoryview] = []
    hlen = len(header_block)
    payload_bytes = 0
    queued = 0
    for subject, payload in messages:
        raw = subjects.get(subject)
        if raw is None:
            if not subject or _BAD_SUBJECT.search(subject):
                log.debug("publish refused: bad subject", extra=fields(subject=subject))
                break
            if len(subjects) >= _MAX_CACHED_SUBJECTS:
                subjects.clear()
            raw = subjects[subject] = subject.encode()
        size = len(payload)
        if max_payload and size + hlen > max_payload:
            log.debug("publish refused: over max_payload", extra=fields(subject=subject))
            break
        # The command around the payload, not formatted with it: the payload is copied
        # once, when the flusher writes the pending buffers (a large value was copied
        # twice more here, into the command and into the batch).
        if hlen:
            cmds.append(b"HPUB %b %d %d\r\n%b" % (raw, hlen, hlen + size, header_block))
        else:
            cmds.append(b"PUB %b %d\r\n" % (raw, size))
        if isinstance(payload, SplitEnvelope):  # a large value: written from the request
            cmds.append(payload.head)
            cmds.append(payload.value)
        else:
            cmds.append(payload)
        cmds.append(b"\r\n")
        payload_bytes += size
        queued += 1
    if not cmds:
        return 0
    # What nats-py's publish does per message, once for the whole batch.
    # (Views too: nats-py only hands _pending to its transport's writelines.)
    nc._pending.extend(cmds)  # type: ignore[arg-type]
    nc._pending_data_size += sum(map(len, cmds))
    nc.stats["out_msgs"] += queued
    nc.stats["out_bytes"] += payload_bytes
    return queued
