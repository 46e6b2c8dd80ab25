"""The fsyncs handed to worker threads in one loop turn, as one batch
(:class:`FlushBatch`, :mod:`jetserver.storage.fsync_runner`'s module docstring says why).

Task safety: made and settled on the event loop thread; its jobs run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

import attrs

from jetserver.storage import Log

log = logging.getLogger(__name__)

__all__ = ["FlushBatch", "flush_all"]


@attrs.define(eq=False)
class FlushBatch:
    """The fsyncs handed to worker threads in one loop turn: one batch, split among at
    most :data:`FSYNC_LANES` jobs; one loop callback, once all ended, settles each
    caller's future."""

    loop: asyncio.AbstractEventLoop
    logs: list[tuple[Log, int | None]] = attrs.field(factory=list)
    waiters: list[asyncio.Future[tuple[int, BaseException | None]]] = attrs.field(factory=list)
    """Each log's caller's future: (flushed offset, None) or (-1, its error)."""
    thens: dict[int, Callable[[int], None]] | None = None
    """By caller's index: called with the flushed offset before its future is set (None:
    no caller gave one)."""
    group: Callable[[list[tuple[int, BaseException | None]]], None] | None = None
    """:meth:`FsyncRunner.flush_group`'s callback (then no waiters): gets every outcome."""
    results: list[tuple[int, BaseException | None]] = attrs.field(init=False)
    """Each log's outcome, in :attr:`logs`' order (made by :meth:`FsyncRunner._submit`)."""
    size: int = 0
    """Logs per job (the last one's share may be smaller)."""
    lanes: int = 0
    """Jobs not ended yet."""
    ended: asyncio.Future[None] | None = None
    """Made for a caller cancelled while the jobs run (:meth:`wait_ended`)."""
    settled: bool = False
    """Every job ended and the callers' futures are set (on the loop)."""
    _lock: threading.Lock | None = attrs.field(default=None, repr=False)
    """Guards :attr:`lanes` while jobs of several threads count down (:meth:`run_lane`);
    made only for a batch of several jobs (not per message at light load)."""

    def run_lane(self, start: int) -> None:
        """One job of a batch of several, in a worker thread: fsync its share of the logs
        and, if it is the last job to end, hand every outcome to the loop in one callback
        (the others hand nothing back: no loop wake-up each)."""
        share = self.logs[start : start + self.size]
        try:
            outcomes = flush_all(share)
        except BaseException as exc:  # unexpected (flush_all keeps each log's error)
            outcomes = [(-1, exc)] * len(share)
            raise
        finally:
            self.results[start : start + len(share)] = outcomes
            assert self._lock is not None  # several jobs: made before they started
            with self._lock:
                self.lanes -= 1
                last = self.lanes == 0
            if last:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    self.loop.call_soon_threadsafe(self._settle)

    def lane_done(
        self,
        start: int,
        outcomes: list[tuple[int, BaseException | None]] | None,
        error: BaseException | None,
    ) -> None:
        """A job ended (a loop callback): its logs' outcomes from ``start`` on; once the
        last one did, every caller's."""
        if outcomes is None:  # unexpected (flush_all keeps each log's error): all get it
            outcomes = [(-1, error)] * (min(start + self.size, len(self.logs)) - start)
        self.results[start : start + len(outcomes)] = outcomes
        self.lanes -= 1
        if self.lanes:
            return
        self._settle()

    def _settle(self) -> None:
        """Every job ended: set each caller's future (on the loop)."""
        self.settled = True
        if self.group is not None:
            try:
                self.group(self.results)
            except Exception:  # a loop callback must not raise
                log.exception("settling a group of fsyncs failed")
            return
        thens = self.thens
        for i, (waiter, outcome) in enumerate(zip(self.waiters, self.results, strict=True)):
            if thens is not None and outcome[1] is None and i in thens:
                thens[i](outcome[0])
            if not waiter.done():
                waiter.set_result(outcome)
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(None)

    async def wait_ended(self) -> None:
        """Until every job of the batch ended (for a caller cancelled meanwhile)."""
        if self.settled:
            return  # ended
        ended = self.ended
        if ended is None:
            ended = self.ended = self.loop.create_future()
        while not ended.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(ended)


def flush_all(logs: list[tuple[Log, int | None]]) -> list[tuple[int, BaseException | None]]:
    """Flush each log in turn (in a worker thread: one job's share of a batch); one's
    failure is its own."""
    out: list[tuple[int, BaseException | None]] = []
    for log_, upto in logs:
        try:
            out.append((log_.flush(upto), None))
        except Exception as exc:
            out.append((-1, exc))
    return out
