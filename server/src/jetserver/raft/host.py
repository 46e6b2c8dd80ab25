"""The PySyncObj node, hosted in a thread of its own. The only module that touches PySyncObj
(with :mod:`.incoming`, the filter of the messages it receives, and
:mod:`.election_timing`, which moves its election deadline).

:class:`RaftHost` builds a ``SyncObj`` in its thread with ``autoTick=False`` and ticks it in
a loop (so the thread's life is ours: no dependency on the thread that built it, a bounded
stop). The event loop never calls into PySyncObj except to enqueue a command (PySyncObj's
command queue is locked; with ``appendEntriesUseBatch=False`` enqueueing also wakes the
Raft thread through PySyncObj's pipe). Everything the Raft thread produces is handed over
without blocking it: command outcomes go into :attr:`RaftHost.events`, the applied state
and the role are published as immutable values in :attr:`RaftHost.machine` and
:attr:`RaftHost.status`, then the ``wake`` callback (a :class:`~.bridge.ThreadWaker`) is
called.

PySyncObj specifics handled here:

- ``password`` is always set (see :mod:`.config`); the port is bound to the configured
  address only, not to every interface (PySyncObj's default).
- the journal is :class:`~.journal.DurableJournal` (synced, checksummed).
- snapshots ("full dumps") are written by our serializer as orjson, never pickle, then
  zlib-compressed (:mod:`.snapshot_file`); the serializer also stores PySyncObj's two
  boundary log entries and the member list.
- log records are routed by :mod:`.logbridge`.
- the messages it receives pass through :mod:`.incoming` first (keepalives dropped, a
  leader's next index kept on late acknowledgements, Raft's AppendEntries rule on a
  follower).

Thread safety: :meth:`RaftHost.submit`, :meth:`RaftHost.change_membership`,
:meth:`RaftHost.force_compaction` and :meth:`RaftHost.stop` may be called from any thread;
:attr:`machine` and :attr:`status` are replaced (never mutated) by the Raft thread.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import TCPNode

from jetsdk.codec.error_codes import ErrorCode
from jetserver.logs import fields
from jetserver.raft import incoming, journal, logbridge
from jetserver.raft.config import RaftConfig
from jetserver.raft.election_timing import (
    Hastened,
    first_election,
    hasten_election,
    postpone_election,
    retry_soon,
)
from jetserver.raft.machine import (
    MAX_ENTRY_BYTES,
    UNDECODABLE,
    EntryOutcome,
    MachineState,
    apply_entry,
    machine_from_dict,
)
from jetserver.raft.snapshot_file import decode_snapshot, encode_snapshot
from jetserver.raft.snapshot_pieces import SnapshotPieces
from jetserver.storage.fatal import fsync_directory_or_die, fsync_or_die
from jetserver.storage.space import with_reserve

log = logging.getLogger(__name__)

BIND_ATTEMPTS = 3
"""Tries to bind the Raft port before giving up."""
BIND_RETRY_S = 0.1
"""Pause between two bind tries."""
SNAPSHOT_FORMAT = 1
"""Version of the snapshot file layout."""
APPEND_BATCH_BYTES = 4 * MAX_ENTRY_BYTES
"""PySyncObj ``appendEntriesBatchSizeBytes``: above any entry, so that PySyncObj never
splits an entry over several messages (its "transmission" path cuts the last chunk of an
entry whose pickled size crosses a multiple of the batch size, and the follower fails to
unpickle it: reproduced with 0.3.17)."""
TICK_ERROR_LOG_EVERY = 100
"""Log one in this many consecutive tick failures (the first is always logged)."""
KEEPALIVES_PER_TIMEOUT = 4
"""Keepalives per ``connection_timeout_s`` on each member-to-member connection."""
JOURNAL_CHECK_S = 0.5
"""How often the Raft thread looks at the journal file's size (``compaction_max_bytes``)."""

FAIL_SUCCESS = FAIL_REASON.SUCCESS
"""PySyncObj's success code, for :class:`CommandDone`."""


@attrs.frozen
class RaftStatus:
    """The Raft role of this node, as last seen by the Raft thread."""

    is_leader: bool = False
    """True if this node believes it is the leader (another may have replaced it)."""
    leader_address: str | None = None
    """Raft address of the last known leader (None while unknown)."""
    leader_id: str | None = None
    """Server id of the last known leader (None while unknown)."""
    term: int = 0
    """Current Raft term."""
    ready: bool = False
    """True once this node has applied everything the leader had committed when it joined."""
    members: tuple[str, ...] = ()
    """Raft addresses of the members (this node included), sorted."""


@attrs.frozen
class Started:
    """The node is bound and has replayed its snapshot and committed journal."""


@attrs.frozen
class StartFailed:
    """The node could not start."""

    error: BaseException
    """Why."""


@attrs.frozen
class Fatal:
    """The Raft thread stopped on an error (a snapshot that cannot be loaded, a crash)."""

    error: BaseException
    """Why."""


@attrs.frozen
class Stopped:
    """The Raft thread has ended and the node is destroyed."""


@attrs.frozen
class CommandDone:
    """A command submitted with a token has an outcome."""

    token: int
    """The token given to :meth:`RaftHost.submit` or :meth:`RaftHost.change_membership`."""
    value: Any
    """What the command returned (an :class:`EntryOutcome` for an entry) on success."""
    fail_reason: int
    """PySyncObj's ``FAIL_REASON`` (``SUCCESS`` = 0)."""


HostEvent = Started | StartFailed | Fatal | Stopped | CommandDone


def _node(address: str, server_id: str | None) -> Any:
    return TCPNode(address, server_id=server_id) if server_id else TCPNode(address)


def _entry_to_json(entry: Any) -> list[Any]:
    command, index, term = entry
    return [base64.b64encode(bytes(command)).decode(), int(index), int(term)]


def _entry_from_json(data: Any) -> tuple[bytes, int, int]:
    command, index, term = data
    return base64.b64decode(command), int(index), int(term)


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        fsync_or_die(fd, f"the Raft snapshot {path}")
    finally:
        os.close(fd)


def _sync_path(path: Path) -> None:
    if path.is_dir():
        fsync_directory_or_die(path, f"the Raft directory {path}")
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync_or_die(fd, f"the Raft snapshot {path}")
    finally:
        os.close(fd)


def _send_keepalives(obj: Any) -> None:
    """Send :data:`.incoming.KEEPALIVE_TYPE` to every other member.

    PySyncObj drops a connection on which nothing was read for ``connectionTimeout``, and
    checks that when it next sends on it. Followers send each other nothing while a leader
    lives, so the first message between them after the leader's death, the vote request of
    a hastened election, found the connection stale: the send dropped it, the request was
    lost, the other survivor became a candidate in the same term at its own deadline, the
    votes split, and the next term waited out an election timeout. Every kill -9 of the
    metadata leader measured at 3,000 and 5,000 partitions lost 1.3-3.5 s this way (the
    second survivor entered the term only at its own hastened deadline)."""
    transport = obj._SyncObj__transport
    for node in list(obj._SyncObj__otherNodes):
        transport.send(node, {"type": incoming.KEEPALIVE_TYPE})


class _MetadataSyncObj(SyncObj):  # type: ignore[misc]
    """PySyncObj's replicated object: one replicated method applying an encoded entry."""

    def __init__(self, host: RaftHost, self_node: Any, other_nodes: list[Any], conf: Any):
        self._jet_host = host
        super().__init__(self_node, other_nodes, conf)

    @replicated  # type: ignore[untyped-decorator]
    def apply_entry(self, payload: bytes) -> EntryOutcome:
        return self._jet_host._apply(payload)


class RaftHost:
    """One PySyncObj node in a dedicated thread (see the module docstring).

    Args:
        config: the node's configuration.
        wake: called from the Raft thread (or the caller's thread) after anything was
            added to :attr:`events` or :attr:`machine` / :attr:`status` changed; must not
            block.
    """

    def __init__(self, config: RaftConfig, wake: Callable[[], None]) -> None:
        self._config = config
        self._wake = wake
        self.machine = MachineState()
        """The applied state (replaced by the Raft thread)."""
        self.status = RaftStatus()
        """The role (replaced by the Raft thread)."""
        self.events: deque[HostEvent] = deque()
        """Outcomes and lifecycle events, appended by the Raft thread, popped by the loop."""
        self._stop = threading.Event()
        self._hasten: tuple[str, float] | None = None
        self._journal_checked = 0.0
        self._compaction_asked = False
        self._pieces = SnapshotPieces()
        self._obj: Any = None
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"raft-{config.server_id}", daemon=True
        )

    # -- any thread ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the Raft thread (a :class:`Started` or :class:`StartFailed` event follows)."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the Raft thread to destroy the node and end (a :class:`Stopped` event follows)."""
        self._stop.set()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the thread to end; True if it has."""
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def submit(self, token: int, payload: bytes) -> None:
        """Propose an encoded entry; a :class:`CommandDone` with ``token`` follows.

        On a follower PySyncObj forwards the entry to the leader it knows.
        """
        obj = self._obj
        if obj is None:
            self._post(CommandDone(token, None, FAIL_REASON.NOT_LEADER))
            return
        # PySyncObj queues the command, then writes to its wake-up pipe; a full pipe means
        # a wake-up is pending already (the command is queued either way).
        with contextlib.suppress(BlockingIOError):
            obj.apply_entry(payload, callback=functools.partial(self._on_done, token))

    def change_membership(self, token: int, add: bool, address: str, server_id: str) -> None:
        """Add or remove a member through the log (leader only; PySyncObj checks it)."""
        obj = self._obj
        if obj is None:
            self._post(CommandDone(token, None, FAIL_REASON.NOT_LEADER))
            return
        callback = functools.partial(self._on_done, token)
        if add:
            obj.addNodeToCluster(_node(address, server_id), callback=callback)
        else:
            obj.removeNodeFromCluster(_node(address, server_id), callback=callback)

    def hasten_election(self, leader_address: str, delay_s: float) -> None:
        """Start an election ``delay_s`` from now, instead of after the election timeout,
        if this member still follows the leader at ``leader_address`` then, or knows no
        leader (done by the Raft thread at its next tick); later terms without a leader
        get short timeouts (:data:`.election_timing.HASTENED_RETRY_S`). For a leader whose
        process is known gone."""
        self._hasten = (leader_address, delay_s)

    def force_compaction(self) -> None:
        """Snapshot and truncate the journal at the next tick (tests, operators)."""
        obj = self._obj
        if obj is not None:
            obj.forceLogCompaction()

    # -- the Raft thread -----------------------------------------------------------------

    def _post(self, event: HostEvent) -> None:
        self.events.append(event)
        self._wake()

    def _on_done(self, token: int, value: Any, fail_reason: int) -> None:
        self._post(CommandDone(token, value, fail_reason))

    def _apply(self, payload: bytes) -> EntryOutcome:
        self.machine, outcome = apply_entry(self.machine, payload)
        result = outcome.result
        if result.error_code == ErrorCode.UNKNOWN or result.message.startswith(UNDECODABLE):
            log.error(
                "metadata raft: an entry could not be applied",
                extra=fields(index=outcome.index, error=outcome.result.message),
            )
        return outcome

    def _build(self) -> Any:
        config = self._config
        config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        logbridge.install()
        conf = SyncObjConf(
            password=config.password,
            autoTick=False,
            appendEntriesUseBatch=False,
            appendEntriesPeriod=config.heartbeat_s,
            appendEntriesBatchSizeBytes=APPEND_BATCH_BYTES,
            raftMinTimeout=config.election_timeout_min_s,
            raftMaxTimeout=config.election_timeout_max_s,
            connectionTimeout=config.connection_timeout_s,
            connectionRetryTime=config.connection_retry_s,
            leaderFallbackTimeout=config.leader_fallback_s,
            commandsWaitLeader=False,
            journalFile=journal.install(config.journal_path, fsync=config.fsync),
            fullDumpFile=str(config.snapshot_path),
            serializer=self._serialize,
            deserializer=self._deserialize,
            logCompactionMinEntries=config.compaction_min_entries,
            logCompactionMinTime=config.compaction_min_time_s,
            dynamicMembershipChange=config.dynamic_membership,
            bindAddress=config.bind_address or config.address,
            maxBindRetries=BIND_ATTEMPTS,
            bindRetryTime=BIND_RETRY_S,
        )
        others = [_node(p.address, p.server_id) for p in config.peers]
        obj = _MetadataSyncObj(self, _node(config.address, config.server_id), others, conf)
        incoming.install(obj)
        return obj

    def _publish(self, obj: Any) -> None:
        leader = obj._getLeader()
        address = None if leader is None else str(leader.id)
        leader_id = None
        if address is not None:
            leader_id = getattr(leader, "server_id", None) or self._config.server_id_of(address)
        members = tuple(sorted([self._config.address, *(str(n.id) for n in obj.otherNodes)]))
        status = RaftStatus(
            is_leader=bool(obj._isLeader()),
            leader_address=address,
            leader_id=leader_id,
            term=int(obj.raftCurrentTerm),
            ready=bool(obj.isReady()),
            members=members,
        )
        if status != self.status:
            if status.leader_address != self.status.leader_address:
                log.info(
                    "metadata raft leader changed",
                    extra=fields(
                        server=self._config.server_id,
                        leader=status.leader_id or status.leader_address,
                        term=status.term,
                    ),
                )
            self.status = status
            self._wake()

    def _run(self) -> None:
        try:
            obj = self._build()
        except BaseException as exc:
            self._post(StartFailed(exc))
            return
        self._obj = obj
        started = False
        try:
            # The first tick loads the snapshot and applies the committed journal tail.
            obj.doTick(0.0)
            if self._load_error is not None:
                raise self._load_error
            self._publish(obj)
            started = True
            self._post(Started())
            self._loop(obj)
        except BaseException as exc:
            self._post(Fatal(exc) if started else StartFailed(exc))
        finally:
            self._obj = None
            try:
                self._destroy(obj)
            except Exception:
                log.exception("metadata raft: error while stopping the node")
            self._post(Stopped())

    def _loop(self, obj: Any) -> None:
        failures = 0
        machine = self.machine
        joining = self._config.join
        if not joining:
            first_election(
                obj, self._config.election_timeout_min_s, self._config.election_timeout_max_s
            )
        keepalive_s = self._config.connection_timeout_s / KEEPALIVES_PER_TIMEOUT
        next_keepalive = time.monotonic()
        hastened: Hastened | None = None
        while not self._stop.is_set():
            if time.monotonic() >= next_keepalive:
                next_keepalive = time.monotonic() + keepalive_s
                _send_keepalives(obj)
            if joining:
                if obj._getLeader() is None:
                    postpone_election(obj, self._config.election_timeout_max_s)
                else:
                    joining = False
            hasten, self._hasten = self._hasten, None
            if hasten is not None:
                hastened = hasten_election(obj, *hasten) or hastened
            try:
                obj.doTick(self._config.tick_s)
                failures = 0
            except Exception:
                if failures % TICK_ERROR_LOG_EVERY == 0:
                    log.exception("metadata raft: tick failed", extra=fields(failures=failures))
                failures += 1
                self._stop.wait(self._config.tick_s)
            if self._load_error is not None:
                raise self._load_error
            if hastened is not None:
                hastened = retry_soon(obj, hastened)
            self._check_journal_size(obj)
            self._publish(obj)
            if self.machine is not machine:
                machine = self.machine
                self._wake()

    def _check_journal_size(self, obj: Any) -> None:
        """Ask for a snapshot once the journal file passes ``compaction_max_bytes`` (looked
        at most every JOURNAL_CHECK_S; PySyncObj itself counts entries and time only)."""
        now = time.monotonic()
        if now - self._journal_checked < JOURNAL_CHECK_S:
            return
        self._journal_checked = now
        try:
            size = self._config.journal_path.stat().st_size
        except OSError:
            return
        if size > self._config.compaction_max_bytes:
            if not self._compaction_asked:
                log.info(
                    "metadata raft: journal over its byte bound, snapshotting",
                    extra=fields(bytes=size, bound=self._config.compaction_max_bytes),
                )
            self._compaction_asked = True
            obj.forceLogCompaction()
        else:
            self._compaction_asked = False

    def _destroy(self, obj: Any) -> None:
        obj.destroy()  # with autoTick=False this destroys the transport and the journal now
        notifier = getattr(obj, "_SyncObj__pipeNotifier", None)
        for name in ("_PipeNotifier__pipeR", "_PipeNotifier__pipeW"):
            fd = getattr(notifier, name, None)
            if isinstance(fd, int):
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- snapshots (called by PySyncObj in the Raft thread) ------------------------------

    def _serialize(self, file_name: str, raft_part: Any) -> None:
        last, prev, cluster = raft_part
        doc = {
            "format": SNAPSHOT_FORMAT,
            "machine": self._pieces.machine(self.machine),  # what did not change: as it was
            "raft": {
                "last": _entry_to_json(last),
                "prev": _entry_to_json(prev),
                "cluster": sorted(
                    (
                        {"address": str(n.id), "server_id": getattr(n, "server_id", None)}
                        for n in cluster
                    ),
                    key=lambda m: str(m["address"]),
                ),
            },
        }
        data = encode_snapshot(doc)
        with_reserve(Path(file_name), lambda: _write_synced(file_name, data))
        log.debug(
            "metadata raft: snapshot written",
            extra=fields(index=self.machine.index, raft_index=int(last[1])),
        )

    def _deserialize(self, file_name: str) -> tuple[Any, Any, Any]:
        try:
            path = Path(file_name)
            # The file may just have been received from the leader: make it durable
            # before the journal entries it replaces are dropped.
            _sync_path(path)
            _sync_path(path.parent)
            doc = decode_snapshot(path.read_bytes())
            if doc.get("format") != SNAPSHOT_FORMAT:
                raise ValueError(f"unknown snapshot format {doc.get('format')!r}")
            raft = doc["raft"]
            machine = machine_from_dict(doc["machine"])
            last = _entry_from_json(raft["last"])
            prev = _entry_from_json(raft["prev"])
            cluster = [_node(str(m["address"]), m.get("server_id")) for m in raft["cluster"]]
        except Exception as exc:
            self._load_error = exc
            log.error(
                "metadata raft: cannot load the snapshot",
                extra=fields(path=file_name, error=repr(exc)),
            )
            raise
        self.machine = machine
        log.info(
            "metadata raft: snapshot loaded",
            extra=fields(index=machine.index, streams=len(machine.metadata.streams)),
        )
        return last, prev, cluster
