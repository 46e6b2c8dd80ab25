"""Compressed values (spec/envelope.md, "Compressed values"): a producer may store a
message's value compressed, naming the codec in the header ``Jet-Compression``; a
consumer that knows the codec gives the application the value as it was sent.

The key, the subject and the other headers stay as they are, so compaction, the key index
and key lookups read them unchanged, and the record's CRC covers the bytes as stored
(compressed). The server stores and serves the bytes it gets; it never compresses or
decompresses. ``max_message_bytes`` counts the stored (compressed) size.

Codecs, by header value:

- ``zstd``: one Zstandard frame (RFC 8878) with its content size, from the
  ``zstandard`` package;
- ``lz4``: one LZ4 frame (the LZ4 frame format, content size included), from the ``lz4``
  package.

Both are optional (``pip install jetsdk[compression]``). Pure functions, no I/O; any thread
may call them: each thread reuses its own zstd (de)compression context (making one per
16 KiB value took 35-55 % of the compression CPU and half of the decompression CPU).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import attrs

from jetsdk.codec._wire import Headers
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_VALUE_BYTES
from jetsdk.codec.record import Record, with_value

__all__ = [
    "CODECS",
    "COMPRESSION_HEADER",
    "DEFAULT_MIN_COMPRESS_BYTES",
    "MAX_SKIP_AFTER_MISS",
    "ZSTD_LEVEL",
    "CompressionError",
    "ValueCompressor",
    "check_codec",
    "compress_value",
    "decompress_value",
    "plain_records",
]

COMPRESSION_HEADER = "Jet-Compression"
"""The header naming the codec of a compressed value (matched without regard to case by
readers; written exactly so)."""
CODECS = ("zstd", "lz4")
"""Codec names, as written in :data:`COMPRESSION_HEADER`."""
DEFAULT_MIN_COMPRESS_BYTES = 1024
"""A producer leaves smaller values as they are (compressing them saves little or nothing;
an empty value, a tombstone, is never compressed)."""
ZSTD_LEVEL = 1
"""Zstandard level: 1, not the library's default 3. On 16 KiB JSON-like values (four kinds:
bench sizes', bench.profile_bytes', log lines, the tests') level 1 stored 0.3-16 % fewer
bytes than level 3 on three of them and 0.5 % more on one, and took 9-25 % less CPU
(36-46 µs against 40-56 µs a value, one core, loaded machine); on random values it took
13 µs against 21 µs to find they do not shrink. Values this size use a small window,
where the higher levels' searches gain nothing."""
MAX_SKIP_AFTER_MISS = 16
"""Most values a :class:`ValueCompressor` sends as they are, without trying, after values
that did not get smaller (1, 2, 4, ... up to this many after consecutive misses)."""


class CompressionError(CodecError):
    """A compressed value that cannot be decompressed: an unknown codec, one whose package
    is not installed, corrupt data, or more than :data:`MAX_VALUE_BYTES` once decompressed."""


def _module(codec: str) -> Any:
    try:
        if codec == "zstd":
            import zstandard

            return zstandard
        if codec == "lz4":
            import lz4.frame

            return lz4.frame
    except ImportError:
        package = "zstandard" if codec == "zstd" else "lz4"
        raise CompressionError(
            f"compression codec {codec!r} needs the {package!r} package "
            "(pip install jetsdk[compression])",
            reason="codec",
        ) from None
    raise CompressionError(
        f"unknown compression codec {codec!r} (known: {', '.join(CODECS)})", reason="codec"
    )


def check_codec(codec: str) -> None:
    """Check that ``codec`` is known and its package installed.

    Raises:
        CompressionError: unknown, or its package missing.
    """
    _module(codec)


_contexts = threading.local()
"""This thread's zstd contexts (``compressor``, ``decompressor``): not thread-safe, and
each one-shot call resets its context, so a reused one writes the same bytes."""


def _zstd_compressor() -> Any:
    """This thread's zstd compressor (made on first use)."""
    compressor = getattr(_contexts, "compressor", None)
    if compressor is None:
        compressor = _contexts.compressor = _module("zstd").ZstdCompressor(
            level=ZSTD_LEVEL, write_content_size=True
        )
    return compressor


def _zstd_compress(value: bytes) -> bytes:
    out: bytes = _zstd_compressor().compress(value)
    return out


def _zstd_compress_many(values: list[bytes]) -> list[bytes]:
    """Each of ``values`` compressed as :func:`_zstd_compress` does (the same bytes), in one
    call into the library where it has one (``multi_compress_to_buffer``, the C backend's):
    the GIL is released once for the batch, not once per value, so a worker thread that
    compresses a batch does not wait for the GIL after every value while the event loop's
    thread runs."""
    compressor = _zstd_compressor()
    if len(values) > 1:
        try:  # marked experimental by zstandard; its CFFI backend does not have it
            out = compressor.multi_compress_to_buffer(values, threads=0)  # 0: this thread
        except (AttributeError, NotImplementedError):
            pass
        else:
            return [out[i].tobytes() for i in range(len(values))]
    return [compressor.compress(value) for value in values]


def _lz4_compress(value: bytes) -> bytes:
    out: bytes = _module("lz4").compress(value, store_size=True)
    return out


_COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "zstd": _zstd_compress,
    "lz4": _lz4_compress,
}


def compress_value(
    codec: str, value: bytes, min_bytes: int = DEFAULT_MIN_COMPRESS_BYTES
) -> bytes | None:
    """``value`` compressed with ``codec``, or None if it is shorter than ``min_bytes`` (or
    empty) or would not get smaller (then it is stored as it is, without the header).

    Raises:
        CompressionError: unknown codec, or its package missing.
    """
    compressor = _COMPRESSORS.get(codec)
    if compressor is None:
        _module(codec)  # raises
    if not value or len(value) < min_bytes:
        return None
    assert compressor is not None
    out = compressor(value)
    return out if len(out) < len(value) else None


def _zstd_decompress(data: bytes, limit: int) -> bytes:
    zstandard = _module("zstd")
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise CompressionError(f"corrupt zstd value: {exc}", reason="corrupt") from None
    if size > limit:
        raise CompressionError(
            f"zstd value of {size} bytes once decompressed, over {limit}", reason="limit"
        )
    decompressor = getattr(_contexts, "decompressor", None)
    if decompressor is None:
        decompressor = _contexts.decompressor = zstandard.ZstdDecompressor()
    try:
        out: bytes = decompressor.decompress(data, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise CompressionError(f"corrupt zstd value: {exc}", reason="corrupt") from None
    return out


def _lz4_decompress(data: bytes, limit: int) -> bytes:
    frame = _module("lz4")
    decompressor = frame.LZ4FrameDecompressor()
    try:
        out: bytes = decompressor.decompress(data, max_length=limit)
    except RuntimeError as exc:  # lz4 reports corrupt frames as RuntimeError
        raise CompressionError(f"corrupt lz4 value: {exc}", reason="corrupt") from None
    if not decompressor.eof:
        if decompressor.needs_input:
            raise CompressionError("truncated lz4 value", reason="corrupt")
        raise CompressionError(f"lz4 value over {limit} bytes once decompressed", reason="limit")
    return out


_DECOMPRESSORS: dict[str, Callable[[bytes, int], bytes]] = {
    "zstd": _zstd_decompress,
    "lz4": _lz4_decompress,
}


def decompress_value(codec: bytes | str, data: bytes, limit: int = MAX_VALUE_BYTES) -> bytes:
    """The value as sent, from its stored bytes ``data`` and the :data:`COMPRESSION_HEADER`
    value ``codec``; at most ``limit`` bytes.

    Raises:
        CompressionError: unknown codec or package missing (``reason`` ``"codec"``),
            corrupt or truncated data (``"corrupt"``), more than ``limit`` bytes (``"limit"``).
    """
    name = codec.decode("ascii", "replace") if isinstance(codec, bytes) else codec
    name = name.strip().lower()
    decompressor = _DECOMPRESSORS.get(name)
    if decompressor is None:
        _module(name)  # raises
        raise AssertionError(name)
    return decompressor(data, limit)


@attrs.define
class ValueCompressor:
    """One producer's compression step: :func:`compress_value` with ``codec``, that stops
    paying for values that do not compress. After a value that does not get smaller it
    sends the next 1, 2, 4, ... (at most :data:`MAX_SKIP_AFTER_MISS`) values of at least
    ``min_bytes`` as they are without trying; a value that gets smaller starts over.
    Incompressible data (random, encrypted, already compressed) then costs about a
    seventeenth of the compression CPU it did (13 µs a 16 KiB value with zstd), as S2's
    skipping does for JetStream's stores; a compressible value that follows a run of
    incompressible ones may be sent as it is (at most the skipped count of them).

    Its counters are a hint: callers on several threads (the sync producer) may race on
    them, which changes only which values are tried.

    Raises:
        CompressionError: (on creation) unknown codec, or its package missing.
    """

    codec: str = attrs.field()
    min_bytes: int = DEFAULT_MIN_COMPRESS_BYTES
    _misses: int = attrs.field(default=0, init=False)
    """Consecutive values tried that did not get smaller."""
    _skip: int = attrs.field(default=0, init=False)
    """Values still to send as they are without trying."""

    @codec.validator
    def _known(self, _attribute: object, codec: str) -> None:
        check_codec(codec)

    def compress_many(self, values: list[bytes]) -> list[bytes | None]:
        """:meth:`compress` of each of ``values`` in order (the same results, the same
        counters after), zstd's in one call into the library
        (:func:`_zstd_compress_many`) while no value was skipped or missed: only then are
        the next values all tried. A miss in the batch makes the values it would have
        skipped sent as they are (their compression wasted); after it, values go one by
        one through :meth:`compress` (skipping is cheap)."""
        if self.codec != "zstd" or self._skip or self._misses:
            return [self.compress(value) for value in values]
        min_bytes = self.min_bytes
        tried = [i for i, value in enumerate(values) if value and len(value) >= min_bytes]
        packed = _zstd_compress_many([values[i] for i in tried])
        results = dict(zip(tried, packed, strict=True))
        out: list[bytes | None] = []
        for i, value in enumerate(values):
            result = results.get(i)
            if result is None or self._skipping():  # never tried (short, empty), or skipped
                out.append(None)
            else:
                out.append(self._counted(result if len(result) < len(value) else None))
        return out

    def compress(self, value: bytes) -> bytes | None:
        """``value`` compressed, or None to send it as it is (short, empty, would not get
        smaller, or skipped after misses)."""
        if not value or len(value) < self.min_bytes:
            return None
        if self._skipping():
            return None
        return self._counted(compress_value(self.codec, value, self.min_bytes))

    def _skipping(self) -> bool:
        """True if this value is one of those skipped after a miss (and counted)."""
        if self._skip:
            self._skip -= 1
            return True
        return False

    def _counted(self, out: bytes | None) -> bytes | None:
        """``out`` (a value compressed, or None: it would not get smaller), after counting
        it: a miss skips the next few values (more after each miss in a row), a hit ends
        the run of misses."""
        if out is None:
            self._skip = min(MAX_SKIP_AFTER_MISS, 1 << min(self._misses, 16))
            self._misses += 1
        else:
            self._misses = 0
        return out


_HEADER_LOWER = COMPRESSION_HEADER.lower()


def _codec_of(headers: Headers) -> bytes | None:
    for name, value in headers:
        if name.lower() == _HEADER_LOWER:
            return value
    return None


def plain_records(records: list[Record], limit: int = MAX_VALUE_BYTES) -> list[Record]:
    """``records`` (changed in place, and returned) with every compressed value
    decompressed and its ``Jet-Compression`` header removed. A value that cannot be
    decompressed (unknown codec, package missing, corrupt) stays as stored, header
    included, so the application can tell (a consumer never stalls on one record)."""
    for i, record in enumerate(records):
        headers = record.headers
        if not headers:
            continue
        codec = _codec_of(headers)
        if codec is None:
            continue
        try:
            value = decompress_value(codec, record.value, limit)
        except CompressionError:
            continue
        rest = tuple(h for h in headers if h[0].lower() != _HEADER_LOWER)
        records[i] = with_value(record, value, rest)
    return records
