"""Which streams a NATS subject reaches (spec/security.md §3): the streams a Produce's
messages will be stored in, so that the Produce is authorized against every one of them.

A Produce publishes each message on NATS (or stores it directly and publishes a copy), and
every stream with a partition subject matching the message subject stores it. Internal
streams take no NATS messages (spec/security.md §2), so they are never reached this way.

The answer per subject is cached; the cache is emptied when the metadata's stream map
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


@attrs.define(eq=False)
class StreamReach:
    """Streams reached by a subject, from the current metadata (cached)."""

    streams: Callable[[], Mapping[str, StreamMeta]]
    """The current streams (replicated metadata)."""
    _source: Mapping[str, StreamMeta] | None = None
    _cache: dict[str, tuple[str, ...]] = attrs.field(factory=dict)

    def _current(self) -> Mapping[str, StreamMeta]:
        current = self.streams()
        if current is not self._source:
            self._source = current
            self._cache.clear()
        return current

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

    def partition_subject(self, stream: str, partition: int) -> str | None:
        """The subject ``stream``/``partition`` listens on (None: no such partition)."""
        meta = self._current().get(stream)
        if meta is None or not 0 <= partition < meta.spec.partitions:
            return None
        return partition_subject(meta.spec.subject, partition)

    def partitions(self, stream: str) -> int | None:
        """``stream``'s partition count (None: no such stream)."""
        meta = self._current().get(stream)
        return None if meta is None else meta.spec.partitions
