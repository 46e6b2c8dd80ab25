"""MetadataRaft: the replicated cluster metadata, as an anyio async context manager.

Every server of a cluster runs one :class:`MetadataRaft` over the same member list. The
metadata leader (the Raft leader) proposes operations; every member applies the committed
log in the same order to the pure state machine of :mod:`.machine`, so every member holds
the same :class:`~jetserver.metadata.model.MetadataState`.

Use::

    async with MetadataRaft(config) as raft:
        await raft.wait_leader()
        if raft.is_leader:
            applied = await raft.propose(CreateStream(...))
            applied.result          # OpResult, exactly as metadata.ops.apply returned it
        else:
            raft.leader_id, raft.leader_address   # forward the request there
        raft.state                  # MetadataState applied on this server
        async for status in raft.watch_status(): ...   # leadership changes
        async for state in raft.watch_state(): ...     # applied-state changes

Proposals on a follower: :meth:`MetadataRaft.propose` raises :class:`~.errors.NotLeader`
(with the leader's id and Raft address) unless called with ``forward=True``, in which case
PySyncObj forwards the entry to the leader over the Raft connection and the result is the
one this server computes when it applies the entry. The server forwards client requests to
the leader over its own protocol; ``forward=True`` is for internal proposals that any server
may make.

Idempotency: every proposal carries an ``op_id`` (generated if not given). After
:class:`~.errors.OutcomeUnknown` / :class:`~.errors.ProposalTimeout`, propose again with the
same ``op_id``: the op is applied at most once and the retry returns the original result.

Task safety: use from the event loop that entered the context (any anyio backend). The Raft
work runs in a thread of its own (:mod:`.host`); no method blocks the event loop on it.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import anyio
import attrs
from anyio.abc import TaskGroup

from jetsdk.background import BackgroundTasks
from jetserver.infra import hops
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState
from jetserver.metadata.ops import Op, OpResult
from jetserver.raft.bridge import Cell, ThreadWaker
from jetserver.raft.config import RaftConfig
from jetserver.raft.errors import (
    NotLeader,
    OutcomeUnknown,
    ProposalTimeout,
    RaftClosed,
    RaftError,
    RaftStartError,
    RaftTimeout,
    Unavailable,
)
from jetserver.raft.host import (
    FAIL_SUCCESS,
    CommandDone,
    Fatal,
    RaftHost,
    RaftStatus,
    Started,
    StartFailed,
    Stopped,
)
from jetserver.raft.machine import Entry, EntryOutcome, MachineState, encode_entry

log = logging.getLogger(__name__)

T = TypeVar("T")

# PySyncObj's FAIL_REASON values, and what each means for the command.
_NOT_APPLIED = {
    1: "the raft command queue is full",
    2: "no metadata leader is known (election in progress)",
    3: "superseded by a new metadata leader; not applied",
    4: "the node it was sent to is not the metadata leader",
    6: "refused by the metadata leader",
}
_UNKNOWN = {
    5: "the metadata leader changed before answering",
    7: "outcome unknown (the log moved past it while waiting)",
}


def error_for(fail_reason: int, what: str) -> RaftError | None:
    """The error for PySyncObj's ``FAIL_REASON`` of a command (None for success)."""
    if fail_reason == FAIL_SUCCESS:
        return None
    if fail_reason in _NOT_APPLIED:
        return Unavailable(f"{what}: {_NOT_APPLIED[fail_reason]}")
    reason = _UNKNOWN.get(fail_reason, f"raft failure {fail_reason}")
    return OutcomeUnknown(f"{what}: {reason}")


@attrs.frozen
class Applied:
    """A proposal's outcome once applied on this server."""

    index: int
    """State-machine index it was applied at (for :meth:`MetadataRaft.wait_applied`)."""
    result: OpResult
    """The operation's result (an error result means the state machine refused it)."""
    op_id: str
    """The op id it was proposed with."""
    duplicate: bool = False
    """True if this op id had already been applied (``result`` is the original one)."""


@attrs.define(eq=False)
class _Slot:
    event: anyio.Event
    done: CommandDone | None = None
    error: RaftError | None = None


class MetadataRaft:
    """This server's member of the metadata Raft group (see the module docstring).

    Args:
        config: identity, peers, password, data directory and timing.
    """

    def __init__(self, config: RaftConfig) -> None:
        self._config = config
        self._entered = False
        self._closed = False
        self._stopped = False
        self._failure: BaseException | None = None
        self._tokens = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        self._host: RaftHost | None = None
        self._waker: ThreadWaker | None = None
        self._tg: TaskGroup | None = None
        self._background = BackgroundTasks()
        self._status_cell: Cell[RaftStatus] | None = None
        self._machine_cell: Cell[MachineState] | None = None
        self._started: anyio.Event | None = None
        self._start_error: BaseException | None = None
        self._state_listeners: list[Callable[[], None]] = []

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> MetadataRaft:
        """Bind the Raft port, replay the snapshot and journal, join the group.

        Returns once the local state is recovered (not once a leader is known: see
        :meth:`wait_leader`).

        Raises:
            RaftStartError: the port cannot be bound, the journal or snapshot cannot be
                read, or starting took longer than ``config.start_timeout_s``.
        """
        if self._entered:
            raise RuntimeError("a MetadataRaft can be entered once")
        self._entered = True
        self._waker = ThreadWaker()
        self._status_cell = Cell(RaftStatus())
        self._machine_cell = Cell(MachineState())
        self._started = anyio.Event()
        self._host = RaftHost(self._config, self._waker.wake)
        self._tg = await self._background.open()
        try:
            self._tg.start_soon(self._dispatch)
            self._host.start()
            with anyio.fail_after(self._config.start_timeout_s):
                await self._started.wait()
        except TimeoutError:
            await self._shutdown()
            raise RaftStartError(
                f"metadata raft did not start within {self._config.start_timeout_s} s"
            ) from None
        except BaseException:
            await self._shutdown()
            raise
        if self._start_error is not None:
            await self._shutdown()
            raise RaftStartError(
                f"metadata raft cannot start on {self._config.address}: {self._start_error!r}"
            ) from self._start_error
        log.debug(
            "metadata raft started",
            extra=fields(
                server=self._config.server_id,
                address=self._config.address,
                index=self.index,
                streams=len(self.state.streams),
            ),
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop the node (:meth:`aclose`) and the dispatcher task."""
        await self._shutdown()

    async def aclose(self) -> None:
        """Stop the Raft thread now (bounded by ``config.stop_timeout_s``); idempotent.

        This server leaves the group (the others elect a leader without it if it led).
        Pending proposals fail with :class:`RaftClosed`; so does everything after. The
        context still has to be exited (it owns the dispatcher task).
        """
        if self._stopped:
            return
        self._stopped = True
        self._fail_pending(RaftClosed("the metadata raft node is stopping"))
        assert self._host is not None
        self._host.stop()
        with anyio.CancelScope(shield=True):
            joined = await anyio.to_thread.run_sync(self._host.join, self._config.stop_timeout_s)
        if not joined:
            log.error(
                "metadata raft thread did not stop in time",
                extra=fields(timeout_s=self._config.stop_timeout_s),
            )
        self._wake_watchers()

    async def _shutdown(self) -> None:
        if self._closed:
            return
        try:
            await self.aclose()
        finally:
            self._closed = True
            assert self._tg is not None
            assert self._waker is not None
            # Exited outside any shield: the task group's scope must be the current one.
            await self._background.close()
            self._waker.close()
            self._wake_watchers()

    # -- views ---------------------------------------------------------------------------

    @property
    def config(self) -> RaftConfig:
        """The configuration."""
        return self._config

    @property
    def machine(self) -> MachineState:
        """The applied replicated state (metadata and remembered op ids)."""
        return self._cells()[1].value

    @property
    def state(self) -> MetadataState:
        """The metadata applied on this server (read-only; replaced, never mutated)."""
        return self.machine.metadata

    @property
    def index(self) -> int:
        """State-machine index applied on this server."""
        return self.machine.index

    @property
    def status(self) -> RaftStatus:
        """This server's Raft role and the leader it knows."""
        return self._cells()[0].value

    @property
    def is_leader(self) -> bool:
        """True if this server is the metadata leader (as far as it knows)."""
        return self.status.is_leader

    @property
    def leader_id(self) -> str | None:
        """Server id of the metadata leader (None while unknown)."""
        return self.status.leader_id

    @property
    def leader_address(self) -> str | None:
        """Raft address of the metadata leader (None while unknown)."""
        return self.status.leader_address

    def _cells(self) -> tuple[Cell[RaftStatus], Cell[MachineState]]:
        if self._status_cell is None or self._machine_cell is None:
            raise RuntimeError("enter the MetadataRaft context first")
        return self._status_cell, self._machine_cell

    # -- proposals -----------------------------------------------------------------------

    async def propose(
        self,
        op: Op,
        *,
        op_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - expiry is a typed error
        forward: bool = False,
    ) -> Applied:
        """Propose ``op``; return once it is applied on this server.

        Args:
            op: the metadata operation (decide ids, times and replicas before proposing).
            op_id: idempotency id (1-128 characters); a new one if None. Reuse it to retry.
            timeout: seconds to wait (default ``config.propose_timeout_s``).
            forward: on a follower, forward through Raft instead of raising NotLeader.

        Raises:
            NotLeader: not the leader and ``forward`` is False (nothing proposed).
            EntryTooLarge: the op encodes to more than ``machine.MAX_ENTRY_BYTES``.
            ValueError: ``op_id`` is empty or too long.
            Unavailable: not applied (no leader, queue full, superseded).
            OutcomeUnknown: may or may not be applied (retry with the same ``op_id``).
            ProposalTimeout: no outcome in time (an OutcomeUnknown).
            RaftClosed: the node is stopped or failed.
        """
        self._check_open()
        op_id = op_id or uuid.uuid4().hex
        payload = encode_entry(Entry(op_id=op_id, op=op))
        if not forward and not self.is_leader:
            raise NotLeader(self.leader_id, self.leader_address)
        host = self._host
        assert host is not None
        done = await self._command(lambda token: host.submit(token, payload), timeout, op_id)
        outcome = done.value
        if not isinstance(outcome, EntryOutcome):  # pragma: no cover - PySyncObj contract
            raise OutcomeUnknown(f"unexpected raft result {outcome!r} for op {op_id}")
        return Applied(outcome.index, outcome.result, op_id, outcome.duplicate)

    async def add_server(
        self,
        server_id: str,
        address: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """Add a member (leader only; one change at a time; see spec/cluster.md).

        Start the new server first, with every current member as its peers.

        Raises:
            NotLeader, Unavailable, OutcomeUnknown, RaftClosed: as :meth:`propose`.
        """
        await self._change_membership(True, server_id, address, timeout)

    async def remove_server(
        self,
        server_id: str,
        address: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """Remove a member (leader only; not the leader itself).

        Raises:
            NotLeader, Unavailable, OutcomeUnknown, RaftClosed: as :meth:`propose`.
        """
        await self._change_membership(False, server_id, address, timeout)

    async def _change_membership(
        self, add: bool, server_id: str, address: str, limit_s: float | None
    ) -> None:
        self._check_open()
        if not self._config.dynamic_membership:
            raise Unavailable("dynamic membership is disabled in the raft configuration")
        if not self.is_leader:
            raise NotLeader(self.leader_id, self.leader_address)
        host = self._host
        assert host is not None
        what = f"{'add' if add else 'remove'} {server_id} at {address}"
        await self._command(
            lambda token: host.change_membership(token, add, address, server_id), limit_s, what
        )

    def hasten_election(self, leader_address: str, delay_s: float) -> None:
        """Elect a new leader ``delay_s`` from now rather than after the election timeout,
        if this member still follows ``leader_address`` (the Raft address of a leader
        whose process is known to be gone: its server refuses connections). Members
        stagger ``delay_s`` so that they do not split their votes."""
        self._check_open()
        assert self._host is not None
        self._host.hasten_election(leader_address, delay_s)

    def force_compaction(self) -> None:
        """Write a snapshot and truncate the journal at the next Raft tick."""
        self._check_open()
        assert self._host is not None
        self._host.force_compaction()

    async def _command(
        self, submit: Callable[[int], None], limit_s: float | None, what: str
    ) -> CommandDone:
        token = next(self._tokens)
        slot = _Slot(anyio.Event())
        self._pending[token] = slot
        limit = self._config.propose_timeout_s if limit_s is None else limit_s
        try:
            submit(token)
            with anyio.move_on_after(limit):
                await slot.event.wait()
        finally:
            self._pending.pop(token, None)
        if slot.error is not None:
            raise slot.error
        done = slot.done
        if done is None:
            raise ProposalTimeout(f"no outcome for {what} within {limit} s")
        error = error_for(done.fail_reason, what)
        if error is not None:
            raise error
        return done

    # -- waiting and watching ------------------------------------------------------------

    async def wait_applied(
        self,
        index: int,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> MetadataState:
        """Wait until this server has applied state-machine index ``index``; return the state.

        Raises:
            RaftTimeout: not reached within ``timeout`` (default ``config.propose_timeout_s``).
            RaftClosed: the node stopped.
        """
        machine = await self._wait_for(
            self._cells()[1], lambda m: m.index >= index, timeout, f"index {index}"
        )
        return machine.metadata

    async def wait_leader(self, *, timeout: float | None = None) -> RaftStatus:  # noqa: ASYNC109
        """Wait until a leader is known; return the status then.

        Raises:
            RaftTimeout: no leader within ``timeout`` (default ``config.propose_timeout_s``).
            RaftClosed: the node stopped.
        """
        return await self._wait_for(
            self._cells()[0], lambda s: s.leader_address is not None, timeout, "a leader"
        )

    async def wait_status(
        self,
        predicate: Callable[[RaftStatus], bool],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> RaftStatus:
        """Wait until ``predicate(status)`` is true; return that status.

        Raises:
            RaftTimeout, RaftClosed: as :meth:`wait_leader`.
        """
        return await self._wait_for(self._cells()[0], predicate, timeout, "a raft status")

    async def wait_ready(self, *, timeout: float | None = None) -> RaftStatus:  # noqa: ASYNC109
        """Wait until this server has caught up with the leader's log once.

        Raises:
            RaftTimeout, RaftClosed: as :meth:`wait_leader`.
        """
        return await self._wait_for(self._cells()[0], lambda s: s.ready, timeout, "catch-up")

    async def _wait_for(
        self, cell: Cell[T], done: Callable[[T], bool], limit_s: float | None, what: str
    ) -> T:
        limit = self._config.propose_timeout_s if limit_s is None else limit_s
        with anyio.move_on_after(limit):
            while True:
                self._check_open()
                value = cell.value
                if done(value):
                    return value
                await cell.wait_changed(cell.version)
        raise RaftTimeout(f"waited {limit} s for {what}")

    async def watch_status(self) -> AsyncIterator[RaftStatus]:
        """The current status, then each change (latest only); ends when the node stops."""
        async for value in self._watch(self._cells()[0]):
            yield value

    async def watch_state(self) -> AsyncIterator[MetadataState]:
        """The applied state, then each change (latest only); ends when the node stops.

        Level-triggered: a snapshot installed from the leader replaces the state in one
        step, so reconcile against the whole state rather than expecting every operation.
        """
        async for machine in self._watch(self._cells()[1]):
            yield machine.metadata

    def on_state(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` each time the applied state changes, in the dispatcher's own
        step that publishes it (no pass of the event loop in between, as a task following
        :meth:`watch_state` would take); it must not raise or block. Returns the function
        that removes it.

        The server's reconciler wakes this way: at a failover its wake-up went through
        three passes of a loop busy with thousands of woken replicas (the dispatch, the
        watcher task, the reconciler)."""
        self._state_listeners.append(listener)
        return lambda: self._state_listeners.remove(listener)

    async def _watch(self, cell: Cell[T]) -> AsyncIterator[T]:
        version = -1
        while not (self._stopped or self._closed):
            if cell.version != version:
                version = cell.version
                yield cell.value
            else:
                await cell.wait_changed(version)

    # -- the dispatcher (event loop side of the bridge) ----------------------------------

    async def _dispatch(self) -> None:
        assert self._waker is not None
        while True:
            try:
                await self._waker.wait()
            except anyio.ClosedResourceError:
                return
            self._drain()

    def _drain(self) -> None:
        host = self._host
        assert host is not None
        status_cell, machine_cell = self._cells()
        # Events first: an outcome is posted after the state it describes was published,
        # so reading the state after popping the event always includes it.
        events = []
        while host.events:
            events.append(host.events.popleft())
        if host.machine is not machine_cell.value:
            if hops.ENABLED:
                hops.mark("meta.state")
            machine_cell.set(host.machine)
            for listener in self._state_listeners:
                listener()
        if host.status != status_cell.value:
            status_cell.set(host.status)
        for event in events:
            self._handle(event)

    def _handle(self, event: Any) -> None:
        assert self._started is not None
        if isinstance(event, CommandDone):
            slot = self._pending.get(event.token)
            if slot is not None:
                slot.done = event
                slot.event.set()
        elif isinstance(event, Started):
            self._started.set()
        elif isinstance(event, StartFailed):
            self._start_error = event.error
            self._started.set()
        elif isinstance(event, Fatal):
            self._failure = event.error
            log.error(
                "metadata raft node failed; it stops serving",
                extra=fields(server=self._config.server_id, error=repr(event.error)),
            )
            self._fail_pending(RaftClosed(f"the metadata raft node failed: {event.error!r}"))
            self._wake_watchers()
        elif isinstance(event, Stopped):
            self._wake_watchers()

    def _fail_pending(self, error: RaftError) -> None:
        for slot in self._pending.values():
            if slot.done is None and slot.error is None:
                slot.error = error
                slot.event.set()

    def _wake_watchers(self) -> None:
        if self._status_cell is not None and self._machine_cell is not None:
            self._status_cell.set(self._status_cell.value)
            self._machine_cell.set(self._machine_cell.value)

    def _check_open(self) -> None:
        if not self._entered or self._host is None:
            raise RuntimeError("enter the MetadataRaft context first")
        if self._failure is not None:
            raise RaftClosed(f"the metadata raft node failed: {self._failure!r}")
        if self._stopped or self._closed:
            raise RaftClosed("the metadata raft node is stopped")
