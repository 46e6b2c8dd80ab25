"""The bound on NATS copies of directly stored records waiting to be handed to NATS.

A partition with one replica stores a Produce request's messages itself and publishes
their NATS copies for live subscribers after the response (spec/protocol.md §6, Produce).
When NATS takes them more slowly than producers send (a slow or stopped nats-server, a
loaded machine), the copies waiting for their turn held their requests' bytes without a
bound: 221-448 MB during a 256 MiB publish of ``bench sizes`` on a loaded 2-core VM.

:class:`CopyBacklog` counts the bytes of the copies accepted and not yet handed to NATS
(or given up), server-wide, up to :data:`COPY_BACKLOG_MAX_BYTES`. A request whose copies
do not fit holds its response (producer backpressure) until earlier copies went, up to the
request's timeout; past it its copies are dropped and counted (:attr:`CopyBacklog.dropped`,
metric ``jet_produce_copies_dropped_total``): the copies are best effort, the records are
stored and acknowledged either way. A request is always let in when the backlog is empty,
so one request larger than the bound still gets its copies. Where requests take their
place in it, and how a request with several (ProduceMany) waits: broker/direct_copies.py.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import collections
import time

import attrs

from jetserver.config.server import COPY_BACKLOG_MAX_BYTES


@attrs.define(eq=False)
class CopyTicket:
    """One request's place in the backlog: its bytes, admitted or waiting in line."""

    size: int
    admitted: asyncio.Future[None] | None
    """Done once admitted (None: admitted at once)."""
    seq: int = 0
    """Its place in the order tickets were taken (server-wide): the order of the copies'
    turns, which a request with several (ProduceMany) publishes its copies in."""


@attrs.define(eq=False)
class CopyBacklog:
    """Bytes of NATS copies accepted and not yet handed to NATS, with a bound; requests
    are let in first come first served, in the order they took their copies' turn (so a
    request never waits for room that a later request of its partition holds while that
    one waits for its turn: :meth:`PartitionReplica.copies_turn`)."""

    limit: int = COPY_BACKLOG_MAX_BYTES
    """The bound (bytes)."""
    held: int = 0
    """Bytes of the copies let in and not yet released."""
    dropped: int = 0
    """Messages whose copies were given up because their request found no room by its
    deadline (or was cancelled while waiting)."""
    waits: int = 0
    """Requests that had to wait for room (backpressure)."""
    _line: collections.deque[CopyTicket] = attrs.field(factory=collections.deque)
    _taken: int = 0
    """Tickets taken so far (the next one's :attr:`CopyTicket.seq`)."""

    def admits(self, size: int) -> bool:
        """True if :meth:`enter` would let ``size`` bytes in at once."""
        return not self._line and (not self.held or self.held + size <= self.limit)

    def hold(self, size: int) -> None:
        """:meth:`enter` of ``size`` bytes its caller saw :meth:`admits` let in, in this
        same step (nothing in line, so it is let in at once), with no ticket made: the
        caller gives them back (:meth:`release`; a one-step Produce's copy,
        broker/produce_one.py)."""
        self._taken += 1
        self.held += size

    def enter(self, size: int) -> CopyTicket:
        """Take a place for ``size`` bytes of copies, right when the request takes its
        copies' turn: let in at once if nobody waits and they fit (or nothing is held),
        else in line."""
        seq = self._taken = self._taken + 1
        if not self._line and (not self.held or self.held + size <= self.limit):
            self.held += size
            return CopyTicket(size, None, seq)
        self.waits += 1
        ticket = CopyTicket(size, asyncio.get_running_loop().create_future(), seq)
        self._line.append(ticket)
        return ticket

    async def wait_admitted(self, ticket: CopyTicket, deadline: float) -> bool:
        """Wait until ``ticket`` is let in, until ``deadline`` (``time.monotonic``): True
        if let in; False if not by then (or cancelled: then it raises), and it leaves the
        line (nothing held)."""
        admitted = ticket.admitted
        if admitted is None or admitted.done():
            return True
        let_in = False
        try:
            done, _pending = await asyncio.wait((admitted,), timeout=deadline - time.monotonic())
            let_in = bool(done)
        finally:
            if not let_in:
                self.leave(ticket)
        return let_in

    def leave(self, ticket: CopyTicket) -> None:
        """``ticket``'s copies are not published (none to publish, or given up): give
        back what it holds, or its place in line."""
        admitted = ticket.admitted
        if admitted is not None and not admitted.done():
            self._line.remove(ticket)
            admitted.cancel()
            self._let_in()
        else:
            self.release(ticket.size)

    def release(self, size: int) -> None:
        """Give back ``size`` bytes let in (their copies went to NATS or were given up) and
        let in those waiting in line that now fit."""
        self.held -= size
        if self._line:  # (else nobody to let in: no call)
            self._let_in()

    def _let_in(self) -> None:
        line = self._line
        while line and (not self.held or self.held + line[0].size <= self.limit):
            ticket = line.popleft()
            self.held += ticket.size
            assert ticket.admitted is not None  # in line: it waits
            ticket.admitted.set_result(None)
