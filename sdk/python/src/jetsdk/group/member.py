"""One group member's decisions, sans-I/O: what to append, what to consume, when to stop.

:class:`GroupMember` is what the SDK Consumer drives. It holds the member's view of the group
(a :class:`~jetsdk.group.reader.GroupLogReader`) and turns it into actions:

- :class:`AppendRecord`: append this record to the group log (``__groups``, key = group name)
  and report the acknowledgement with :meth:`GroupMember.on_appended`;
- :class:`StartPartition`: start fetching a partition from an offset;
- :class:`RevokePartition`: stop fetching it, finish in-flight work, then call
  :meth:`GroupMember.release` with the final offset before the deadline;
- :class:`LosePartition`: stop at once; do not commit (commits would be fenced off anyway);
- :class:`Fenced`: another incarnation with our instance id took over; hand back what was
  revoked, then close without rejoining.

The driver loop (any I/O library)::

    member.join(now())
    loop:
        for record in fetch(group_log, member.next_fetch_offset): member.on_record(...)
        if the fetch returned nothing new: member.caught_up(hw)
        for action in member.poll(now()): perform it
        wait until member.next_wakeup() or new records
    before handing a message of partition p to user code: member.may_process(p, now())

``now`` is the member's monotonic clock in seconds; record timestamps are the server's (ns).

Not thread-safe: one task drives a member.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from jetsdk.group.actions import (
    Action,
    AppendRecord,
    Fenced,
    LosePartition,
    RevokePartition,
    StartPartition,
)
from jetsdk.group.assignors import BUILTIN_ASSIGNORS, Assignor
from jetsdk.group.changes import Change, MemberRemoved
from jetsdk.group.errors import InvalidGroupConfig, NotOwner
from jetsdk.group.lease import ServerClockBound
from jetsdk.group.reader import GroupLogReader
from jetsdk.group.records import (
    Checkpoint,
    FinalOffset,
    GroupRecord,
    Heartbeat,
    Join,
    Leave,
    OffsetCommit,
    Release,
)
from jetsdk.group.state import GroupState
from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "DEFAULT_CHECKPOINT_INTERVAL",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_RELEASE_TIMEOUT",
    "DEFAULT_SESSION_TIMEOUT",
    "Action",
    "AppendRecord",
    "Fenced",
    "GroupMember",
    "LosePartition",
    "MemberConfig",
    "Phase",
    "RevokePartition",
    "StartPartition",
]

DEFAULT_SESSION_TIMEOUT = 10.0
"""Seconds of log time without a record from a member before it is expired."""
DEFAULT_HEARTBEAT_INTERVAL = 3.0
"""Seconds between heartbeats."""
DEFAULT_RELEASE_TIMEOUT = 30.0
"""Seconds a member has to hand back a partition before it is taken."""
DEFAULT_CHECKPOINT_INTERVAL = 60.0
"""Log seconds between checkpoints written by the group's leader."""


@attrs.frozen
class MemberConfig:
    """Timing and identity of a group member (durations in float seconds)."""

    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    """Expired after this long (log time) without a record from the member."""
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    """Time between heartbeats; at most half the session timeout."""
    release_timeout: float = DEFAULT_RELEASE_TIMEOUT
    """Time the member promises to release a revoked partition within."""
    checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL
    """Log time between checkpoints (written by the oldest member)."""
    lease_margin: float | None = None
    """Safety margin subtracted from every lease (default: session_timeout / 10): covers
    clock-rate differences between this machine and the servers."""
    assignors: tuple[str, ...] = ("sticky", "range", "roundrobin")
    """Assignors this member supports, most preferred first."""
    instance_id: str | None = None
    """Static membership: a stable id for this consumer across restarts."""
    metadata: str = ""
    """Free-form client information published in the join record."""

    def __attrs_post_init__(self) -> None:
        if not 0.001 <= self.session_timeout <= 86_400:
            raise InvalidGroupConfig("session_timeout must be in 0.001..86400 s")
        if not 0 < self.heartbeat_interval <= self.session_timeout / 2:
            raise InvalidGroupConfig("heartbeat_interval must be in (0, session_timeout / 2]")
        if not 0.001 <= self.release_timeout <= 86_400:
            raise InvalidGroupConfig("release_timeout must be in 0.001..86400 s")
        if self.checkpoint_interval <= 0:
            raise InvalidGroupConfig("checkpoint_interval must be > 0")
        if self.lease_margin is not None and not 0 <= self.lease_margin < self.session_timeout:
            raise InvalidGroupConfig("lease_margin must be in [0, session_timeout)")
        if not self.assignors:
            raise InvalidGroupConfig("assignors must name at least one assignor")

    @property
    def margin(self) -> float:
        """The effective lease margin in seconds."""
        return self.session_timeout / 10 if self.lease_margin is None else self.lease_margin


class Phase(enum.Enum):
    """Lifecycle of a member."""

    IDLE = "idle"
    JOINING = "joining"
    ACTIVE = "active"
    FENCED = "fenced"
    CLOSED = "closed"


class _Status(enum.Enum):
    ACTIVE = "active"
    REVOKING = "revoking"
    RELEASED = "released"


@attrs.define(eq=False)
class _Local:
    generation: int
    status: _Status = _Status.ACTIVE
    release_offset: int | None = None
    release_metadata: str = ""
    fresh: bool = True


@attrs.define(eq=False)
class GroupMember:
    """The decisions of one member of a consumer group (see the module docstring).

    Args:
        group: the group name.
        member_id: unique per process incarnation (e.g. a random UUID).
        subscriptions: stream -> partition count, as this member sees them.
        config: timing and identity.
        assignors: assignors by name; must contain every name in ``config.assignors``.
        log_start: first stored offset of the group-log partition.
        start: where to start reading it (default: ``log_start``); see GroupLogReader.
    """

    group: str
    member_id: str
    subscriptions: Mapping[str, int]
    config: MemberConfig = attrs.field(factory=MemberConfig)
    assignors: Mapping[str, Assignor] = attrs.field(default=BUILTIN_ASSIGNORS, kw_only=True)
    log_start: int = attrs.field(default=0, kw_only=True)
    start: int | None = attrs.field(default=None, kw_only=True)
    phase: Phase = attrs.field(default=Phase.IDLE, init=False)
    """Where the member is in its lifecycle."""
    _reader: GroupLogReader = attrs.field(init=False)
    _clock: ServerClockBound = attrs.field(factory=ServerClockBound, init=False)
    _actions: list[Action] = attrs.field(factory=list, init=False)
    _local: dict[StreamPartition, _Local] = attrs.field(factory=dict, init=False)
    _sent: dict[tuple[StreamPartition, int], int] = attrs.field(factory=dict, init=False)
    _next_heartbeat: float | None = attrs.field(default=None, init=False)
    _replaced: bool = attrs.field(default=False, init=False)
    _checkpoint_basis: int | None = attrs.field(default=None, init=False)
    # Leases change only when the view or the clock bound does: cache them per view offset.
    _lease_cache: tuple[int, dict[StreamPartition, float | None]] | None = attrs.field(
        default=None, init=False
    )
    # Decisions are redone only when the view, the clock bound or local state changed, or a
    # lease ran out (every poll would otherwise walk all partitions).
    _stale: bool = attrs.field(default=True, init=False)
    _decided_at_offset: int = attrs.field(default=-2, init=False)
    _next_expiry: float | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        missing = [a for a in self.config.assignors if a not in self.assignors]
        if missing:
            raise InvalidGroupConfig(f"assignors not registered: {missing}")
        self._join_record()  # validates ids and subscriptions early
        self._reader = GroupLogReader(
            self.group, self.log_start, self.start, assignors=self.assignors
        )

    # ------------------------------------------------------------------ inputs

    @property
    def view(self) -> GroupState | None:
        """The member's current view of the group (None while bootstrapping)."""
        return self._reader.state

    @property
    def next_fetch_offset(self) -> int:
        """The group-log offset to fetch next."""
        return self._reader.next_offset

    @property
    def skipped(self) -> int:
        """Group-log records skipped so far (invalid, or another group's of a newer
        version; see :attr:`GroupLogReader.skipped`)."""
        return self._reader.skipped

    def on_record(self, offset: int, timestamp: int, value: bytes | memoryview) -> list[Change]:
        """Feed one group-log record (in offset order; other groups' records too).

        Raises:
            UnsupportedGroupVersion, UnknownAssignor: the member cannot follow this group.
        """
        return self._changes(self._reader.feed(offset, timestamp, value))

    def on_decoded_record(self, offset: int, timestamp: int, record: GroupRecord) -> list[Change]:
        """Like :meth:`on_record` for a record the caller already decoded."""
        return self._changes(self._reader.feed_record(offset, timestamp, record))

    def _changes(self, changes: list[Change]) -> list[Change]:
        if changes:
            self._lease_cache = None
        for change in changes:
            if (
                isinstance(change, MemberRemoved)
                and change.member == self.member_id
                and change.reason == "replaced"
            ):
                self._replaced = True
        return changes

    def caught_up(self, hw: int) -> None:
        """The driver has read every group-log record below ``hw``."""
        self._reader.caught_up(hw)

    def reset_log(self, log_start: int, start: int | None = None) -> None:
        """The driver fell behind the log start (retention): rebuild the view from there."""
        self._reader.reset(log_start, start)

    def on_appended(self, sent_at: float, timestamp: int) -> None:
        """An append sent at local time ``sent_at`` was stored with server ``timestamp`` (ns)."""
        self._clock.observe(sent_at, timestamp)
        self._lease_cache = None
        self._stale = True

    def join(self, now: float) -> None:
        """Start taking part: append a join record (actions come from :meth:`poll`)."""
        if self.phase is not Phase.IDLE:
            raise RuntimeError(f"join() in phase {self.phase.value}")
        self.phase = Phase.JOINING
        self._append(self._join_record())
        self._next_heartbeat = now + self.config.heartbeat_interval

    def update_subscriptions(self, subscriptions: Mapping[str, int]) -> None:
        """Change the subscribed streams or the partition counts seen (rejoins, same id)."""
        self.subscriptions = dict(subscriptions)
        record = self._join_record()
        if self.phase in (Phase.JOINING, Phase.ACTIVE):
            self._append(record)

    def commit(self, partition: StreamPartition, offset: int, metadata: str = "") -> bool:
        """Commit ``offset`` (next to consume) for an owned partition.

        Returns False if the same offset was already sent for this ownership.

        Raises:
            NotOwner: the partition is not being consumed by this member.
        """
        local = self._local.get(partition)
        if local is None or local.status is _Status.RELEASED or self.phase is Phase.CLOSED:
            raise NotOwner(partition.stream, partition.partition)
        key = (partition, local.generation)
        if self._sent.get(key) == offset and not metadata:
            return False
        self._append(
            OffsetCommit.of(
                self.group, self.member_id, partition, local.generation, offset, metadata
            )
        )
        self._sent[key] = max(offset, self._sent.get(key, offset))
        return True

    def release(self, partition: StreamPartition, offset: int | None, metadata: str = "") -> bool:
        """Hand back a revoked partition, committing ``offset`` (None: commit nothing).

        Returns False (and does nothing) if the partition is not being revoked any more.
        """
        local = self._local.get(partition)
        if local is None or local.status is not _Status.REVOKING:
            return False
        local.status = _Status.RELEASED
        self._stale = True
        local.release_offset = offset
        local.release_metadata = metadata
        local.fresh = True
        if offset is not None:
            key = (partition, local.generation)
            self._sent[key] = max(offset, self._sent.get(key, offset))
        self._append(self._release_record(partition, local))
        return True

    def leave(
        self,
        final_offsets: Mapping[StreamPartition, int] | None = None,
        *,
        temporary: bool | None = None,
        metadata: Mapping[StreamPartition, str] | None = None,
    ) -> None:
        """Leave the group, committing ``final_offsets``; no action follows but the append.

        ``temporary`` (default: True for static members) keeps the member's slot until its
        session timeout, so a restart with the same instance id causes no rebalance.
        ``metadata`` is committed with the final offset of each partition it names.
        """
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            self.phase = Phase.CLOSED
            return
        offsets = final_offsets or {}
        notes = metadata or {}
        entries = [
            FinalOffset(p.stream, p.partition, loc.generation, offsets.get(p), notes.get(p, ""))
            for p, loc in sorted(self._local.items())
            if loc.status is not _Status.RELEASED
        ]
        if temporary is None:
            temporary = self.config.instance_id is not None
        self._append(
            Leave(
                group=self.group, member=self.member_id, temporary=temporary, final_offsets=entries
            )
        )
        self._local.clear()
        self.phase = Phase.CLOSED

    # ------------------------------------------------------------------ outputs

    def may_process(self, partition: StreamPartition, now: float) -> bool:
        """True if records of ``partition`` may be handed to user code at local time ``now``."""
        local = self._local.get(partition)
        if local is None or local.status is _Status.RELEASED or self.phase is Phase.CLOSED:
            return False
        state = self._reader.state
        lease = None if state is None else self._lease(state, partition)
        return lease is not None and now < lease

    def owned(self) -> dict[StreamPartition, int]:
        """Partitions being consumed or revoked, with their owner generations."""
        return {
            p: loc.generation
            for p, loc in self._local.items()
            if loc.status is not _Status.RELEASED
        }

    def next_wakeup(self) -> float | None:
        """The local time :meth:`poll` must be called at, at the latest (None: no timer)."""
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return None
        times = [t for t in (self._next_heartbeat, self._next_expiry) if t is not None]
        return min(times) if times else None

    def poll(self, now: float) -> list[Action]:
        """Bring decisions up to date at local time ``now``; return the actions to perform."""
        state = self._reader.state
        if self.phase not in (Phase.IDLE, Phase.CLOSED) and state is not None:
            expired = self._next_expiry is not None and now >= self._next_expiry
            if self._stale or expired or state.last_offset != self._decided_at_offset:
                self._track_membership(state, now)
                self._reconcile(state, now)
                self._stale = False
                self._decided_at_offset = state.last_offset
                leases = [
                    self._lease(state, p)
                    for p, loc in self._local.items()
                    if loc.status is not _Status.RELEASED
                ]
                self._next_expiry = min((t for t in leases if t is not None), default=None)
        self._timers(now, state)
        actions, self._actions = self._actions, []
        return actions

    # ------------------------------------------------------------------ internals

    def _append(self, record: GroupRecord) -> None:
        self._actions.append(AppendRecord(record))

    def _join_record(self) -> Join:
        cfg = self.config
        return Join(
            group=self.group,
            member=self.member_id,
            subscriptions=self.subscriptions,
            instance=cfg.instance_id,
            assignors=cfg.assignors,
            session_timeout_ms=max(1, round(cfg.session_timeout * 1000)),
            release_timeout_ms=max(1, round(cfg.release_timeout * 1000)),
            metadata=cfg.metadata,
        )

    def _release_record(self, partition: StreamPartition, local: _Local) -> Release:
        entry = FinalOffset(
            partition.stream,
            partition.partition,
            local.generation,
            local.release_offset,
            local.release_metadata,
        )
        return Release(group=self.group, member=self.member_id, partitions=(entry,))

    def _lease(self, state: GroupState, partition: StreamPartition) -> float | None:
        cache = self._lease_cache
        if cache is None or cache[0] != state.last_offset:
            cache = self._lease_cache = (state.last_offset, {})
        if partition in cache[1]:
            return cache[1][partition]
        lease = cache[1][partition] = self._compute_lease(state, partition)
        return lease

    def _compute_lease(self, state: GroupState, partition: StreamPartition) -> float | None:
        end = state.lease_end(self.member_id, partition)
        if end is None:
            return None
        local = self._clock.local_deadline(end)
        return None if local is None else local - self.config.margin

    def _resume_offset(
        self, state: GroupState, partition: StreamPartition, generation: int
    ) -> int | None:
        committed = state.committed(partition)
        sent = self._sent.get((partition, generation))
        if committed is None:
            return sent
        offset = committed.position.offset
        return offset if sent is None else max(offset, sent)

    def _track_membership(self, state: GroupState, now: float) -> None:
        info = state.member(self.member_id)
        if self._replaced and self.phase in (Phase.JOINING, Phase.ACTIVE):
            instance = self.config.instance_id
            holder = None if instance is None else state.member_for_instance(instance)
            self.phase = Phase.FENCED
            self._actions.append(Fenced(holder or ""))
            return
        if self.phase is Phase.JOINING:
            if info is not None and not info.parked:
                self.phase = Phase.ACTIVE
            return
        if self.phase is not Phase.ACTIVE or info is not None:
            return
        instance = self.config.instance_id
        holder = None if instance is None else state.member_for_instance(instance)
        if holder is not None and holder != self.member_id:
            self.phase = Phase.FENCED
            self._actions.append(Fenced(holder))
            return
        # Expired (or removed some other way): everything is lost; join again, same id.
        self.phase = Phase.JOINING
        self._append(self._join_record())
        self._next_heartbeat = now + self.config.heartbeat_interval

    def _reconcile(self, state: GroupState, now: float) -> None:
        me = self.member_id
        owned = state.owned_by(me)
        # Offsets sent for ownerships we no longer have are never needed again.
        for key in [k for k in self._sent if k[0] not in owned or owned[k[0]].generation != k[1]]:
            del self._sent[key]
        for p in sorted(self._local):
            local = self._local[p]
            own = owned.get(p)
            if own is None or own.generation != local.generation:
                del self._local[p]
                if local.status is not _Status.RELEASED:
                    self._actions.append(LosePartition(p, "taken"))
                continue
            lease = self._lease(state, p)
            alive = lease is not None and now < lease
            if local.status is _Status.RELEASED:
                # Never resume an ownership we released, even if the partition was assigned
                # back meanwhile: the release still applies when it lands, and we get the
                # partition again under a new owner generation.
                continue
            if not alive:
                del self._local[p]
                self._actions.append(LosePartition(p, "lease"))
                continue
            if own.target != me and local.status is _Status.ACTIVE:
                local.status = _Status.REVOKING
                assert lease is not None
                self._actions.append(RevokePartition(p, lease))
        for p, own in owned.items():
            if p in self._local:
                continue
            if own.target != me or self.phase is not Phase.ACTIVE:
                # Ours in the log but we are not consuming it: hand it back at once.
                local = _Local(own.generation, _Status.RELEASED)
                local.release_offset = self._sent.get((p, own.generation))
                self._local[p] = local
                self._append(self._release_record(p, local))
                continue
            lease = self._lease(state, p)
            if lease is not None and now < lease:
                self._local[p] = _Local(own.generation)
                offset = self._resume_offset(state, p, own.generation)
                self._actions.append(StartPartition(p, offset, own.generation))

    def _timers(self, now: float, state: GroupState | None) -> None:
        if self._next_heartbeat is None or now < self._next_heartbeat:
            return
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return
        self._next_heartbeat = now + self.config.heartbeat_interval
        if self.phase is Phase.JOINING:
            self._append(self._join_record())
            return
        if self.phase is Phase.ACTIVE:
            generation = 0 if state is None else state.generation
            self._append(Heartbeat(group=self.group, member=self.member_id, generation=generation))
        if state is None:
            return
        # Re-send releases the log has not applied yet (the first may have been lost).
        owned = state.owned_by(self.member_id)
        for p, local in sorted(self._local.items()):
            if local.status is not _Status.RELEASED:
                continue
            if local.fresh:
                local.fresh = False
            elif p in owned and owned[p].generation == local.generation:
                self._append(self._release_record(p, local))
        if (
            self.phase is Phase.ACTIVE
            and state.leader() == self.member_id
            and state.last_checkpoint_at is not None
            and state.clock - state.last_checkpoint_at >= self.config.checkpoint_interval * 1e9
            and self._checkpoint_basis != state.last_checkpoint_at
        ):
            # One checkpoint per interval even if our view lags behind our own appends.
            self._checkpoint_basis = state.last_checkpoint_at
            self._append(
                Checkpoint(
                    group=self.group,
                    member=self.member_id,
                    as_of=state.last_offset,
                    state=state.snapshot(),
                )
            )
