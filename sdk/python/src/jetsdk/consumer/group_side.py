"""A Consumer's side of consumer-group membership: what it does with the member's actions.

:class:`GroupSide` is the :class:`~jetsdk.consumer.group_runtime.GroupHandler` of a group
:class:`~jetsdk.consumer.consumer.Consumer`:

- **start** (the member acquired a partition): the start offset is the group's committed
  offset (else ``start``/``reset``), the commit's progress tells which records above it were
  processed already and how often the others were delivered; ``on_assigned`` runs, then the
  partition's fetcher starts.
- **revoke** (the partition is being handed to another member): fetching stops and what was
  prefetched is dropped; the revocation waits until the messages handed out are processed
  (acked, or the application asked for more), or until shortly before the member's lease
  ends; ``on_revoked`` runs; then the release record carries the final offset and progress.
- **lose**: the run ends at once, nothing is committed; ``on_lost`` runs.
- **fenced**: a newer incarnation with our instance id took over; once what we owned is
  handed back, :class:`~jetsdk.group.errors.MemberFenced` is raised to the application.

Offsets are committed with the member's owner generation (spec/groups.md §7): periodically
(``auto_commit``), in every release, in the leave record on close, and by
:meth:`GroupSide.commit`, which waits until the member's view of the log shows the commit
accepted. Commits, committed offsets and ownership are all read from the member's view (the
cache); nothing scans the log per lookup.

Not thread-safe: the consumer's event loop.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping, Sequence

import anyio
import anyio.abc
import attrs

from jetsdk.consumer.fetcher import PartitionRun
from jetsdk.consumer.group_host import ConsumerParts
from jetsdk.consumer.group_runtime import GroupRuntime, new_member_id
from jetsdk.consumer.progress import Progress, commit_entries, decode_progress, encode_progress
from jetsdk.consumer.tick_batch import TickBatch
from jetsdk.consumer.values import OffsetAndMetadata, PartitionRef, PartitionsCallback
from jetsdk.errors import InvalidArgument, JetError
from jetsdk.group.assignors import BUILTIN_ASSIGNORS, Assignor
from jetsdk.group.errors import CommitFailed, MemberFenced, NotOwner
from jetsdk.group.member import MemberConfig, Phase
from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "DEFAULT_AUTO_COMMIT_INTERVAL",
    "GroupSide",
    "OffsetAndMetadata",
    "PartitionRef",
    "PartitionsCallback",
]

DEFAULT_AUTO_COMMIT_INTERVAL = 5.0
"""Seconds between automatic commits of a group consumer."""
ASSIGNOR_ALIASES = {"round-robin": "roundrobin", "round_robin": "roundrobin"}
"""Other spellings accepted for the built-in assignors."""


@attrs.define(eq=False)
class _Start:
    key: StreamPartition
    offset: int | None
    generation: int
    progress: Progress | None
    announced: bool = False


@attrs.define(eq=False)
class _Revoke:
    key: StreamPartition
    run: PartitionRun | None
    deadline: float


async def _invoke(callback: PartitionsCallback, partitions: list[StreamPartition]) -> None:
    result = callback(partitions)
    if inspect.isawaitable(result):
        await result


def _assignor_setup(
    assignors: Sequence[str | Assignor] | None, base: MemberConfig
) -> tuple[tuple[str, ...], dict[str, Assignor]]:
    registry: dict[str, Assignor] = dict(BUILTIN_ASSIGNORS)
    if assignors is None:
        return base.assignors, registry
    names: list[str] = []
    for entry in assignors:
        if isinstance(entry, str):
            name = ASSIGNOR_ALIASES.get(entry, entry)
            if name not in registry:
                raise InvalidArgument(f"unknown assignor {entry!r}", details={"field": "assignors"})
        else:
            name = entry.name
            registry[name] = entry
        if name not in names:
            names.append(name)
    if not names:
        raise InvalidArgument("name at least one assignor", details={"field": "assignors"})
    return tuple(names), registry


class GroupSide:
    """Group membership of one consumer (see the module docstring)."""

    def __init__(
        self,
        consumer: ConsumerParts,
        name: str,
        *,
        member_id: str | None,
        instance_id: str | None,
        assignors: Sequence[str | Assignor] | None,
        config: MemberConfig | None,
        auto_commit: float | None,
        on_assigned: PartitionsCallback | None,
        on_revoked: PartitionsCallback | None,
        on_lost: PartitionsCallback | None,
    ) -> None:
        if auto_commit is not None and auto_commit <= 0:
            raise InvalidArgument(
                "auto_commit must be > 0 or None", details={"field": "auto_commit"}
            )
        base = config or MemberConfig()
        names, self.registry = _assignor_setup(assignors, base)
        self.config = attrs.evolve(
            base, assignors=names, instance_id=instance_id or base.instance_id
        )
        self.consumer = consumer
        self.name = name
        self.member_id = member_id or new_member_id()
        self.auto_commit = auto_commit
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.on_lost = on_lost
        self.runtime: GroupRuntime | None = None
        self.draining = 0
        """Revocations waiting for in-flight work (acks and settles wake them)."""
        self._tg: anyio.abc.TaskGroup | None = None
        self._starting: dict[StreamPartition, _Start] = {}
        self._starts = TickBatch(self._start_assigned)
        self._revokes = TickBatch(self._finish_revoked)
        self._losses = TickBatch(self._report_lost)
        self._fenced: MemberFenced | None = None
        self._next_commit = 0.0

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self, tg: anyio.abc.TaskGroup, counts: Mapping[str, int]) -> None:
        """Join the group (the runtime's tasks run in ``tg``)."""
        self._tg = tg
        self.runtime = await GroupRuntime.open(
            self.consumer.client,
            self.name,
            counts,
            self,
            member_id=self.member_id,
            config=self.config,
            assignors=self.registry,
        )
        if self.auto_commit is not None:
            self._next_commit = time.monotonic() + self.auto_commit
        await tg.start(self.runtime.run)
        # So that committed() and assignment() mean something right away (bounded).
        if await self.runtime.wait_joined(self.config.session_timeout):
            self.runtime.flush_actions()
            await self._starts.run_now()

    async def close(self, *, clean: bool) -> None:
        """Leave the group with final offsets (when auto-committing); bounded in time."""
        runtime = self.runtime
        if runtime is None:
            return
        try:
            if runtime.error is None and runtime.member.phase is not Phase.CLOSED:
                finals: dict[StreamPartition, int] = {}
                notes: dict[StreamPartition, str] = {}
                if self.auto_commit is not None:
                    for key, run in self.consumer.delivery.runs.items():
                        if run.generation is None:
                            continue
                        offset = run.processed.finish() if clean else run.processed.committable()
                        if self._behind(key, offset):
                            continue
                        finals[key] = offset
                        notes[key] = encode_progress(run.processed.progress())
                await runtime.leave(finals, notes, self.config.session_timeout)
        finally:
            runtime.stop()

    # -- reading the view ------------------------------------------------------------------

    @property
    def generation(self) -> int | None:
        """The group generation in the member's view."""
        view = None if self.runtime is None else self.runtime.member.view
        return None if view is None else view.generation

    def may_process(self, key: StreamPartition, now: float) -> bool:
        """True if the member's lease allows handing out messages of ``key`` now."""
        return self.runtime is not None and self.runtime.member.may_process(key, now)

    def kick(self) -> None:
        """Ask the driver to re-decide soon (a lease looked expired)."""
        if self.runtime is not None:
            self.runtime.kick()

    def check_fenced(self) -> None:
        """Raise MemberFenced once what the member owned has been handed back."""
        if self._fenced is not None and not self.consumer.delivery.runs and not self._starting:
            raise self._fenced

    def committed(self, key: StreamPartition) -> OffsetAndMetadata | None:
        """The committed offset in the member's view."""
        view = None if self.runtime is None else self.runtime.member.view
        entry = None if view is None else view.committed(key)
        if entry is None:
            return None
        offset = entry.position.offset
        return OffsetAndMetadata(offset, decode_progress(offset, entry.position.metadata).metadata)

    def _behind(self, key: StreamPartition, offset: int) -> bool:
        """True if ``offset`` is below the committed offset (the log would refuse it)."""
        view = None if self.runtime is None else self.runtime.member.view
        entry = None if view is None else view.committed(key)
        return entry is not None and offset < entry.position.offset

    # -- commits -----------------------------------------------------------------------------

    def _commit_run(self, run: PartitionRun, metadata: str = "") -> int | None:
        """Send a commit of the run's processed position if it changed; the offset, or None if
        nothing was sent (not owned, or below the committed offset)."""
        runtime = self.runtime
        assert runtime is not None
        offset = run.processed.committable()
        if self._behind(run.key, offset):
            return None
        encoded = encode_progress(run.processed.progress(metadata))
        view = runtime.member.view
        entry = None if view is None else view.committed(run.key)
        if entry is not None and entry.position == OffsetAndMetadata(offset, encoded):
            return offset  # already committed
        try:
            runtime.member.commit(run.key, offset, encoded)
        except NotOwner:
            return None
        return offset

    def group_tick(self, now: float) -> float | None:
        """Auto-commit when due; the next due time."""
        if self.auto_commit is None:
            return None
        if now >= self._next_commit:
            self._next_commit = now + self.auto_commit
            sent = False
            for run in list(self.consumer.delivery.runs.values()):
                if run.generation is not None and not run.revoking:
                    sent = self._commit_run(run) is not None or sent
            if sent and self.runtime is not None:
                self.runtime.kick()
        return self._next_commit

    async def commit(
        self, offsets: Mapping[StreamPartition, int | OffsetAndMetadata] | None, metadata: str
    ) -> None:
        """See :meth:`jetsdk.consumer.consumer.Consumer.commit`."""
        runtime = self.runtime
        assert runtime is not None
        entries = commit_entries(offsets, metadata)
        wanted: dict[StreamPartition, int] = {}
        if entries is None:
            for key, run in list(self.consumer.delivery.runs.items()):
                if run.generation is not None:
                    offset = self._commit_run(run, metadata)
                    if offset is not None:
                        wanted[key] = offset
        else:
            for key, entry in entries.items():
                offset, note = entry.offset, entry.metadata
                current = self.consumer.delivery.runs.get(key)
                if current is not None and current.processed.committable() == offset:
                    progress = current.processed.progress(note)
                else:
                    progress = Progress(offset, offset, (), note)
                try:
                    runtime.member.commit(key, offset, encode_progress(progress))
                except NotOwner:
                    raise CommitFailed(key.stream, key.partition, offset, "not_owner") from None
                wanted[key] = offset
        if not wanted:
            return
        await self._confirm(wanted)

    async def _confirm(self, wanted: Mapping[StreamPartition, int]) -> None:
        runtime = self.runtime
        assert runtime is not None
        for key in wanted:
            runtime.rejected.pop(key, None)
        timeout = max(self.config.session_timeout, self.consumer.client.request_timeout)
        count = runtime.flush_actions()
        stored = await runtime.wait_stored(count, timeout)
        applied = stored is not None and await runtime.wait_view(stored, timeout)
        view = runtime.member.view
        for key, offset in sorted(wanted.items()):
            entry = None if view is None else view.committed(key)
            rejected = runtime.rejected.get(key)
            if not applied:
                reason = "timeout"
            elif rejected is not None and rejected.offset == offset:
                reason = rejected.reason
            elif entry is None or entry.position.offset < offset:
                reason = "rejected"
            else:
                continue
            raise CommitFailed(key.stream, key.partition, offset, reason)

    # -- the runtime's actions (GroupHandler) ----------------------------------------------

    def group_start(self, partition: StreamPartition, offset: int | None, generation: int) -> None:
        """See GroupHandler."""
        progress = None
        view = None if self.runtime is None else self.runtime.member.view
        entry = None if view is None else view.committed(partition)
        if offset is not None and entry is not None and entry.position.offset == offset:
            progress = decode_progress(offset, entry.position.metadata)
        start = _Start(partition, offset, generation, progress)
        self._starting[partition] = start
        self._starts.add(start, self._tg)

    async def _start_assigned(self, batch: list[_Start]) -> None:
        consumer = self.consumer
        for start in batch:
            if start.offset is None and self._starting.get(start.key) is start:
                try:
                    start.offset = await consumer.initial_offset(start.key, consumer.start)
                except JetError as exc:
                    consumer.fail(exc)
        live = [s for s in batch if self._starting.get(s.key) is s and s.offset is not None]
        for start in live:
            start.announced = True
        if self.on_assigned is not None and live:
            try:
                await _invoke(self.on_assigned, [s.key for s in live])
            except Exception as exc:
                consumer.fail(exc)
        for start in live:
            if self._starting.get(start.key) is not start or start.offset is None:
                continue
            del self._starting[start.key]
            consumer.begin_run(start.key, start.offset, start.generation, start.progress)

    def seek_starting(self, key: StreamPartition, offset: int) -> bool:
        """A seek on a partition not started yet: start it there. False if not starting."""
        start = self._starting.get(key)
        if start is None:
            return False
        if start.offset is None:
            start.offset = offset  # NoCommittedOffset: the application chose where
            del self._starting[key]
            self.consumer.begin_run(key, offset, start.generation, None)
            return True
        start.offset, start.progress = offset, None
        return True

    def group_revoke(self, partition: StreamPartition, deadline: float) -> None:
        """See GroupHandler."""
        runtime = self.runtime
        assert runtime is not None
        start = self._starting.pop(partition, None)
        run = self.consumer.delivery.runs.get(partition)
        if run is None and (start is None or not start.announced):
            if runtime.member.release(partition, None):
                runtime.kick()
            return
        if run is not None:
            run.revoking = True
            run.stop()
            self.consumer.delivery.drop_buffered(run)
        # on_assigned saw it: on_revoked must see it too (after the callbacks in flight).
        self.draining += 1
        self._revokes.add(_Revoke(partition, run, deadline), self._tg)

    async def _finish_revoked(self, batch: list[_Revoke]) -> None:
        consumer, runtime = self.consumer, self.runtime
        assert runtime is not None
        try:
            deadline = min(r.deadline for r in batch)
            now = time.monotonic()
            # Leave time for the release to be stored before the lease ends.
            until = deadline - max(0.05, min(1.0, (deadline - now) / 4))
            with anyio.move_on_after(max(0.0, until - now)):
                while not all(r.run is None or r.run.processed.drained for r in batch):
                    await consumer.delivery.signal.wait()
            if self.on_revoked is not None:
                try:
                    await _invoke(self.on_revoked, [r.key for r in batch])
                except Exception as exc:
                    consumer.fail(exc)
            for entry in batch:
                run = entry.run
                if run is None:
                    runtime.member.release(entry.key, None)  # never started: nothing to commit
                    continue
                if consumer.delivery.runs.get(run.key) is not run:
                    continue  # lost meanwhile
                offset: int | None = None
                note = ""
                if self.auto_commit is not None:
                    offset = run.processed.committable()
                    note = encode_progress(run.processed.progress())
                    if self._behind(run.key, offset):
                        offset, note = None, ""
                consumer.delivery.end_run(run)
                runtime.member.release(run.key, offset, note)
            runtime.kick()
        finally:
            self.draining -= len(batch)

    def group_lose(self, partition: StreamPartition, reason: str) -> None:
        """See GroupHandler."""
        start = self._starting.pop(partition, None)
        run = self.consumer.delivery.runs.get(partition)
        if run is not None:
            self.consumer.delivery.end_run(run)
        elif start is None or not start.announced:
            return
        if self.on_lost is not None:
            self._losses.add(partition, self._tg)

    async def _report_lost(self, batch: list[StreamPartition]) -> None:
        assert self.on_lost is not None
        try:
            await _invoke(self.on_lost, batch)
        except Exception as exc:
            self.consumer.fail(exc)

    def group_fenced(self, by: str) -> None:
        """See GroupHandler."""
        self._fenced = MemberFenced(
            f"member {self.member_id} of group {self.name!r} was replaced by {by or 'another'}"
            " (same instance id)"
        )
        self.consumer.delivery.notify()

    def group_failed(self, error: JetError) -> None:
        """See GroupHandler."""
        self.consumer.fail(error)
