from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.record import frame_body
from jetserver.storage.framing import frame_batch


@settings(max_examples=200, deadline=None)
@given(
    first=st.integers(0, 2**63 - 1000),
    ts=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**32 - 1),
    bodies=st.lists(st.binary(max_size=300), max_size=20),
)
def test_frame_batch_matches_the_codec(
    first: int, ts: int, epoch: int, bodies: list[bytes]
) -> None:
    expected = b"".join(frame_body(first + i, ts, epoch, b) for i, b in enumerate(bodies))
    assert frame_batch(first, ts, epoch, bodies) == expected
