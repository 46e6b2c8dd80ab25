"""The server's NATS connection behind a small interface (nats-py is asyncio-only).

Everything else in the server talks to NATS through :class:`NatsLink`: connect (with
retries), subscribe with a callback (optionally in a queue group), publish, flush, close,
and whether the link is up. nats-py reconnects on its own with exponential backoff (see
:func:`backoff_delay`) and replays subscriptions, so ingest resumes by itself after NATS
comes back.

The link holds two NATS connections. Partition ingest subscriptions live on the *ingest*
connection, opened with ``no_echo``: the NATS copies of records a leader stored directly
(:mod:`jetserver.broker.stored_copy`) are published on it too, so NATS does not send them
back to this server just to be dropped (that echo cost about a fifth of the server's CPU
on acked publishing). Everything else (acks, Produce through NATS, control subjects) uses
the *main* connection, whose publishes reach every subscription, this server's included.
A stored copy whose subject also feeds another ingest subscription of this server goes on
the main connection, so that subscription still gets it.

Task safety: use from the event loop thread only (the asyncio backend of anyio).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Iterable, Sequence
from typing import Any

import anyio
import attrs
from nats.aio.client import Client as NatsClient
from nats.aio.subscription import Subscription

from jetsdk.codec.transcode import EnvelopeBytes, SplitEnvelope
from jetsdk.subjects import is_literal, subject_matches
from jetserver.broker.nats_port import MessageHandler, NatsUnavailable, Sink, SkipMarked
from jetserver.config.server import NatsConfig
from jetserver.logs import fields
from jetserver.natslink.connect import LinkCallbacks, backoff_delay, open_connection
from jetserver.natslink.fast import DirectDelivery, JetNatsClient
from jetserver.natslink.flush import round_trip
from jetserver.natslink.read import JetParser
from jetserver.natslink.shared_rounds import SharedRounds
from jetserver.natslink.write import PendingWriter, queue_commands
from jetserver.natsproto import header_map

log = logging.getLogger(__name__)


_CONNECTED = NatsClient.CONNECTED
_MAX_ECHO_CACHE = 4096
_COMMAND_BYTES = 512
"""More than a publish command around its payload takes (``PUB <subject> <size>``)."""
_NATS_PY_PUB_INTERNALS = (
    "_pending",
    "_pending_data_size",
    "_max_pending_size",
    "_flush_queue",
    "_flush_pending",
    "_status",
    "_max_payload",
    "stats",
)
"""nats-py client attributes :meth:`NatsLink.publish_many` writes through (checked at
connect; without them it publishes message by message)."""


def _has_pub_internals(nc: NatsClient) -> bool:
    return all(hasattr(nc, name) for name in _NATS_PY_PUB_INTERNALS) and isinstance(
        getattr(nc, "_pending", None), list
    )


@attrs.frozen
class _SubjectIndex:
    """Subscriptions (pattern, owner) split into literal patterns, by subject, and the
    ones with wildcards."""

    literal: dict[str, list[object]]
    wildcard: list[tuple[str, object]]

    @classmethod
    def of(cls, subs: Iterable[tuple[str, object]]) -> _SubjectIndex:
        literal: dict[str, list[object]] = {}
        wildcard: list[tuple[str, object]] = []
        for pattern, who in subs:
            if is_literal(pattern):
                literal.setdefault(pattern, []).append(who)
            else:
                wildcard.append((pattern, who))
        return cls(literal, wildcard)


@attrs.define(eq=False)
class SubscriptionHandle:
    """A live subscription; :meth:`unsubscribe` ends it."""

    subject: str
    """The subscribed subject (may hold wildcards)."""
    queue: str
    """Queue group, empty if none."""
    _sub: Subscription
    _nc: NatsClient | None = None
    _link: NatsLink | None = None

    async def unsubscribe(self) -> None:
        """Stop the subscription (messages already queued in nats-py are dropped)."""
        if self._link is not None:
            self._link._forget_ingest(self._sub)
        if isinstance(self._nc, JetNatsClient):
            self._nc.stop_direct(self._sub._id)
        try:
            await self._sub.unsubscribe()
        except Exception as exc:  # the link may be closed or reconnecting
            log.debug("unsubscribe failed", extra=fields(subject=self.subject, error=str(exc)))


@attrs.define(eq=False)
class NatsLink:
    """The server's NATS connections: ingest (``no_echo``) and main (acks, Produce, the
    rest); see the module doc."""

    config: NatsConfig
    """Connection settings."""
    _nc: NatsClient | None = None
    _ingest_nc: NatsClient | None = None
    _ingest_subs: dict[Subscription, tuple[str, object]] = attrs.field(factory=dict)
    """Live ingest subscriptions: subject and owner (what :meth:`publish_stored_copies`
    is told to leave out)."""
    _echo_cache: dict[tuple[str, int], bool] = attrs.field(factory=dict)
    _echo_index: _SubjectIndex | None = None
    """The ingest subscriptions by literal subject, and those with wildcards (built on
    first use after a change, with the cache)."""
    _rng: random.Random = attrs.field(factory=random.Random)
    _state_changed: anyio.Event = attrs.field(factory=anyio.Event)
    _closing: bool = False
    _batch_pub: bool = False
    _subjects: dict[str, bytes] = attrs.field(factory=dict)
    _writer: PendingWriter = attrs.field(factory=PendingWriter)
    """Writes the connections' pending publishes without nats-py's flusher task."""
    disconnects: int = 0
    """Times one of the link's two connections was lost since start (a NATS outage
    counts twice)."""
    reconnects: int = 0
    """Times one of them came back."""
    _flush_rounds: dict[bool, SharedRounds] = attrs.field(factory=dict)
    """The flush round trips of each connection (by ``ingest``), shared by the flushes
    that wait at the same time."""

    @property
    def connected(self) -> bool:
        """True while both connections are up (False while reconnecting or after close)."""
        nc, ingest = self._nc, self._ingest_nc
        # The status first: nats-py's is_connected is a property call (twice per Produce).
        return (
            nc is not None
            and (nc._status == _CONNECTED or nc.is_connected)
            and ingest is not None
            and (ingest._status == _CONNECTED or ingest.is_connected)
        )

    @property
    def malformed_headers(self) -> int:
        """Messages received with a malformed header block (delivered without headers,
        spec/envelope.md) on both connections since they opened."""
        return sum(p.malformed_headers for p in self._parsers())

    @property
    def handler_errors(self) -> int:
        """Received messages whose handling raised (logged and skipped)."""
        return sum(p.handler_errors for p in self._parsers())

    def _parsers(self) -> list[JetParser]:
        ncs = (self._nc, self._ingest_nc)
        return [nc._ps for nc in ncs if nc is not None and isinstance(nc._ps, JetParser)]

    @property
    def client(self) -> NatsClient:
        """The nats-py client (connected or reconnecting)."""
        if self._nc is None:
            raise NatsUnavailable("NATS is not connected")
        return self._nc

    @property
    def max_payload(self) -> int:
        """The NATS server's max_payload (0 if unknown)."""
        if self._nc is None:
            return 0
        return int(self._nc._max_payload)  # (its property's field: a call per Produce less)

    def _reconnect_handler(self, servers: list[Any], _info: dict[str, Any]) -> tuple[Any, float]:
        server = min(servers, key=lambda s: s.reconnects)
        delay = backoff_delay(
            server.reconnects,
            self.config.reconnect_wait_s,
            self.config.reconnect_max_wait_s,
            self._rng,
        )
        return server, delay

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats error", extra=fields(error=f"{type(exc).__name__}: {exc}"))

    async def _on_disconnected(self) -> None:
        self.disconnects += 1
        if self._closing:
            log.debug("nats disconnected (closing)")
        else:
            log.warning(
                "nats disconnected; reconnecting", extra=fields(disconnects=self.disconnects)
            )
        self._notify()

    async def _on_reconnected(self) -> None:
        self.reconnects += 1
        nc = self._nc
        url = nc.connected_url.netloc if nc is not None and nc.connected_url else "?"
        log.info("nats reconnected", extra=fields(server=url))
        self._notify()

    async def _on_closed(self) -> None:
        log.info("nats connection closed")
        self._notify()

    def _notify(self) -> None:
        event, self._state_changed = self._state_changed, anyio.Event()
        event.set()

    async def wait_state_change(self) -> None:
        """Return at the next disconnect, reconnect or close."""
        await self._state_changed.wait()

    async def connect(self, *, attempts: int | None = None) -> None:
        """Connect both connections, retrying with backoff until they work (or
        ``attempts`` failed).

        Raises:
            NatsUnavailable: ``attempts`` connection attempts failed.
            JetServerError: TLS files cannot be loaded.
        """
        nc = await self._connect_one(attempts, no_echo=False)
        try:
            ingest = await self._connect_one(attempts, no_echo=True)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                await nc.close()
            raise
        self._nc, self._ingest_nc = nc, ingest
        self._batch_pub = _has_pub_internals(nc) and _has_pub_internals(ingest)
        url = nc.connected_url.netloc if nc.connected_url else "?"
        log.info("nats connected", extra=fields(server=url, max_payload=nc.max_payload))

    async def _connect_one(self, attempts: int | None, *, no_echo: bool) -> NatsClient:
        callbacks = LinkCallbacks(
            reconnect_to_server=self._reconnect_handler,
            error=self._on_error,
            disconnected=self._on_disconnected,
            reconnected=self._on_reconnected,
            closed=self._on_closed,
        )
        return await open_connection(
            self.config, callbacks, no_echo=no_echo, attempts=attempts, rng=self._rng
        )

    async def subscribe(
        self,
        subject: str,
        handler: MessageHandler,
        *,
        queue: str = "",
        sink: Sink | None = None,
        skip: SkipMarked | None = None,
        ingest_owner: object | None = None,
    ) -> SubscriptionHandle:
        """Subscribe with a callback (never the async iterator, which drops under load).

        Args:
            subject: the subject (wildcards allowed).
            handler: awaited for each message, one at a time, in arrival order.
            queue: NATS queue group ("": none).
            sink: optional fast path for messages without headers: a plain function that
                takes ``(subject, reply, data)`` now (True) or declines (False: the message
                and those after it go to ``handler``); order is kept either way
                (:mod:`~jetserver.natslink.fast`). Ignored where the fast path is unsupported.
            skip: drop the messages it matches before any parsing (where the fast path is
                supported; the handler must apply the same rule for the others).
            ingest_owner: a partition's ingest subscription: on the ingest connection
                (``no_echo``), owned by this object (the ``owner`` its stored copies are
                published with, :meth:`publish_stored_copies`). None: the main connection.

        Raises:
            NatsUnavailable: the link is closed.
        """
        nc = self.client if ingest_owner is None else self._ingest_client()
        if nc.is_closed:
            raise NatsUnavailable("NATS connection is closed")
        if isinstance(nc, JetNatsClient):
            # Same callback, order and limits; cheaper than nats-py's queue and task
            # (natslink/fast.py), in time and in memory per subscription.
            cfg = self.config
            delivery = DirectDelivery(
                handler, cfg.sub_pending_msgs, cfg.sub_pending_bytes, sink, skip
            )
            sub = await nc.subscribe_direct(subject, queue, delivery)
        else:
            sub = await nc.subscribe(
                subject,
                queue=queue,
                cb=handler,
                pending_msgs_limit=self.config.sub_pending_msgs,
                pending_bytes_limit=self.config.sub_pending_bytes,
            )
        if ingest_owner is None:
            return SubscriptionHandle(subject, queue, sub, nc)
        self._ingest_subs[sub] = (subject, ingest_owner)
        self._echo_changed()
        return SubscriptionHandle(subject, queue, sub, nc, self)

    def _ingest_client(self) -> NatsClient:
        if self._ingest_nc is None:
            raise NatsUnavailable("NATS is not connected")
        return self._ingest_nc

    def _forget_ingest(self, sub: Subscription) -> None:
        if self._ingest_subs.pop(sub, None) is not None:
            self._echo_changed()

    def _echo_changed(self) -> None:
        self._echo_cache.clear()
        self._echo_index = None

    def _echo_needed(self, subject: str, owner: object) -> bool:
        """True if an ingest subscription of this server other than ``owner``'s matches
        ``subject`` (it must get the copy: publish it on the main connection)."""
        key = (subject, id(owner))
        needed = self._echo_cache.get(key)
        if needed is None:
            index = self._echo_index
            if index is None:
                index = self._echo_index = _SubjectIndex.of(self._ingest_subs.values())
            # A literal subject is looked up, not matched against every partition's
            # subscription: the first message to each of P partitions cost P matches.
            needed = any(who is not owner for who in index.literal.get(subject, ())) or any(
                who is not owner and subject_matches(pattern, subject)
                for pattern, who in index.wildcard
            )
            if len(self._echo_cache) >= _MAX_ECHO_CACHE:
                self._echo_cache.clear()
            self._echo_cache[key] = needed
        return needed

    def echo_needed(self, subjects: Iterable[str], owner: object) -> bool:
        """True if another ingest subscription of this server than ``owner``'s matches one
        of ``subjects`` (then copies of them must go on the main connection)."""
        return any(self._echo_needed(subject, owner) for subject in subjects)

    async def publish_unstored_copies(
        self,
        messages: Sequence[tuple[str, EnvelopeBytes]],
        header_block: bytes = b"",
        within_s: float | None = None,
    ) -> int:
        """:meth:`publish_many` on the ``no_echo`` ingest connection, not marked stored:
        for the messages a replicated partition's leader appended directly (spec/
        protocol.md, Produce). They do not come back to this server; any other subscriber,
        a new leader of the partition included, gets them as if they had been published
        to NATS (``header_block``: their sequence marks, broker/seq_marks.py).
        ``within_s``: the most it waits for NATS to take what is pending (a full pending
        buffer), so that its caller needs no cancel scope (None: no bound)."""
        return await self._publish_on(self._ingest_nc, messages, header_block, within_s)

    async def publish_stored_copies(
        self, messages: Sequence[tuple[str, EnvelopeBytes]], header_block: bytes, owner: object
    ) -> int:
        """:meth:`publish_many` for the NATS copies of records ``owner`` (a partition
        leader, see :meth:`subscribe`) stored directly: on the ``no_echo`` ingest
        connection, so they do not come back to this server, unless another ingest
        subscription here wants one of them (then all go on the main connection, in
        order)."""
        nc = self._ingest_nc
        if len(messages) == 1:  # the usual one at light load: no set, no generator
            echo = self._echo_needed(messages[0][0], owner)
        else:
            echo = any(self._echo_needed(subject, owner) for subject in {s for s, _p in messages})
        if echo:
            nc = self._nc
        return await self._publish_on(nc, messages, header_block)

    def send_stored_copy(
        self, subject: str, payload: EnvelopeBytes, header_block: bytes, owner: object
    ) -> bool:
        """:meth:`publish_stored_copies` of one message, written to the socket now if
        nothing is pending on its connection (the copy of a request answered already:
        nothing waits behind it). False: nothing done (publish it as always)."""
        nc = self._nc if self._echo_needed(subject, owner) else self._ingest_nc
        raw = self._subjects.get(subject)  # known from an earlier publish
        if nc is None or raw is None or not self._batch_pub:
            return False
        size = len(payload)
        hlen = len(header_block)
        if nc._max_payload and size + hlen > nc._max_payload:
            return False
        cmd = b"HPUB %b %d %d\r\n%b" % (raw, hlen, hlen + size, header_block)
        if isinstance(payload, SplitEnvelope):
            written = self._writer.send_now(nc, (cmd, payload.head, payload.value, b"\r\n"))
        else:
            written = self._writer.send_now(nc, (cmd, payload, b"\r\n"))
        if written:
            nc.stats["out_msgs"] += 1
            nc.stats["out_bytes"] += size
        return written

    async def publish(
        self,
        subject: str,
        payload: bytes,
        *,
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue one message for sending (nats-py flushes in the background).

        Raises:
            NatsUnavailable: the link is down or its reconnect buffer is full.
        """
        nc = self.client
        if not nc.is_connected:
            raise NatsUnavailable("NATS link is down")
        try:
            await nc.publish(subject, payload, reply=reply, headers=headers)
        except Exception as exc:
            raise NatsUnavailable(f"NATS publish failed: {exc}") from exc

    async def publish_many(
        self, messages: Sequence[tuple[str, EnvelopeBytes]], header_block: bytes = b""
    ) -> int:
        """Queue several messages at once, in order (no reply subject; every message with
        the NATS header block ``header_block`` if given: ``NATS/1.0`` line to blank line).

        One buffer write for all of them instead of one nats-py ``publish`` each: this is
        the Produce and ack hot path. Falls back to publishing one by one if this nats-py
        version lacks the internals used.

        Returns:
            How many leading messages were queued: all of them, or fewer if the link is
            down, a subject is invalid or a payload is over the server's max_payload (the
            rest were not published).
        """
        return await self._publish_on(self._nc, messages, header_block)

    async def _publish_on(
        self,
        nc: NatsClient | None,
        messages: Sequence[tuple[str, EnvelopeBytes]],
        header_block: bytes,
        within_s: float | None = None,
    ) -> int:
        if nc is None or not messages:
            return 0
        if not self._batch_pub:
            if not nc.is_connected:
                return 0
            with anyio.move_on_after(math.inf if within_s is None else within_s):
                return await _publish_each(nc, messages, header_map(header_block))
            return 0  # (not within ``within_s``: counted as not queued)
        # nats-py's status read as its is_connected does (two property calls a publish).
        if nc._status != _CONNECTED and not nc.is_connected:
            return 0
        queued = queue_commands(nc, self._subjects, messages, header_block)
        if not queued:
            return 0
        try:
            if 0 < nc._max_pending_size < nc._pending_data_size:
                # (the one wait here: bounded without a scope on the way that does not wait)
                if within_s is None:
                    await nc._flush_pending(force_flush=True)
                else:
                    with anyio.move_on_after(within_s):
                        await nc._flush_pending(force_flush=True)
            elif nc._flush_queue is not None and nc._flush_queue.empty():
                self._writer.write_soon(nc)
        except Exception as exc:  # queued already: nats-py sends or drops it on reconnect
            log.debug("flush kick failed", extra=fields(error=str(exc)))
        return queued

    def unstored_copy_room(self, size: int) -> bool:
        """Whether :meth:`queue_unstored_copy` of ``size`` bytes (payload and subject) would
        queue it now: the link is up and its pending buffer takes it with no forced flush
        (:meth:`publish_unstored_copies` would wait for one)."""
        nc = self._ingest_nc
        if nc is None or not self._batch_pub or nc._status != _CONNECTED:
            return False
        limit = nc._max_pending_size
        return not 0 < limit < nc._pending_data_size + size + _COMMAND_BYTES

    def queue_unstored_copy(self, subject: str, payload: EnvelopeBytes) -> bool:
        """:meth:`publish_unstored_copies` of one unmarked message with no wait: queued in
        order after what is pending and written at the end of this loop turn (after the
        turn's callbacks due before, the followers' answers of its append among them).
        False: not queued (the link is down; a subject NATS refuses)."""
        nc = self._ingest_nc
        if nc is None or not self._batch_pub or nc._status != _CONNECTED:
            return False
        if not queue_commands(nc, self._subjects, ((subject, payload),), b""):
            return False
        if nc._flush_queue is not None and nc._flush_queue.empty():
            self._writer.write_soon(nc)
        return True

    async def flush(self, timeout_s: float, *, ingest: bool = False) -> None:
        """Wait until NATS has received everything published so far on the main
        connection (a PING round trip); with ``ingest``, on the ingest connection instead
        (which confirms the partitions' subscriptions).

        Raises:
            NatsUnavailable: the link is down or the round trip timed out.
        """
        nc = self._ingest_client() if ingest else self.client
        if not nc.is_connected:
            raise NatsUnavailable("NATS link is down")
        timeout_s = max(timeout_s, 0.001)
        # Flushes waiting at the same time share round trips (a failover's new leaders
        # each confirmed its subscription with a PING of its own).
        rounds = self._flush_rounds.setdefault(ingest, SharedRounds())
        try:
            await rounds.run(lambda: round_trip(nc, timeout_s), timeout_s)
        except Exception as exc:
            raise NatsUnavailable(f"NATS flush failed: {str(exc) or type(exc).__name__}") from exc

    def new_inbox(self) -> str:
        """A unique inbox subject prefix for this connection."""
        return str(self.client.new_inbox())

    async def close(self) -> None:
        """Flush what was published and close both connections (subscriptions end
        first)."""
        self._closing = True
        ingest, self._ingest_nc = self._ingest_nc, None
        self._ingest_subs.clear()
        self._echo_changed()
        await self._close_one(ingest)
        nc, self._nc = self._nc, None
        await self._close_one(nc)

    async def _close_one(self, nc: NatsClient | None) -> None:
        if isinstance(nc, JetNatsClient):
            nc.stop_all_direct()
        if nc is None or nc.is_closed:
            return
        started = time.monotonic()
        try:
            if nc.is_connected:
                with anyio.move_on_after(2.0):
                    await nc.flush(timeout=2)
            await nc.close()
        except Exception as exc:
            log.debug("nats close failed", extra=fields(error=str(exc)))
        log.debug("nats closed", extra=fields(took_s=round(time.monotonic() - started, 3)))


async def _publish_each(
    nc: NatsClient, messages: Sequence[tuple[str, EnvelopeBytes]], headers: dict[str, str] | None
) -> int:
    """nats-py's ``publish`` of each message (a nats-py without the internals the batch
    write uses): how many leading ones were queued."""
    for done, (subject, payload) in enumerate(messages):
        try:
            await nc.publish(subject, bytes(payload), headers=headers)
        except Exception as exc:
            log.debug("publish failed", extra=fields(subject=subject, error=str(exc)))
            return done
    return len(messages)
