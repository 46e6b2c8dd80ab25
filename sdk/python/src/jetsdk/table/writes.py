"""A table's writes: Produce messages with ack ALL, as an idempotent producer (so a retry
after an unknown outcome is answered DUPLICATE_SEQUENCE with the stored offset instead of
being stored twice or, for a compare-and-set, refused by its own success).

Writes go in rounds. A write that finds no round gathering and its partition idle starts
one: its caller lets the rest of the event loop's turn run (the callers woken by the last
answer write again meanwhile), then takes every waiting write of every partition that has
no request in flight (up to :data:`MAX_BATCH_MESSAGES` / :data:`MAX_BATCH_BYTES` per
partition, in call order, consecutive sequences) and sends one Produce request per
partition, all in the same turn, so those to one server go as ONE ProduceMany request
(:class:`~jetsdk.producer.fan_in.FanIn`, spec/protocol.md §17) on asyncio. Concurrent
``put`` calls thus share requests and fsyncs: a partition's batch holds every write made
to it while its previous request was in flight and in the turn its answer came (64
callers putting to one partition: one request per ~60 puts, where sending at once made
batches of 1 and 63 by turns), and the partitions of a round share a round trip, a pass
of the server and its fsyncs (which the server runs at once: one after the other, they
made the ProduceMany rounds slower than a request per partition, see
:mod:`jetserver.storage.fsync_runner`). A partition has at most one request in flight (its
writes keep their order); writes to it wait for the next round. Nothing waits to fill a
batch (no linger): the wait is one loop turn, and a lone writer's write goes at once. A
write whose result is retriable is tried again (its partition stays busy), alone,
:data:`RETRY_PAUSE_S` apart. Each partition of a round is free again, and its writes'
callers woken, as soon as its own answer came (only the round's caller waits for all of
the round); a ProduceMany is answered once all its sections are. A round of one partition
(a lone writer, each try of a racing compare-and-set) is written on asyncio by its caller
on the leader's open connection, as the producer's direct send.

A compare-and-set carries ``Jet-Expected-Key-Offset`` (spec/envelope.md, "Per-key
compare-and-set"); the server checks the messages of a request in order, each against the
ones before it, and refuses it with WRONG_EXPECTED_KEY_OFFSET naming the key's current
offset, raised here as :class:`~jetsdk.errors.WrongExpectedKeyOffset`. A request holding
a compare-and-set asks for the key's current value too (the Produce flag "current values",
spec/protocol.md §6): the refusal then carries it (``current_value``), so the writer can
retry at once on it instead of reading the key first. It asks for the latest values too
(flag "latest values"): a compare-and-set that won is answered with the key's later record
when racing writers built on it while its commit ran, so the winner's next try starts from
there instead of from its own, by then stale, value.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets

import anyio
import anyio.lowlevel
import attrs

from jetsdk.client import Client
from jetsdk.client_requests import decode_produce_answer
from jetsdk.codec.error_codes import AckPolicy, ErrorCode, is_retriable
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import (
    ProduceRequest,
    ProduceResult,
    encode_produce_request,
    encode_produce_request_parts,
    new_produce_message,
)
from jetsdk.codec.produce_values import decode_one_result_values, encode_key_write
from jetsdk.codec.ttl import TTL_HEADER
from jetsdk.errors import JetError, Timeout, WrongExpectedKeyOffset, error_from_code
from jetsdk.partitioner import partition_for_key
from jetsdk.producer.fan_in import FanIn, SectionAnswer
from jetsdk.retry import needs_metadata_refresh
from jetsdk.table.queued_write import QueuedWrite
from jetsdk.transport import running_asyncio_loop

EXPECTED_KEY_OFFSET = "Jet-Expected-Key-Offset"
"""The header of a per-key compare-and-set."""
ABSENT = -1
"""Expected revision meaning "the key has no live value" (create)."""
MAX_WRITE_ATTEMPTS = 200
"""Tries of one write whose result is retriable (TIMEOUT, NOT_LEADER, UNAVAILABLE while a
new leader rebuilds its key index from a long log...), :data:`RETRY_PAUSE_S` apart."""
RETRY_PAUSE_S = 0.1
"""Pause between such tries (a leader election takes a moment)."""
MAX_BATCH_MESSAGES = 1000
"""Most writes sent in one Produce request."""
MAX_BATCH_BYTES = 1024 * 1024
"""Most key and value bytes in one Produce request (a single larger write goes alone)."""
_FINAL = frozenset(
    {ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE, ErrorCode.WRONG_EXPECTED_KEY_OFFSET}
)
"""Per-message results never tried again."""


@attrs.define(eq=False)
class TableWriter:
    """Writes the keys of one stream (module docstring)."""

    client: Client
    stream: str
    partitions: int
    timeout_s: float
    producer_id: int = attrs.field(factory=lambda: secrets.randbits(63))
    _seq: int = 0
    _queues: dict[int, list[QueuedWrite]] = attrs.field(factory=dict)
    """Writes waiting (not sent) per partition; a partition without any is absent."""
    _busy: set[int] = attrs.field(factory=set)
    """Partitions with a request in flight (or a retry pending)."""
    _gatherer: QueuedWrite | None = None
    """The write whose caller gathers the next round (None: no round gathering)."""
    _calls: int = 0
    """:meth:`write` calls under way."""
    requests: int = 0
    """Produce requests (partition batches) sent (a metric and a test hook)."""
    _fan_in: FanIn = attrs.field(factory=FanIn)
    """Groups the requests of a round to one server into one ProduceMany."""
    _direct: int = 0
    """Requests sent as Produce requests of their own (not through the fan-in)."""
    retries: int = 0
    """Requests that tried writes again (after a retriable result; a metric, a test hook)."""
    _loop: asyncio.AbstractEventLoop | None = attrs.field(factory=running_asyncio_loop)
    """The running asyncio loop, looked up once (the table's writer lives in the loop it
    was made in; None under trio): ``asyncio.get_running_loop`` makes a getpid system call
    on Python 3.11, which a write looked up once or twice."""

    @property
    def wire_requests(self) -> int:
        """Requests written to servers (a ProduceMany of several batches counts one)."""
        return self._fan_in.requests + self._direct

    def partition_of(self, key: bytes) -> int:
        """The partition a key lives in (the SDK's default partitioner)."""
        if self.partitions == 1:
            return 0
        return partition_for_key(key, self.partitions)

    async def write(
        self, key: bytes, value: bytes, expected: int | None, ttl_ms: int | None = None
    ) -> int:
        """Store ``value`` (empty: a tombstone) under ``key``, if ``expected`` is None or
        the key's revision, expiring ``ttl_ms`` after it is stored (``Jet-TTL``, None:
        never); return the record's offset.

        Raises:
            WrongExpectedKeyOffset: the key is at another revision (``current_revision``).
            JetError: the write failed (retriable errors after :data:`MAX_WRITE_ATTEMPTS`).
        """
        return (await self.write_result(key, value, expected, ttl_ms)).offset

    async def write_result(
        self, key: bytes, value: bytes, expected: int | None, ttl_ms: int | None = None
    ) -> ProduceResult:
        """:meth:`write`, returning the write's result: its offset, and for a
        compare-and-set the key's later record if one was appended after it before the
        answer (``latest_offset``, its value in ``current_value``; spec/protocol.md §6).

        Raises:
            As :meth:`write`.
        """
        return self.outcome(key, expected, await self.write_try(key, value, expected, ttl_ms))

    async def write_try(
        self, key: bytes, value: bytes, expected: int | None, ttl_ms: int | None = None
    ) -> ProduceResult:
        """:meth:`write_result`, with a compare-and-set's refusal returned, not raised
        (``error_code`` WRONG_EXPECTED_KEY_OFFSET, ``offset`` the key's current revision,
        ``current_value`` its value if carried): :meth:`Table.modify
        <jetsdk.table.table.Table.modify>`'s tries, most of them refused when writers race.

        Raises:
            JetError: the write failed (retriable errors after :data:`MAX_WRITE_ATTEMPTS`).
        """
        partition = self.partition_of(key)
        result = None
        if not self._calls and ttl_ms is None and self._loop is not None:
            result = await self._write_alone(key, value, expected, partition)
        if result is None:
            result = await self._write_queued(key, value, expected, ttl_ms, partition)
        if result.error_code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
            return result
        return self.outcome(key, expected, result)

    async def _write_alone(
        self, key: bytes, value: bytes, expected: int | None, partition: int
    ) -> ProduceResult | None:
        """A write while no other is under way, on asyncio: its request encoded from its
        fields, written on the leader's open connection from this task and its answer
        awaited, none of the rounds' objects and steps (a table's lone writer; each try
        of a racing compare-and-set); if that try fails retriably, tried again as
        :meth:`_send` tries (same sequence, its partition busy meanwhile). Its final
        result; None if it cannot go this way (nothing sent: the caller queues it).

        Raises:
            JetError: as :meth:`write`.
        """
        conn = self.client.leader_connection_now(self.stream, partition)
        if conn is None:
            return None
        seq = self._seq
        timeout_ms = int(self.timeout_s * 1000)
        body = encode_key_write(
            self.stream, partition, timeout_ms, self.producer_id, seq, key, value, expected
        )
        response = None if body is None else conn.send_nowait(Api.PRODUCE, body)
        if response is None:
            return None
        self._seq = seq + 1
        self._calls += 1
        self._busy.add(partition)
        self.requests += 1
        self._direct += 1
        cas = expected is not None
        retry: JetError | None = None
        result = None
        settled = False
        try:
            try:
                answer = await response.wait(timeout_ms / 1000 + self.client.request_timeout)
                result = decode_one_result_values(answer, cas) if cas else None
                if result is None:
                    (result,) = decode_produce_answer(answer, 1, cas, cas)
            except JetError as exc:
                if not exc.retriable:
                    raise
                if needs_metadata_refresh(exc):  # the leader may have moved
                    with contextlib.suppress(JetError):
                        await self.client.refresh_metadata()
                retry = exc
            if result is not None and retry is None:
                code = result.error_code
                if code in _FINAL or not is_retriable(code):
                    return result
                text = f"table write to {self.stream}/{partition}"
                retry = error_from_code(code, text, {"stream": self.stream, "partition": partition})
            message = new_produce_message(value, key, _headers(expected), "")
            write = QueuedWrite(key, expected, message, partition, seq, retry_error=retry)
            settled = True
            await self._send([write], tried=1)  # again, after a pause; frees the partition
            if write.error is not None:
                raise write.error
            assert write.result is not None
            return write.result
        finally:
            self._calls -= 1
            if not settled:
                self._busy.discard(partition)
                self._hand_on()

    async def _write_queued(
        self,
        key: bytes,
        value: bytes,
        expected: int | None,
        ttl_ms: int | None,
        partition: int,
    ) -> ProduceResult:
        """:meth:`write_result` through the rounds (module docstring): its final result.

        Raises:
            JetError: as :meth:`write`.
        """
        headers = _headers(expected)
        if ttl_ms is not None:
            headers = (*headers, (TTL_HEADER, b"%d" % ttl_ms))
        write = QueuedWrite(key, expected, new_produce_message(value, key, headers, ""), partition)
        queue = self._queues.get(partition)
        if queue is None:
            self._queues[partition] = queue = []
        queue.append(write)
        if self._gatherer is None and partition not in self._busy:
            self._gatherer = write  # no round would take it: this caller starts one
            write.sends = True
        self._calls += 1
        try:
            while True:
                if write.sends:
                    write.sends = False
                    await self._gather(write)
                if write.done:
                    break
                await write.wait(self._loop)
        except BaseException:  # cancelled: never sent, or sent by another caller
            self._withdraw(write)
            raise
        finally:
            self._calls -= 1
        if write.error is not None:
            raise write.error
        assert write.result is not None
        return write.result

    def _withdraw(self, write: QueuedWrite) -> None:
        """Take a cancelled caller's write out of its queue if it was not sent yet, and
        hand the gathering on if it had it."""
        queue = self._queues.get(write.partition)
        if queue is not None and write in queue:
            queue.remove(write)
            if not queue:
                del self._queues[write.partition]
        if self._gatherer is write:
            self._gatherer = None
            self._hand_on()

    def _hand_on(self) -> None:
        """If no round is gathering and an idle partition has writes waiting, wake the
        first of them to gather one."""
        if self._gatherer is not None:
            return
        for partition, queue in self._queues.items():
            if partition not in self._busy:
                nxt = queue[0]
                self._gatherer = nxt
                nxt.sends = True
                nxt.wake()
                return

    async def _gather(self, own: QueuedWrite) -> None:
        """Let this loop turn's writes join (if another write call is under way: a lone
        one goes at once, an extra loop turn costs a lone writer more than it saves),
        take the waiting writes of every idle partition and send them (one round).
        ``own``: the caller's write. The round is shielded from the caller's cancellation
        (the callers of its other writes wait for their answers), unless it is ``own``
        alone: a cancellation then concerns that write only, which :meth:`_send` settles
        (its partition freed); anyio's shielded scope was about a tenth of the client's
        Python lines per try of a racing compare-and-set."""
        if self._calls > 1:
            await anyio.lowlevel.checkpoint()  # cancellable: write() withdraws, hands on
        self._gatherer = None
        batches: list[list[QueuedWrite]] = []
        for partition, queue in list(self._queues.items()):
            if partition in self._busy:
                continue
            size = count = 0
            for w in queue[:MAX_BATCH_MESSAGES]:
                size += len(w.message.value) + len(w.key)
                if count and size > MAX_BATCH_BYTES:
                    break
                count += 1
            batches.append(queue[:count])
            del queue[:count]
            if not queue:
                del self._queues[partition]
            self._busy.add(partition)
        if len(batches) == 1 and len(batches[0]) == 1 and batches[0][0] is own:
            await self._round(batches)
            return
        with anyio.CancelScope(shield=True):  # its writes' callers wait for the answers
            await self._round(batches)

    async def _round(self, batches: list[list[QueuedWrite]]) -> None:
        """Send ``batches`` (one per partition) at once (as one ProduceMany per server
        where it can): a partition is free again, and its writes' callers woken, as soon
        as its writes are settled."""
        for batch in batches:
            base = self._seq
            self._seq += len(batch)
            for i, w in enumerate(batch):
                w.seq = base + i
        if len(batches) == 1:
            # Puts to one partition (no compare-and-set) go as a ProduceMany of one
            # section, as a round over several partitions does: the server appends such a
            # section in the request's step with one pending ALL ack (broker/
            # produce_section.py), where a Produce request of many takes the general
            # path (per message: order and duplicate checks, an ack settled). A lone
            # write, or compare-and-sets, go alone.
            batch = batches[0]
            if len(batch) > 1 and all(w.expected is None for w in batch):
                await self._send(batch, True, many=True)
            else:
                await self._send(batch)
            return
        if self._loop is not None:
            # Plain asyncio tasks, all started in this turn (one ProduceMany): anyio's
            # task group cost about a third of a 4-partition round's writer time (its
            # start_soon ~30 us a task, gather's create_task ~5 us). Each _send settles
            # its own writes whatever happens; a cancellation cancels them all.
            sends = (self._send(batch, True) for batch in batches)
            for outcome in await asyncio.gather(*sends, return_exceptions=True):
                if isinstance(outcome, BaseException):  # all ended first, as in a task group
                    raise outcome
            return
        async with anyio.create_task_group() as tg:
            for batch in batches:  # all first tries in this turn: one ProduceMany
                tg.start_soon(self._send, batch, True)

    async def _send(
        self, batch: list[QueuedWrite], grouped: bool = False, tried: int = 0, many: bool = False
    ) -> None:
        """Send one partition's ``batch`` until every write has a final result; writes
        whose result is retriable are tried again with their own sequences (each run of
        consecutive ones in one request, alone), :data:`RETRY_PAUSE_S` apart.
        ``grouped``: the first try goes with the round's other batches. ``tried``: tries
        made already (the next one is a retry). ``many``: the first try goes as a
        ProduceMany even alone (:meth:`FanIn.defer`)."""
        runs = [batch]
        try:
            for attempt in range(tried, MAX_WRITE_ATTEMPTS):
                if attempt:
                    await anyio.sleep(RETRY_PAUSE_S)
                    self.retries += len(runs)
                for run in runs:
                    await self._try(run, grouped=grouped and not attempt, many=many)
                runs = self._settle(runs, final=attempt == MAX_WRITE_ATTEMPTS - 1)
                if not runs:
                    return
        except BaseException as exc:  # cancelled (the table closes): nothing more is sent
            for run in runs:
                for w in run:
                    if not w.done:
                        w.error = exc
            self._settle(runs, final=True)
            raise

    def _settle(self, runs: list[list[QueuedWrite]], final: bool) -> list[list[QueuedWrite]]:
        """Wake the writes of ``runs`` (one partition's) that are done (with ``final``,
        all: those left get their last retriable error), free the partition if all are,
        and return the runs to try again."""
        left: list[QueuedWrite] = []
        for run in runs:
            for w in run:
                if not w.done and final:
                    w.error = w.retry_error or Timeout(f"table write to {self.stream} not sent")
                if w.done:
                    w.wake()
                else:
                    left.append(w)
        retrying = {w.partition for w in left}
        freed = {run[0].partition for run in runs} - retrying
        if freed:
            self._busy -= freed
            self._hand_on()
        if not left:
            return []
        again: list[list[QueuedWrite]] = []
        for partition in retrying:
            again += _runs([w for w in left if w.partition == partition])
        return again

    async def _try(self, run: list[QueuedWrite], grouped: bool = False, many: bool = False) -> None:
        """One request with ``run`` (consecutive sequences of one partition); sets each
        write's result, or its ``retry_error`` if retriable, or its error. ``grouped``:
        with the round's other requests to its server (:meth:`_produce`)."""
        partition = run[0].partition
        cas = any(w.expected is not None for w in run)
        request = ProduceRequest(
            self.stream,
            partition,
            AckPolicy.ALL,
            int(self.timeout_s * 1000),
            tuple(w.message for w in run),
            self.producer_id,
            run[0].seq,
            current_values=cas,
            latest_values=cas,
            sequence_start=True,  # (sequences run across partitions: encode_key_write)
        )
        self.requests += 1
        try:
            if grouped:
                results = await self._produce(request, many)
            else:
                self._direct += 1
                results = await self._produce_alone(request)
        except JetError as exc:
            if needs_metadata_refresh(exc):  # the leader may have moved
                with contextlib.suppress(JetError):
                    await self.client.refresh_metadata()
            if not exc.retriable:
                for w in run:
                    w.error = exc
                return
            for w in run:
                w.retry_error = exc
            return
        except Exception as exc:
            for w in run:
                w.error = exc
            return
        for w, result in zip(run, results, strict=True):
            code = result.error_code
            if code not in _FINAL and is_retriable(code):
                details = {"stream": self.stream, "partition": partition}
                text = f"table write to {self.stream}/{partition}"
                w.retry_error = error_from_code(code, text, details)
            else:
                w.result = result

    async def _produce_alone(self, request: ProduceRequest) -> list[ProduceResult]:
        """Send ``request`` on its own; its results. On asyncio, with the leader's
        connection open and taking a write at once, written from this task
        (:meth:`Connection.send_nowait <jetsdk.connection.Connection.send_nowait>`,
        as the producer's direct send) and its answer awaited: none of
        :meth:`Client.produce`'s leader lookup, retry wrapper and write lock per
        request (a racing compare-and-set is a request per try). Through
        :meth:`Client.produce` (which finds the leader and retries) otherwise, and
        again, with the same sequences (a duplicate is answered with its offset), if
        that one try failed retriably."""
        client = self.client
        conn = (
            None
            if self._loop is None
            else client.leader_connection_now(self.stream, request.partition)
        )
        response = None
        if conn is not None:
            response = conn.send_nowait(Api.PRODUCE, encode_produce_request_parts(request))
        if response is None:
            return await client.produce(request)
        try:
            answer = await response.wait(request.timeout_ms / 1000 + client.request_timeout)
        except JetError as exc:
            if not exc.retriable:
                raise
            if needs_metadata_refresh(exc):  # the leader may have moved
                with contextlib.suppress(JetError):
                    await client.refresh_metadata()
            return await client.produce(request)
        return decode_produce_answer(
            answer, len(request.messages), request.current_values, request.latest_values
        )

    async def _produce(self, request: ProduceRequest, many: bool = False) -> list[ProduceResult]:
        """Send ``request`` to its partition's leader with the round's other requests to
        that server, as one ProduceMany (:class:`FanIn`, at the end of this loop turn;
        ``many``: one even if it goes alone); its results. Through :meth:`Client.produce`
        (which finds the leader and retries) where the leader's connection is not at
        hand, its server has no ProduceMany, or the loop is not asyncio."""
        client = self.client
        conn = client.leader_connection_now(self.stream, request.partition)
        loop = self._loop
        if conn is None or loop is None or not self._fan_in.takes(conn):
            self._direct += 1
            return await client.produce(request)
        body = encode_produce_request(request)
        wait = request.timeout_ms / 1000 + client.request_timeout
        cut: asyncio.Future[SectionAnswer] = loop.create_future()

        def section(answer: SectionAnswer) -> bytes:
            cut.set_result(answer)
            return body

        self._fan_in.defer(conn, section, wait, many)
        answer = await (await cut).wait(wait)
        return decode_produce_answer(
            answer, len(request.messages), request.current_values, request.latest_values
        )

    def outcome(self, key: bytes, expected: int | None, result: ProduceResult) -> ProduceResult:
        """``result`` of a write of ``key`` (a compare-and-set expecting ``expected``) if it
        was stored (or was a duplicate of a stored one); else its error raised."""
        code = result.error_code
        if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE):
            return result
        partition = self.partition_of(key)
        details = {"stream": self.stream, "partition": partition, "expected": expected}
        if code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
            current = result.offset
            now = "has no value" if current == ABSENT else f"is at revision {current}"
            raise WrongExpectedKeyOffset(
                f"key {key[:40]!r} {now}, not {expected}",
                details={
                    **details,
                    "current_revision": current,
                    "current_value": result.current_value,
                },
            )
        raise error_from_code(code, f"table write to {self.stream}/{partition}", details)


def _headers(expected: int | None) -> tuple[tuple[str, bytes], ...]:
    """A write's headers: its compare-and-set's, if it is one."""
    if expected is None:
        return ()
    return ((EXPECTED_KEY_OFFSET, str(expected).encode()),)


def _runs(writes: list[QueuedWrite]) -> list[list[QueuedWrite]]:
    """``writes`` (in sequence order) cut into runs of consecutive sequences."""
    runs: list[list[QueuedWrite]] = []
    for w in writes:
        if runs and runs[-1][-1].seq + 1 == w.seq:
            runs[-1].append(w)
        else:
            runs.append([w])
    return runs
