"""The sans-I/O NATS reader (jetserver.natsproto): exact bytes, then random streams.

Properties: a stream a NATS server could send parses into exactly the events it was built
from, however it is cut into reads; arbitrary bytes never raise anything but
NatsProtocolError; what a publisher controls (header block, payload, reply) never does.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jetsdk.codec.nats_headers import parse_header_block
from jetserver.natsproto import (
    MAX_CONTROL_LINE_BYTES,
    Err,
    Event,
    Info,
    Message,
    NatsProtocolError,
    NatsReader,
    Ok,
    Ping,
    Pong,
    header_block_ok,
    header_map,
)

TABLE: list[tuple[bytes, list[Event]]] = [
    (b"PING\r\n", [Ping()]),
    (b"PONG\r\n+OK\r\n", [Pong(), Ok()]),
    (b"ping\r\n", [Ping()]),
    (
        b'INFO {"server_id":"x","max_payload":1048576}\r\n',
        [Info({"server_id": "x", "max_payload": 1048576})],
    ),
    (b"-ERR 'Stale Connection'\r\n", [Err("Stale Connection")]),
    (b"-ERR\r\n", [Err("")]),
    (b"MSG a.b 7 5\r\nhello\r\n", [(b"a.b", 7, b"", b"hello")]),
    (b"MSG a.b 7 _INBOX.x 0\r\n\r\n", [(b"a.b", 7, b"_INBOX.x", b"")]),
    (b"MSG  a\t7   2\r\n\r\n\r\n", [(b"a", 7, b"", b"\r\n")]),
    (b"msg a 1 4\r\nPING\r\n", [(b"a", 1, b"", b"PING")]),
    (
        b"HMSG s 3 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        [Message(b"s", 3, b"", b"hi", b"NATS/1.0\r\n\r\n", True)],
    ),
    (
        b"HMSG s 3 r 20 20\r\nNATS/1.0\r\nX-A: 1\r\n\r\n\r\n",
        [Message(b"s", 3, b"r", b"", b"NATS/1.0\r\nX-A: 1\r\n\r\n", True)],
    ),
    # Malformed header blocks (issue 31): a message with the block kept, flagged.
    (b"HMSG s 3 8 9\r\nNATS/1.0x\r\n", [Message(b"s", 3, b"", b"x", b"NATS/1.0", False)]),
    (b"HMSG s 3 1 1\r\nN\r\n", [Message(b"s", 3, b"", b"", b"N", False)]),
    (b"HMSG s 3 0 2\r\nab\r\n", [Message(b"s", 3, b"", b"ab", b"", False)]),
    (
        b"HMSG s 3 10 10\r\nNATS/1.0\r\n\r\n",
        [Message(b"s", 3, b"", b"", b"NATS/1.0\r\n", False)],
    ),
]

BROKEN = [
    b"HELLO\r\n",
    b"\r\n",
    b"MSG a 1\r\n",
    b"MSG a b 1\r\nx\r\n",
    b"MSG a 1 2 3 4\r\n",
    b"MSG a 1 1\r\nxy\r\n",
    b"HMSG a 1 3 2\r\nabc\r\n",
    b"HMSG a 1 x 2\r\nab\r\n",
    b"MSG a 1 99999999999999\r\n",
    b"MSG a 1 -1\r\n",
    b"INFO [1]\r\n",
    b"INFO {\r\n",
    b"PING now\r\n",
]


@pytest.mark.parametrize(("stream", "events"), TABLE)
def test_exact_bytes(stream: bytes, events: list[Event]) -> None:
    assert NatsReader().feed(stream) == events
    reader = NatsReader()
    got = [e for i in range(len(stream)) for e in reader.feed(stream[i : i + 1])]
    assert got == events
    assert reader.buffered == 0


@pytest.mark.parametrize("stream", BROKEN)
def test_broken_streams_raise_a_typed_error(stream: bytes) -> None:
    reader = NatsReader()
    with pytest.raises(NatsProtocolError) as caught:
        reader.feed(b"PING\r\n" + stream + b"PONG\r\n")
    assert caught.value.events_before == [Ping()]
    assert caught.value.offset == 6
    with pytest.raises(NatsProtocolError):
        reader.feed(b"PING\r\n")  # stays broken


def test_limits() -> None:
    with pytest.raises(NatsProtocolError, match="max_message_bytes"):
        NatsReader(max_message_bytes=10).feed(b"MSG a 1 11\r\n")
    assert NatsReader(max_message_bytes=10).feed(b"MSG a 1 10\r\n0123456789\r\n")
    reader = NatsReader()
    reader.feed(b"INFO " + b"x" * (MAX_CONTROL_LINE_BYTES - 5))
    with pytest.raises(NatsProtocolError, match="MAX_CONTROL_LINE_BYTES"):
        reader.feed(b"xx")


def test_a_large_payload_in_small_reads_is_joined_once() -> None:
    payload = bytes(range(256)) * 4096
    stream = b"MSG big 1 %d\r\n" % len(payload) + payload + b"\r\nPING\r\n"
    reader = NatsReader()
    events: list[Event] = []
    for i in range(0, len(stream), 1000):
        events.extend(reader.feed(stream[i : i + 1000]))
    assert events == [(b"big", 1, b"", payload), Ping()]


def test_header_blocks() -> None:
    assert header_block_ok(b"NATS/1.0\r\n\r\n")
    assert header_block_ok(b"NATS/1.0 503\r\n\r\n")
    assert header_block_ok(b"NATS/1.0\r\nA: 1\r\nno colon\r\n\r\n")
    for bad in (b"", b"N", b"NATS/1.0", b"NATS/1.0\r\n", b"NATS/1.1\r\n\r\n", b"NATS/1.0x\r\n\r\n"):
        assert not header_block_ok(bad), bad
    assert header_map(b"NATS/1.0 503\r\n\r\n") == {"Status": "503"}
    assert header_map(b"NATS/1.0 404 No Messages\r\nA: 1\r\nA: 2\r\n\r\n") == {
        "Status": "404",
        "Description": "No Messages",
        "A": "2",
    }
    assert header_map(b"NATS/1.0 \xff\r\nB:\xfe\r\n\r\n") == {"B": "\ufffd"}
    assert header_map(b"NATS/1.0") is None
    assert header_map(b"NATS/1.0\r\n\r\n") is None


# A model of what a NATS server sends: events and their exact bytes.
tokens = st.text("abcXYZ09_-", min_size=1, max_size=6)
subjects = st.lists(tokens, min_size=1, max_size=3).map(".".join).map(str.encode)
odd_bytes = st.one_of(
    st.binary(max_size=60),
    st.sampled_from(
        [b"", b"\r\n", b"\r", b"\n", b"MSG x 1 2\r\nhi\r\n", b"PING\r\n", b"NATS/1.0", b"N"]
    ),
)
header_blocks = st.one_of(
    odd_bytes,
    st.lists(st.tuples(tokens, st.binary(max_size=10)), max_size=4).map(
        lambda lines: (
            b"NATS/1.0\r\n"
            + b"".join(n.encode() + b": " + v.replace(b"\r\n", b"") + b"\r\n" for n, v in lines)
            + b"\r\n"
        )
    ),
)


@st.composite
def server_items(draw: st.DrawFn) -> tuple[bytes, Event]:
    kind = draw(st.sampled_from(["msg", "hmsg", "ping", "pong", "ok", "err", "info"]))
    if kind in ("msg", "hmsg"):
        subject = draw(subjects)
        sid = draw(st.integers(1, 10**6))
        reply = draw(st.one_of(st.just(b""), subjects))
        payload = draw(odd_bytes)
        reply_arg = b" " + reply if reply else b""
        if kind == "msg":
            line = b"MSG %b %d%b %d\r\n" % (subject, sid, reply_arg, len(payload))
            return line + payload + b"\r\n", (subject, sid, reply, payload)
        block = draw(header_blocks)
        total = len(block) + len(payload)
        line = b"HMSG %b %d%b %d %d\r\n" % (subject, sid, reply_arg, len(block), total)
        event = Message(subject, sid, reply, payload, block, header_block_ok(block))
        return line + block + payload + b"\r\n", event
    if kind == "ping":
        return b"PING\r\n", Ping()
    if kind == "pong":
        return b"PONG\r\n", Pong()
    if kind == "ok":
        return b"+OK\r\n", Ok()
    if kind == "err":
        text = draw(st.text("abc XYZ:'", max_size=20)).strip()
        return b"-ERR '%b'\r\n" % text.encode(), Err(text)
    server_id: str = draw(tokens)
    max_payload: int = draw(st.integers(0, 2**30))
    line = b'INFO {"server_id":"%b","max_payload":%d}\r\n' % (server_id.encode(), max_payload)
    return line, Info({"server_id": server_id, "max_payload": max_payload})


@settings(max_examples=300, deadline=None)
@given(st.lists(server_items(), max_size=12), st.lists(st.integers(0, 400), max_size=8))
@example([(b"HMSG s 1 8 9\r\nNATS/1.0x\r\n", Message(b"s", 1, b"", b"x", b"NATS/1.0", False))], [1])
def test_split_anywhere_equals_one_shot(items: list[tuple[bytes, Event]], cuts: list[int]) -> None:
    stream = b"".join(raw for raw, _event in items)
    expected = [event for _raw, event in items]
    assert NatsReader().feed(stream) == expected
    reader = NatsReader()
    got: list[Event] = []
    last = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        got.extend(reader.feed(stream[last:cut]))
        last = cut
    assert got == expected
    assert reader.buffered == 0


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=40), odd_bytes), max_size=10))
def test_arbitrary_bytes_raise_only_the_protocol_error(chunks: list[bytes]) -> None:
    reader = NatsReader()
    try:
        for chunk in chunks:
            for event in reader.feed(chunk):
                assert isinstance(event, (tuple, Message, Ping, Pong, Ok, Info, Err))
    except NatsProtocolError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_any_header_block_is_read_without_raising(block: bytes) -> None:
    parse_header_block(block)
    mapped = header_map(block)
    assert mapped is None or header_block_ok(block)
