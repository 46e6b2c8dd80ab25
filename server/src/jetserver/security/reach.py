"""Which streams a NATS subject reaches (spec/security.md §3): the streams a Produce's
messages will be stored in, so that the Produce is authorized against every one of them.

A Produce publishes each message on NATS (or stores it directly and publishes a copy), and
every stream with a partition subject matching the message subject stores it. Internal
streams take no NATS messages (spec/security.md §2), so they are never reached this way.

The gate first asks :meth:`StreamReach.neighbours`: the streams whose subjects overlap the
target partition's subject at all. Usually there are none, or the identity may publish on
all of them, and the request's subjects need not be read. Otherwise it reads the distinct
message subjects and asks :meth:`StreamReach.reached` for each.

Both answers are cached; the caches is emptied when the metadata's stream map
changes (it is immutable: a new map on every change) and when it reaches
:data:`MAX_CACHED_SUBJECTS`. A hit costs one dict lookup; a miss one subject match per
stream (partition subjects are checked by their last token, not one by one).

Task safety: one event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from jetserver.metadata.model import StreamMeta, StreamSpec
from jetserver.metadata.validate import partition_subject, subject_matches

MAX_CACHED_SUBJECTS = 4096
"""Most subjects whose reach is remembered (the cache starts over beyond)."""


def listens_on(spec: StreamSpec, subject: str) -> bool:
    """True if a partition of stream ``spec`` subscribes to literal ``subject``
    (partition 0 on the stream subject, partition p > 0 on ``<subject>.<p>``)."""
    if subject_matches(spec.subject, subject):
        return True
    if spec.partitions == 1:
        return False
    head, _, last = subject.rpartition(".")
    if not head or not last.isdigit() or last != str(int(last)):
        return False
    p = int(last)
    return 0 < p < spec.partitions and subject_matches(spec.subject, head)


def subjects_overlap(a: str, b: str) -> bool:
    """True if some literal subject is matched by both patterns ``a`` and ``b``."""
    at, bt = a.split("."), b.split(".")
    for i, x in enumerate(at):
        if x == ">":
            return len(bt) > i
        if i >= len(bt):
            return False
        y = bt[i]
        if y == ">":
            return True
        if x != y and x != "*" and y != "*":
            return False
    return len(at) == len(bt)


def may_listen(spec: StreamSpec, pattern: str) -> bool:
    """True if a partition of ``spec`` may subscribe to a subject ``pattern`` matches
    (conservative: partitions p > 0 are taken as ``<subject>.*``)."""
    if subjects_overlap(spec.subject, pattern):
        return True
    return spec.partitions > 1 and subjects_overlap(spec.subject + ".*", pattern)


@attrs.define(eq=False)
class StreamReach:
    """Streams reached by a subject, from the current metadata (cached)."""

    streams: Callable[[], Mapping[str, StreamMeta]]
    """The current streams (replicated metadata)."""
    _source: Mapping[str, StreamMeta] | None = None
    _cache: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    _overlaps: dict[tuple[str, int], tuple[str, ...] | None] = attrs.field(factory=dict)

    def _current(self) -> Mapping[str, StreamMeta]:
        current = self.streams()
        if current is not self._source:
            self._source = current
            self._cache.clear()
            self._overlaps.clear()
        return current

    def neighbours(self, stream: str, partition: int) -> tuple[str, ...] | None:
        """``(partition subject, *other user streams)`` where the others are every stream
        that may store a message published on a subject of ``stream``/``partition`` (a
        superset of what :meth:`reached` finds for each such subject). None: no such
        partition. Cached like :meth:`reached`."""
        current = self._current()
        key = (stream, partition)
        if key in self._overlaps:
            return self._overlaps[key]
        meta = current.get(stream)
        found: tuple[str, ...] | None = None
        if meta is not None and 0 <= partition < meta.spec.partitions:
            psubj = partition_subject(meta.spec.subject, partition)
            others = sorted(
                name
                for name, other in current.items()
                if name != stream and not other.spec.internal and may_listen(other.spec, psubj)
            )
            found = (psubj, *others)
        if len(self._overlaps) >= MAX_CACHED_SUBJECTS:
            self._overlaps.clear()
        self._overlaps[key] = found
        return found

    def reached(self, subject: str) -> tuple[str, ...]:
        """Names of the user streams that store a message published on ``subject``."""
        current = self._current()
        hit = self._cache.get(subject)
        if hit is None:
            hit = tuple(
                sorted(
                    name
                    for name, meta in current.items()
                    if not meta.spec.internal and listens_on(meta.spec, subject)
                )
            )
            if len(self._cache) >= MAX_CACHED_SUBJECTS:
                self._cache.clear()
            self._cache[subject] = hit
        return hit

    def partitions(self, stream: str) -> int | None:
        """``stream``'s partition count (None: no such stream)."""
        meta = self._current().get(stream)
        return None if meta is None else meta.spec.partitions
