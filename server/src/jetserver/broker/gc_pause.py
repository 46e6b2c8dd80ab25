"""Keeping the cyclic garbage collector out of opening thousands of partitions.

Opening a partition makes a few hundred objects that live as long as it does (its log, the
replica, its task). At 10,000 partitions, a server's restart made some 2 million of them,
and the collector, finding them all alive, kept walking them: young collections of up to
40 ms and middle ones of 120-280 ms, about 1.7 s of a 9.3 s restart (a ``gc.callbacks``
timer in the server process), then a full collection of about 1 s shortly after ready. While many
partitions open, :func:`collector_paused` turns the collector off, then freezes what exists
(``gc.freeze``: later collections skip it) and turns it back on.

A frozen object that becomes cyclic garbage is not collected until it is unfrozen:
:func:`release_frozen` (called when partitions close for good: a stream deleted, a replica
moved away) hands every frozen object back to the collector's oldest generation, so that
garbage goes at the next full collection.

Thread safety: the event loop thread (the collector's state is process-wide).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["FREEZE_MIN_PARTITIONS", "collector_paused", "release_frozen"]

FREEZE_MIN_PARTITIONS = 256
"""Partitions opened at once from which the collector is paused (fewer: left alone)."""

_paused = 0
"""Openings under way that paused the collector (it resumes when the last one ends)."""


@contextlib.contextmanager
def collector_paused(partitions: int, held: int = 0) -> Iterator[None]:
    """Around opening ``partitions`` partitions (or changing their roles) on a server that
    holds ``held`` partitions with them: with at least FREEZE_MIN_PARTITIONS either way
    (and ``partitions`` not 0) and the collector enabled, disable it; at the end (of the
    last such opening, if they overlap) freeze every object that exists and enable it
    again."""
    global _paused
    many = partitions >= FREEZE_MIN_PARTITIONS or (partitions > 0 and held >= FREEZE_MIN_PARTITIONS)
    if not many or (_paused == 0 and not gc.isenabled()):
        yield
        return
    _paused += 1
    gc.disable()
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0:
            gc.freeze()
            gc.enable()


def release_frozen() -> None:
    """Partitions closed for good: let the collector see the frozen objects again (those
    partitions' cycles among them are garbage now)."""
    if gc.get_freeze_count():
        gc.unfreeze()
