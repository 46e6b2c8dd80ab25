"""The last value this table wrote to a key by compare-and-set, until its view has it.

A table's view follows its partitions' logs through Fetch, so right after a write
succeeds the view still holds the key's previous value: a read-modify-write
(:meth:`jetsdk.Table.modify`) that started from the view would be refused once (and
retried on the value the refusal carries), two requests per update for a lone writer. The
writer knows better: the write's result is the key's value at that revision, so the next
modify of the key starts from it instead; or, when racing writers built on the write while
it committed, from the later record its answer named (spec/protocol.md §6, "latest
values": such a value may not be committed yet; a compare-and-set built on it is committed
only if it is).

Only a hint: the server's compare-and-set decides. A stale hint (another process wrote
since, the key expired) costs one refused try, never a lost update.

Bounded (:data:`MAX_OWN_WRITES` keys) and single-threaded (the table's event loop).
"""

from __future__ import annotations

import attrs

from jetsdk.table.view import Entry

MAX_OWN_WRITES = 10_000
"""Keys whose last written value a table keeps until its view reaches it."""


@attrs.define(eq=False)
class OwnWrites:
    """Key -> the entry this table's last successful compare-and-set of it stored."""

    limit: int = MAX_OWN_WRITES
    _entries: dict[bytes, Entry] = attrs.field(factory=dict)

    def __len__(self) -> int:
        return len(self._entries)

    def newer(self, key: bytes, seen: Entry | None, position: int) -> Entry | None:
        """The entry to build on: the one written here if the view (``seen``, its
        partition read up to ``position``) has not reached it, else ``seen``."""
        mine = self._entries.get(key)
        if mine is None:
            return seen
        if position > mine.revision:  # the view has it, or something later
            del self._entries[key]
            return seen
        return mine

    def wrote(self, entry: Entry, positions: list[int]) -> None:
        """This table stored ``entry`` (its revision is the record's offset). Past the
        bound, entries the view (read up to ``positions``) has reached go first, then the
        oldest down to half the bound."""
        entries = self._entries
        entries.pop(entry.key, None)
        entries[entry.key] = entry
        if len(entries) <= self.limit:
            return
        for key, e in list(entries.items()):
            if positions[e.partition] > e.revision:
                del entries[key]
        if len(entries) > self.limit:
            for key in list(entries)[: len(entries) - self.limit // 2]:
                del entries[key]
