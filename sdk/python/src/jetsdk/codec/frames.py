"""Client protocol framing (spec/protocol.md, "Frame"), sans-I/O in the style of h11.

Layout (big-endian)::

    length          uint32   bytes after this field: 6 + len(body)
    api             uint8    API key (:class:`Api`); a response repeats the request's key
    flags           uint8    bit 0 response, bit 1 error (JSON error body), bit 2 more
                             responses follow (FetchStream); other bits 0
    correlation_id  uint32   chosen by the requester, echoed in the response
    body            length - 6 bytes

Sending: ``sock.sendall(encode_frame(api, cid, body))``. Receiving::

    decoder = FrameDecoder()
    while data := sock.recv(65536):
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            handle(frame)

This module is pure: no I/O. The decoder raises only :class:`CodecError` (or its subclass
:class:`FrameTooLarge`).
"""

from __future__ import annotations

import ctypes
import enum
import struct
from collections import deque
from collections.abc import Callable

import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FLAG_ERROR",
    "FLAG_MORE",
    "FLAG_RESPONSE",
    "FRAME_HEADER_SIZE",
    "MIN_FRAME_LENGTH",
    "Api",
    "Frame",
    "FrameDecoder",
    "FrameTooLarge",
    "encode_frame",
    "encode_frame_header",
    "new_body_buffer",
]


class Api(enum.IntEnum):
    """API keys of the client protocol."""

    HELLO = 0
    METADATA = 1
    CREATE_STREAM = 2
    DELETE_STREAM = 3
    DESCRIBE_STREAM = 4
    LIST_OFFSETS = 5
    PRODUCE = 6
    FETCH = 7
    OFFSET_FOR_LEADER_EPOCH = 8
    REPORT_LEADER = 9
    AUTHENTICATE = 10
    SET_ACL = 11
    LIST_ACLS = 12
    REPLICA_FETCH = 13
    REBALANCE_LEADERS = 14
    PURGE_STREAM = 15
    UPDATE_STREAM = 16
    PRODUCE_MANY = 17
    FETCH_STREAM = 18
    CANCEL_FETCH_STREAM = 19
    FETCH_STREAM_CREDIT = 20


FLAG_RESPONSE = 0x01
"""Set on every response frame."""
FLAG_ERROR = 0x02
"""Set (together with FLAG_RESPONSE) on an error response; the body is a JSON error object."""
FLAG_MORE = 0x04
"""Set (together with FLAG_RESPONSE, never with FLAG_ERROR) on a response that more
responses to the same request follow: every FetchStream response but the last."""
VALID_FLAGS = frozenset({0, FLAG_RESPONSE, FLAG_RESPONSE | FLAG_ERROR, FLAG_RESPONSE | FLAG_MORE})
"""The flag values a frame may carry (spec/protocol.md, "Frame"): request, response, error
response, response with more to follow."""

_HEADER = struct.Struct(">IBBI")
FRAME_HEADER_SIZE = _HEADER.size  # 10
"""length u32 | api u8 | flags u8 | correlation_id u32."""
MIN_FRAME_LENGTH = FRAME_HEADER_SIZE - 4  # 6
"""Smallest valid value of the length field (a frame with an empty body)."""
_PREFIX = struct.Struct(">I")


def _uninitialized_bytearray() -> Callable[[None, int], bytearray] | None:
    """CPython's ``PyByteArray_FromStringAndSize(NULL, size)``: a bytearray whose bytes
    are not set (``bytearray(size)`` zero-fills it first, a pass over every byte that the
    body read in place then overwrites); None where the C API is not reachable."""
    try:
        proto = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t)
        new: Callable[[None, int], bytearray] = proto(
            ("PyByteArray_FromStringAndSize", ctypes.pythonapi)
        )
    except (AttributeError, OSError):  # pragma: no cover - not CPython
        return None
    return new


_NEW_BYTEARRAY = _uninitialized_bytearray()


def new_body_buffer(size: int) -> bytearray:
    """A bytearray of ``size`` bytes for a body read in place, not zero-filled where
    CPython lets us: its bytes are whatever the allocator had there until written, so it
    must be filled whole before anyone reads it (:class:`FrameDecoder` hands it out only
    then)."""
    if _NEW_BYTEARRAY is None or size <= 0:  # pragma: no cover - not CPython
        return bytearray(size)
    return _NEW_BYTEARRAY(None, size)


_FOREIGN_PREFIX_BYTES = 5
_FOREIGN_GREETINGS = (
    (
        b"INFO ",
        "the peer speaks the NATS protocol: this is a nats-server's client port, not a "
        "jet server's (jet dev prints each jet server's address; the SDK reads $JET_SERVERS)",
    ),
    (b"HTTP/", "the peer speaks HTTP (a console or metrics port?), not jet's protocol"),
    (b"SSH-", "the peer speaks SSH, not jet's protocol"),
)
"""First bytes of other protocols' greetings. Read as a length prefix they are far over any
frame limit, so they are recognised only then (no cost to a good frame)."""


def _foreign_protocol(prefix: bytes) -> str:
    """What a too-large length prefix says if it is another protocol's greeting, else ""."""
    for greeting, meaning in _FOREIGN_GREETINGS:
        if prefix.startswith(greeting[: len(prefix)]) and len(prefix) >= 4:
            return meaning
    return ""


class FrameTooLarge(CodecError):
    """A length prefix over the frame limit: refused before the body is read.

    Attributes:
        size: the length field that was received (bytes after the prefix).
        limit: the limit in force.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit}", reason="limit")
        self.size = size
        self.limit = limit


@attrs.frozen
class Frame:
    """One decoded frame."""

    api: int
    """API key (see :class:`Api`; unknown keys are kept so the server can answer them)."""
    flags: int
    """Flag bits (FLAG_RESPONSE, FLAG_ERROR)."""
    correlation_id: int
    """Requester-chosen id, echoed in the response."""
    body: bytes | bytearray
    """The body bytes (its encoding depends on the API)."""

    @property
    def is_response(self) -> bool:
        """True for a response frame."""
        return bool(self.flags & FLAG_RESPONSE)

    @property
    def is_error(self) -> bool:
        """True for an error response (JSON error body, see messages.decode_error)."""
        return bool(self.flags & FLAG_ERROR)

    @property
    def has_more(self) -> bool:
        """True for a response that more responses to the same request follow."""
        return bool(self.flags & FLAG_MORE)


def encode_frame_header(api: int, correlation_id: int, body_len: int, *, flags: int = 0) -> bytes:
    """The 10 header bytes of a frame whose body of ``body_len`` bytes is sent separately.

    Raises:
        CodecError: a field out of range, unknown flag bits, or the frame would exceed
            MAX_FRAME_BYTES (reason ``"limit"``).
    """
    length = body_len + MIN_FRAME_LENGTH
    if body_len < 0 or length > MAX_FRAME_BYTES:
        raise CodecError(f"frame body of {body_len} bytes exceeds MAX_FRAME_BYTES", reason="limit")
    if flags not in VALID_FLAGS:
        raise CodecError(f"invalid frame flags {flags:#x}", reason="limit")
    try:
        return _HEADER.pack(length, api, flags, correlation_id)
    except struct.error as exc:
        raise CodecError(f"frame header field out of range: {exc}", reason="limit") from None


def encode_frame(api: int, correlation_id: int, body: bytes, *, flags: int = 0) -> bytes:
    """A whole frame: header and body.

    Raises:
        CodecError: as :func:`encode_frame_header`.
    """
    return encode_frame_header(api, correlation_id, len(body), flags=flags) + body


FrameParts = tuple[int, int, int, bytes]
"""A frame's api, flags, correlation id and body (:meth:`FrameDecoder.whole_frame`)."""


class FrameDecoder:
    """Incremental frame decoder: :meth:`feed` bytes in, pull frames with :meth:`next_frame`.

    Memory is bounded by what the caller feeds between two drains: at most one incomplete
    frame (itself at most ``max_frame_bytes`` + 4 bytes, since an oversized prefix is refused
    as soon as its 4 bytes are in) plus the last chunk fed. Call :meth:`next_frame` until it
    returns None after every :meth:`feed`.

    The chunks fed are kept as they are (a ``bytes`` chunk is not copied; any other buffer
    is copied once, as the caller may reuse it) and each frame body is copied out of them
    exactly once: a body within one chunk is one slice, a body spread over several chunks
    (a large frame read in pieces) one join. Appending to one growing buffer instead copied
    a large frame several times over as the buffer was reallocated while it grew.

    With ``readinto_min`` (the server's jet port), a frame whose body is at least that
    large and not all received yet is read in place: once its header is in, the decoder
    makes a ``bytearray`` of the body's size, copies the body bytes it holds into it, and
    :meth:`read_target` gives the caller a view of the rest to receive into (the socket's
    ``recv_into``; :meth:`filled` says how much came), so the body is copied by the kernel
    only, not joined from received chunks afterwards. That frame's body is the
    ``bytearray``. Bytes fed meanwhile with :meth:`feed` are copied into it. The buffer is
    made when the header is in, not zero-filled (:func:`new_body_buffer`: the frame is
    handed out only once every byte of it was received), so a connection holds at most
    one such buffer, of at most ``max_frame_bytes``.

    After :meth:`next_frame` raised, the decoder is broken (the byte stream cannot be
    trusted): every later call raises the same error again.

    Not thread-safe; one decoder per connection direction.
    """

    __slots__ = (
        "_big",
        "_big_at",
        "_big_head",
        "_chunks",
        "_error",
        "_max",
        "_pos",
        "_readinto_min",
        "_size",
    )

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *, readinto_min: int = 0
    ) -> None:
        """Create a decoder that refuses length fields over ``max_frame_bytes``; with
        ``readinto_min`` > 0, bodies of at least that many bytes are read in place (see the
        class doc).

        Raises:
            ValueError: ``max_frame_bytes`` below 6 or above MAX_FRAME_BYTES, or a negative
                ``readinto_min``.
        """
        if not MIN_FRAME_LENGTH <= max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(
                f"max_frame_bytes must be within [{MIN_FRAME_LENGTH}, {MAX_FRAME_BYTES}]"
            )
        if readinto_min < 0:
            raise ValueError("readinto_min must not be negative")
        self._max = max_frame_bytes
        self._readinto_min = readinto_min
        self._chunks: deque[bytes] = deque()
        self._pos = 0  # bytes of the first chunk already consumed
        self._size = 0  # bytes buffered, not yet returned
        self._error: CodecError | None = None
        self._big: bytearray | None = None  # the body of a frame read in place
        self._big_at = 0  # bytes of it received
        self._big_head = (0, 0, 0)  # its api, flags, correlation id

    @property
    def max_frame_bytes(self) -> int:
        """The limit on the length field."""
        return self._max

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet returned as frames."""
        if self._big is None:
            return self._size
        return self._size + FRAME_HEADER_SIZE + self._big_at

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. An empty ``data`` is a no-op (EOF is the caller's business:
        check :attr:`buffered_bytes` to tell a clean close from a torn frame). Ignored once
        the decoder is broken, so memory stays bounded."""
        if self._error is None and len(data):
            big = self._big
            if big is not None:  # the body read in place takes what it still misses
                take = min(len(big) - self._big_at, len(data))
                big[self._big_at : self._big_at + take] = memoryview(data)[:take]
                self._big_at += take
                if take == len(data):
                    return
                data = memoryview(data)[take:]
            chunk = data if type(data) is bytes else bytes(data)
            self._chunks.append(chunk)
            self._size += len(chunk)

    def whole_frame(self, data: bytes) -> FrameParts | None:
        """If nothing is buffered and ``data`` is exactly one whole, valid frame (an answer
        alone in its read, the common case at light load): its parts, without buffering
        anything or building a :class:`Frame`. None for anything else: :meth:`feed` it
        then, and take its frames with :meth:`next_frame` (which checks it the same way)."""
        if self._size or self._big is not None or self._error is not None:
            return None
        if len(data) < FRAME_HEADER_SIZE:
            return None
        length, api, flags, cid = _HEADER.unpack_from(data)
        if length + 4 != len(data) or length > self._max or flags not in VALID_FLAGS:
            return None
        return api, flags, cid, data[FRAME_HEADER_SIZE:]

    def read_target(self) -> memoryview | None:
        """Where the rest of a body read in place goes (receive into it, then call
        :meth:`filled`), or None: feed received bytes as usual. Call it after
        :meth:`next_frame` returned None."""
        big = self._big
        if big is None or self._error is not None:
            return None
        return memoryview(big)[self._big_at :]

    def filled(self, n: int) -> None:
        """``n`` bytes were received into :meth:`read_target`'s view."""
        assert self._big is not None
        assert 0 <= n <= len(self._big) - self._big_at
        self._big_at += n

    def _start_in_place(self, head: bytes, pos: int, body_len: int) -> None:
        """Read the body of the frame whose header is at ``head[pos:]`` in place: the
        header is dropped, the body bytes buffered are copied into its buffer."""
        _length, api, flags, cid = _HEADER.unpack_from(head, pos)
        big = new_body_buffer(body_len)
        self._consume(FRAME_HEADER_SIZE, 0)
        at = 0
        pos = self._pos
        for chunk in self._chunks:
            n = len(chunk) - pos
            big[at : at + n] = memoryview(chunk)[pos:]
            at += n
            pos = 0
        self._chunks.clear()
        self._pos = self._size = 0
        self._big, self._big_at, self._big_head = big, at, (api, flags, cid)

    def _finish_in_place(self) -> Frame | None:
        big = self._big
        assert big is not None
        if self._big_at < len(big):
            return None
        api, flags, cid = self._big_head
        self._big = None
        self._big_at = 0
        return Frame(api=api, flags=flags, correlation_id=cid, body=big)

    def _peek(self, n: int) -> bytes:
        """The first ``n`` buffered bytes (fewer if fewer are buffered), not consumed."""
        out = b""
        pos = self._pos
        for chunk in self._chunks:
            out += chunk[pos : pos + n - len(out)]
            pos = 0
            if len(out) >= n:
                break
        return out

    def _consume(self, skip: int, take: int) -> bytes:
        """Drop ``skip`` buffered bytes, then return the next ``take`` (both buffered)."""
        chunks = self._chunks
        pos = self._pos
        self._size -= skip + take
        while skip:
            avail = len(chunks[0]) - pos
            if avail > skip:
                pos += skip
                break
            skip -= avail
            chunks.popleft()
            pos = 0
        if not take:
            body = b""
        elif len(chunks[0]) - pos >= take:  # within one chunk: one slice
            first = chunks[0]
            body = first[pos : pos + take]
            pos += take
        else:  # spread over several chunks: one join of views
            parts: list[bytes | memoryview] = []
            while take:
                first = chunks[0]
                avail = len(first) - pos
                if avail > take:
                    parts.append(memoryview(first)[pos : pos + take])
                    pos += take
                    break
                parts.append(memoryview(first)[pos:] if pos else first)
                take -= avail
                chunks.popleft()
                pos = 0
            body = b"".join(parts)
        if chunks and pos == len(chunks[0]):
            chunks.popleft()
            pos = 0
        self._pos = pos
        return body

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None if more bytes are needed.

        Raises:
            FrameTooLarge: the length prefix is over the limit (raised as soon as the 4
                prefix bytes are in, before any body byte).
            CodecError: the length field is below 6, or unknown flag bits are set.
        """
        if self._error is not None:
            raise self._error
        if self._big is not None:
            return self._finish_in_place()
        n = self._size
        if n < 4:
            return None
        first = self._chunks[0]
        pos = self._pos
        head = first if len(first) - pos >= FRAME_HEADER_SIZE else None
        if head is None:
            head, pos = self._peek(FRAME_HEADER_SIZE), 0
        (length,) = _PREFIX.unpack_from(head, pos)
        if length > self._max:
            foreign = _foreign_protocol(self._peek(_FOREIGN_PREFIX_BYTES))
            self._error = (
                CodecError(foreign, reason="foreign")
                if foreign
                else FrameTooLarge(length, self._max)
            )
            raise self._error
        if length < MIN_FRAME_LENGTH:
            self._error = CodecError(f"frame length {length} below {MIN_FRAME_LENGTH}")
            raise self._error
        total = length + 4
        if n < total:
            # Not all here: wait for more, unless the body is to be read in place (its
            # header is checked first).
            in_place = self._readinto_min or MAX_FRAME_BYTES + 1
            if n < FRAME_HEADER_SIZE or total - FRAME_HEADER_SIZE < in_place:
                return None
        _length, api, flags, cid = _HEADER.unpack_from(head, pos)
        if flags not in VALID_FLAGS:
            self._error = CodecError(f"bad frame flags {flags:#04x}")
            raise self._error
        if n < total:  # a large body not all here: read the rest in place
            self._start_in_place(head, pos, total - FRAME_HEADER_SIZE)
            return None
        if head is first and pos == 0 and len(first) == total:
            # One received chunk, one whole frame (a request alone on its connection): its
            # body is the chunk's tail, nothing else buffered moves.
            self._chunks.popleft()
            self._size = n - total
            return Frame(api=api, flags=flags, correlation_id=cid, body=first[FRAME_HEADER_SIZE:])
        body = self._consume(FRAME_HEADER_SIZE, total - FRAME_HEADER_SIZE)
        return Frame(api=api, flags=flags, correlation_id=cid, body=body)
