"""NATS header blocks as sent: every line kept, in order, repeats and case included.

A NATS message with headers (``HPUB`` / ``HMSG``) carries a block such as::

    NATS/1.0\\r\\nX-Multi: a\\r\\nX-Multi: b\\r\\nX-Id: 7\\r\\n\\r\\n

Client libraries usually read it into a map and lose repeats (nats-py keeps the last
value). A jet stream stores a plain message's headers as a list of (name, value) pairs
(spec/envelope.md, "What is stored"); :func:`parse_header_block` gives that list: the
name as sent (case kept; decoded as UTF-8, undecodable bytes replaced), the value's bytes
after the colon and one optional space, exactly (non-UTF-8 bytes kept). The first line
(``NATS/1.0`` with an optional inline status) is not a header. A line without a colon is
skipped. Vectors: spec/vectors/envelope.json, ``nats_header_blocks``.
"""

from __future__ import annotations

_CRLF = b"\r\n"


def parse_header_block(block: bytes) -> tuple[tuple[str, bytes], ...]:
    """The header lines of a NATS header block, in order (see the module docstring)."""
    lines = block.split(_CRLF)
    out: list[tuple[str, bytes]] = []
    for line in lines[1:]:
        if not line:
            continue
        colon = line.find(b":")
        if colon <= 0:
            continue
        value = line[colon + 1 :]
        if value[:1] == b" ":
            value = value[1:]
        out.append((line[:colon].decode(errors="replace"), value))
    return tuple(out)
