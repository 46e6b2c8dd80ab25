"""A client pointed at another protocol's port is told which one it reached (a NATS port is
the easy mistake: `jet dev` prints both), instead of a length read out of "INFO"."""

from __future__ import annotations

import pytest

from jetsdk import Client
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import FrameDecoder, FrameTooLarge
from jetsdk.errors import JetError
from support.nats_server import NatsServer


@pytest.mark.parametrize(
    ("greeting", "named"),
    [
        (b'INFO {"server_id":"x"}\r\n', "NATS"),
        (b"HTTP/1.1 400 Bad Request\r\n", "HTTP"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", "SSH"),
    ],
)
def test_decoder_names_a_foreign_greeting(greeting: bytes, named: str) -> None:
    decoder = FrameDecoder()
    decoder.feed(greeting)
    with pytest.raises(CodecError) as info:
        decoder.next_frame()
    assert named in str(info.value)
    assert info.value.reason == "foreign"
    assert not isinstance(info.value, FrameTooLarge)


def test_an_oversized_length_is_still_frame_too_large() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\x7f\x00\x00\x00")
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


@pytest.mark.anyio
async def test_client_on_a_real_nats_port_says_it_is_one(nats_server: NatsServer) -> None:
    client = Client(f"127.0.0.1:{nats_server.port}", connect_timeout=5, request_timeout=5)
    with pytest.raises(JetError) as info:
        async with client:
            pass
    assert "nats-server's client port" in str(info.value), str(info.value)
