"""Follower reconciliation by leader epoch (Kafka KIP-101, with KIP-279's answer).

A follower that starts following a leader (a new leader epoch, or a restart) asks the
leader ``OffsetForLeaderEpoch(its latest epoch E)``. The leader answers ``(E', end)``: the
largest epoch ``E' <= E`` in its epoch cache and the offset where ``E'`` ends in its log.
:func:`truncation_point` turns that answer into the offset the follower truncates to, and
says whether it must ask again (the follower does not know ``E'``: it cuts back to the end
of its largest epoch below ``E'`` and asks about that one). Each round strictly lowers the
follower's latest epoch, so the exchange ends.

Truncating at the divergence point — not at the high watermark — keeps every record the
follower shares with the leader and drops exactly the ones the leader does not have, so a
committed record is never cut (a bare truncate-to-HW can drop a committed record the
follower had, then lose it if the leader fails too; it can also keep a divergent one).

The follower does not ask when the answer cannot cut anything
(:func:`answer_cannot_cut`): its log holds no record, or its latest epoch is the one it
follows (what it holds of that epoch came from this leader, whose log in an epoch only
grows; a LEO above the leader's is answered ``OFFSET_OUT_OF_RANGE`` at the first fetch,
and the follower asks then). Kafka's rule is the same in substance: since truncation on
fetch (KIP-595, 2.7) a follower sends no OffsetsForLeaderEpoch before fetching; its last
fetched epoch rides in the fetch, and the leader answers a divergence only if it lacks that
epoch or the epoch ends on its side before the fetch offset.

Pure: the follower's cache is given as a lookup function.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

UNDEFINED = -1


@attrs.frozen
class Truncation:
    """Where to truncate, and whether the follower is reconciled after that."""

    offset: int
    """Truncate the log to this offset (records at or after it are dropped)."""
    done: bool
    """False: truncate, then ask the leader again about the new latest epoch."""


def truncation_point(
    *,
    local_epoch_end: Callable[[int], tuple[int, int]],
    local_leo: int,
    local_hw: int,
    leader_epoch: int,
    leader_end_offset: int,
) -> Truncation:
    """The follower's truncation point from the leader's OffsetForLeaderEpoch answer.

    Args:
        local_epoch_end: the follower's ``LeaderEpochCache.epoch_and_end_offset_for``:
            ``epoch -> (largest local epoch <= epoch, its end offset)``, ``(-1, -1)`` if none.
        local_leo: the follower's log end offset.
        local_hw: the follower's high watermark (the fallback when the leader knows no epoch).
        leader_epoch: ``leader_epoch`` of the answer (-1: the leader knows no such epoch).
        leader_end_offset: ``end_offset`` of the answer (-1: unknown).
    """
    if leader_epoch == UNDEFINED or leader_end_offset == UNDEFINED:
        return Truncation(min(local_hw, local_leo), True)
    follower_epoch, follower_end = local_epoch_end(leader_epoch)
    if follower_epoch == UNDEFINED:
        return Truncation(min(leader_end_offset, local_leo), True)
    if follower_epoch != leader_epoch:
        return Truncation(min(follower_end, local_leo), False)
    # Both know the epoch: the logs agree up to where it ends on *both* (the follower may
    # hold a later epoch the leader never had, starting before the leader's end).
    return Truncation(min(leader_end_offset, follower_end, local_leo), True)


def answer_cannot_cut(*, log_start: int, leo: int, latest_epoch: int, following: int) -> bool:
    """True if no OffsetForLeaderEpoch answer can cut a record of the follower's log: it
    holds none (``leo <= log_start``, or no epoch at all), or its latest epoch is
    ``following``, the epoch of the leader it follows (module docstring). The follower then
    only drops its epoch entries at or after its LEO (an epoch it led without appending),
    which is all that asking could do to it. A follower whose fetch was answered
    ``OFFSET_OUT_OF_RANGE`` above the leader's LEO asks anyway.

    Args:
        log_start: the follower's log start offset.
        leo: the follower's log end offset.
        latest_epoch: the follower's latest epoch (-1: none).
        following: the leader epoch it follows.
    """
    return latest_epoch in (UNDEFINED, following) or leo <= log_start
