"""One partition's long-poll fetch loop and the per-partition state a consumer keeps.

For each partition it reads, a :class:`~jetsdk.consumer.consumer.Consumer` runs
:func:`fetch_loop` in its task group: FetchStream requests (or Fetch long polls, see
:mod:`jetsdk.consumer.fetch_source`) to the partition leader, records
decoded with :func:`jetsdk.codec.record.iter_records` (a trailing partial record is ignored
and fetched again), each decoded batch handed to the consumer's inbox. A credit semaphore
allows one batch waiting per partition besides the one being read, so the next response is
always on its way while the application works through the current one. While the loop
waits for an open FetchStream's next answer, an answer with records the run has credit for
is decoded and handed to the consumer in the connection reader's turn (``take_now``,
through :attr:`FetchSource.take <jetsdk.consumer.fetch_source.FetchSource.take>`): the
application's task is the only one woken for it, as nats-py wakes its subscription's.

Errors: retriable ones are retried with backoff without surfacing; the others are handed to
the consumer as a batch with an ``error`` and the loop ends (until a seek restarts it). An
out-of-range offset is handled by the reset policy (:mod:`jetsdk.consumer.positions`).

Not thread-safe: runs in the consumer's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.lowlevel
import attrs

from jetsdk.client import Client
from jetsdk.codec.compression import plain_records
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_messages import FetchResponseHeader
from jetsdk.codec.record import HEADER_SIZE, Record, iter_records, peek_header
from jetsdk.consumer.fetch_source import FetchSource
from jetsdk.consumer.positions import ResetPolicy, reset_offset
from jetsdk.consumer.processed import ProcessedOffsets
from jetsdk.errors import JetError, MalformedFrame, OffsetOutOfRange
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.message import Acker
from jetsdk.retry import RetryPolicy

__all__ = ["FETCHER_BACKOFF", "HAND_OVER_FIRST", "Fetched", "PartitionRun", "fetch_loop"]

FETCHER_BACKOFF = RetryPolicy(attempts=1_000_000, backoff=0.1, backoff_max=2.0)
"""Backoff between a fetcher's attempts after retriable errors."""
HAND_OVER_FIRST = 16
"""A batch of at most this many records that the application waits for is handed over
before the next Fetch is written (light load: the records arrive one request write sooner).
A bigger one keeps the next Fetch on the way while the application works through it.
While a FetchStream is open no request is written next, so the loop does not yield for
it: it waits for the stream's next answer, and the application runs then (one task step
less per message at the tail)."""


@attrs.define(eq=False, slots=True)
class Fetched:
    """A decoded batch (or an error) from one fetcher run."""

    key: StreamPartition
    """The partition."""
    run: PartitionRun
    """The run it belongs to (a batch of an ended run is dropped)."""
    records: list[Record]
    """Records in offset order (empty with an error)."""
    error: JetError | None = None
    """A non-retriable error that stopped the fetcher."""
    index: int = 0
    """Next record to hand out."""
    credit: bool = True
    """It holds one of its run's prefetch credits (a batch given back holds none)."""


@attrs.define(eq=False)
class PartitionRun:
    """One partition being read, from an assignment or a seek to the next.

    A new run (new object) starts at every seek; batches and acks of an older run are
    recognised by identity and ignored.
    """

    key: StreamPartition
    """The partition."""
    processed: ProcessedOffsets
    """Delivery bookkeeping (position, acks, what to commit)."""
    generation: int | None = None
    """Owner generation in the group (None without a group)."""
    hw: int = -1
    """High watermark as of the last fetch (-1 before any)."""
    log_start: int = -1
    """Log start as of the last fetch (-1 before any)."""
    scope: anyio.CancelScope | None = None
    """Cancels the fetch loop."""
    credit: anyio.Semaphore = attrs.field(factory=lambda: anyio.Semaphore(1, fast_acquire=True))
    """One batch may wait in the inbox besides the one being handed out."""
    revoking: bool = False
    """A group revocation is finishing in-flight work; nothing more is fetched."""
    reset_to: int | None = None
    """Set by the fetcher when the reset policy moved it (the position follows)."""
    acker: Acker | None = None
    """What this run's messages call ``ack_offset`` on (made by the delivery)."""

    @property
    def position(self) -> int:
        """Next offset the application will get."""
        return self.processed.position

    def stop(self) -> None:
        """Stop fetching and ignore later acks of this run's messages (if ``final``)."""
        if self.scope is not None:
            self.scope.cancel()

    def end(self) -> None:
        """Stop fetching; acks of this run's messages are ignored from now on."""
        self.stop()
        self.processed.alive = False


async def fetch_loop(
    client: Client,
    run: PartitionRun,
    offset: int,
    *,
    max_bytes: int,
    max_wait: float,
    reset: ResetPolicy,
    read_replicas: bool = False,
    deliver: Callable[[Fetched], bool],
) -> None:
    """Fetch ``run``'s partition from ``offset`` until cancelled or a non-retriable error
    (from an in-sync follower with ``read_replicas``).

    ``deliver`` is called with each batch once the run's credit allows it; it returns True
    if the application waits for it, and then the loop lets the application take a small
    batch (:data:`HAND_OVER_FIRST`) before writing the next Fetch (or FetchStream).
    """
    source = FetchSource(client, run.key, max_wait, read_replicas)
    try:
        await _fetch_from(source, run, offset, max_bytes=max_bytes, reset=reset, deliver=deliver)
    finally:
        source.close()  # a seek, a close or a revocation: drop the stream's other answers


async def _fetch_from(
    source: FetchSource,
    run: PartitionRun,
    offset: int,
    *,
    max_bytes: int,
    reset: ResetPolicy,
    deliver: Callable[[Fetched], bool],
) -> None:
    stream, partition = run.key
    failures = 0
    limit = max_bytes
    credit = run.credit

    def take_now(header: FetchResponseHeader, raw: memoryview) -> bool:
        # A stream's answer, in the reader's turn while this task waits in source.next
        # (module doc): the loop's step below for records the run has credit for.
        nonlocal offset, limit, failures
        if not credit.value or not run.processed.alive:  # (ended: its task is cancelled)
            return False
        records = plain_records([r for r in iter_records(raw) if r.offset >= offset])
        if not records:
            return False
        failures, limit = 0, max_bytes
        run.hw, run.log_start = header.hw, header.log_start
        offset = records[-1].offset + 1
        credit.acquire_nowait()
        deliver(Fetched(run.key, run, records))
        return True

    source.take = take_now
    while True:
        try:
            header, raw = await source.next(offset, limit)
            records = plain_records([r for r in iter_records(raw) if r.offset >= offset])
            if not records and len(raw) >= HEADER_SIZE:
                # Only a partial record came back: ask for at least its size.
                limit = max(max_bytes, peek_header(raw)[3])
            else:
                limit = max_bytes
        except OffsetOutOfRange as exc:
            log_start = exc.log_start if exc.log_start is not None else 0
            hw = exc.hw if exc.hw is not None else 0
            resume = reset_offset(offset, reset, log_start=log_start, hw=hw)
            if resume is None or resume == offset:
                await credit.acquire()
                deliver(Fetched(run.key, run, [], exc))
                return
            offset = resume
            run.reset_to = resume
            continue
        except CodecError as exc:
            error = MalformedFrame(f"corrupt records in {stream}/{partition}: {exc}")
            await credit.acquire()
            deliver(Fetched(run.key, run, [], error))
            return
        except JetError as exc:
            if not exc.retriable:
                await credit.acquire()
                deliver(Fetched(run.key, run, [], exc))
                return
            failures += 1
            await anyio.sleep(FETCHER_BACKOFF.delay(failures))
            continue
        failures = 0
        run.hw, run.log_start = header.hw, header.log_start
        if not records:
            continue
        offset = records[-1].offset + 1
        await credit.acquire()
        handed = deliver(Fetched(run.key, run, records))
        if handed and len(records) <= HAND_OVER_FIRST and not source.streaming:
            await anyio.lowlevel.checkpoint()
