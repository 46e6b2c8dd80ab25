"""The Produce response to a request with the current-values flag (spec/protocol.md §6,
flags bit 2): each result as in :func:`jetsdk.codec.messages.encode_produce_response`,
and a WRONG_EXPECTED_KEY_OFFSET result followed by the key's current value (``nbytes32``,
-1: none or left out). With the latest-values flag too (bit 3), a success result is
followed by the key's latest offset (``i64``, -1: no later write of the key) and, when it is
one, that record's value (``nbytes32``). Results of other codes keep their 18 bytes, so the
change lies inside the per-message result."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from jetsdk.codec import _wire as w
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_VALUE_BYTES
from jetsdk.codec.messages import ProduceResult

__all__ = [
    "decode_produce_response_values",
    "encode_produce_response_values",
    "encode_produce_result_values",
]

_RESULT = struct.Struct(">Hqq")
_LATEST = struct.Struct(">q")
_REFUSED = int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET)


def encode_produce_result_values(
    results: Sequence[tuple[int, int, int]],
    values: Sequence[bytes | None],
    latest: Sequence[tuple[int, bytes | None]] | None = None,
) -> bytes:
    """The response body from ``(error_code, offset, timestamp)`` results, a
    WRONG_EXPECTED_KEY_OFFSET one followed by its value from ``values`` (same index; None:
    -1). ``latest`` (the request had the latest-values flag): per result, the key's latest
    (offset, value) that follows a success result ((-1, None): no later write).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    parts = [w.U32.pack(len(results))]
    pack = _RESULT.pack
    try:
        for i, (result, value) in enumerate(zip(results, values, strict=True)):
            parts.append(pack(*result))
            if result[0] == _REFUSED:
                w.put_nbytes32(parts, value, "current value", MAX_VALUE_BYTES)
            elif latest is not None and result[0] == 0:
                moved, moved_value = latest[i]
                parts.append(_LATEST.pack(moved))
                if moved >= 0:
                    w.put_nbytes32(parts, moved_value, "latest value", MAX_VALUE_BYTES)
    except struct.error as exc:
        raise CodecError(f"produce result field out of range: {exc}", reason="limit") from None
    return b"".join(parts)


def encode_produce_response_values(results: Sequence[ProduceResult], latest: bool = False) -> bytes:
    """The response body of ``results`` (their ``current_value`` where refused; with
    ``latest``, their ``latest_offset`` and ``current_value`` where they succeeded).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    return encode_produce_result_values(
        [(r.error_code, r.offset, r.timestamp) for r in results],
        [r.current_value for r in results],
        [(r.latest_offset, r.current_value) for r in results] if latest else None,
    )


def decode_produce_response_values(
    body: bytes | bytearray | memoryview, latest: bool = False
) -> list[ProduceResult]:
    """Decode the response body of a request with the flag (``latest``: and the
    latest-values flag).

    Raises:
        CodecError: truncated, trailing bytes, or a value over MAX_VALUE_BYTES.
    """
    body = bytes(body)
    try:
        count, p = w.get_count(body, 0, _RESULT.size, "result")
        out: list[ProduceResult] = []
        for _ in range(count):
            w.need(body, p, _RESULT.size, "produce result")
            code, offset, timestamp = _RESULT.unpack_from(body, p)
            p += _RESULT.size
            value = None
            moved = -1
            if code == _REFUSED:
                value, p = w.get_nbytes32(body, p, "current value", MAX_VALUE_BYTES)
            elif latest and code == 0:
                w.need(body, p, _LATEST.size, "latest offset")
                (moved,) = _LATEST.unpack_from(body, p)
                p += _LATEST.size
                if moved >= 0:
                    value, p = w.get_nbytes32(body, p, "latest value", MAX_VALUE_BYTES)
                elif moved != -1:
                    raise CodecError(f"latest offset {moved}")
            out.append(ProduceResult(code, offset, timestamp, value, moved))
        w.check_end(body, p, "produce response")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce response") from None
    return out
