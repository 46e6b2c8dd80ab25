"""Arrow columns to Produce messages in bulk: partitions and wire bytes without a Python
object per row.

- :func:`murmur2` is :func:`jetsdk.partitioner.murmur2` (Kafka's hash) over every key of
  a column at once, so keyed rows land where the SDK would put them.
- :func:`encode_messages` encodes every row as a Produce message (spec/wire.md, Produce
  request: subject str16, key nbytes32, headers, value bytes32), byte for byte what
  :func:`jetsdk.codec.messages.encode_produce_request` writes for the same message (the
  tests compare them); :func:`request_body` puts a request's head before them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_HEADER_COUNT,
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
    MAX_VALUE_BYTES,
)
from jetsdk.codec.messages import ProduceRequest, encode_produce_request
from jetspark._arrow import I64, U8, binary_parts
from jetspark.errors import ColumnError

__all__ = ["Messages", "encode_messages", "join_messages", "murmur2", "request_body"]

_M = np.uint64(0x5BD1E995)
_SEED = np.uint64(0x9747B28C)
_MASK32 = np.uint64(0xFFFFFFFF)
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_EMPTY = pa.scalar(b"", pa.binary())
_NO_HEADERS = b"\x00\x00"
"""An empty subject's str16 is the same two zero bytes as an empty header list."""


def murmur2(data: U8, starts: I64, lengths: I64) -> I64:
    """Kafka's murmur2 of every ``data[starts[i]:starts[i] + lengths[i]]``, as unsigned
    32-bit values (``& 0x7FFFFFFF`` gives what the SDK partitioner takes)."""
    n = len(starts)
    h = (_SEED ^ lengths.astype(np.uint64)) & _MASK32
    blocks = lengths // 4
    order = np.argsort(-blocks, kind="stable")
    descending = blocks[order]
    most = int(descending[0]) if n else 0
    # rows with more than j blocks are the first active[j] of ``order``
    active = np.searchsorted(-descending, -np.arange(most, dtype=np.int64), side="left")
    wide = data.astype(np.uint64) if most else data
    for j in range(most):
        rows = order[: active[j]]
        pos = starts[rows] + 4 * j
        k = wide[pos] | (wide[pos + 1] << 8) | (wide[pos + 2] << 16) | (wide[pos + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> np.uint64(24)
        k = (k * _M) & _MASK32
        h[rows] = ((h[rows] * _M) & _MASK32) ^ k
    rest = lengths & 3
    tail = starts + (lengths - rest)
    for size, shift in ((3, 16), (2, 8), (1, 0)):
        rows = np.flatnonzero(rest >= size)
        if len(rows):
            h[rows] ^= data[tail[rows] + (size - 1)].astype(np.uint64) << np.uint64(shift)
    rows = np.flatnonzero(rest)
    h[rows] = (h[rows] * _M) & _MASK32
    h ^= h >> np.uint64(13)
    h = (h * _M) & _MASK32
    h ^= h >> np.uint64(15)
    result: I64 = h.astype(np.int64)
    return result


@attrs.frozen
class Messages:
    """Rows encoded as Produce messages: row i's message is ``heads[i]`` then
    ``value[i]`` (the value's bytes are not copied until :attr:`data` joins them)."""

    heads: pa.Array
    """binary: row i's message up to its value (subject, key, headers, value length)."""
    value: pa.Array
    """binary: the value column (strings viewed as binary, large types cast; null =
    empty)."""
    sizes: I64
    """Row i's size as the sinks count it for chunking: value + key + header names and
    values (names in characters)."""
    key_data: U8
    key_starts: I64
    key_lengths: I64
    has_key: npt.NDArray[np.bool_]
    """The keys (for partitioning): row i's key is ``key_data[key_starts[i]:...]``."""

    @property
    def data(self) -> pa.Array:
        """binary: row i's whole message (a copy of every value)."""
        return join_messages(self.heads, self.value)


def join_messages(heads: pa.Array | pa.ChunkedArray, value: pa.Array | pa.ChunkedArray) -> Any:
    """The whole messages (binary) of :attr:`Messages.heads` and :attr:`Messages.value`
    (arrays, or chunked arrays chunked alike)."""
    return pc.binary_join_element_wise(heads, value, _EMPTY, null_handling="skip")


def encode_messages(
    value: pa.Array,
    key: pa.Array | None,
    headers: pa.Array | None,
    subject: pa.Array | None = None,
) -> Messages:
    """Encode rows (``value`` string or binary, null = empty; ``key`` likewise, null =
    keyless; ``headers`` a list of (key, value) structs or None; ``subject`` strings, null
    or empty = the partition's subject).

    Raises:
        ColumnError: a header with a null key.
        CodecError: a key, value or header over its limit.
    """
    n = len(value)
    _, v_off, v_valid = binary_parts(value)
    v_len = np.where(v_valid, np.diff(v_off), 0)
    if n and int(v_len.max()) > MAX_VALUE_BYTES:
        raise CodecError(f"value of {int(v_len.max())} bytes exceeds {MAX_VALUE_BYTES}")
    if key is None:
        k_data, k_start = np.zeros(0, dtype=np.uint8), np.zeros(n, dtype=np.int64)
        k_len, has_key = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.bool_)
    else:
        k_data, k_off, has_key = binary_parts(key)
        k_start, k_len = k_off[:-1], np.where(has_key, np.diff(k_off), 0)
        if n and int(k_len.max()) > MAX_KEY_BYTES:
            raise CodecError(f"key of {int(k_len.max())} bytes exceeds {MAX_KEY_BYTES}")
    head = np.zeros((n, 6), dtype=np.uint8)  # empty subject, then the key length
    head[:, 2:6] = np.where(has_key, k_len, -1).astype(">i4").view(np.uint8).reshape(n, 4)
    subject_parts: list[pa.Array | pa.Scalar] = []
    if subject is not None and subject.null_count < n:
        _, s_off, s_valid = binary_parts(subject)
        s_len = np.where(s_valid, np.diff(s_off), 0)
        if int(s_len.max()) > MAX_SUBJECT_BYTES:
            raise CodecError(f"subject of {int(s_len.max())} bytes exceeds {MAX_SUBJECT_BYTES}")
        head[:, 0:2] = s_len.astype(">u2").view(np.uint8).reshape(n, 2)
        subject_parts = [_fixed(np.ascontiguousarray(head[:, 0:2])), _binary(subject)]
        head = head[:, 2:6]
    tail = v_len.astype(">u4").view(np.uint8).reshape(n, 4)
    sizes = v_len + k_len
    middle: pa.Array | pa.Scalar = pa.scalar(_NO_HEADERS, pa.binary())
    if headers is not None:
        middle, header_sizes = _encode_headers(headers)
        sizes = sizes + header_sizes
    parts = [
        *subject_parts,
        _fixed(np.ascontiguousarray(head)),
        _binary(key) if key is not None else _EMPTY,
        middle,
        _fixed(tail),
        _EMPTY,  # the separator
    ]
    heads = pc.binary_join_element_wise(*parts, null_handling="skip")
    return Messages(heads, _binary(value), sizes, k_data, k_start, k_len, has_key)


def _fixed(rows: U8) -> pa.Array:
    n, width = rows.shape
    array = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [None, pa.py_buffer(np.ascontiguousarray(rows))]
    )
    return array.cast(pa.binary())


def _binary(array: pa.Array) -> pa.Array:
    if pa.types.is_string(array.type):
        return array.view(pa.binary())
    if pa.types.is_large_string(array.type):
        return array.view(pa.large_binary()).cast(pa.binary())
    if pa.types.is_binary(array.type):
        return array
    return array.cast(pa.binary())


def _encode_headers(headers: pa.Array) -> tuple[pa.Array, I64]:
    """Each row's encoded header list, and the size the sinks count for it."""
    n = len(headers)
    counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False)
    sizes = np.zeros(n, dtype=np.int64)
    rows = np.flatnonzero(counts)
    if not len(rows):
        return pa.repeat(pa.scalar(_NO_HEADERS, pa.binary()), n), sizes
    encoded: list[bytes] = [_NO_HEADERS]
    for i, row in zip(rows.tolist(), headers.take(pa.array(rows)).to_pylist(), strict=True):
        raw, sizes[i] = _header_bytes(row)
        encoded.append(raw)
    pick = np.zeros(n, dtype=np.int64)
    pick[rows] = np.arange(1, len(rows) + 1)
    return pa.array(encoded, pa.binary()).take(pa.array(pick)), sizes


def _header_bytes(row: Sequence[Any]) -> tuple[bytes, int]:
    """One row's headers as on the wire (u16 count, then str16 name, bytes32 value), and
    their counted size."""
    if len(row) > MAX_HEADER_COUNT:
        raise CodecError(f"{len(row)} headers exceed {MAX_HEADER_COUNT}", reason="limit")
    parts = [_U16.pack(len(row))]
    size = 0
    for header in row:
        if isinstance(header, dict):
            name, value = header.get("key"), header.get("value")
        else:
            name, value = header[0], header[1]
        if not isinstance(name, str):
            raise ColumnError("headers", "a header has a null key")
        raw_value = b"" if value is None else _as_bytes(value)
        raw_name = name.encode()
        if len(raw_name) > MAX_HEADER_NAME_BYTES:
            raise CodecError("header name exceeds its limit", reason="limit")
        if len(raw_value) > MAX_VALUE_BYTES:
            raise CodecError("header value exceeds its limit", reason="limit")
        parts += [_U16.pack(len(raw_name)), raw_name, _U32.pack(len(raw_value)), raw_value]
        size += len(name) + len(raw_value)
    return b"".join(parts), size


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def request_body(
    stream: str,
    partition: int,
    ack: AckPolicy,
    timeout_ms: int,
    producer_id: int,
    base_seq: int,
    count: int,
    messages: Iterable[bytes | memoryview],
) -> tuple[bytes, ...]:
    """A Produce request body in parts: the SDK's encoding of the head with the message
    count, then the ``count`` encoded messages as given (the connection writes a large body
    gathered, so the messages are not copied into it)."""
    head = encode_produce_request(
        ProduceRequest(
            stream=stream,
            partition=partition,
            ack_policy=ack,
            timeout_ms=timeout_ms,
            messages=(),
            producer_id=producer_id,
            base_seq=base_seq,
        )
    )
    # memoryviews stand in for bytes here: the connection only takes lengths and buffers.
    return (head[:-4] + _U32.pack(count), *messages)  # type: ignore[arg-type]
