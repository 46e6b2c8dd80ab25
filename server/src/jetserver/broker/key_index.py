"""Per-key last offsets of a compacted partition, for per-key compare-and-set
(spec/storage.md, "Key index"; spec/envelope.md, ``Jet-Expected-Key-Offset``).

The index maps each key whose last record is live (not a tombstone) to that record's
offset. It lives in memory on the partition leader only and is derived from the log, never
stored: it is (re)built by scanning the log from its start the first time a check needs it
in a leader epoch (so a new leader after a failover or a restart rebuilds it from its own
log), and then caught up from the log before each check, reading only the records appended
since the previous one; records the sequencer appends right after a caught-up index are
indexed from their bodies as they are appended (:meth:`KeyIndex.appended`), so a check
after one's own append reads nothing back. A tombstone removes its key: a deleted key and a
key never written are both absent (offset -1), on every replica, whether or not compaction
has removed the tombstone yet. A record with a ``Jet-TTL`` counts until its expiry, by this
server's wall clock, and as a tombstone from then on (spec/storage.md §11.2); a message in
the batch being appended is live (its TTL runs from its own timestamp, now).

Bounded: at most :data:`MAX_KEY_INDEX_KEYS` live keys. Past that a new key is not indexed
and the index is marked full; until the next rebuild a check on a key it does not hold
cannot be answered and is refused with INVALID_ARGUMENT (never a wrong answer).

Messages still in the batch being appended (not yet in the log) count too: a check scans
them (``pending`` bodies) after the log, so two messages of one batch for the same key
cannot both pass with the same expected offset.

Single writer: called from the partition's sequencer only. Pure apart from reading the log.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from jetsdk.codec.compression import COMPRESSION_HEADER
from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER, Record, decode_record, iter_records
from jetsdk.codec.ttl import expiry_ns
from jetserver.storage import Log
from jetserver.storage.clock import wall_ns
from jetserver.storage.framing import Body, whole_body

MAX_KEY_INDEX_KEYS = 1_000_000
"""Live keys indexed per partition (about 100 MB of memory with 32-byte keys)."""
SCAN_READ_BYTES = 1 << 20
"""Bytes read from the log per step of a rebuild or catch-up."""
SCAN_RECORDS_PER_CHECK = 50_000
"""Most records one check reads from the log (about 0.1 s of the sequencer on a quiet
core): a rebuild of a long log is spread over several checks, the sequencer (and the
server's event loop) never stalls on it."""
ABSENT = -1
"""The offset of a key with no live record."""
RECENT_VALUE_BYTES = 4 << 20
"""Bytes of the values the index keeps of the records it read last (:meth:`KeyIndex.recent_value`:
a refused compare-and-set's current value without reading the log again)."""
_COMPRESSION = COMPRESSION_HEADER.lower()

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_PLAIN_TAIL = struct.Struct(">HHI")
"""After the subject: reply length, header count, value length."""


class IndexFull(Exception):
    """The index is full and does not hold the key: its offset is unknown."""


class IndexBehind(Exception):
    """The index has not read the log up to its end yet (a rebuild in progress)."""

    def __init__(self, indexed: int, end: int) -> None:
        super().__init__(f"the key index is rebuilding: at offset {indexed} of {end}")
        self.indexed = indexed
        self.end = end


def _read_key(body: bytes) -> tuple[bytes | None, int, int]:
    """A record body's key (None: it has none), its length field and where the subject
    starts (spec/storage.md, "Record").

    Raises:
        struct.error, IndexError: the body is cut short.
    """
    p = 17 if body[0] & 1 else 1
    (klen,) = _I32.unpack_from(body, p)
    p += 4
    if klen < 0:
        return None, klen, p
    return body[p : p + klen], klen, p + klen


def scan_body(body: bytes) -> tuple[bytes | None, bool]:
    """``(key, is_tombstone)`` of a record body (spec/storage.md, "Record").

    Raises:
        CodecError: the body is malformed.
    """
    try:
        key, _klen, p = _read_key(body)
        for _ in range(2):  # subject, reply
            (n,) = _U16.unpack_from(body, p)
            p += 2 + n
        (count,) = _U16.unpack_from(body, p)
        p += 2
        for _ in range(count):
            (n,) = _U16.unpack_from(body, p)
            p += 2 + n
            (vlen,) = _U32.unpack_from(body, p)
            p += 4 + vlen
        (vlen,) = _U32.unpack_from(body, p)
    except (struct.error, IndexError) as exc:
        raise CodecError(f"malformed record body: {exc}") from None
    return key, key is not None and vlen == 0


@attrs.define(eq=False)
class KeyIndex:
    """Last live offset per key of one partition, derived from its log (module docstring)."""

    max_keys: int = MAX_KEY_INDEX_KEYS
    """Bound on live keys (:data:`MAX_KEY_INDEX_KEYS`)."""
    scan_budget: int = SCAN_RECORDS_PER_CHECK
    """Records one check may read (:data:`SCAN_RECORDS_PER_CHECK`)."""
    _offsets: dict[bytes, int] = attrs.field(factory=dict)
    _epoch: int = -1
    """The leader epoch the index was built in (-1: never built)."""
    _next: int = 0
    """The log is indexed up to (not including) this offset."""
    _cuts: int = 0
    """The fsync-failure cuts of the log the index was built after."""
    _full: bool = False
    _pending: list[bytes] | None = None
    """The batch whose bodies :attr:`_overlay` indexes (held, so its id stays unique)."""
    _pending_seen: int = 0
    _overlay: dict[bytes, int] = attrs.field(factory=dict)
    _expiries: dict[bytes, int] = attrs.field(factory=dict)
    """Expiry (ns, the record's timestamp + ``Jet-TTL``) of the indexed keys that have one."""
    rebuilds: int = 0
    """Full rebuilds from the log (a metric and a test hook)."""
    recent_bytes: int = RECENT_VALUE_BYTES
    """Bound on the bytes of :attr:`_recent` (:data:`RECENT_VALUE_BYTES`)."""
    _recent: dict[bytes, tuple[int, bytes]] = attrs.field(factory=dict)
    """Key -> (offset, value) of the live records read last, oldest first."""
    _recent_size: int = 0

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        """True once a live key was not indexed for lack of room (until the next rebuild)."""
        return self._full

    def offset_of(
        self, log_: Log, epoch: int, key: bytes, pending: list[bytes], cuts: int = 0
    ) -> int:
        """The offset of ``key``'s last live record (:data:`ABSENT` if none), counting
        the log up to its end and then ``pending`` (bodies to be appended at the log end,
        in order). ``cuts``: how often an fsync failure cut the log back so far (a new
        count rebuilds the index: records appended since may have refilled the offsets
        the cut freed, so the log end alone does not show it).

        Raises:
            IndexFull: the index is full and does not hold ``key``.
            IndexBehind: the log is longer than one check reads; ask again (each check
                reads :attr:`scan_budget` more records).
            CodecError, StorageError: the log cannot be read.
        """
        self._catch_up(log_, epoch, cuts)
        if pending is not self._pending:
            self._pending, self._pending_seen = pending, 0
            self._overlay.clear()
        base = log_.log_end_offset
        for i in range(self._pending_seen, len(pending)):
            k, tomb = scan_body(pending[i])
            if k is not None:
                self._overlay[k] = ABSENT if tomb else base + i
        self._pending_seen = len(pending)
        found = self._overlay.get(key)
        if found is not None:
            return found
        found = self._offsets.get(key)
        if found is not None:
            expires = self._expiries.get(key)
            if expires is None or expires > wall_ns():
                return found
            del self._offsets[key], self._expiries[key]  # expired: a tombstone (§11.2)
            return ABSENT
        if self._full:
            raise IndexFull
        return ABSENT

    def recent_value(self, key: bytes, offset: int) -> bytes | None:
        """The value of ``key``'s record at ``offset`` if the index read that record lately
        and still keeps it (bounded by :attr:`recent_bytes`); None otherwise (read the log).
        Never a value of another record: the offset must match."""
        found = self._recent.get(key)
        if found is None or found[0] != offset:
            return None
        return found[1]

    def _remember(self, key: bytes, offset: int, value: bytes | None) -> None:
        recent = self._recent
        old = recent.pop(key, None)
        if old is not None:
            self._recent_size -= len(old[1])
        if value is None or len(value) > self.recent_bytes:
            return
        recent[key] = (offset, value)
        self._recent_size += len(value)
        while self._recent_size > self.recent_bytes:
            _k, (_o, dropped) = next(iter(recent.items()))
            del recent[_k]
            self._recent_size -= len(dropped)

    def appended(
        self, epoch: int, cuts: int, first: int, timestamp: int, bodies: Sequence[Body]
    ) -> None:
        """The leader of epoch ``epoch`` (after ``cuts`` fsync-failure cuts) appended
        ``bodies`` at offset ``first``, each stamped ``timestamp``. If the index had read the
        log up to exactly ``first`` in that epoch, it indexes them from the bodies (no read
        of the log at the next check); otherwise it leaves them to the next check's
        catch-up (never built, behind, or another epoch: nothing changes).

        Raises:
            CodecError: a body is malformed (the index then reads the log at the next
                check).
        """
        if epoch != self._epoch or cuts != self._cuts or first != self._next:
            return
        for i, part in enumerate(bodies):
            body = whole_body(part)
            offset = first + i
            plain = _plain_fields(body)
            if plain is None:  # headers (a TTL, compression?), a reply: decoded whole
                framed = HEADER.pack(offset, timestamp, epoch, len(body), 0) + body
                record, _end = decode_record(framed, verify=False)
                self._index(record)
            else:
                key, value = plain
                if key is not None:
                    self._set(key, offset, value, value, None)
            self._next = offset + 1

    def _catch_up(self, log_: Log, epoch: int, cuts: int) -> None:
        leo = log_.log_end_offset
        if epoch != self._epoch or cuts != self._cuts or leo < self._next:
            self._cuts = cuts
            self._offsets.clear()
            self._expiries.clear()
            self._recent.clear()
            self._recent_size = 0
            self._full = False
            self._epoch = epoch
            self._next = log_.log_start_offset
            self._pending = None
            self.rebuilds += 1
        offset = max(self._next, log_.log_start_offset)
        budget = self.scan_budget
        while offset < leo:
            if budget <= 0:
                self._next = offset
                raise IndexBehind(offset, leo)
            with log_.read(offset, SCAN_READ_BYTES, leo) as records:
                data = records.read_bytes()
                nxt = records.next_offset
            for record in iter_records(data, verify=False):
                self._index(record)
                nxt = max(nxt, record.offset + 1)
                budget -= 1
            if nxt <= offset:
                break
            offset = nxt
        self._next = leo

    def _index(self, record: Record) -> None:
        key = record.key
        if key is None:
            return
        value = record.value
        if value and record.headers:
            compressed = any(n.lower() == _COMPRESSION for n, _v in record.headers)
            expires = expiry_ns(key, value, record.timestamp, record.headers)
            self._set(key, record.offset, value, None if compressed else value, expires)
        else:
            self._set(key, record.offset, value, value, None)

    def _set(
        self, key: bytes, offset: int, value: bytes, kept: bytes | None, expires: int | None
    ) -> None:
        """Index ``key``'s record at ``offset`` of ``value`` (empty: a tombstone),
        remembering ``kept`` as its value (None: not, e.g. compressed), expiring at
        ``expires`` (ns; None: never)."""
        if not value:
            self._offsets.pop(key, None)
            self._expiries.pop(key, None)
            self._remember(key, offset, None)
        elif key in self._offsets or len(self._offsets) < self.max_keys:
            self._offsets[key] = offset
            self._remember(key, offset, kept)
            if expires is None:
                self._expiries.pop(key, None)
            else:
                self._expiries[key] = expires
        else:
            self._full = True


def _plain_fields(body: bytes) -> tuple[bytes | None, bytes] | None:
    """``(key, value)`` of a record body with no reply and no headers (spec/storage.md,
    "Record"; the key None if it has none, the value empty for a tombstone), or None if it
    has either or does not parse so (:func:`decode_record` then decides): the common body
    a compare-and-set appends, indexed without a :class:`Record` made for it."""
    try:
        key, klen, p = _read_key(body)
        (slen,) = _U16.unpack_from(body, p)
        p += 2 + slen
        reply, count, vlen = _PLAIN_TAIL.unpack_from(body, p)
    except (struct.error, IndexError):
        return None
    p += 8
    if reply or count or klen < -1 or p + vlen != len(body) or len(key or b"") != max(klen, 0):
        return None
    return key, body[p:]
