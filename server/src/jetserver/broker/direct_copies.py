"""The NATS copies of the records a Produce request stored directly (one replica).

A partition with one replica stores a Produce request's messages itself and publishes
their NATS copies for live subscribers after the response, once committed (spec/
protocol.md §6, Produce). Two things order them:

- their **turn** in the partition's order of copies (:meth:`Committer.copies_turn`,
  :class:`~jetserver.broker.copy_turns.CopyTurns`): each request's copies go after the
  previous request's. The turn is taken as the request's
  batch enters the sequencer (:class:`CopiesPlace`, ``entered`` of
  :meth:`PartitionReplica.ingest_direct`), so in append order; taken after the append it
  came out of order, as an ALL ack appended in its request's own task fsyncs before its
  append returns (which yields), and later requests took their turns meanwhile;
- their **ticket** in the server's :class:`~jetserver.broker.copy_backlog.CopyBacklog`
  (the bound on copies waiting for NATS), taken together with the turn (same order).

No wait may depend on itself through them. A request's response waits for room in the
backlog (producer backpressure) only while the request holds none: a Produce request's
one ticket; a ProduceMany request's first (:meth:`DirectCopies.in_order`), whose other
sections wait for room in their after-work, run one after the other in the order of
their turns. Before (issue 39's 1 MiB ack ALL stall): a section's copies waited for the
turn of a later section of the same request whose after-work ran only after theirs, and
a section held its request's response for room that the request's own earlier sections
held until after that response; each waited for its whole timeout.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

import attrs

from jetsdk.codec.transcode import EnvelopeBytes
from jetserver.broker.copy_backlog import CopyBacklog, CopyTicket
from jetserver.broker.copy_turns import CopyTurns
from jetserver.broker.direct import DirectBatch
from jetserver.broker.nats_port import NatsPort
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.stored_copy import stored_header_block

__all__ = ["After", "Copies", "CopiesPlace", "DirectCopies", "ingest_taking_place"]

After = Callable[[], Awaitable[None]]
"""Work a request leaves for after its response (``Reply.after`` in
:mod:`jetserver.protocol.connection`)."""
HEADER_BLOCKS_CACHED = 4096
"""Partitions whose stored copies' header block is kept built (:func:`_header_block`)."""


@attrs.frozen
class Copies:
    """A request's NATS copies to publish after its response (its after-work): their
    place in the :class:`CopyBacklog` and count, and their ``turn`` in ``turns`` (their
    partition's order: :meth:`PartitionReplica.copies_turn`), passed on by whoever gives
    them up."""

    publish: After
    ticket: CopyTicket
    count: int
    turns: CopyTurns
    turn: int
    deadline: float
    """The request's deadline (``time.monotonic``)."""

    def __call__(self) -> Awaitable[None]:
        return self.publish()  # its coroutine: no frame of its own to resume


@attrs.define(eq=False)
class CopiesPlace:
    """Where the NATS copies of a request to a one-replica partition stand: their turn in
    the partition's order and their ticket in the backlog, taken together (so in the
    same order) as the request's batch enters the sequencer (:meth:`take`)."""

    replica: PartitionReplica
    backlog: CopyBacklog
    size: int
    turn: int | None = None
    ticket: CopyTicket | None = None

    def take(self) -> None:
        """Take the turn and the ticket (``entered`` of ``ingest_direct``)."""
        self.turn = self.replica.committer.copies_turn()
        self.ticket = self.backlog.enter(self.size)

    def give_up(self) -> None:
        """Nothing will be copied (the append did not return): pass the turn on."""
        if self.turn is not None and self.ticket is not None:
            self.backlog.leave(self.ticket)
            self.replica.committer.copy_turns.finish(self.turn)
            self.turn = self.ticket = None


async def ingest_taking_place(
    replica: PartitionReplica, batch: DirectBatch, place: CopiesPlace | None, *, shield: bool
) -> bool:
    """:meth:`PartitionReplica.ingest_direct`, taking ``place`` as the batch enters the
    sequencer; given up again if the append raised (cancelled) after that. The caller
    saw the replica take the request directly in this turn (``checked``)."""
    intake = replica.intake
    if place is None:
        return await intake.ingest_direct(batch, shield=shield, checked=True)
    try:
        return await intake.ingest_direct(batch, shield=shield, entered=place.take, checked=True)
    except BaseException:
        place.give_up()
        raise


def _turn_order(after: After) -> int:
    return after.ticket.seq if isinstance(after, Copies) else 0


@functools.lru_cache(maxsize=HEADER_BLOCKS_CACHED)
def _header_block(stream: str, partition: int) -> bytes:
    return stored_header_block(stream, partition)


@attrs.define(eq=False)
class DirectCopies:
    """Publishes the copies of directly stored records, bounded by ``backlog``."""

    link: NatsPort
    """Where the copies go."""
    backlog: CopyBacklog
    """Their bound."""
    _tasks: set[asyncio.Future[None]] = attrs.field(factory=set)
    """The tasks of :meth:`copy_committed`'s copies that could not go at once."""

    def after_commit(
        self,
        replica: PartitionReplica,
        messages: list[tuple[str, EnvelopeBytes]],
        end: int,
        failures: int,
        timeout_s: float,
        turn: int,
        ticket: CopyTicket,
        deadline: float,
    ) -> Copies | None:
        """The after-work of a request whose ``messages`` ``replica`` stored directly below
        offset ``end``. Publish their NATS copies once the HW passed them (at once with
        durability ``written``), within ``timeout_s``; none if the replica's fsync
        failures went past ``failures`` (a cut may have taken them) or it closed first. A
        request's after-work is not cancelled with its connection (``Reply.after``), so a
        request whose client went away after its append still has its stored records
        copied. Copies go in append order: each request's after the previous one's
        (``turn``). Copies not let in to the backlog yet (``ticket``; a ProduceMany
        section's, :meth:`in_order`) wait for it first, within ``timeout_s``, else are
        dropped and counted. ``deadline``: the request's (for the wait before its
        response, :meth:`room_for`).

        The usual case at light load waits for nothing: let in at once, every earlier
        turn finished, the fsync its append left to it run in its own step, the HW past
        ``end``; then it only checks and counts (no clock read, no future)."""
        committer = replica.committer
        turns = committer.copy_turns
        backlog = self.backlog
        if not messages:
            backlog.leave(ticket)
            turns.finish(turn)
            return None
        publish_let_in = self.publish_let_in

        async def publish_copies() -> None:
            deadline = 0.0  # read from the clock at the first wait
            if ticket.admitted is not None:  # in line (a ProduceMany section's)
                deadline = time.monotonic() + timeout_s
                let_in = False
                try:
                    let_in = await backlog.wait_admitted(ticket, deadline)
                finally:
                    if not let_in:  # out of the line: nothing held
                        backlog.dropped += len(messages)
                        turns.finish(turn)
                if not let_in:
                    return
            await publish_let_in(
                replica, messages, end, failures, timeout_s, turn, ticket, deadline
            )

        return Copies(publish_copies, ticket, len(messages), turns, turn, deadline)

    async def after_room(
        self,
        replica: PartitionReplica,
        message: tuple[str, EnvelopeBytes] | None,
        where: tuple[int, int, float, int, CopyTicket, float],
    ) -> Copies | None:
        """:meth:`after_commit` of one stored ``message`` (None: none stored; ``where``:
        its ``end``, ``failures``, ``timeout_s``, ``turn``, ``ticket`` and ``deadline``),
        then :meth:`room_for` it if the backlog has not let it in yet (the response
        waits: producer backpressure)."""
        after = self.after_commit(replica, [] if message is None else [message], *where)
        if isinstance(after, Copies) and after.ticket.admitted is not None:
            return await self.room_for(after, where[5])
        return after

    async def publish_let_in(
        self,
        replica: PartitionReplica,
        messages: Sequence[tuple[str, EnvelopeBytes]],
        end: int,
        failures: int,
        timeout_s: float,
        turn: int,
        ticket: CopyTicket,
        deadline: float = 0.0,
    ) -> None:
        """:meth:`after_commit`'s after-work once its copies were let in to the backlog:
        the fsync its append left to it, its turn, the commit; then the copies (the
        one-step Produce's after-work whose copy :meth:`send_now` could not send yet,
        durability ``flushed``, called directly: no closure or :class:`Copies`).
        ``deadline``: the wait's, if one began (0: read from the clock at the first)."""
        committer = replica.committer
        turns = committer.copy_turns
        in_turn = True
        try:
            # The fsync its append left to it (Committer.defer_flush), if still due.
            await committer.commit_deferred()
            if not turns.is_next(turn):
                deadline = deadline or time.monotonic() + timeout_s
                in_turn = await turns.wait(turn, timeout_s, committer.running_loop())
            if committer.sync_failures == failures and replica.log.high_watermark >= end:
                await self._publish(
                    messages, _header_block(replica.stream, replica.partition), replica
                )
            else:
                left = (deadline or time.monotonic() + timeout_s) - time.monotonic()
                if left > 0 and await committer.wait_committed(end, failures, left):
                    await self._publish(
                        messages, _header_block(replica.stream, replica.partition), replica
                    )
        finally:
            self.backlog.release(ticket.size)
            turns.finish(turn, overtake=not in_turn)

    def send_alone(
        self, replica: PartitionReplica, message: tuple[str, EnvelopeBytes], failures: int
    ) -> bool:
        """Publish the copy of a request answered already whose one record its own step
        appended and committed (durability ``written``: the caller saw the HW past it),
        with no turn or ticket: written to the NATS socket now if no earlier
        copy of the partition is waiting (every turn finished), the backlog admitted its
        size (the caller saw :meth:`CopyBacklog.admits` before the append: nothing waits
        in line) and no fsync failed since ``failures``. True: written; False: nothing
        done (the caller takes a turn and a ticket and goes on as :meth:`send_now`)."""
        committer = replica.committer
        if not committer.copy_turns.all_finished() or committer.sync_failures != failures:
            return False
        subject, payload = message
        return self.link.send_stored_copy(
            subject, payload, _header_block(replica.stream, replica.partition), replica
        )

    def send_now(
        self,
        replica: PartitionReplica,
        message: tuple[str, EnvelopeBytes],
        end: int,
        failures: int,
        turn: int,
        ticket: CopyTicket,
    ) -> bool | After:
        """Publish the copy of a request answered already (:meth:`after_commit`'s
        arguments, one message) in this step if it may go now: let in at once, its turn
        next, committed (durability ``written``) and no fsync failure since. False:
        nothing done (its after-work publishes it); True: written to the NATS socket; else
        the write to await (something was pending on the NATS connection)."""
        committer = replica.committer
        turns = committer.copy_turns
        if not (
            ticket.admitted is None
            and turns.is_next(turn)
            and committer.sync_failures == failures
            and replica.log.high_watermark >= end
        ):
            return False
        header = _header_block(replica.stream, replica.partition)
        subject, payload = message
        held = False
        try:  # (:meth:`_publish` of one message inline: no coroutine for the usual case)
            held = not self.link.send_stored_copy(subject, payload, header, replica)
        finally:
            if not held:
                self.backlog.release(ticket.size)
                turns.finish(turn)
        if held:
            return functools.partial(self._publish_held, message, header, replica, turn, ticket)
        return True

    def copy_committed(
        self,
        replica: PartitionReplica,
        message: tuple[str, EnvelopeBytes],
        end: int,
        failures: int,
        timeout_s: float,
        turn: int,
        size: int,
    ) -> None:
        """The work after the commit of a request answered in its reader callback whose
        copy waits for the fsync its append left (durability ``flushed``), run from the
        loop callback that commits it (:class:`~jetserver.broker.commit_soon.CommitSoon`):
        the copy sent then if it may (:meth:`send_now`'s test, inline), else its
        after-work (:meth:`publish_let_in`: its turn, the commit, within ``timeout_s``) in
        a task. ``size``: the bytes the backlog holds for it (:meth:`CopyBacklog.hold`,
        no ticket: it was let in at once)."""
        committer = replica.committer
        turns = committer.copy_turns
        after: After | None = None
        if (
            turns.is_next(turn)
            and committer.sync_failures == failures
            and replica.log.high_watermark >= end
        ):
            header = _header_block(replica.stream, replica.partition)
            subject, payload = message
            held = False
            try:
                held = not self.link.send_stored_copy(subject, payload, header, replica)
            finally:
                if not held:
                    self.backlog.release(size)
                    turns.finish(turn)
            if not held:
                return
            after = functools.partial(
                self._publish_held, message, header, replica, turn, CopyTicket(size, None)
            )
        else:
            after = functools.partial(
                self.publish_let_in,
                replica,
                (message,),
                end,
                failures,
                timeout_s,
                turn,
                CopyTicket(size, None),
            )
        task = asyncio.ensure_future(after())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish_held(
        self,
        message: tuple[str, EnvelopeBytes],
        header: bytes,
        replica: PartitionReplica,
        turn: int,
        ticket: CopyTicket,
    ) -> None:
        try:
            await self.link.publish_stored_copies((message,), header, replica)
        finally:
            self.backlog.release(ticket.size)
            replica.committer.copy_turns.finish(turn)

    async def _publish(
        self,
        messages: Sequence[tuple[str, EnvelopeBytes]],
        header: bytes,
        replica: PartitionReplica,
    ) -> None:
        """Publish the stored copies ``messages`` of ``replica``'s records: one alone is
        written to the socket at once if nothing is pending before it (its response went
        already: :meth:`NatsLink.send_stored_copy`)."""
        if len(messages) == 1:
            subject, payload = messages[0]
            if self.link.send_stored_copy(subject, payload, header, replica):
                return
        await self.link.publish_stored_copies(messages, header, replica)

    async def in_order(self, afters: Sequence[After]) -> list[After]:
        """The after-work of the sections of one request (ProduceMany), to run one after
        the other, in the order of their copies' turns, once the first of their copies
        was let in to the backlog (the response waits for that, as a Produce request's,
        up to its section's timeout; the others wait in their after-work).

        In the order of the turns: a section's copies wait for those before them in their
        partition; run in another order, one would wait for a later section's turn, which
        only comes after it. And only the first waits before the response: a section
        waiting there for room that the request's own earlier sections hold (let in, and
        released only by their after-work, after the response) would wait for itself, as
        would two such requests whose sections' turns alternate."""
        ordered = sorted(afters, key=_turn_order)
        first = next((a for a in ordered if isinstance(a, Copies)), None)
        if first is not None and first.ticket.admitted is not None:
            try:
                let_in = await self.room_for(first, first.deadline)
            except BaseException:  # cancelled: none of them will run
                self.give_up(a for a in ordered if a is not first)
                raise
            if let_in is None:
                ordered.remove(first)
        return ordered

    def give_up(self, afters: Iterable[After]) -> None:
        """Drop the copies of after-work that will not run (its request was cancelled
        before its response): out of the backlog, counted, their turns passed on (else
        their place in the line and their turns would hold up every later request's)."""
        backlog = self.backlog
        for after in afters:
            if isinstance(after, Copies):
                backlog.leave(after.ticket)
                backlog.dropped += after.count
                after.turns.finish(after.turn)

    async def room_for(self, copies: Copies, deadline: float) -> Copies | None:
        """``copies`` once the backlog let them in (the response waits: producer
        backpressure), or None if it did not by ``deadline`` (or this request was
        cancelled meanwhile): then they are given up, counted, their turn passed on."""
        let_in = False
        try:
            let_in = await self.backlog.wait_admitted(copies.ticket, deadline)
        finally:
            if not let_in:
                self.backlog.dropped += copies.count
                copies.turns.finish(copies.turn)
        return copies if let_in else None
