"""ProduceMany (api 17): the sections of one request served as Produce requests, each
answered on its own (spec/protocol.md, "17 ProduceMany").

Every section is a Produce request body. The sections start together (each in a plain
asyncio task, as a Produce request runs in its own: the direct path appends there at once),
so the partitions this server leads are appended in one pass of the loop; the request is
answered once every section is settled (and its first section's NATS copies were let in
to the server's backlog of copies), and the sections' after-work (their NATS copies once
committed) runs together, one after the other in the order of their copies' turns
(broker/direct_copies.py). The partitions' fsyncs that one loop turn hands to worker
threads go as one batch, split among a few threads that fsync at once
(:class:`jetserver.storage.fsync_runner.FsyncRunner`): group commit across the partitions of the
request. Sections appended at once leave their fsyncs to the request, which hands them
over as that batch itself and commits each partition from its end
(:func:`jetserver.broker.commit_group.commit_together`), not through each partition's
flusher task.

When every section would be appended without waiting, they are served one after the
other in the request's task instead, and the common section (one replica, no header
controls, an idempotent producer's next sequences or none) in one step with no await
(:class:`~jetserver.broker.produce_section.SectionProduce`: no per-section coroutine,
completion or typed batch); any other goes through the Produce path as before. An
ALL-acked section (a table's puts, issue 38) is appended so too, in a request of several
sections: its fsync is left to the request's group, and its answer
(:class:`~jetserver.broker.produce_section.AllAnswer`) awaited once the group is closed;
one the section path leaves to the Produce path gets a task, as below, whose first step
joins the group too, and so does every later section of the request (the tasks start in
section order: each partition's appends keep the request's order).

A section's error (not leader, unknown stream, permission denied, a body that does not
decode...) is that section's answer; the other sections are served as usual.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import attrs

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import FLAG_RESPONSE, Frame, encode_frame
from jetsdk.codec.messages import ProduceHead, decode_produce_head, encode_error
from jetsdk.codec.produce_many import (
    MAX_PRODUCE_SECTIONS,
    ProduceSection,
    encode_produce_many_response,
    produce_many_section_count,
    produce_many_section_views,
)
from jetserver.broker.commit_group import IN_GROUP, FsyncGroup
from jetserver.broker.direct_copies import After
from jetserver.broker.pending_opens import PartitionOpening
from jetserver.broker.produce import ProduceService
from jetserver.broker.produce_section import AllAnswer
from jetserver.errors import ApiError, invalid_argument
from jetserver.logs import fields
from jetserver.protocol.connection import Reply
from jetserver.protocol.gate_port import RequestGate, Session
from jetserver.storage import StorageError

__all__ = ["ProduceMany"]

log = logging.getLogger(__name__)

_UNKNOWN_NAME = frozenset({ErrorCode.STREAM_NOT_FOUND, ErrorCode.PARTITION_NOT_FOUND})
_ALL = int(AckPolicy.ALL)
_Served = tuple[ProduceSection, After | None]
_Later = tuple[int, "AllAnswer | asyncio.Task[_Served]"]
"""A section answered after the group closed: its index and what answers it."""


@attrs.define(eq=False)
class ProduceMany:
    """Serves ProduceMany requests for one server (composed by the dispatcher)."""

    produce: ProduceService
    """Serves each section as a Produce request."""
    security: RequestGate | None = None
    """Checks each section's grants (None: nothing checked)."""
    starting: Callable[[], bool] = lambda: False
    """True while a cluster server's metadata may be behind (unknown names: UNAVAILABLE)."""
    applied_more: Callable[[float], Awaitable[bool]] | None = None
    """In a cluster: waits for one more applied metadata entry until a deadline (False
    then); a section naming a stream not known yet is tried again after each."""
    stale_grace_s: float = 1.0
    """How long a section naming an unknown stream waits for the metadata to catch up."""

    async def handle(self, frame: Frame, session: Session | None) -> Reply:
        """Answer one ProduceMany request frame.

        Raises:
            ApiError: INVALID_ARGUMENT (more than MAX_PRODUCE_SECTIONS sections).
            CodecError: the sections do not add up to the body (MALFORMED_FRAME).
        """
        count = produce_many_section_count(frame.body)
        if count > MAX_PRODUCE_SECTIONS:
            raise invalid_argument(
                "count", f"{count} sections exceed the limit of {MAX_PRODUCE_SECTIONS}"
            )
        # Views of a body read in place (not copied): it is held while they are.
        sections = produce_many_section_views(frame.body)
        session = session or Session()
        answers: Sequence[tuple[ProduceSection, After | None]]
        heads = self._at_once(sections)
        loop = asyncio.get_running_loop()
        # Several sections leave their partitions' fsyncs to this request (an append made
        # in their step joins the group), which fsyncs and commits them in one thread job;
        # so does a lone ALL section appended at once (a table's round of puts to one
        # partition: its answer awaits that commit).
        lone_all = heads is not None and len(heads) == 1 and heads[0][2] == _ALL
        group = FsyncGroup() if len(sections) > 1 or lone_all else None
        if heads is not None:
            # Each is appended without waiting: one after the other, here (each head
            # decoded once, for the check and the section); ALL ones answered once the
            # group is closed.
            served: list[_Served] = []
            later: list[_Later] = []
            joined = IN_GROUP.set(group)
            try:
                await self._in_turn(sections, heads, session, group is not None, served, later)
            except BaseException:  # cancelled: the after-work of those served won't run
                self._give_up(served, later)
                raise
            finally:
                IN_GROUP.reset(joined)
                if group is not None:
                    if any(not isinstance(w, AllAnswer) for _i, w in later):
                        loop.call_soon(group.close, loop, 1)  # (after the tasks' first steps)
                    else:
                        group.close(loop, 1 if later else 2)
            try:
                for i, waited in later:  # (each bounded by its section's timeout)
                    if isinstance(waited, AllAnswer):
                        section = ProduceSection(ErrorCode.NONE, await waited.body())
                        served[i] = (section, served[i][1])
                    else:
                        served[i] = await waited
            except BaseException:
                self._give_up(served, later)
                raise
            answers = served
            committed = None if group is None else group.committed
        else:
            joined = IN_GROUP.set(group)  # (each task copies it: their first steps join)
            try:
                tasks = [loop.create_task(self._section(body, session)) for body in sections]
            finally:
                IN_GROUP.reset(joined)
            if group is not None:
                # After every section's first step (their appends, if at once; an ALL
                # section then waits for its partition's commit): one group (not one fsync
                # per section: issue 38's table puts), a group of one included.
                loop.call_soon(group.close, loop, 1)
            try:
                answers = await asyncio.gather(*tasks) if tasks else []
            except BaseException:
                for task in tasks:
                    task.cancel()
                self.produce.give_up_copies(
                    task.result()[1]
                    for task in tasks
                    if task.done() and not task.cancelled() and task.exception() is None
                )
                raise
            committed = None if group is None else group.committed
        body = encode_produce_many_response([section for section, _after in answers])
        afters = await self.produce.copies_in_order(
            [after for _section, after in answers if after is not None]
        )
        return Reply(
            encode_frame(frame.api, frame.correlation_id, body, flags=FLAG_RESPONSE),
            after=_all_after(afters, committed) if afters else None,
        )

    async def _in_turn(
        self,
        sections: list[bytes | memoryview],
        heads: list[ProduceHead],
        session: Session,
        all_acks: bool,
        served: list[_Served],
        later: list[_Later],
    ) -> None:
        """Serve the sections one after the other in this task (``heads``: theirs), into
        ``served``; those answered once the request's group closed (placeholders in
        ``served``) into ``later``. ``all_acks``: ALL sections may be appended here."""
        loop = asyncio.get_running_loop()
        in_tasks = False
        for body, head in zip(sections, heads, strict=True):
            if not in_tasks:
                now = self._section_now(body, session, head, all_acks)
                if now is not None:
                    if isinstance(now[0], AllAnswer):
                        later.append((len(served), now[0]))
                        served.append((_PENDING, now[1]))
                    else:
                        served.append((now[0], now[1]))
                    continue
                if head[2] != _ALL:
                    served.append(await self._section(body, session, head))
                    continue
                # An ALL section left to the Produce path waits for its commit: it and
                # every later one get a task, started in section order (each partition's
                # appends keep the request's order), whose first steps join the group.
                in_tasks = True
            later.append((len(served), loop.create_task(self._section(body, session, head))))
            served.append((_PENDING, None))

    def _give_up(self, served: list[_Served], later: list[_Later]) -> None:
        """The request was cancelled: its sections' tasks cancelled, the after-work of
        those served given up (it won't run)."""
        for _i, waited in later:
            if not isinstance(waited, AllAnswer):
                waited.cancel()
        self.produce.give_up_copies(after for _section, after in served)

    def _at_once(self, sections: list[bytes | memoryview]) -> list[ProduceHead] | None:
        """Every section's decoded head if every section would be appended without
        waiting, and answered so but for ALL ones (answered once the request's group
        committed them; then serving them in turn in this task keeps their order and
        costs no task each), else None."""
        at_once = self.produce.answers_at_once
        heads: list[ProduceHead] = []
        try:
            for body in sections:
                head = decode_produce_head(body)
                if not at_once(head[0], head[1], head[2], True):
                    return None
                heads.append(head)
        except (CodecError, ApiError):
            return None
        return heads

    def _section_now(
        self, body: bytes | memoryview, session: Session, head: ProduceHead, all_acks: bool
    ) -> tuple[ProduceSection | AllAnswer, After | None] | None:
        """One section served in this step if it is the common case
        (:class:`~jetserver.broker.produce_section.SectionProduce`; ``all_acks``: an ALL
        one too, its answer to await once the request's group is closed); None (nothing
        done): :meth:`_section` serves it, and answers its refusal or error."""
        if self.security is not None and self.security.produce_refusal(session, body, head):
            return None
        served = self.produce.section.serve_now(body, head, all_acks)
        if served is None:
            return None
        answer, after = served
        if isinstance(answer, AllAnswer):
            return answer, after
        return ProduceSection(ErrorCode.NONE, answer), after

    async def _section(
        self, body: bytes | memoryview, session: Session, head: ProduceHead | None = None
    ) -> tuple[ProduceSection, After | None]:
        """One section, served as a Produce request (``head``: its decoded head, if
        known); never raises (its error is its answer)."""
        try:
            if head is None:
                head = decode_produce_head(body)
            if self.security is not None:
                refusal = self.security.produce_refusal(session, body, head)
                if refusal is not None:
                    return _error(
                        ErrorCode.PERMISSION_DENIED,
                        f"permission denied: {refusal}",
                        {"identity": session.identity},
                    ), None
            deadline = time.monotonic() + self.stale_grace_s
            while True:
                try:
                    response, after = await self.produce.produce_then(
                        body, head, own_task=True, hold_for_room=False
                    )
                    return ProduceSection(ErrorCode.NONE, response), after
                except PartitionOpening as exc:  # after a restart: it opens next
                    if not await exc.opened():
                        raise
                except ApiError as exc:
                    if exc.code not in _UNKNOWN_NAME:
                        raise
                    if self.starting():
                        return _error(
                            ErrorCode.UNAVAILABLE,
                            "server is starting, its metadata may not be current yet "
                            f"({exc.message})",
                            exc.details,
                        ), None
                    if self.applied_more is None or not await self.applied_more(deadline):
                        raise
        except ApiError as exc:
            return _error(exc.code, exc.message, exc.details), None
        except StorageError as exc:
            return _error(exc.code, f"storage: {exc}", {"retriable": exc.retriable}), None
        except CodecError as exc:
            return _error(ErrorCode.MALFORMED_FRAME, f"section does not decode: {exc}", {}), None
        except Exception as exc:
            log.exception("produce-many section failed", extra=fields(error=repr(exc)))
            return _error(ErrorCode.UNKNOWN, f"internal error: {exc!r}", {}), None


_PENDING = ProduceSection(int(ErrorCode.UNKNOWN), b"")
"""The place of a section answered once the request's group closed (replaced then)."""


def _error(code: ErrorCode, message: str, details: dict[str, object] | None) -> ProduceSection:
    return ProduceSection(int(code), encode_error(code, message, details))


def _all_after(afters: list[After], committed: asyncio.Future[None] | None) -> After:
    """The after-work of every section (each bounds itself), one after the other (in
    the order of their copies' turns: :meth:`ProduceService.copies_in_order`).

    ``committed``: the one thread job that fsyncs and commits the sections' partitions
    (:func:`commit_together`), awaited first; then each section finds its commit done
    and publishes its copies, in section order (no task each). Without it, one loop
    turn first: the fsyncs the sections' appends left to their requests
    (``Committer.defer_flush``) then go to their partitions' flushers, all in that turn
    (one thread batch, :class:`~jetserver.storage.fsync_runner.FsyncRunner`), instead
    of each section's after-work trying its own on the loop."""

    async def run() -> None:
        if committed is not None:
            await committed  # set from the job's loop callback, whatever the outcomes
        elif len(afters) > 1:
            await asyncio.sleep(0)
        for after in afters:
            try:
                await after()
            except Exception as exc:  # one section's copies; the others still go
                log.warning("produce-many after-work failed", extra=fields(error=repr(exc)))

    return run
