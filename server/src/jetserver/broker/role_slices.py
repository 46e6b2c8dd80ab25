"""A burst's role changes handed out in slices of bounded event-loop time, leaderships first.

A reconcile that changes many replicas' roles at once (a survivor's share of a failover:
about 3,300 at 10,000 RF 3 partitions, 6,700 at 20,000) woke every applier in one turn,
and most role changes run to their end without waiting for anything, so the whole burst
ran in one pass of the event loop: 1.1 s at 10,000 partitions on a quiet machine and
2.2 s at 20,000 (``loop_stall_s`` of the role summary), in which the server answered
nothing else: no probe of its liveness, no Metadata, no ListOffsets of a new leader that
had already taken its role.

:func:`wake_in_slices` wakes the appliers in slices instead: the new leaderships first
(what the failover waits for), then the rest (followers re-pointed), each slice as many
as :data:`SLICE_S` of the loop's time holds, measured on the slice before (it starts with
:data:`FIRST_SLICE`). Between two slices the loop polls its sockets and serves what came.

A gate of 32 role changes per turn (66181c47, reverted in 36154d9d) made a loaded
survivor's leaderships 3x later: each slice waited for a whole turn of a loop busy with
other work, 30 turns per 1,000 role changes. Slices measured in time keep that to a few
turns per second of role changes (about 6 for a 10,000-partition survivor's burst), and
the leaderships no longer wait behind the followers' changes.

Task safety: the event loop; one :func:`wake_in_slices` task per burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio.lowlevel

from jetserver.broker.running import RunningPartition

__all__ = ["FIRST_SLICE", "SLICE_S", "leaders_first", "wake_in_slices"]

SLICE_S = 0.2
"""Event-loop time one slice of role changes may take (the next slice's size is set from
the last one's)."""
FIRST_SLICE = 128
"""Appliers in the first slice (0.3-0.6 ms each in a failover: 40-80 ms)."""
GROWTH_MAX = 4
"""A slice is at most this many times the last one (a slice of role changes that waited
for something, and so ran in no time here, does not wake the whole rest)."""


def leaders_first(woken: Sequence[RunningPartition], server_id: str) -> list[RunningPartition]:
    """``woken`` with those whose target makes ``server_id`` their leader first, each
    group in its order."""
    leads: list[RunningPartition] = []
    rest: list[RunningPartition] = []
    for opened in woken:
        target = opened.wanted
        (leads if target is not None and target[0].leader == server_id else rest).append(opened)
    return leads + rest


async def wake_in_slices(
    woken: Sequence[RunningPartition],
    slice_s: float = SLICE_S,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Set each of ``woken``'s wake event, in order, a slice per event-loop turn (see the
    module docstring); the slices."""
    size, start, slices = FIRST_SLICE, 0, 0
    while start < len(woken):
        began = clock()
        for opened in woken[start : start + size]:
            opened.wake.set()
        start += size
        slices += 1
        if start >= len(woken):
            break
        # The woken appliers run before this task goes on (they were scheduled first),
        # then the loop polls its sockets.
        await anyio.lowlevel.checkpoint()
        spent = clock() - began
        fits = size * GROWTH_MAX if spent <= 0 else int(size * slice_s / spent)
        size = max(1, min(fits, size * GROWTH_MAX))
    return slices
