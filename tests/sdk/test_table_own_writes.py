"""The hint a table keeps of its own last compare-and-set per key (jetsdk.table.own_writes)."""

from __future__ import annotations

from jetsdk.table.own_writes import OwnWrites
from jetsdk.table.view import Entry


def test_the_own_write_wins_until_the_view_reaches_it() -> None:
    own = OwnWrites()
    seen = Entry(b"k", b"old", 3, 0)
    assert own.newer(b"k", seen, 4) is seen  # nothing written here
    mine = Entry(b"k", b"new", 7, 0)
    own.wrote(mine, [4])
    assert own.newer(b"k", seen, 4) is mine  # the view is at offset 4: behind the write
    assert own.newer(b"k", None, 7) is mine  # still below it (7 not applied yet)
    later = Entry(b"k", b"later", 9, 0)
    assert own.newer(b"k", later, 8) is later  # the view applied 7: it knows best
    assert len(own) == 0  # and the hint is gone


def test_bounded() -> None:
    own = OwnWrites(limit=10)
    positions = [0, 0]
    for i in range(10):
        own.wrote(Entry(b"a%d" % i, b"v", i, 0), positions)
    positions[0] = 5  # the view reached a0..a4
    own.wrote(Entry(b"b", b"v", 0, 1), positions)
    assert len(own) == 6  # a5..a9 and b: the ones the view reached went first
    for i in range(20):
        own.wrote(Entry(b"c%d" % i, b"v", i, 1), positions)
        assert len(own) <= 10
    assert own.newer(b"c19", None, 0) is not None  # the newest stay
