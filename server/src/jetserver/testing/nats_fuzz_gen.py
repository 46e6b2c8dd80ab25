"""Random NATS publishes for the ingest fuzzer (:mod:`jetserver.testing.nats_fuzz`), pure.

:class:`MessageMaker` draws, from a seeded :class:`random.Random`, one publisher's
messages as the raw bytes a NATS client writes (``PUB`` / ``HPUB``: odd but valid
spacing and case, header blocks well-formed, odd, huge or malformed, payload sizes from
empty to hundreds of KiB, with and without a reply subject), each with what a jet stream
must store for it (spec/envelope.md): the payload, and the header lines of a well-formed
block or none for a malformed one. Every payload starts with ``fz<publisher>.<seq>|``, so a
stored record names the message it came from.
"""

from __future__ import annotations

import random

import attrs

from jetsdk.codec.limits import MAX_HEADER_COUNT, MAX_HEADER_NAME_BYTES
from jetsdk.codec.nats_headers import parse_header_block
from jetserver.natsproto import header_block_ok

MAX_FUZZ_PAYLOAD = 256 * 1024
"""The largest payload drawn (nats-server's default max_payload is 1 MiB)."""
NOISE_SHARE = 0.12
"""Share of messages to subjects no stream listens on."""
HEADERED_SHARE = 0.5
"""Share of messages sent with ``HPUB``."""
REPLY_SHARE = 0.1
"""Share of messages with a reply subject (jet acks them there; nobody listens)."""

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
"""A stream's max_message_bytes when created without one (spec/protocol.md)."""
_TOKEN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
_ODD_LINES = (
    b"no colon here",
    b": no name",
    b"X-Empty:",
    b"\xff\xfe: raw name",
    b"X-Spaces:    many",
    b"X-Colon: a:b:c",
)
_FIRST_LINES = (b"NATS/1.0", b"NATS/1.0 503", b"NATS/1.0 100 Idle Heartbeat", b"NATS/1.0 x")


@attrs.frozen
class FuzzMessage:
    """One drawn publish and what must be stored for it."""

    publisher: int
    """Which publisher sent it."""
    seq: int
    """Its number among that publisher's messages (from 0)."""
    stream: int
    """Index of the stream whose subject it was sent to, -1 for a noise subject."""
    wire: bytes
    """The exact bytes written to nats-server."""
    value: bytes
    """The payload: the stored record's value."""
    headers: tuple[tuple[str, bytes], ...]
    """The stored record's headers."""
    kind: str
    """``pub``, ``hpub`` (well-formed block), ``hpub-odd`` (well-formed, unusual) or
    ``hpub-malformed``."""
    stored: bool = True
    """False if a stream must refuse it: headers over the record limits (spec/README.md,
    "Limits": MAX_HEADER_COUNT, MAX_HEADER_NAME_BYTES) or over the default
    max_message_bytes (spec/envelope.md)."""


def payload_id(value: bytes) -> tuple[int, int] | None:
    """``(publisher, seq)`` of a fuzzer payload, None if it is not one."""
    if not value.startswith(b"fz"):
        return None
    bar = value.find(b"|", 2, 40)
    if bar < 0:
        return None
    publisher, _dot, seq = value[2:bar].partition(b".")
    if not (publisher.isdigit() and seq.isdigit()):
        return None
    return int(publisher), int(seq)


@attrs.define(eq=False)
class MessageMaker:
    """Draws one publisher's messages (not thread-safe: one per publisher)."""

    publisher: int
    """This publisher's number."""
    subjects: list[str]
    """The streams' subjects (index = stream index)."""
    rng: random.Random
    """The seeded source of every choice."""
    seq: int = 0
    """The next message's number."""

    def next(self) -> FuzzMessage:
        """The next message."""
        rng = self.rng
        seq = self.seq
        self.seq += 1
        if rng.random() < NOISE_SHARE:
            stream = -1
            subject = f"fz.noise.{rng.randrange(50)}"
        else:
            stream = rng.randrange(len(self.subjects))
            subject = self.subjects[stream]
        reply = f"fz.reply.{self.publisher}.{seq}" if rng.random() < REPLY_SHARE else ""
        value = b"fz%d.%d|" % (self.publisher, seq) + rng.randbytes(self._size())
        if rng.random() >= HEADERED_SHARE:
            return FuzzMessage(
                self.publisher, seq, stream, self._pub(subject, reply, value), value, (), "pub"
            )
        block, kind = self._block()
        ok = header_block_ok(block)
        headers = parse_header_block(block) if ok else ()
        wire = self._hpub(subject, reply, block, value)
        size = len(value) + sum(len(n) + len(v) for n, v in headers)
        stored = (
            len(headers) <= MAX_HEADER_COUNT
            and all(len(n.encode()) <= MAX_HEADER_NAME_BYTES for n, _v in headers)
            and size <= DEFAULT_MAX_MESSAGE_BYTES
        )
        return FuzzMessage(self.publisher, seq, stream, wire, value, headers, kind, stored)

    def _size(self) -> int:
        roll = self.rng.random()
        if roll < 0.70:
            return self.rng.randrange(0, 64)
        if roll < 0.95:
            return self.rng.randrange(64, 2048)
        if roll < 0.998:
            return self.rng.randrange(2048, 64 * 1024)
        return self.rng.randrange(64 * 1024, MAX_FUZZ_PAYLOAD)

    def _sep(self) -> bytes:
        """The space between protocol arguments (sometimes more than one, or a tab)."""
        return self.rng.choice((b" ",) * 12 + (b"  ", b"\t", b" \t "))

    def _op(self, name: bytes) -> bytes:
        return name.lower() if self.rng.random() < 0.05 else name

    def _pub(self, subject: str, reply: str, value: bytes) -> bytes:
        s = self._sep
        args = [subject.encode()] + ([reply.encode()] if reply else [])
        line = self._op(b"PUB") + s() + b"".join(a + s() for a in args) + b"%d" % len(value)
        return line + b"\r\n" + value + b"\r\n"

    def _hpub(self, subject: str, reply: str, block: bytes, value: bytes) -> bytes:
        s = self._sep
        args = [subject.encode()] + ([reply.encode()] if reply else [])
        sizes = b"%d%b%d" % (len(block), s(), len(block) + len(value))
        line = self._op(b"HPUB") + s() + b"".join(a + s() for a in args) + sizes
        return line + b"\r\n" + block + value + b"\r\n"

    def _name(self) -> bytes:
        rng = self.rng
        return b"X-" + "".join(rng.choice(_TOKEN) for _ in range(rng.randrange(1, 12))).encode()

    def _value(self) -> bytes:
        raw = self.rng.randbytes(self.rng.randrange(0, 40))
        return raw.replace(b"\r", b"").replace(b"\n", b"")

    def _lines(self, count: int) -> list[bytes]:
        rng = self.rng
        names = [self._name() for _ in range(max(1, count // 3 + 1))]
        return [
            rng.choice(names) + b":" + rng.choice((b" ", b"", b"  ")) + self._value()
            for _ in range(count)
        ]

    def _block(self) -> tuple[bytes, str]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.45:
            return _block(b"NATS/1.0", self._lines(rng.randrange(0, 7))), "hpub"
        if roll < 0.62:
            odd = [*self._lines(rng.randrange(0, 4)), rng.choice(_ODD_LINES)]
            rng.shuffle(odd)
            first = rng.choice(_FIRST_LINES)
            return _block(first, odd), "hpub-odd"
        if roll < 0.66:
            lines = self._lines(rng.randrange(100, 1500))
            return b"NATS/1.0\r\n" + b"".join(
                line + b"\r\n" for line in lines
            ) + b"\r\n", "hpub-odd"
        good = _block(b"NATS/1.0", self._lines(2))
        block = rng.choice(
            (
                b"NATS/1.0",
                b"N",
                b"",
                b"NATS/1.0\r\n",
                b"NATS/1.1\r\n\r\n",
                b"NATS/1.0X\r\n\r\n",
                b"nats/1.0\r\n\r\n",
                good[:-2],
                good[: rng.randrange(1, len(good))],
                rng.randbytes(rng.randrange(1, 300)),
                b"X-Only: lines\r\n\r\n",
            )
        )
        return block, "hpub-malformed" if not header_block_ok(block) else "hpub-odd"


def _block(first: bytes, lines: list[bytes]) -> bytes:
    return first + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"
