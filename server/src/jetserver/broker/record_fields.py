"""Per-subject caches of the record-body bytes that surround a message's value.

The sequencer builds a record body (spec/storage.md "Record") for every message; for the
common shapes it keeps the bytes that depend only on the subject:

- a plain message with no key, reply or headers: everything before the value;
- an enveloped message without a reply: the subject and reply fields.

Both caches are bounded (cleared when full). Task safety: one partition's sequencer only.
"""

from __future__ import annotations

import struct

import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_SUBJECT_BYTES
from jetsdk.codec.transcode import record_subjects

_U16 = struct.Struct(">H")
_NO_PRODUCER_NO_KEY = b"\x00\xff\xff\xff\xff"
"""Record body start: attributes 0, key length -1."""
_EMPTY_REPLY_NO_HEADERS = b"\x00\x00\x00\x00"
"""Record body: reply length 0, header count 0."""
MAX_CACHED_SUBJECTS = 10_000
"""Entries per cache before it is cleared."""


@attrs.define(eq=False)
class RecordFields:
    """The two caches of one partition."""

    plain_prefix: dict[str, bytes] = attrs.field(factory=dict)
    """Subject -> body bytes before the value's length of a plain message (empty: the
    subject is too long; the general path reports it)."""
    _subject_fields: dict[str, bytes] = attrs.field(factory=dict)

    def new_plain_prefix(self, subject: str) -> bytes:
        """Record body bytes before the value's length of a plain message on ``subject``
        (no key, no reply, no headers), cached. Empty if the subject is too long."""
        raw = subject.encode()
        if len(raw) > MAX_SUBJECT_BYTES:
            return b""
        prefix = b"".join((_NO_PRODUCER_NO_KEY, _U16.pack(len(raw)), raw, _EMPTY_REPLY_NO_HEADERS))
        if len(self.plain_prefix) >= MAX_CACHED_SUBJECTS:
            self.plain_prefix.clear()
        self.plain_prefix[subject] = prefix
        return prefix

    def subjects(self, subject: str, reply: str) -> bytes | None:
        """The subject and reply fields of a record body (cached for reply-less messages).
        None if a subject is over the record limit: the message then takes the plain path,
        whose encoder refuses it."""
        if not reply:
            cached = self._subject_fields.get(subject)
            if cached is not None:
                return cached
        try:
            raw = record_subjects(subject, reply)
        except CodecError:
            return None
        if not reply:
            if len(self._subject_fields) >= MAX_CACHED_SUBJECTS:
                self._subject_fields.clear()
            self._subject_fields[subject] = raw
        return raw
