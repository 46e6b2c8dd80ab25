"""The consumed partitions' records, for one share-group member (spec/share-groups.md §5).

:class:`ShareRecords` watches each consumed partition's high watermark with a one-byte
long-poll Fetch (the high watermarks size the member's claims at SPEO), loads the records of
a lease once it is won (one Fetch of the range, usually), and gives a record out when its
message is handed to the application. Members do not all read and decode everything.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import anyio
import anyio.abc
import attrs

from jetsdk.client import Client
from jetsdk.codec.compression import plain_records
from jetsdk.codec.fetch_messages import FetchResponseHeader
from jetsdk.codec.record import Record, iter_records, peek_header
from jetsdk.errors import JetError, OffsetOutOfRange
from jetsdk.retry import RetryPolicy

__all__ = ["FETCH_MAX_BYTES", "POLL_BACKOFF", "Key", "ShareRecords", "poll_fetch"]

FETCH_MAX_BYTES = 1 << 20
LOAD_MAX_BYTES = 4 << 20
"""Most bytes one Fetch of a won lease's records asks for."""
LOAD_MIN_BYTES = 16 << 10
"""Fewest bytes one Fetch of a won lease's records asks for."""
SIZE_SAMPLE = 8
"""One load in this many measures its records' size (a walk over their headers)."""
POLL_BACKOFF = RetryPolicy(attempts=1_000_000, backoff=0.05, backoff_max=1.0)
"""The pauses of a share member's long polls (the share log, the consumed partitions) after
retriable errors: they run for the member's life, so they outlast any failover."""

Key = tuple[str, int]
"""(stream, partition)."""


async def poll_fetch(
    client: Client, key: Key, offset: int, *, max_bytes: int, max_wait: float
) -> tuple[FetchResponseHeader, memoryview]:
    """``client.fetch`` until it answers: a retriable error is tried again after a pause of
    :data:`POLL_BACKOFF` (growing with the failures in a row, up to 1 s).

    Raises:
        OffsetOutOfRange: the caller moves its position.
        JetError: an error that is not retriable (or :data:`POLL_BACKOFF`'s attempts spent).
    """
    stream, partition = key
    for failures in range(1, POLL_BACKOFF.attempts):
        try:
            return await client.fetch(
                stream, partition, offset, max_bytes=max_bytes, max_wait=max_wait
            )
        except OffsetOutOfRange:
            raise
        except JetError as exc:
            if not exc.retriable:
                raise
            await anyio.sleep(POLL_BACKOFF.delay(failures))
    return await client.fetch(stream, partition, offset, max_bytes=max_bytes, max_wait=max_wait)


def _span(raw: memoryview, count: int) -> int:
    """Bytes the first ``count`` (whole) records of ``raw`` take."""
    pos = 0
    for _ in range(count):
        pos += peek_header(raw, pos)[3]
    return pos


@attrs.define(eq=False)
class ShareRecords:
    """High watermarks and a cache of leased records (see the module docstring)."""

    client: Client
    keys: tuple[Key, ...]
    hws: dict[Key, int] = attrs.field(factory=dict)
    _cache: dict[Key, dict[int, Record]] = attrs.field(init=False)
    _loading: dict[tuple[str, int, int], anyio.Event] = attrs.field(factory=dict, init=False)
    record_bytes: float = attrs.field(default=512.0, init=False)
    """Bytes per record in the loads so far (a moving average of every
    :data:`SIZE_SAMPLE`-th load): a lease's Fetch asks for about what its records take, not
    many times more."""
    _loads: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self._cache = {k: {} for k in self.keys}

    async def watch(self, key: Key, speo: Callable[[], int], changed: Callable[[], None]) -> None:
        """Long-poll ``key``'s high watermark from its SPEO forever; ``changed()`` when it
        moves."""
        pos = 0
        while True:
            pos = max(pos, speo(), self.hws.get(key, 0))
            try:
                header, _raw = await poll_fetch(self.client, key, pos, max_bytes=1, max_wait=0.5)
            except OffsetOutOfRange as exc:
                pos = exc.log_start if exc.log_start is not None and pos < exc.log_start else 0
                self.hws.pop(key, None)
                await anyio.sleep(0.05)
                continue
            if header.hw != self.hws.get(key):
                self.hws[key] = header.hw
                changed()

    def load_soon(self, tg: anyio.abc.TaskGroup, key: Key, start: int, end: int) -> None:
        """Start loading ``[start, end)`` of ``key`` (a lease just won) into the cache."""
        loading = (key[0], key[1], start)
        if loading not in self._loading:
            self._loading[loading] = anyio.Event()
            tg.start_soon(self._load, key, start, end)

    async def _load(self, key: Key, start: int, end: int) -> None:
        stream, partition = key
        done = self._loading[(stream, partition, start)]
        cache = self._cache[key]
        offset = start
        try:
            for _ in range(end - start):
                if offset >= end:
                    break
                want = math.ceil((end - offset) * self.record_bytes * 1.25)
                size = min(LOAD_MAX_BYTES, max(LOAD_MIN_BYTES, want))
                _, raw = await self.client.fetch(
                    stream, partition, offset, max_bytes=size, max_wait=0.0
                )
                last = offset
                for r in plain_records(list(iter_records(raw))):
                    if r.offset >= end:
                        break
                    cache[r.offset] = r
                    last = r.offset + 1
                if last == offset:
                    break
                count = last - offset
                self._loads += 1
                if count >= 16 and self._loads % SIZE_SAMPLE == 1:  # for the next loads
                    seen = _span(raw, count) / count
                    first = self._loads == 1  # the default is a guess: replace it
                    self.record_bytes = seen if first else 0.5 * self.record_bytes + 0.5 * seen
                offset = last
        except JetError:
            pass  # record() fetches what is missing when it is handed out
        finally:
            del self._loading[(stream, partition, start)]
            done.set()

    def cached(self, key: Key, offset: int) -> Record | None:
        """The record at ``offset`` if it is loaded (taken out of the cache), else None:
        the usual case, without :meth:`record`'s await."""
        return self._cache[key].pop(offset, None)

    async def record(self, key: Key, offset: int) -> Record | None:
        """The record at ``offset`` (taken out of the cache), or None if it is gone."""
        stream, partition = key
        cache = self._cache[key]
        record = cache.pop(offset, None)
        if record is not None:
            return record
        for (s, p, start), loading in list(self._loading.items()):
            if s == stream and p == partition and start <= offset:
                await loading.wait()
        record = cache.pop(offset, None)
        if record is not None:
            return record
        try:
            _, raw = await self.client.fetch(
                stream, partition, offset, max_bytes=64 * 1024, max_wait=0.0
            )
        except OffsetOutOfRange:
            return None
        for r in plain_records(list(iter_records(raw))):
            if r.offset == offset:
                return r
        return None
