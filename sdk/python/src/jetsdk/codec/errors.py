"""The codec layer's one exception type.

Every decoder in :mod:`jetsdk.codec` raises :class:`CodecError` (and nothing else) on bad
input: truncated bytes, a bad CRC, a length over a named limit, an unknown version.
Callers at an I/O boundary convert it to a protocol error for the peer.
"""

from __future__ import annotations


class CodecError(ValueError):
    """Bytes that do not decode under the spec.

    Attributes:
        reason: a short machine-friendly tag (``"truncated"``, ``"crc"``, ``"limit"``,
            ``"version"``, ``"malformed"``).
    """

    def __init__(self, message: str, *, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason
