"""A raw NATS publisher for hostile-input tests: protocol lines written by hand on a socket,
so a test can send what no client library would (malformed header blocks, oversized PUBs)."""

from __future__ import annotations

from collections.abc import Iterable

import anyio

ANSWER_S = 10.0
"""The server's PONG after the frames, within this."""


def pub(subject: str, payload: bytes) -> bytes:
    """One PUB frame (no reply subject)."""
    return f"PUB {subject} {len(payload)}\r\n".encode() + payload + b"\r\n"


def hpub(subject: str, block: bytes, payload: bytes) -> bytes:
    """One HPUB frame carrying the header ``block`` as given, well-formed or not."""
    head = f"HPUB {subject} {len(block)} {len(block) + len(payload)}\r\n".encode()
    return head + block + payload + b"\r\n"


async def send_frames(url: str, frames: Iterable[bytes]) -> None:
    """CONNECT (headers on), the frames in one write, then PING; returns at the PONG.

    Raises:
        AssertionError: the NATS server answered -ERR (it refused a frame itself).
        TimeoutError: no PONG within ``ANSWER_S``.
    """
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    async with await anyio.connect_tcp(host, int(port)) as sock:
        await sock.receive()  # INFO
        out = [b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n', *frames]
        out.append(b"PING\r\n")
        await sock.send(b"".join(out))
        with anyio.fail_after(ANSWER_S):
            got = b""
            while b"PONG" not in got:
                got += await sock.receive()
        assert b"-ERR" not in got, got
