"""Vectorised helpers between raw bytes and Arrow arrays (numpy does the per-row work).

The source turns a Fetch response's record bytes into Arrow columns, and the sinks turn
Arrow columns into Produce request bodies, without a Python object per row: positions
and lengths are numpy arrays, and the bytes of a column are gathered in one numpy
fancy-indexing operation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = [
    "I64",
    "U8",
    "binary_parts",
    "read_be",
    "slices",
]

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


def read_be(buf: U8, positions: I64, dtype: str) -> I64:
    """The big-endian integers of numpy ``dtype`` (``">i4"``, ``">u2"``...) at
    ``positions`` of ``buf``, as int64."""
    width = np.dtype(dtype).itemsize
    if len(positions) == 0:
        return np.zeros(0, dtype=np.int64)
    idx = positions[:, None] + np.arange(width, dtype=np.int64)
    values: I64 = buf[idx].view(dtype).reshape(-1).astype(np.int64)
    return values


def slices(
    type_: pa.DataType,
    buf: pa.Buffer,
    starts: I64,
    lengths: I64,
    valid: npt.NDArray[np.bool_] | None = None,
) -> pa.Array:
    """An Arrow binary or string array whose row i is ``buf[starts[i]:starts[i] +
    lengths[i]]`` (null where not ``valid``); the spans must be in order and not overlap.

    The spans and the gaps between them make one binary array over ``buf`` (no copy);
    Arrow's ``take`` of every second element then copies the spans out. Strings are
    checked to be UTF-8.

    Raises:
        pyarrow.ArrowInvalid: a string value is not UTF-8, or offsets overflow.
    """
    n = len(starts)
    large = pa.types.is_large_binary(type_) or pa.types.is_large_string(type_)
    offsets = np.empty(2 * n + 1, dtype=np.int64 if large else np.int32)
    offsets[0] = 0
    offsets[1::2] = starts
    offsets[2::2] = starts + lengths
    whole = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(), 2 * n, [None, pa.py_buffer(offsets), buf]
    )
    mask = None if valid is None or bool(valid.all()) else ~valid
    picked = whole.take(pa.array(np.arange(1, 2 * n, 2, dtype=np.int64), mask=mask))
    if picked.type != type_:
        picked = picked.view(type_)
        picked.validate(full=True)
    return picked


def binary_parts(array: pa.Array) -> tuple[U8, I64, npt.NDArray[np.bool_]]:
    """``(data, offsets, valid)`` of an Arrow binary or string array (any offset width,
    sliced or not): row i is ``data[offsets[i]:offsets[i + 1]]`` unless not ``valid``."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_string_view(array.type) or pa.types.is_binary_view(array.type):
        array = array.cast(pa.large_binary())
    n = len(array)
    wide = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    bufs = array.buffers()
    width = 8 if wide else 4
    raw_offsets = np.frombuffer(
        bufs[1], dtype=np.int64 if wide else np.int32, count=n + 1, offset=array.offset * width
    ).astype(np.int64)
    data = (
        np.frombuffer(bufs[2], dtype=np.uint8)
        if bufs[2] is not None
        else np.zeros(0, dtype=np.uint8)
    )
    valid = _valid(array)
    if n and raw_offsets[0]:
        data = data[raw_offsets[0] :]
        raw_offsets = raw_offsets - raw_offsets[0]
    return data, raw_offsets, valid


def _valid(array: pa.Array) -> npt.NDArray[np.bool_]:
    n = len(array)
    if array.null_count == 0:
        return np.ones(n, dtype=np.bool_)
    mask: Any = array.is_valid()
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.bool_)
