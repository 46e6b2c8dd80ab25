"""Fetch sessions: one connection and one long poll per leader server (spec/cluster.md,
"Fetch sessions").

A follower server follows many partitions led by the same server. Instead of a connection
and a long-poll Fetch per partition, every :class:`~jetserver.replication.fetcher.FollowerFetcher`
whose leader is at one address shares a :class:`FetchSession`:

- :meth:`FetchSession.fetch` takes one partition's replica fetch and waits for its answer.
  The session's loop has every waiting partition in one ReplicaFetch request (api 13)
  and hands each its answer; a partition the leader left out (nothing new for it) waits on
  in the next request, whose ``max_wait_ms`` ends at the earliest partition's long-poll
  bound (``fetch_max_wait_s`` after it asked), so no partition waits longer than with its
  own long poll.
- Before the next request, the loop waits (at most ``COALESCE_S``) until the partitions
  answered by the last one have asked again (those with records after appending and
  fsyncing them): one request per round, as Kafka's replica fetcher thread does per
  broker.
- A partition that asks while no request is out and no other partition waits or is
  awaited (a session with one partition, the usual case at light load) sends its request
  and takes its answer in its own task: the hand-off to the loop and back were two
  event-loop turns on every round of a replicated message's way.
- Requests are incremental (KIP-227): the leader keeps the session's partitions parked
  from one request to the next (``broker/replica_sessions.py``); a request carries only
  the partitions new to the session or whose fetch changed (offset, flushed offset, epoch),
  and the slots of those that leave it (answered and not back, or dropped). The first
  request, and the one after any failure, is full (``session_epoch`` 0); a leader that no
  longer holds the session answers ``FETCH_SESSION_LOST`` and the round is sent again in
  full. An answer flagged ``POLL_ENDED`` (the long poll ended) leaves the partitions it
  does not name parked: their bounds start again (an idle round is an empty answer).
- A partition that asks while a request is parked at the leader (a new follower, one back
  from an error) sends a wake (ReplicaFetch with ``FLAG_WAKE``): the leader ends the parked
  request and the next one carries the new partition.
- Each waiting partition's bound (its long poll plus ``request_slack_s``) is kept by one
  task of the session (a heap of deadlines), not by a cancel scope around each fetch: those
  were half of the followers' fetch loops' time in a failover's profile.
- :meth:`FetchSession.request_json` sends the fetchers' other requests
  (OffsetForLeaderEpoch) on the same connection, a bounded number at a time.

Errors keep the per-partition rules of the fetcher: a partition's error (``NOT_LEADER``...)
is raised to that partition's fetch as the exception a replica Fetch would raise; a request
unanswered within its long poll plus ``request_slack_s``, and until the last of its
partitions' own bounds, raises :class:`~jetsdk.errors.Timeout` to every partition still in
it; a partition's fetch unanswered
within its own bound raises :class:`LeftOut` (a Timeout) if a request that carried it
without a long poll (``max_wait_ms`` 0: it was due) was answered without it (the leader
answers every partition of such a request: this one is stuck there), else a plain Timeout
(a slow or busy leader, or rounds answered early for other partitions' news, which the
follower cannot tell from late ones); a broken connection raises its error to every
partition waiting, and the session dials again (backing off).

:class:`~jetserver.replication.session_pool.FetchSessions` holds the sessions of one
server by leader address; a session with no fetcher left closes after ``IDLE_CLOSE_S``.

Task safety: one event loop. A session's loop runs in the task group given to
``FetchSessions``.
"""

from __future__ import annotations

import heapq
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.codec.replica_fetch import (
    FLAG_WAKE,
    ReplicaFetchAnswer,
    ReplicaFetchPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
    decode_replica_fetch_response,
    encode_replica_fetch_request,
)
from jetsdk.connection import Connection
from jetsdk.errors import (
    ClientClosed,
    FetchSessionLost,
    JetConnectionError,
    JetError,
    Timeout,
    error_from_code,
)
from jetsdk.transport import parse_address
from jetserver.infra import hops
from jetserver.infra.lazy_event import LazyEvent
from jetserver.infra.log_tally import LogTally
from jetserver.logs import fields
from jetserver.replication.config import ReplicationConfig
from jetserver.replication.session_entry import Entry
from jetserver.replication.session_entry import LeftOut as LeftOut
from jetserver.replication.session_view import HeldPartitions
from jetserver.security.peer import PLAIN, PeerSecurity

log = logging.getLogger(__name__)

FETCHER_LOGGER = "jetserver.replication.fetcher"
"""The logger of the fetchers' lines that the session tallies (:attr:`FetchSession.interrupted`)."""
CONNECT_TIMEOUT_S = 2.0
"""Bound on dialing the leader."""
COALESCE_S = 0.05
"""Longest wait, before a request, for the partitions answered by the last one to ask
again (those with records append and fsync them first)."""
SESSION_MAX_BYTES = 8 << 20
"""Soft bound on the records of one ReplicaFetch answer (the leader also clamps it to its
``limits.max_fetch_bytes``); each partition's share is bounded by ``fetch_max_bytes``."""
JSON_CONCURRENCY = 16
"""Other requests (OffsetForLeaderEpoch) in flight at once on a session's connection."""
IDLE_CLOSE_S = 10.0
"""A session with no fetcher closes after this."""
CONNECTION_CHECK_S = 1.0
"""How often an idle session looks whether its connection broke (then it dials again)."""


class _Idle(Exception):
    """No fetcher uses the session any more."""


@attrs.define(eq=False)
class FetchSession:
    """The fetches of every partition followed from one leader server (module docstring)."""

    address: str
    """The leader server's client ``host:port``."""
    config: ReplicationConfig
    """Long-poll bound, sizes, timeouts, backoff."""
    security: PeerSecurity = PLAIN
    """TLS and the internal token for the connection."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds (not ``anyio.current_time``: a backend look-up and, on Python
    3.11, a ``getpid`` for each of a round's two readings)."""
    session_id: int = attrs.field(factory=lambda: secrets.randbits(63))
    """Names this session to the leader (wakes)."""
    users: int = 0
    """Fetchers using the session."""
    closed: bool = False
    """The loop ended: a new fetcher gets a new session."""
    requests: int = 0
    """ReplicaFetch requests answered."""
    wakes: int = 0
    """Wakes sent."""
    inline_rounds: int = 0
    """Requests a lone partition's fetcher sent and took the answer of in its own task
    (:meth:`fetch`)."""
    partitions_sent: int = 0
    """Partitions carried by the ReplicaFetch requests sent (only those new to the session
    or changed: :attr:`partitions_sent` / :attr:`requests` is the cost per round)."""
    full_requests: int = 0
    """Full requests sent (``session_epoch`` 0: the first, and after any failure)."""
    sessions_lost: int = 0
    """Requests the leader refused with ``FETCH_SESSION_LOST`` (then sent again in full)."""
    last_heard: float | None = None
    """When the leader last answered a ReplicaFetch request (``clock``; None: never): an
    answer with ``POLL_ENDED`` answers every partition parked there."""
    interrupted: LogTally = attrs.field(
        factory=lambda: LogTally(logging.getLogger(FETCHER_LOGGER), "replication interrupted")
    )
    """The fetchers' "replication interrupted" lines at INFO: one per cause per interval
    for all the partitions followed there (``FollowerFetcher._pause_after``)."""
    _pending: list[Entry] = attrs.field(factory=list)
    _asking: dict[tuple[str, int], Entry] = attrs.field(factory=dict)
    """Each partition's fetch waiting for its answer (:meth:`drop`)."""
    _awaited: set[tuple[str, int]] = attrs.field(factory=set)
    _back: LazyEvent = attrs.field(factory=LazyEvent)
    _work: anyio.Event = attrs.field(factory=anyio.Event)
    _woken: bool | None = None
    """None: no request parked at the leader; False: one is, not yet woken; True: woken."""
    _inline: LazyEvent | None = None
    """Set when the round a fetcher runs in its own task ends (None: none runs)."""
    _conn: Connection | None = None
    _connected: anyio.Event = attrs.field(factory=anyio.Event)
    _json_waiting: int = 0
    _json_slots: anyio.Semaphore = attrs.field(factory=lambda: anyio.Semaphore(JSON_CONCURRENCY))
    _rotation: int = 0
    held: HeldPartitions = attrs.field(factory=HeldPartitions)
    """What the leader holds of the session (its parked partitions), as sent."""
    _deadlines: list[tuple[float, int, Entry]] = attrs.field(factory=list)
    """Heap of the waiting fetches' deadlines (:meth:`_expire`); answered ones are dropped
    when they reach the top."""
    _deadline_seq: int = 0
    _earlier: LazyEvent = attrs.field(factory=LazyEvent)
    """Set when a deadline earlier than the heap's top was pushed (the expiry task sleeps
    until the top's)."""

    # ------------------------------------------------------------------ fetchers' side

    async def fetch(self, part: ReplicaFetchPartition, timeout_s: float) -> ReplicaFetchAnswer:
        """One partition's replica fetch: its answer (error code NONE or
        OFFSET_OUT_OF_RANGE).

        Raises:
            Timeout: no answer within ``timeout_s``.
            JetError: the partition's error (its class from the error registry), the whole
                request's, or the connection's.
            CodecError: an answer that does not decode (the session reconnects).
        """
        if self.closed:
            raise ClientClosed(f"fetch session to {self.address} closed")
        now = self.clock()
        entry = Entry(part, now, now + timeout_s, timeout_s)
        key = (part.stream, part.partition)
        self._asking[key] = entry
        if key in self._awaited:
            self._awaited.discard(key)
            if not self._awaited:
                self._back.set()
        conn = self._conn
        if (
            conn is not None
            and not conn.closed
            and self._woken is None
            and self._inline is None
            and not self._awaited
            and not self._pending
        ):
            # Nobody else waits and no request is out: send this one's request from this
            # task and take its answer here (no hand-off to the session's loop and back:
            # two event-loop turns on every round of a lone partition).
            await self._inline_round(conn, entry)
        else:
            self._pending.append(entry)
            self._work.set()
        try:
            if not entry.done.is_set():  # (answered by a round of its own: no yield)
                if self._woken is False:
                    # A request is parked: wake it (from this task, with no task in
                    # between) so that the next one carries this partition.
                    self._woken = True
                    with anyio.move_on_after(timeout_s):
                        await self._wake()
                if not entry.done.is_set():
                    # Bounded by the session's expiry task (_expire), not by a cancel
                    # scope of its own: a scope with a deadline for every partition's
                    # every round was about half of the followers' fetch loops' time in
                    # a 3,000-partition failover's profile, and of an idle follower's.
                    self._expire_at(entry)
                    await entry.done.wait()
        finally:
            if self._asking.get(key) is entry:
                del self._asking[key]
            if not entry.done.is_set():
                entry.abandoned = True
                if entry in self._pending:
                    self._pending.remove(entry)
        if entry.expired or not entry.done.is_set():
            raise (LeftOut if entry.left_out else Timeout)(
                f"replica fetch of {part.stream}/{part.partition} unanswered by "
                f"{self.address} within {timeout_s:.1f} s"
                + (" (left out of an answer without a long poll)" if entry.left_out else "")
            )
        if entry.error is not None:
            raise entry.error
        assert entry.answer is not None
        return entry.answer

    def _expire_at(self, entry: Entry) -> None:
        """Have the expiry task end ``entry``'s wait at its deadline (at once with
        ClientClosed if the session ended meanwhile: no task would)."""
        if self.closed:
            entry.resolve(None, ClientClosed(f"fetch session to {self.address} closed"))
            return
        heap = self._deadlines
        if not heap or entry.deadline < heap[0][0]:
            self._earlier.set()
        self._deadline_seq += 1
        heapq.heappush(heap, (entry.deadline, self._deadline_seq, entry))

    async def _expire(self) -> None:
        """Run as a task while the session runs: end each waiting fetch whose deadline
        passed unanswered (it raises Timeout or LeftOut, as its own bound did before)."""
        heap = self._deadlines
        while True:
            now = self.clock()
            while heap and (heap[0][2].done.is_set() or heap[0][0] <= now):
                at, _, entry = heapq.heappop(heap)
                if entry.deadline > at:
                    continue  # renewed (POLL_ENDED): its later deadline is in the heap too
                if not entry.done.is_set():
                    entry.expired = entry.abandoned = True
                    if entry in self._pending:
                        self._pending.remove(entry)
                    entry.done.set()
            self._earlier = LazyEvent()
            with anyio.move_on_after(heap[0][0] - now if heap else CONNECTION_CHECK_S):
                await self._earlier.wait()

    def drop(self, stream: str, partition: int) -> None:
        """End the partition's waiting fetch at once with :class:`~jetsdk.errors.ClientClosed`
        (its fetcher was stopped: ``FollowerFetcher.stop``); no later request carries it.
        Waking it this way, not by cancelling its task, keeps a failover's thousand stops
        cheap (anyio delivers a cancellation again on every loop pass until the task
        ends)."""
        entry = self._asking.pop((stream, partition), None)
        if entry is not None:
            entry.abandoned = True
            entry.resolve(None, ClientClosed(f"replica fetch of {stream}/{partition} dropped"))

    async def _inline_round(self, conn: Connection, entry: Entry) -> None:
        """One round for ``entry`` alone, in the caller's task (see :meth:`fetch`). The
        session's loop sends no request meanwhile; a partition that asks meanwhile wakes
        this one as usual, and an entry it leaves unanswered goes back to the loop."""
        done = self._inline = LazyEvent()
        self.inline_rounds += 1
        try:
            await self._round(conn, [entry])
        except Exception:
            # The connection broke (the error is the entry's) or an answer did not decode:
            # the loop dials again, as after a round of its own.
            self._work.set()
            with anyio.CancelScope(shield=True):
                await conn.aclose()
            raise
        finally:
            self._inline = None
            done.set()
            if self._pending:
                self._work.set()

    async def request_json(self, api: int, obj: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send another request (JSON body) on the session's connection.

        Raises:
            JetError: the server's error, a timeout, or no connection.
        """
        conn = self._conn
        if conn is not None and conn.closed:
            self._work.set()  # the loop notices and dials again
            raise JetConnectionError(f"connection to {self.address} broke; dialing again")
        if conn is None:
            self._json_waiting += 1
            self._work.set()
            try:
                with anyio.move_on_after(CONNECT_TIMEOUT_S + timeout_s):
                    await self._connected.wait()
            finally:
                self._json_waiting -= 1
            conn = self._conn
            if conn is None or conn.closed:
                raise JetConnectionError(f"no connection to {self.address}")
        async with self._json_slots:
            body = await conn.request(api, encode_json(obj), timeout=timeout_s)
        return decode_json(body)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Connect, fetch in rounds, reconnect after failures; end once idle."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._expire)
            try:
                await self._run()
            finally:
                tg.cancel_scope.cancel()
                closed = ClientClosed(f"fetch session to {self.address} closed")
                for _, _, entry in self._deadlines:  # nothing ends their waits any more
                    entry.resolve(None, closed)
                self._deadlines.clear()

    async def _run(self) -> None:
        failures = 0
        try:
            while True:
                await self._wait_for_work()
                try:
                    stream = await self.security.dial(
                        parse_address(self.address), CONNECT_TIMEOUT_S
                    )
                    async with Connection(stream, label=self.address) as conn:
                        await self.security.authenticate(conn, CONNECT_TIMEOUT_S)
                        self._conn = conn
                        self._connected.set()
                        failures = 0
                        await self._rounds(conn)
                except _Idle:
                    raise
                except Exception as exc:  # the session must outlive any one failure
                    failures += 1
                    if not isinstance(exc, (JetError, CodecError, OSError)):
                        log.exception("fetch session failed", extra=fields(leader=self.address))
                    level = logging.INFO if failures == 1 else logging.DEBUG
                    log.log(
                        level,
                        "fetch session interrupted",
                        extra=fields(leader=self.address, error=repr(exc)),
                    )
                    self._fail_waiting(exc)
                    await anyio.sleep(self.config.backoff_s(failures))
                finally:
                    self._conn = None
                    if self._connected.is_set():
                        self._connected = anyio.Event()
        except _Idle:
            pass
        finally:
            self.closed = True
            self._fail_waiting(ClientClosed(f"fetch session to {self.address} closed"))
            self.interrupted.close()

    async def _wait_for_work(self, *, conn: Connection | None = None) -> None:
        """Return once a partition waits (or, without ``conn``, another request waits for
        a connection).

        Raises:
            _Idle: no fetcher used the session for ``IDLE_CLOSE_S``.
            JetConnectionError: ``conn`` broke meanwhile (checked every
                ``CONNECTION_CHECK_S``): the requests of other kinds on it would fail.
        """
        while not (self._pending or (conn is None and self._json_waiting)):
            self._work = anyio.Event()
            if conn is not None and conn.closed:
                raise JetConnectionError(f"connection to {self.address} broke")
            if self.users > 0:
                with anyio.move_on_after(CONNECTION_CHECK_S):
                    await self._work.wait()
                continue
            with anyio.move_on_after(IDLE_CLOSE_S):
                await self._work.wait()
            if self.users == 0 and not self._pending and not self._json_waiting:
                self.closed = True  # at once: a new fetcher now gets a new session
                raise _Idle

    def _fail_waiting(self, exc: Exception) -> None:
        pending, self._pending = self._pending, []
        for entry in pending:
            entry.resolve(None, exc)

    async def _rounds(self, conn: Connection) -> None:
        """Send the waiting partitions in one request per round, until the connection
        breaks (raises its error)."""
        while True:
            await self._wait_for_work(conn=conn)
            if self._awaited:
                with anyio.move_on_after(COALESCE_S):
                    await self._back.wait()
                self._awaited.clear()
            while self._inline is not None:  # a fetcher's own round is out (fetch)
                await self._inline.wait()
            batch = [e for e in self._pending if not e.abandoned]
            self._pending = []
            if batch:
                await self._round(conn, batch)

    def heard_s_ago(self) -> float | None:
        """Seconds since the leader last answered a request (None: never)."""
        return None if self.last_heard is None else self.clock() - self.last_heard

    async def _round(self, conn: Connection, batch: list[Entry]) -> None:
        self._rotation = (self._rotation + 1) % len(batch)
        batch = batch[self._rotation :] + batch[: self._rotation]  # fairness under the bound
        for _ in range(2):  # a lost session: once more, in full
            if not await self._request(conn, batch):
                return
            self.sessions_lost += 1
            log.info(
                "fetch session lost at the leader; sending it in full",
                extra=fields(leader=self.address),
            )

    async def _request(self, conn: Connection, batch: list[Entry]) -> bool:
        """One request for ``batch`` and its answers delivered; True if the leader answered
        ``FETCH_SESSION_LOST`` to an incremental request (nothing delivered: send it again,
        in full)."""
        cfg = self.config
        now = self.clock()
        wait_s = min(e.asked_at + cfg.fetch_max_wait_s - now for e in batch)
        wait_s = min(max(wait_s, 0.0), cfg.fetch_max_wait_s)
        delta = self.held.delta([e.part for e in batch])  # any failure: the next is full
        epoch = delta.epoch
        req = ReplicaFetchRequest(
            session_id=self.session_id,
            max_wait_ms=int(wait_s * 1000),
            max_bytes=SESSION_MAX_BYTES,
            partitions=delta.partitions,
            session_epoch=epoch,
            forget=delta.forget,
        )
        # From here a partition that asks wakes the request (a wake that overtakes it is
        # remembered by the leader, which then answers this request at once).
        self._woken = False
        body: bytes | bytearray | None = None
        error: JetError | None = None
        try:
            # A failed send fails the batch too: its partitions are no longer pending, so
            # nothing else would answer them.
            if hops.ENABLED:
                hops.mark("repl.send")
            pending = await conn.send(Api.REPLICA_FETCH, encode_replica_fetch_request(req))
            self.partitions_sent += len(delta.partitions)
            if epoch == 0:
                self.full_requests += 1
            # Until the last of its partitions' own bounds (each expires alone at its own:
            # _expire), at least its long poll plus the slack. Bounded by the earliest, a
            # late answer of a loaded leader was thrown away with every partition in it
            # (each asked again in the next request, which the leader served in full again):
            # 10,000 partitions on a loaded machine, 190k fetches timed out on a server in
            # 9 minutes, while it got 230k answers.
            last = max(e.deadline for e in batch) - self.clock()
            body = await pending.wait_buffer(max(wait_s + cfg.request_slack_s, last))
            if hops.ENABLED:
                hops.mark("repl.recv")
        except JetError as exc:
            error = exc
        finally:
            self._woken = None
        if isinstance(error, FetchSessionLost) and epoch != 0:
            return True
        if error is not None:
            if isinstance(error, Timeout):
                log.info(  # once for every partition in it (they log it at DEBUG)
                    "replica fetch request unanswered",
                    extra=fields(leader=self.address, partitions=len(batch), error=str(error)),
                )
            for entry in batch:
                entry.resolve(None, error)
            if conn.closed:
                raise error
            return False
        assert body is not None
        self.requests += 1
        self.last_heard = self.clock()
        try:
            response = decode_replica_fetch_response(body)
        except CodecError as exc:
            for entry in batch:
                entry.resolve(None, exc)
            raise
        self.held.answered(delta)
        by_slot = dict(zip(delta.slots, batch, strict=True))
        # Without a long poll the leader answers every partition it can (an answer to a
        # request with one may come early, for other partitions' news, and late on a
        # loaded machine: the follower cannot tell).
        self._deliver(batch, by_slot, response, full=req.max_wait_ms == 0)
        return False

    def _deliver(
        self,
        batch: list[Entry],
        by_slot: dict[int, Entry],
        response: ReplicaFetchResponse,
        *,
        full: bool = False,
    ) -> None:
        for answer in response.answers:
            entry = by_slot.get(answer.index)
            if entry is None:
                self.held.reset()
                raise CodecError(f"replica fetch answer for slot {answer.index}, not sent")
            if answer.error_code != ErrorCode.NONE:
                self.held.dropped(entry.part)  # the leader dropped it
            if answer.error_code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                if not entry.abandoned:
                    self._awaited.add((entry.part.stream, entry.part.partition))
                entry.resolve(answer, None)
            else:
                entry.resolve(None, error_from_code(answer.error_code, answer.message))
        left = [e for e in batch if not e.done.is_set() and not e.abandoned]
        if full:
            for e in left:
                e.left_out = True
        elif response.poll_ended:
            # Parked at the leader with nothing new: their long polls start again.
            now = self.clock()
            for e in left:
                e.asked_at, e.deadline = now, now + e.timeout_s
                self._expire_at(e)
        self._pending = left + self._pending
        self._back = LazyEvent()
        if not self._awaited:
            self._back.set()

    async def _wake(self) -> None:
        """End the request parked at the leader (its answer is not awaited)."""
        conn = self._conn
        if conn is None:
            return
        wake = ReplicaFetchRequest(
            session_id=self.session_id, max_wait_ms=0, max_bytes=0, flags=FLAG_WAKE
        )
        try:
            await conn.send(Api.REPLICA_FETCH, encode_replica_fetch_request(wake))
            self.wakes += 1
        except JetError:
            pass  # the request in flight fails with the connection's error
