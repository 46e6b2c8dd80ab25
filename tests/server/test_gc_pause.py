"""The collector paused while many partitions open, their objects frozen after, and handed
back when partitions close (checked in a child process: the collector is process-wide)."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import gc
from jetserver.broker.gc_pause import FREEZE_MIN_PARTITIONS, collector_paused, release_frozen

def cycle():
    a = []
    a.append(a)
    return a

print("few", end=" ")
with collector_paused(FREEZE_MIN_PARTITIONS - 1):
    print(gc.isenabled(), end=" ")
print(gc.get_freeze_count(), end=" ")

print("many", end=" ")
with collector_paused(FREEZE_MIN_PARTITIONS):
    with collector_paused(FREEZE_MIN_PARTITIONS):  # overlapping openings
        print(gc.isenabled(), end=" ")
    print(gc.isenabled(), gc.get_freeze_count(), end=" ")
    kept = cycle()
print(gc.isenabled(), gc.get_freeze_count() > 0, end=" ")
del kept  # garbage now, but frozen: a full collection does not see it
print(gc.collect(), end=" ")
release_frozen()
print(gc.get_freeze_count(), gc.collect() >= 1, end=" ")

print("off", end=" ")
gc.disable()
with collector_paused(FREEZE_MIN_PARTITIONS):
    pass
print(gc.isenabled(), gc.get_freeze_count())
"""


def test_collector_paused_for_many_partitions_then_frozen_and_released_at_close() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == [
        "few",
        "True",  # a few partitions: left alone
        "0",
        "many",
        "False",  # paused
        "False",  # still paused while the outer opening runs
        "0",  # nothing frozen yet
        "True",  # enabled again at the end of the last opening
        "True",  # and what existed is frozen
        "0",  # the frozen cycle is not collected
        "0",  # released: nothing frozen
        "True",  # and the cycle is collected
        "off",
        "False",  # disabled by someone else: left disabled, nothing frozen
        "0",
    ], out.stderr


HELD_CHILD = """
import gc
from jetserver.broker.gc_pause import FREEZE_MIN_PARTITIONS, collector_paused

with collector_paused(100, held=FREEZE_MIN_PARTITIONS - 1):  # a small server
    print(gc.isenabled(), end=" ")
print(gc.get_freeze_count(), end=" ")
with collector_paused(100, held=FREEZE_MIN_PARTITIONS + 100):  # a stream of 100 more
    print(gc.isenabled(), end=" ")
print(gc.isenabled(), gc.get_freeze_count() > 0, end=" ")
gc.unfreeze()
with collector_paused(0, held=FREEZE_MIN_PARTITIONS):  # nothing opened
    print(gc.isenabled(), end=" ")
print(gc.get_freeze_count())
"""


def test_a_few_partitions_opened_on_a_server_holding_many_are_frozen_after() -> None:
    """A cluster's streams are created 100 partitions at a time: on a server that holds many
    already, what each creation makes is frozen too (else every middle and full collection
    walks them all: 178-247 ms of CPU each at 3,000 partitions; before 2026-11-30 a creation
    below FREEZE_MIN_PARTITIONS was never frozen)."""
    out = subprocess.run(
        [sys.executable, "-c", HELD_CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == [
        "True",  # a small server: left alone
        "0",
        "False",  # paused while the few open on a server holding many
        "True",  # enabled again
        "True",  # and what existed is frozen
        "True",  # nothing opened: left alone
        "0",
    ], out.stderr
