"""FrameDecoder: chunking independence, limits, broken-stream behaviour."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import (
    FLAG_ERROR,
    FLAG_RESPONSE,
    FRAME_HEADER_SIZE,
    Api,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    encode_frame,
    encode_frame_header,
)
from jetsdk.codec.limits import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_BYTES

from .strategies import U32

frames = st.builds(
    Frame,
    api=st.integers(0, 255),
    flags=st.sampled_from([0, FLAG_RESPONSE, FLAG_RESPONSE | FLAG_ERROR]),
    correlation_id=U32,
    body=st.binary(max_size=32),
)


def encode(frame: Frame) -> bytes:
    return encode_frame(frame.api, frame.correlation_id, frame.body, flags=frame.flags)


def drain(decoder: FrameDecoder) -> list[Frame]:
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(frames, max_size=4), st.randoms(use_true_random=False))
def test_any_chunking_yields_the_same_frames(batch: list[Frame], rnd: random.Random) -> None:
    stream = b"".join(encode(f) for f in batch)
    # all at once
    whole = FrameDecoder()
    whole.feed(stream)
    assert drain(whole) == batch
    # byte by byte
    single = FrameDecoder()
    got: list[Frame] = []
    for i in range(len(stream)):
        single.feed(stream[i : i + 1])
        got.extend(drain(single))
    assert got == batch
    # random chunks, including empty ones
    chunked = FrameDecoder()
    got = []
    pos = 0
    while pos < len(stream):
        step = rnd.randint(0, 40)
        chunked.feed(memoryview(stream)[pos : pos + step])
        pos += step
        got.extend(drain(chunked))
    assert got == batch
    assert chunked.buffered_bytes == 0


def test_frame_properties_and_header() -> None:
    raw = encode_frame(Api.FETCH, 0xDEADBEEF, b"xyz", flags=FLAG_RESPONSE | FLAG_ERROR)
    assert raw == bytes.fromhex("00000009 07 03 deadbeef") + b"xyz"
    assert raw[:FRAME_HEADER_SIZE] == encode_frame_header(
        Api.FETCH, 0xDEADBEEF, 3, flags=FLAG_RESPONSE | FLAG_ERROR
    )
    decoder = FrameDecoder()
    decoder.feed(raw)
    frame = decoder.next_frame()
    assert frame is not None
    assert frame.is_response
    assert frame.is_error
    assert not Frame(api=0, flags=0, correlation_id=0, body=b"").is_response


def test_oversized_prefix_refused_after_ten_bytes() -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    header = encode_frame_header(Api.PRODUCE, 5, 2000)
    assert len(header) == 10
    decoder.feed(header)
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert info.value.size == 2006
    assert info.value.limit == 1024
    assert info.value.reason == "limit"
    assert isinstance(info.value, CodecError)


def test_oversized_prefix_refused_from_the_prefix_alone() -> None:
    decoder = FrameDecoder()
    decoder.feed((DEFAULT_MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_prefix_at_the_limit_waits_for_the_body() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    decoder.feed((100).to_bytes(4, "big") + b"\x06\x00\x00\x00\x00\x01")
    assert decoder.next_frame() is None
    decoder.feed(b"b" * 94)
    frame = decoder.next_frame()
    assert frame is not None
    assert frame.body == b"b" * 94


def test_incomplete_prefix_needs_data() -> None:
    decoder = FrameDecoder()
    for b in b"\x00\x00\x00":
        decoder.feed(bytes([b]))
        assert decoder.next_frame() is None


@pytest.mark.parametrize("length", [0, 1, 5])
def test_length_below_six_is_malformed(length: int) -> None:
    decoder = FrameDecoder()
    decoder.feed(length.to_bytes(4, "big"))
    with pytest.raises(CodecError) as info:
        decoder.next_frame()
    assert info.value.reason == "malformed"
    assert not isinstance(info.value, FrameTooLarge)


def test_decoder_stays_broken_after_an_error() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.feed(b"\x00\x00\x01\x00")
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    decoder.feed(encode_frame(0, 1, b""))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


@pytest.mark.parametrize("flags", [FLAG_ERROR, 0x04, 0x80, 0xFF])
def test_bad_flags_are_malformed(flags: int) -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00\x00\x06\x01" + bytes([flags]) + b"\x00\x00\x00\x01")
    with pytest.raises(CodecError):
        decoder.next_frame()


@pytest.mark.parametrize(
    ("api", "cid", "flags"),
    [(256, 0, 0), (-1, 0, 0), (0, 2**32, 0), (0, -1, 0), (0, 0, 0x04), (0, 0, 0x100)],
)
def test_encoder_refuses_out_of_range_fields(api: int, cid: int, flags: int) -> None:
    with pytest.raises(CodecError) as info:
        encode_frame(api, cid, b"", flags=flags)
    assert info.value.reason == "limit"


def test_encoder_refuses_oversized_body() -> None:
    with pytest.raises(CodecError) as info:
        encode_frame_header(0, 0, MAX_FRAME_BYTES)
    assert info.value.reason == "limit"
    assert len(encode_frame_header(0, 0, MAX_FRAME_BYTES - 6)) == FRAME_HEADER_SIZE


@pytest.mark.parametrize("limit", [5, MAX_FRAME_BYTES + 1])
def test_decoder_limit_is_validated(limit: int) -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(limit)


def test_memory_is_released_after_each_frame() -> None:
    decoder = FrameDecoder()
    one = encode_frame(Api.PRODUCE, 1, b"x" * 1000)
    for _ in range(100):
        decoder.feed(one)
        assert decoder.next_frame() is not None
        assert decoder.buffered_bytes == 0


def test_broken_decoder_drops_further_input() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.feed(b"\x00\x00\x01\x00")
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    decoder.feed(b"x" * 1000)
    assert decoder.buffered_bytes == 4


def test_large_frame_read_in_pieces_and_a_reused_read_buffer() -> None:
    # A 1 MiB body arriving in 64 KiB reads, the way a socket delivers it, with a small
    # frame behind it in the last read; half the reads come through one reused buffer
    # (a view of it fed, then the buffer overwritten): the frames are unaffected.
    body = bytes(range(256)) * 4096
    small = encode_frame(3, 9, b"after")
    stream = encode_frame(1, 7, body) + small
    decoder = FrameDecoder()
    reused = bytearray(65536)
    got: list[Frame] = []
    for i, pos in enumerate(range(0, len(stream), 65536)):
        piece = stream[pos : pos + 65536]
        if i % 2:
            reused[: len(piece)] = piece
            decoder.feed(memoryview(reused)[: len(piece)])
            reused[:] = bytes(65536)
        else:
            decoder.feed(piece)
        got.extend(drain(decoder))
    assert [(f.api, f.correlation_id, f.body) for f in got] == [(1, 7, body), (3, 9, b"after")]
    assert decoder.buffered_bytes == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(frames, max_size=4), st.randoms(use_true_random=False))
def test_bodies_read_in_place_yield_the_same_frames(batch: list[Frame], rnd: random.Random) -> None:
    """With ``readinto_min``, any mix of received chunks fed and bytes received into
    :meth:`FrameDecoder.read_target` gives the frames the plain decoder gives."""
    stream = b"".join(encode(f) for f in batch)
    decoder = FrameDecoder(readinto_min=rnd.randint(1, 16))
    got: list[Frame] = []
    pos = 0
    while pos < len(stream):
        step = rnd.randint(0, 40)
        target = decoder.read_target()
        if target is not None and rnd.random() < 0.7:
            n = min(step, len(target), len(stream) - pos)
            target[:n] = stream[pos : pos + n]
            decoder.filled(n)
            pos += n
        else:
            decoder.feed(memoryview(stream)[pos : pos + step])
            pos += step
        got.extend(drain(decoder))
    assert got == batch
    assert decoder.buffered_bytes == 0
    assert decoder.read_target() is None


def test_a_large_body_is_received_into_its_own_buffer() -> None:
    """The body of a large frame not all received is received in place: the caller's
    reads go straight into the buffer that becomes the frame's body (no join of chunks);
    frames wholly received stay slices of what was fed, and one ahead of the large frame
    in the same chunk is not held back."""
    small = encode_frame(Api.FETCH, 1, b"s" * 10)
    big_body = bytes(range(256)) * 1024  # 256 KiB
    big = encode_frame(Api.PRODUCE, 2, big_body)
    decoder = FrameDecoder(readinto_min=64 * 1024)
    decoder.feed(small + big[:1000])
    first = decoder.next_frame()
    assert first is not None
    assert first.body == b"s" * 10
    assert type(first.body) is bytes
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 1000
    target = decoder.read_target()
    assert target is not None
    assert len(target) == len(big) - 1000
    buffer = target.obj
    pos = 1000
    while (target := decoder.read_target()) is not None and pos < len(big):
        n = min(len(target), 100_000)
        target[:n] = big[pos : pos + n]
        decoder.filled(n)
        pos += n
        assert decoder.buffered_bytes == pos
        if pos < len(big):
            assert decoder.next_frame() is None
    frame = decoder.next_frame()
    assert frame is not None
    assert frame.body is buffer  # the buffer received into, not a copy
    assert (frame.api, frame.correlation_id, frame.body) == (Api.PRODUCE, 2, big_body)
    assert decoder.buffered_bytes == 0
    assert decoder.read_target() is None
    # Below the threshold: received chunks, one slice or join as before.
    plain = FrameDecoder(readinto_min=len(big_body) + 1)
    plain.feed(big[:1000])
    assert plain.next_frame() is None
    assert plain.read_target() is None


def test_bad_flags_are_refused_before_a_body_is_read_in_place() -> None:
    decoder = FrameDecoder(readinto_min=16)
    length = (1000 + FRAME_HEADER_SIZE - 4).to_bytes(4, "big")
    decoder.feed(length + bytes([Api.PRODUCE, 0x80, 0, 0, 0, 1]) + b"x" * 100)
    with pytest.raises(CodecError):
        decoder.next_frame()
    assert decoder.read_target() is None


def test_a_body_read_in_place_is_not_zero_filled_first() -> None:
    # Issue 39: the buffer of a body read in place was made with bytearray(size), which
    # zero-fills it (a pass over every byte, and each page faulted in) before the socket
    # overwrites it all. Made unset, a 64 MiB body's buffer touches no page until filled
    # (64 MiB is above the allocator's largest mmap threshold: fresh pages every time).
    import resource

    size = 64 << 20
    decoder = FrameDecoder(size + 16, readinto_min=1 << 16)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    decoder.feed(encode_frame_header(Api.PRODUCE, 9, size))
    assert decoder.next_frame() is None
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    target = decoder.read_target()
    assert target is not None
    assert len(target) == size
    assert faults < size // 4096 // 16, faults  # zero-filled: every one of its 16384 pages
    del target, decoder
    # A frame is handed out only once its last byte is in.
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_BYTES, readinto_min=1 << 16)
    body = random.randbytes(1 << 20)
    whole = encode_frame(Api.PRODUCE, 5, body)
    decoder.feed(whole[:1000])
    assert decoder.next_frame() is None
    target = decoder.read_target()
    assert target is not None
    assert len(target) == len(whole) - 1000
    target[: len(target) - 1] = whole[1000:-1]
    decoder.filled(len(target) - 1)
    assert decoder.next_frame() is None
    decoder.feed(whole[-1:])
    frame = decoder.next_frame()
    assert frame is not None
    assert frame.body == body
    assert frame.correlation_id == 5


def test_chunks_that_are_each_one_whole_frame_decode_as_fed() -> None:
    """A chunk that is exactly one frame (a request alone in its read) gives that frame,
    and leaves the chunks after it buffered: a torn frame behind it still waits."""
    one = encode_frame(0, 7, b"first")
    two = encode_frame(3, 8, b"")
    three = encode_frame(0, 9, b"third body")
    dec = FrameDecoder()
    dec.feed(one)
    dec.feed(two)
    dec.feed(three[:5])
    got = dec.next_frame()
    assert got is not None
    assert (got.api, got.correlation_id, bytes(got.body)) == (0, 7, b"first")
    assert dec.buffered_bytes == len(two) + 5
    got = dec.next_frame()
    assert got is not None
    assert (got.api, got.correlation_id, bytes(got.body)) == (3, 8, b"")
    assert dec.next_frame() is None
    assert dec.buffered_bytes == 5
    dec.feed(three[5:])
    got = dec.next_frame()
    assert got is not None
    assert (got.correlation_id, bytes(got.body)) == (9, b"third body")
    assert dec.buffered_bytes == 0
    assert dec.next_frame() is None
