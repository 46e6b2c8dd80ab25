"""``jet bench``'s message identity and its final check: what the servers hold against what
was sent.

Every message of a run carries its send time and its identity (run tag, publisher,
sequence): in the first :data:`ID_BYTES` bytes of the value when ``--size`` allows, else in
a ``Jet-Bench`` header (so that latency and the check work for any size, 0 included). After
the run the check reads every partition from where it ended before the run to its high
watermark and counts the run's messages: duplicates (held more than once), acknowledged
messages missing (a loss), unacknowledged ones missing, and records of other writers
(foreign, ignored).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio
import attrs

from jetsdk import Client, OffsetOutOfRange
from jetsdk.codec.record import Record, iter_records

STAMP_BYTES = 8
"""Send time (monotonic ns, big-endian) at the start of an identified value."""
ID_BYTES = 18
"""Stamp (8), run tag (4), publisher (2), sequence (4): values this long or longer carry
them; shorter ones carry them in the :data:`ID_HEADER` header."""
ID_HEADER = "Jet-Bench"
"""``<stamp>:<run tag>:<publisher>:<sequence>`` (decimal) for values under ID_BYTES."""
READ_MAX_BYTES = 4 * 1024 * 1024
"""Bytes per Fetch of the check (a message over it still comes back whole)."""
SETTLE_S = 5.0
"""How long the check waits for the high watermarks to stop moving (acks of the leader
alone, or none, come before the commit)."""

MessageId = tuple[int, int]
"""(publisher index, sequence number)."""


def payload_maker(
    size: int, run_tag: int, publisher: int
) -> Callable[[int], tuple[bytes, list[tuple[str, bytes]] | None]]:
    """``seq -> (value, headers)`` for message ``seq`` of ``publisher``: ``size`` bytes of
    value, the identity and send time in it or in a header."""
    pad = bytes(max(0, size - ID_BYTES))
    short = bytes(size)
    ident = run_tag.to_bytes(4, "big") + publisher.to_bytes(2, "big")

    def make(seq: int) -> tuple[bytes, list[tuple[str, bytes]] | None]:
        now = time.monotonic_ns()
        if size >= ID_BYTES:
            return now.to_bytes(STAMP_BYTES, "big") + ident + seq.to_bytes(4, "big") + pad, None
        return short, [(ID_HEADER, f"{now}:{run_tag}:{publisher}:{seq}".encode())]

    return make


_HEADER_MAX_BYTES = len(ID_HEADER) + len(f"{2**63}:{2**32}:{2**16}:{2**32}")
"""The most an identity header adds to a message's size (name and value)."""


def message_bytes(size: int) -> int:
    """The size a message of ``--size`` counts against max_message_bytes (value, plus the
    identity header below ID_BYTES; spec/protocol.md: value + key + headers)."""
    return size if size >= ID_BYTES else size + _HEADER_MAX_BYTES


def largest_size(limit: int) -> int:
    """The largest ``--size`` whose messages fit ``limit``."""
    return limit if limit >= ID_BYTES else max(0, limit - _HEADER_MAX_BYTES)


@attrs.frozen
class Identity:
    """What a record of a bench run carries."""

    stamp_ns: int
    run_tag: int
    publisher: int
    seq: int


def identity(value: bytes, headers: Iterable[tuple[str, bytes]]) -> Identity | None:
    """The identity a record carries, or None (another writer's record)."""
    if len(value) >= ID_BYTES:
        return Identity(
            int.from_bytes(value[:8], "big"),
            int.from_bytes(value[8:12], "big"),
            int.from_bytes(value[12:14], "big"),
            int.from_bytes(value[14:18], "big"),
        )
    for name, raw in headers:
        if name == ID_HEADER:
            try:
                stamp, tag, pub, seq = (int(x) for x in raw.decode().split(":"))
            except ValueError:
                return None
            return Identity(stamp, tag, pub, seq)
    return None


@attrs.frozen
class Check:
    """The servers' copy of a run against what it sent."""

    held: int
    """Records of this run (or foreign) found."""
    distinct: int
    """Distinct messages of this run found."""
    duplicates: int
    """Records of this run beyond the first of each message."""
    missing_acked: int
    """Acknowledged messages not found: losses."""
    missing_unacked: int
    """Sent but never acknowledged, and not found."""
    foreign: int
    """Records that are not this run's (other writers)."""

    @property
    def lost(self) -> bool:
        """An acknowledged message is missing."""
        return self.missing_acked > 0

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return attrs.asdict(self)


def check_held(
    held: Iterable[MessageId | None], sent: Mapping[int, int], acked: set[MessageId]
) -> Check:
    """Compare the ids found (None: not this run's) with ``sent`` (publisher -> messages
    sent, sequences 0..n-1) and the ``acked`` ids."""
    found: Counter[MessageId] = Counter()
    foreign = total = 0
    for mid in held:
        total += 1
        if mid is None or mid[1] >= sent.get(mid[0], 0):
            foreign += 1
        else:
            found[mid] += 1
    expected = {(p, s) for p, n in sent.items() for s in range(n)}
    missing = expected - set(found)
    return Check(
        held=total,
        distinct=len(found),
        duplicates=sum(found.values()) - len(found),
        missing_acked=len(missing & acked),
        missing_unacked=len(missing - acked),
        foreign=foreign,
    )


async def _settled_hws(client: Client, stream: str, partitions: int) -> list[int]:
    last: list[int] | None = None
    with anyio.move_on_after(SETTLE_S):
        while True:
            hws = [(await client.list_offsets(stream, p, "latest")).hw for p in range(partitions)]
            if hws == last:
                break
            last = hws
            await anyio.sleep(0.2)
    return last or []


async def read_back(
    client: Client, stream: str, starts: Mapping[int, int], run_tag: int
) -> list[MessageId | None]:
    """The ids of the records from ``starts`` (partition -> offset) to each high watermark
    (None for a record not of run ``run_tag``)."""
    out: list[MessageId | None] = []
    ends = await _settled_hws(client, stream, len(starts))
    for p, start in sorted(starts.items()):
        offset, end = start, ends[p] if p < len(ends) else start
        for _ in range(end - start + 1):  # one record per Fetch at worst
            if offset >= end:
                break
            try:
                _, raw = await client.fetch(stream, p, offset, max_bytes=READ_MAX_BYTES, max_wait=0)
            except OffsetOutOfRange as exc:  # retention moved the start meanwhile
                offset = max(offset, exc.log_start or offset)
                continue
            record: Record | None = None
            for record in iter_records(raw):
                if record.offset >= end:
                    break
                ident = identity(bytes(record.value), record.headers)
                ok = ident is not None and ident.run_tag == run_tag
                out.append((ident.publisher, ident.seq) if ok and ident is not None else None)
                offset = record.offset + 1
            if record is None:
                break
    return out
