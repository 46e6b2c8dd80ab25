"""NATS header blocks: which are well formed, and nats-py's map of one (never raising).

A well-formed block (what every NATS client library sends, and the server's own status
messages) is::

    NATS/1.0[ <status>[ <description>]]\\r\\n(<name>: <value>\\r\\n)*\\r\\n

:func:`header_block_ok` checks the frame only: the ``NATS/1.0`` version line and the
closing blank line. Lines inside are read leniently by
:func:`jetsdk.codec.nats_headers.parse_header_block` (a line without a colon is skipped),
as spec/envelope.md ("What is stored") says. A block that fails the check is
*malformed*; what the server does with its message is in spec/envelope.md ("Malformed
header blocks").
"""

from __future__ import annotations

from jetsdk.codec.nats_headers import parse_header_block

VERSION_LINE = b"NATS/1.0"
"""The first bytes of every header block."""
_END = b"\r\n\r\n"
_AFTER_VERSION = (b"\r", b" ")
STATUS_HEADER = "Status"
"""nats-py's map key for an inline status (``NATS/1.0 503``)."""
DESCRIPTION_HEADER = "Description"
"""nats-py's map key for the text after an inline status."""


def header_block_ok(block: bytes) -> bool:
    """True if ``block`` is a well-formed NATS header block (see the module docstring)."""
    return (
        block.startswith(VERSION_LINE)
        and block[8:9] in _AFTER_VERSION
        and block.endswith(_END)
        and len(block) >= len(VERSION_LINE) + len(_END)
    )


def header_map(
    block: bytes, lines: tuple[tuple[str, bytes], ...] | None = None
) -> dict[str, str] | None:
    """The header map nats-py's client gives a message (its ``Msg.headers``): the inline
    status and description if any, then each line's name and value, stripped, the last
    value of a repeated name winning; None if empty. Never raises: a malformed block
    gives None, undecodable bytes are replaced. ``lines``: the block's
    :func:`~jetsdk.codec.nats_headers.parse_header_block`, if already known."""
    if not header_block_ok(block):
        return None
    out: dict[str, str] = {}
    first = block[: block.find(b"\r\n")]
    status_line = first[len(VERSION_LINE) :].strip()
    if status_line:
        status, _sep, description = status_line.partition(b" ")
        if status.isdigit():
            out[STATUS_HEADER] = status.decode()
        if description.strip():
            out[DESCRIPTION_HEADER] = description.strip().decode(errors="replace")
    for name, value in parse_header_block(block) if lines is None else lines:
        name = name.strip()
        if name:
            out[name] = value.decode(errors="replace").strip()
    return out or None
