"""FrameDecoder.whole_frame: an answer alone in its read is taken without buffering, the
same frame next_frame gives; anything else is left to feed + next_frame."""

from __future__ import annotations

from jetsdk.codec.frames import FLAG_RESPONSE, FrameDecoder, encode_frame


def _frame(cid: int, body: bytes, flags: int = FLAG_RESPONSE) -> bytes:
    return encode_frame(1, cid, body, flags=flags)


def test_one_whole_frame_is_the_frame_next_frame_gives() -> None:
    data = _frame(7, b"body")
    assert FrameDecoder().whole_frame(data) == (1, FLAG_RESPONSE, 7, b"body")
    decoder = FrameDecoder()
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not None
    assert (frame.api, frame.flags, frame.correlation_id, frame.body) == (1, 1, 7, b"body")
    assert FrameDecoder().whole_frame(_frame(8, b"")) == (1, FLAG_RESPONSE, 8, b"")


def test_anything_else_is_left_to_the_buffer() -> None:
    data = _frame(7, b"body")
    decoder = FrameDecoder()
    assert decoder.whole_frame(data[:5]) is None  # part of one
    assert decoder.whole_frame(data + data) is None  # two
    assert decoder.whole_frame(data[:-1]) is None  # its body cut short
    bad_flags = bytearray(_frame(7, b"x"))
    bad_flags[5] = 0x08
    assert decoder.whole_frame(bytes(bad_flags)) is None  # bad flags
    assert FrameDecoder(max_frame_bytes=8).whole_frame(data) is None  # over the limit
    decoder.feed(data[:3])
    assert decoder.whole_frame(data) is None  # bytes already buffered come first
    assert decoder.buffered_bytes == 3  # and nothing was taken
