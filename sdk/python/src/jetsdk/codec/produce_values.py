"""The Produce response to a request with the current-values flag (spec/protocol.md §6,
flags bit 2): each result as in :func:`jetsdk.codec.messages.encode_produce_response`,
and a WRONG_EXPECTED_KEY_OFFSET result followed by the key's current value (``nbytes32``,
-1: none or left out). Results of other codes keep their 18 bytes, so the change lies
inside the per-message result."""

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
_REFUSED = int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET)


def encode_produce_result_values(
    results: Sequence[tuple[int, int, int]], values: Sequence[bytes | None]
) -> bytes:
    """The response body from ``(error_code, offset, timestamp)`` results, a
    WRONG_EXPECTED_KEY_OFFSET one followed by its value from ``values`` (same index; None:
    -1).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    parts = [w.U32.pack(len(results))]
    pack = _RESULT.pack
    try:
        for result, value in zip(results, values, strict=True):
            parts.append(pack(*result))
            if result[0] == _REFUSED:
                w.put_nbytes32(parts, value, "current value", MAX_VALUE_BYTES)
    except struct.error as exc:
        raise CodecError(f"produce result field out of range: {exc}", reason="limit") from None
    return b"".join(parts)


def encode_produce_response_values(results: Sequence[ProduceResult]) -> bytes:
    """The response body of ``results`` (their ``current_value`` where refused).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    return encode_produce_result_values(
        [(r.error_code, r.offset, r.timestamp) for r in results],
        [r.current_value for r in results],
    )


def decode_produce_response_values(body: bytes | bytearray | memoryview) -> list[ProduceResult]:
    """Decode the response body of a request with the flag.

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
            if code == _REFUSED:
                value, p = w.get_nbytes32(body, p, "current value", MAX_VALUE_BYTES)
            out.append(ProduceResult(code, offset, timestamp, value))
        w.check_end(body, p, "produce response")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce response") from None
    return out
