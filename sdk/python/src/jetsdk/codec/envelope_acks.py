"""Envelope acks (spec/envelope.md, kinds 1 and 2): :class:`EnvelopeAck`, their encoders and
decoders. Importable from :mod:`jetsdk.codec.envelope` too. Pure, no I/O; decoders raise only
:class:`CodecError`, encoders raise it with reason ``"limit"`` for a field out of range."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from jetsdk.codec import _wire as w
from jetsdk.codec._envelope_frame import (
    ACK_BATCH,
    ACK_MID,
    ACK_ONE,
    ACK_POLICIES,
    ACK_SUCCESS_TAIL,
    ACK_TAIL,
    ENVELOPE_HEADER_SIZE,
    KIND_ACK,
    KIND_ACK_BATCH,
    MIN_ACK,
    NO_HEADERS,
    POLICY_BY_VALUE,
    QQ,
    U16,
    U32,
    open_envelope,
    seal,
    str16,
)
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_ACKS_PER_BATCH,
    MAX_CORRELATION_ID_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_STREAM_NAME_BYTES,
)

AckFields = tuple[int, int, str, int, int, str]
"""The per-message fields of an ack from one partition: (offset, timestamp, correlation_id,
ack_policy, error_code, error_message)."""


@attrs.frozen
class EnvelopeAck:
    """An acknowledgement from a partition leader (kind 1, or one entry of kind 2)."""

    stream: str
    """Stream the message was stored in."""
    partition: int
    """Partition number."""
    offset: int
    """Assigned offset, or -1 when error_code is not 0 and no offset applies."""
    timestamp: int
    """Stored timestamp in ns since the epoch, or -1."""
    correlation_id: str
    """The message's correlation id (empty for a plain message)."""
    ack_policy: AckPolicy
    """The policy this ack satisfies."""
    error_code: int = 0
    """0 for success, else a wire error code (spec/protocol.md)."""
    error_message: str = ""
    """Explanation when error_code is not 0."""

    @property
    def fields(self) -> AckFields:
        """Its fields after the stream and partition, as :class:`AckEncoder` takes them."""
        return (
            self.offset,
            self.timestamp,
            self.correlation_id,
            self.ack_policy,
            self.error_code,
            self.error_message,
        )


def _put_ack(parts: list[bytes], ack: EnvelopeAck) -> None:
    parts.append(str16(ack.stream, "stream name", MAX_STREAM_NAME_BYTES))
    _put_ack_rest(parts, ack.partition, *ack.fields)


def _put_ack_rest(
    parts: list[bytes],
    partition: int,
    offset: int,
    timestamp: int,
    correlation_id: str,
    ack_policy: int,
    error_code: int,
    error_message: str,
) -> None:
    """An ack after its stream name."""
    if ack_policy not in ACK_POLICIES:
        raise CodecError(f"unknown ack policy {ack_policy}", reason="limit")
    try:
        parts.append(ACK_MID.pack(partition, offset, timestamp))
        parts.append(str16(correlation_id, "correlation id", MAX_CORRELATION_ID_BYTES))
        if error_code == 0 and not error_message:
            parts.append(ACK_SUCCESS_TAIL[ack_policy])
            return
        parts.append(ACK_TAIL.pack(ack_policy, error_code))
    except struct.error as exc:
        raise CodecError(f"ack field out of range: {exc}", reason="limit") from None
    parts.append(str16(error_message, "error message", MAX_ERROR_MESSAGE_BYTES))


def encode_ack(ack: EnvelopeAck) -> bytes:
    """Encode a kind 1 envelope (one ack).

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    parts: list[bytes] = []
    _put_ack(parts, ack)
    return seal(ACK_ONE, b"".join(parts))


def encode_acks(acks: Sequence[EnvelopeAck]) -> bytes:
    """Encode a kind 2 envelope: 1 to MAX_ACKS_PER_BATCH acks for one ack inbox.

    Raises:
        CodecError: empty or too many acks, or a field over its limit (reason ``"limit"``).
    """
    if not 1 <= len(acks) <= MAX_ACKS_PER_BATCH:
        raise CodecError(
            f"an ack batch holds 1 to {MAX_ACKS_PER_BATCH} acks, not {len(acks)}", reason="limit"
        )
    parts: list[bytes] = [w.U16.pack(len(acks))]
    for ack in acks:
        _put_ack(parts, ack)
    return seal(ACK_BATCH, b"".join(parts))


class AckEncoder:
    """Encodes acks of one stream partition from plain :data:`AckFields` tuples (the
    partition leader's hot path: no :class:`EnvelopeAck` objects); output is byte for byte what
    :func:`encode_ack` / :func:`encode_acks` write for the same acks.

    Thread safety: immutable after construction.
    """

    __slots__ = ("_head", "_partition", "_stream16")

    def __init__(self, stream: str, partition: int) -> None:
        """Prepare the shared fields.

        Raises:
            CodecError: a stream name or partition out of range (reason ``"limit"``).
        """
        try:
            part = U32.pack(partition)
        except struct.error as exc:
            raise CodecError(f"ack field out of range: {exc}", reason="limit") from None
        self._stream16 = str16(stream, "stream name", MAX_STREAM_NAME_BYTES)
        self._partition = partition
        self._head = self._stream16 + part

    def encode(self, acks: Sequence[AckFields]) -> bytes:
        """One envelope for 1 to MAX_ACKS_PER_BATCH acks: kind 1 for one, kind 2 for more.

        Raises:
            CodecError: no or too many acks, or a field out of range (reason ``"limit"``).
        """
        count = len(acks)
        if not 1 <= count <= MAX_ACKS_PER_BATCH:
            raise CodecError(
                f"an ack batch holds 1 to {MAX_ACKS_PER_BATCH} acks, not {count}", reason="limit"
            )
        head = self._head
        pack_qq = QQ.pack
        tails = ACK_SUCCESS_TAIL
        parts: list[bytes] = [] if count == 1 else [U16.pack(count)]
        append = parts.append
        try:
            for offset, timestamp, corr, policy, code, message in acks:
                if (
                    code == 0
                    and not message
                    and corr.isascii()
                    and len(corr) <= MAX_CORRELATION_ID_BYTES
                ):
                    tail = tails.get(policy)
                    if tail is not None:
                        append(head)
                        append(pack_qq(offset, timestamp))
                        append(U16.pack(len(corr)))
                        append(corr.encode())
                        append(tail)
                        continue
                append(self._stream16)
                _put_ack_rest(
                    parts, self._partition, offset, timestamp, corr, policy, code, message
                )
        except struct.error as exc:
            raise CodecError(f"ack field out of range: {exc}", reason="limit") from None
        except AttributeError as exc:
            raise CodecError(f"ack field of the wrong type: {exc}", reason="limit") from None
        return seal(ACK_ONE if count == 1 else ACK_BATCH, b"".join(parts))


AckTuple = tuple[str, int, int, int, str, int, int, str]
"""A decoded ack as a plain tuple: (stream, partition, offset, timestamp, correlation_id,
ack_policy, error_code, error_message)."""


def decode_ack_tuples(payload: bytes | bytearray | memoryview) -> list[AckTuple]:
    """Decode a kind 1 or kind 2 envelope into :data:`AckTuple` tuples (what
    :func:`decode_acks` returns, without building :class:`EnvelopeAck` objects).

    Raises:
        CodecError: anything but a valid version 1 kind 1 or 2 envelope.
    """
    buf = payload if isinstance(payload, bytes) else bytes(payload)
    kind, flags = open_envelope(buf)
    if kind not in (KIND_ACK, KIND_ACK_BATCH):
        raise CodecError(f"envelope kind {kind} is not an ack")
    if flags:
        raise CodecError(f"unknown envelope flags {flags:#06x}")
    n = len(buf)
    p = ENVELOPE_HEADER_SIZE
    out: list[AckTuple] = []
    try:
        if kind == KIND_ACK:
            count = 1
        else:
            w.need(buf, p, 2, "ack count")
            (count,) = U16.unpack_from(buf, p)
            p += 2
            if count == 0:
                raise CodecError("empty ack batch")
            if count * MIN_ACK > n - p:
                raise CodecError(f"ack count {count} exceeds the payload", reason="truncated")
        u16 = U16.unpack_from
        mid = ACK_MID.unpack_from
        tail = ACK_TAIL.unpack_from
        mid_size = ACK_MID.size
        policies = ACK_POLICIES
        append = out.append
        prev_raw = b""
        prev_stream = ""
        for _ in range(count):
            (slen,) = u16(buf, p)
            p += 2
            if slen > MAX_STREAM_NAME_BYTES:
                raise CodecError(
                    f"stream name of {slen} bytes exceeds {MAX_STREAM_NAME_BYTES}",
                    reason="limit",
                )
            end = p + slen
            if end > n:
                raise CodecError("truncated stream name", reason="truncated")
            raw = buf[p:end]
            if raw != prev_raw:  # a batch is normally one stream: decode its name once
                prev_stream = str(raw, "utf-8")
                prev_raw = raw
            p = end
            w.need(buf, p, mid_size, "ack")
            partition, offset, timestamp = mid(buf, p)
            p += mid_size
            (clen,) = u16(buf, p)
            p += 2
            if clen > MAX_CORRELATION_ID_BYTES:
                raise CodecError(
                    f"correlation id of {clen} bytes exceeds {MAX_CORRELATION_ID_BYTES}",
                    reason="limit",
                )
            end = p + clen
            if end > n:
                raise CodecError("truncated correlation id", reason="truncated")
            corr = str(buf[p:end], "utf-8")
            p = end
            w.need(buf, p, 5, "ack")
            ack_policy, error_code = tail(buf, p)
            p += 3
            if ack_policy not in policies:
                raise CodecError(f"unknown ack policy {ack_policy}")
            if buf[p : p + 2] == NO_HEADERS:  # empty error message
                message = ""
                p += 2
            else:
                message, p = w.get_str16(buf, p, "error message", MAX_ERROR_MESSAGE_BYTES)
            append(
                (prev_stream, partition, offset, timestamp, corr, ack_policy, error_code, message)
            )
        w.check_end(buf, p, "ack envelope")
    except UnicodeDecodeError:
        raise CodecError("ack text field is not valid UTF-8") from None
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "ack envelope") from None
    return out


def decode_acks(payload: bytes | bytearray | memoryview) -> list[EnvelopeAck]:
    """Decode a kind 1 (one ack) or kind 2 (ack batch) envelope.

    Raises:
        CodecError: anything but a valid version 1 kind 1 or 2 envelope.
    """
    return [
        EnvelopeAck(
            stream=stream,
            partition=partition,
            offset=offset,
            timestamp=timestamp,
            correlation_id=corr,
            ack_policy=POLICY_BY_VALUE[policy],
            error_code=code,
            error_message=message,
        )
        for stream, partition, offset, timestamp, corr, policy, code, message in (
            decode_ack_tuples(payload)
        )
    ]
