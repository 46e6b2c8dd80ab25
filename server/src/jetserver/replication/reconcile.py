"""A follower's reconciliation by leader epoch, the exchange (spec/cluster.md,
"Reconciliation by leader epoch"): ask the leader about the latest local epoch, truncate to
:func:`~jetserver.replication.epochs.truncation_point`, again until done; or, when no answer
could cut a record (:func:`~jetserver.replication.epochs.answer_cannot_cut`), only drop the
epoch entries at the log's end, without asking.

The caller sends the requests and makes the cuts (:class:`~jetserver.replication.fetcher.
FollowerFetcher`: OffsetForLeaderEpoch on its fetch session; the truncation in a worker
thread, logged).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from jetserver.replication.epochs import UNDEFINED, answer_cannot_cut, truncation_point
from jetserver.storage import Log

ROUNDS = 64
"""Most questions in one reconciliation: each lowers the latest epoch; far beyond need."""

Ask = Callable[[int], Awaitable[tuple[int, int]]]
"""Sends ``OffsetForLeaderEpoch(epoch)`` to the leader; its answer ``(leader_epoch,
end_offset)``."""


async def reconcile(
    log: Log,
    *,
    following: int,
    ask: Ask,
    truncate: Callable[[int], Awaitable[None]],
    ask_anyway: bool = False,
) -> bool:
    """Truncate ``log`` where it diverges from the leader's; False if the exchange did not
    end within :data:`ROUNDS` questions.

    Args:
        log: the follower's log.
        following: the leader epoch it follows.
        ask: asks the leader (:data:`Ask`).
        truncate: cuts the log and its epoch entries at an offset (entries at or after it
            are dropped even when no record is).
        ask_anyway: ask even if no answer could cut a record (the last fetch found the log
            past the leader's LEO).
    """
    leo, entries = log.log_end_offset, log.epochs.entries
    latest = entries[-1].epoch if entries else UNDEFINED
    if not ask_anyway and answer_cannot_cut(
        log_start=log.log_start_offset, leo=leo, latest_epoch=latest, following=following
    ):
        if entries and entries[-1].start_offset >= leo:  # an epoch it led without appending
            await truncate(leo)
        return True
    for _ in range(ROUNDS):
        latest = log.epochs.latest_epoch
        if latest < 0:
            return True
        leader_epoch, leader_end = await ask(latest)
        cut = truncation_point(
            local_epoch_end=log.epochs.epoch_and_end_offset_for,
            local_leo=log.log_end_offset,
            local_hw=log.high_watermark,
            leader_epoch=leader_epoch,
            leader_end_offset=leader_end,
        )
        await truncate(cut.offset)
        if cut.done:
            return True
    return False
