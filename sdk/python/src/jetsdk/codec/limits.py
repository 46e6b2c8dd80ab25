"""Named size limits of the wire and disk formats (spec/README.md, "Limits").

These are hard limits of the encoding; servers may configure lower ones (for example a
smaller maximum message size) but never higher.
"""

from __future__ import annotations

MAX_KEY_BYTES = 64 * 1024
"""Largest key, in bytes."""

MAX_SUBJECT_BYTES = 4096
"""Largest NATS subject or reply subject, UTF-8 encoded."""

MAX_HEADER_COUNT = 1024
"""Most headers on one record or envelope."""

MAX_HEADER_NAME_BYTES = 1024
"""Largest header name, UTF-8 encoded."""

MAX_VALUE_BYTES = 64 * 1024 * 1024
"""Largest value the encoding admits (servers default to a much smaller message limit)."""

MAX_FRAME_BYTES = 128 * 1024 * 1024
"""Largest client-protocol frame the encoding admits (length prefix excluded)."""

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Default frame limit a server or client enforces; a bigger length prefix is refused
before any body byte is read."""

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
"""Default largest message (value plus key plus headers) a server stores."""

ENVELOPE_ALLOWANCE_BYTES = 64 * 1024
"""Room a message needs in a NATS payload above its own size (envelope and NATS headers):
a stream's ``max_message_bytes`` may be at most NATS's ``max_payload`` minus this."""

MAX_CORRELATION_ID_BYTES = 1024
"""Largest envelope/ack correlation id, UTF-8 encoded."""

MAX_ERROR_MESSAGE_BYTES = 4096
"""Largest ack error message, UTF-8 encoded."""

MAX_STREAM_NAME_BYTES = 255
"""Largest stream name (names are 1-255 characters of [A-Za-z0-9_.-], spec/protocol.md)."""

MAX_ACKS_PER_BATCH = 0xFFFF
"""Most acks in one kind 2 envelope (the count is a u16)."""
