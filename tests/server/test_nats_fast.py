"""jet's receive path of nats-py connections (jetserver.natslink.fast) and NatsLink.publish_many.

JetParser is checked against nats-py's own parser on random well-formed protocol streams
cut at random points (the same calls to the client), and on malformed header blocks and
failing handlers (where it differs on purpose: nothing stops it); direct delivery and
batched publishing against a real nats-server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import nats
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg
from nats.protocol.parser import Parser

from jetserver.broker.nats_port import SkipMarked, header_lines
from jetserver.broker.stored_copy import stored_header_block
from jetserver.config.server import NatsConfig
from jetserver.natslink.fast import JetNatsClient, JetParser, fast_path_supported
from jetserver.natslink.link import _NATS_PY_PUB_INTERNALS, NatsLink
from jetserver.testing import nats_flushed
from support.nats_server import NatsServer


class _Recorder:
    """Stands in for the nats-py client behind a parser: records what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self._subs: dict[int, object] = {}
        self._jet_direct: dict[int, object] = {}
        self.stats: dict[str, int] = {}

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        self.calls.append(("msg", sid, bytes(subject), bytes(reply), data, headers))

    async def _process_ping(self) -> None:
        self.calls.append(("ping",))

    async def _process_pong(self) -> None:
        self.calls.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.calls.append(("info", info))

    async def _process_err(self, err: str) -> None:
        self.calls.append(("err", err))


tokens = st.text("abcXYZ09_-", min_size=1, max_size=6)
subjects = st.lists(tokens, min_size=1, max_size=3).map(".".join)
payloads = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"MSG x 1 2\r\nhi\r\n", b"\r\n", b"PING\r\n", b"\r"]),
)


@st.composite
def operations(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["msg", "msg", "msg", "reply", "hmsg", "ping", "pong", "ok"]))
    sid = draw(st.integers(1, 300))
    subject = draw(subjects).encode()
    payload = draw(payloads)
    if kind == "msg":
        return b"MSG %b %d %d\r\n%b\r\n" % (subject, sid, len(payload), payload)
    if kind == "reply":
        reply = draw(subjects).encode()
        return b"MSG %b %d %b %d\r\n%b\r\n" % (subject, sid, reply, len(payload), payload)
    if kind == "hmsg":
        hdr = b"NATS/1.0\r\nk: v\r\n\r\n"
        total = len(hdr) + len(payload)
        return b"HMSG %b %d %d %d\r\n%b%b\r\n" % (subject, sid, len(hdr), total, hdr, payload)
    return {"ping": b"PING\r\n", "pong": b"PONG\r\n", "ok": b"+OK\r\n"}[kind]


async def _feed(parser_class: type[Parser], chunks: list[bytes]) -> list[tuple[Any, ...]]:
    nc = _Recorder()
    parser = parser_class(nc)
    for chunk in chunks:
        await parser.parse(chunk)
    assert not parser.buf, "everything was complete, nothing may be left"
    if isinstance(parser, JetParser):
        assert parser.reader.buffered == 0
    return nc.calls


def _cut(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts})
    out, last = [], 0
    for p in [*points, len(stream)]:
        out.append(stream[last:p])
        last = p
    return out


@pytest.fixture
async def link(nats_server: NatsServer) -> AsyncIterator[NatsLink]:
    """A NatsLink connected to ``nats_server`` (default settings); closed after the test."""
    link = NatsLink(NatsConfig(servers=(nats_server.url,)))
    await link.connect(attempts=3)
    try:
        yield link
    finally:
        await link.close()


def test_fast_path_is_supported_by_the_installed_nats_py() -> None:
    """Fails loudly when a nats-py release drops an internal the fast paths use (the
    server would silently fall back to the slow ones); pinned in server/pyproject.toml."""
    assert fast_path_supported()
    assert isinstance(JetNatsClient()._ps, JetParser)


@pytest.mark.anyio
async def test_batched_publish_internals_exist_on_a_connected_client(
    nats_server: NatsServer,
) -> None:
    link = NatsLink(NatsConfig(servers=(nats_server.url,)))
    await link.connect()
    try:
        missing = [name for name in _NATS_PY_PUB_INTERNALS if not hasattr(link.client, name)]
        assert missing == []
        assert link._batch_pub, "publish_many would fall back to one publish per message"
    finally:
        await link.close()


_MARK = b"\r\nJet-Stored: s 0\r\n"


async def _probe(nc: Any, subject: str, heard: anyio.Event) -> None:
    """Publish to ``subject`` on ``nc`` until a subscriber says it ``heard`` one (bounded):
    a subscriber's flush does not always mean another connection's messages reach it yet
    (on a loaded machine about 1 run of 15 lost the first ones, plain nats-py too)."""
    with anyio.fail_after(10):
        while not heard.is_set():
            await nc.publish(subject, b"")
            await nats_flushed(nc)
            with anyio.move_on_after(0.1):
                await heard.wait()


@attrs.define(eq=False)
class _Watch:
    """What a watcher subscribed to ``<prefix>.>`` received: the payloads, in order, and
    an event set once ``count`` arrived."""

    prefix: str
    count: int
    payloads: list[bytes] = attrs.Factory(list)
    all_in: anyio.Event = attrs.Factory(anyio.Event)
    heard: anyio.Event = attrs.Factory(anyio.Event)
    """Set at the first ``<prefix>.probe`` (not counted among the payloads)."""

    async def on_msg(self, msg: Msg) -> None:
        if msg.subject == f"{self.prefix}.probe":
            self.heard.set()
            return
        self.payloads.append(msg.data)
        if len(self.payloads) == self.count:
            self.all_in.set()


@asynccontextmanager
async def _watching(url: str, prefix: str, count: int, sender: Any) -> AsyncIterator[_Watch]:
    """A watcher on its own NATS connection to ``url``, subscribed to ``<prefix>.>``,
    once what ``sender`` (a nats-py connection) publishes is known to reach it
    (:func:`_probe`); closed on exit."""
    watch = _Watch(prefix, count)
    nc = await nats.connect(url)
    try:
        await nc.subscribe(f"{prefix}.>", cb=watch.on_msg)
        await nats_flushed(nc)
        await _probe(sender, f"{prefix}.probe", watch.heard)
        yield watch
    finally:
        await nc.close()


def _is_marked(call: tuple[Any, ...]) -> bool:
    headers, payload = call[5], call[4]
    return bool(headers) and _MARK in headers and payload.startswith(b"\xffJET")


class _SkipDirect:
    """What the parser uses of a direct subscription: its skip filter, and ``push`` for a
    message without headers (recorded as ``_process_msg`` would record it)."""

    def __init__(self, nc: _Recorder) -> None:
        self.skip = SkipMarked(_MARK, b"\xffJET")
        self.nc = nc

    def push(self, subject: bytes, reply: bytes, data: bytes) -> None:
        self.nc.calls.append(("msg", 7, bytes(subject), bytes(reply), data, None))


@st.composite
def marked_or_not(draw: st.DrawFn) -> tuple[bytes, bool]:
    """An HMSG for sid 7: with the marker line or a near miss, an envelope or not."""
    header = draw(
        st.sampled_from(
            [
                b"NATS/1.0" + _MARK + b"\r\n",
                b"NATS/1.0\r\nk: v" + _MARK + b"\r\n",
                b"NATS/1.0\r\nJet-Stored: s 01\r\n\r\n",
                b"NATS/1.0\r\nJet-Stored: xs 0\r\n\r\n",
            ]
        )
    )
    payload = draw(st.sampled_from([b"\xffJET...", b"plain", b""]))
    total = len(header) + len(payload)
    op = b"HMSG s 7 %d %d\r\n%b%b\r\n" % (len(header), total, header, payload)
    return op, _MARK in header and payload.startswith(b"\xffJET")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(operations().map(lambda op: (op, False)), marked_or_not()), max_size=12),
    st.lists(st.integers(0, 10**6)),
)
@example([(b"MSG 0 7 0\r\n\r\n", False)], [])  # a plain MSG for the direct subscription
def test_marked_copies_are_dropped_and_nothing_else(
    ops: list[tuple[bytes, bool]], cuts: list[int]
) -> None:
    stream = b"".join(op for op, _ in ops)
    kept = b"".join(op for op, dropped in ops if not dropped)

    async def both() -> None:
        expected = await _feed(Parser, [kept])
        nc = _Recorder()
        nc.stats.update(in_msgs=0, in_bytes=0)
        direct = _SkipDirect(nc)
        nc._subs[7] = object()
        nc._jet_direct[7] = direct
        parser = JetParser(nc)
        for chunk in _cut(stream, cuts):
            await parser.parse(chunk)
        # Marked copies the parser did not drop itself (after an operation it leaves to
        # nats-py) reach _process_msg, where JetNatsClient drops them.
        passed_on = [c for c in nc.calls if c[0] == "msg" and c[1] == 7 and _is_marked(c)]
        assert [c for c in nc.calls if not (c[0] == "msg" and c[1] == 7 and _is_marked(c))] == (
            expected
        )
        assert direct.skip.count + len(passed_on) == sum(dropped for _, dropped in ops)

    asyncio.run(both())


@settings(max_examples=300, deadline=None)
@given(st.lists(operations(), min_size=1, max_size=12), st.lists(st.integers(0, 10**6)))
def test_fast_parser_matches_nats_py(ops: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(ops)
    chunks = _cut(stream, cuts)

    async def both() -> None:
        expected = await _feed(Parser, [stream])
        assert await _feed(JetParser, chunks) == expected
        assert await _feed(JetParser, [stream[i : i + 1] for i in range(len(stream))]) == (expected)

    asyncio.run(both())


@pytest.mark.anyio
async def test_chunk_ending_after_a_msg_line_that_nats_py_parsed() -> None:
    # nats-py parses PING and the MSG line, then awaits the payload with an empty buffer:
    # the next chunk is payload, never a new control line (found by the property test).
    stream = b"PING\r\nMSG a.b 10 15\r\nMSG \x00 0 0\r\n\x00\x00\x00\x00\r\nPING\r\n"
    expected = await _feed(Parser, [stream])
    assert expected[1] == ("msg", 10, b"a.b", b"", b"MSG \x00 0 0\r\n\x00\x00\x00\x00", None)
    for cut in range(len(stream) + 1):
        assert await _feed(JetParser, [stream[:cut], stream[cut:]]) == expected, cut


@pytest.mark.anyio
async def test_unusual_msg_lines_parse_as_nats_py_does() -> None:
    stream = b"MSG a  1 2\r\nhi\r\nMSG b\t2 3\r\nabc\r\nMSG c 3 r 1\r\nx\r\n"
    assert await _feed(JetParser, [stream]) == await _feed(Parser, [stream])


@pytest.mark.anyio
async def test_direct_delivery_order_headers_reply_and_unsubscribe(
    nats_server: NatsServer,
    link: NatsLink,
) -> None:
    got: list[Msg] = []
    done = anyio.Event()

    async def handler(msg: Msg) -> None:
        got.append(msg)
        if len(got) == 203:
            done.set()

    sub = await link.subscribe("fast.>", handler)
    assert isinstance(link.client, JetNatsClient)
    assert link.client._jet_direct
    await link.flush(5)
    plain = await nats.connect(nats_server.url)
    try:
        for i in range(100):
            await plain.publish(f"fast.{i % 3}", b"m%d" % i)
        await plain.publish("fast.h", b"with headers", headers={"k": "v"})
        await plain.publish("fast.r", b"with reply", reply="_INBOX.r")
        queued = await link.publish_many([(f"fast.p.{i}", b"p%d" % i) for i in range(100)])
        assert queued == 100
        await plain.publish("fast.end", b"end")
        await nats_flushed(plain)
        with anyio.fail_after(10):
            await done.wait()
    finally:
        await plain.close()
    datas = [m.data for m in got]
    from_plain = [d for d in datas if d.startswith(b"m")]
    from_link = [d for d in datas if d.startswith(b"p")]
    assert from_plain == [b"m%d" % i for i in range(100)]
    assert from_link == [b"p%d" % i for i in range(100)]
    headers_msg = next(m for m in got if m.data == b"with headers")
    assert headers_msg.headers == {"k": "v"}
    assert next(m for m in got if m.data == b"with reply").reply == "_INBOX.r"
    # Order holds per publishing connection only, so check subjects per source.
    assert [m.subject for m in got if m.data.startswith(b"m")][:3] == ["fast.0", "fast.1", "fast.2"]
    assert next(m for m in got if m.data == b"p7").subject == "fast.p.7"
    await sub.unsubscribe()
    assert not link.client._jet_direct


@pytest.mark.anyio
async def test_sink_takes_messages_and_declined_ones_keep_their_order(
    link: NatsLink,
) -> None:
    # The sink declines messages 100-199 (as a partition does while its queue is full):
    # they and every later one go through the handler until its deque is empty again;
    # one publishing connection, so one order across sink and handler.
    order: list[bytes] = []
    by_sink: list[bytes] = []
    events = {200: anyio.Event(), 400: anyio.Event()}

    def delivered(data: bytes) -> None:
        order.append(data)
        if len(order) in events:
            events[len(order)].set()

    def sink(subject: str, reply: str, data: bytes) -> bool:
        assert (subject, reply) == ("sink.s", "")
        if 100 <= int(data) < 200:
            return False
        by_sink.append(data)
        delivered(data)
        return True

    async def handler(msg: Msg) -> None:
        delivered(msg.data)

    await link.subscribe("sink.s", handler, sink=sink)
    await link.flush(5)
    for start in (0, 200):
        for chunk in range(start, start + 200, 50):
            batch = [("sink.s", b"%d" % i) for i in range(chunk, chunk + 50)]
            assert await link.publish_many(batch) == 50
        with anyio.fail_after(20):
            await events[start + 200].wait()
    assert order == [b"%d" % i for i in range(400)]
    # Once the deque was empty again, the sink took every message.
    assert by_sink[:100] == [b"%d" % i for i in range(100)]
    assert by_sink[-200:] == [b"%d" % i for i in range(200, 400)]


@pytest.mark.anyio
async def test_direct_delivery_drops_beyond_the_pending_limit(nats_server: NatsServer) -> None:
    link = NatsLink(NatsConfig(servers=(nats_server.url,), sub_pending_msgs=5))
    await link.connect(attempts=3)
    release = anyio.Event()
    got: list[bytes] = []

    async def slow(msg: Msg) -> None:
        await release.wait()
        got.append(msg.data)

    await link.subscribe("slow", slow)
    await link.flush(5)
    assert await link.publish_many([("slow", b"%d" % i) for i in range(50)]) == 50
    await link.flush(5)
    with anyio.fail_after(10):
        while link.client.stats["in_msgs"] < 50:  # noqa: ASYNC110 - no event for this
            await anyio.sleep(0.01)
    release.set()
    with anyio.fail_after(10):
        while len(got) < 5:  # noqa: ASYNC110 - polling the handler's list, bounded
            await anyio.sleep(0.01)
    # Every queued message has been handed to the handler: the delivery is idle again.
    (direct,) = link.client._jet_direct.values()
    with anyio.fail_after(10):
        while direct.queue or direct.busy:  # noqa: ASYNC110 - the delivery's state, no event
            await anyio.sleep(0.01)
    # The first five were queued; beyond the limit messages were dropped as a slow
    # consumer, as nats-py does. One more may have found room when the handler took one
    # from the queue while the rest were still arriving (which one depends on timing).
    assert got[:5] == [b"%d" % i for i in range(5)]
    assert len(got) <= 6
    assert [int(d) for d in got] == sorted({int(d) for d in got})
    await link.close()


@pytest.mark.anyio
async def test_publish_many_refuses_bad_subjects_and_oversized_payloads(
    nats_server: NatsServer,
) -> None:
    link = NatsLink(NatsConfig(servers=(nats_server.url,)))
    assert await link.publish_many([("a", b"x")]) == 0  # not connected
    await link.connect(attempts=3)
    assert await link.publish_many([("a", b"x"), ("bad subject", b"y"), ("c", b"z")]) == 1
    assert await link.publish_many([("a\r\nPUB x 1", b"y")]) == 0
    big = b"x" * (link.max_payload + 1)
    assert await link.publish_many([("a", b"x"), ("a", big)]) == 1
    assert await link.publish_many([]) == 0
    await link.close()


@pytest.mark.anyio
async def test_idle_direct_subscriptions_start_no_task_until_a_message_needs_one(
    nats_server: NatsServer,
    link: NatsLink,
) -> None:
    # A server holds thousands of idle partition subscriptions: neither nats-py's delivery
    # task and queue nor the direct delivery's task and deque may exist before a message
    # needs them (the sink takes messages without them).
    got: list[bytes] = []
    arrived = anyio.Event()

    async def handler(msg: Msg) -> None:
        got.append(msg.data)
        arrived.set()

    def sink(subject: str, reply: str, data: bytes) -> bool:
        if data == b"decline":
            return False
        got.append(data)
        return True

    tasks_before = len(asyncio.all_tasks())
    subs = [await link.subscribe(f"idle.{i}", handler, sink=sink) for i in range(50)]
    assert len(asyncio.all_tasks()) == tasks_before
    assert isinstance(link.client, JetNatsClient)
    nats_subs = [link.client._subs[sid] for sid in link.client._jet_direct]
    assert all(s._wait_for_msgs_task is None for s in nats_subs)
    assert all("_jet_queue" not in vars(s) for s in nats_subs)
    assert all(d.queue is None and d.task is None for d in link.client._jet_direct.values())
    await link.flush(5)
    plain = await nats.connect(nats_server.url)
    try:
        await plain.publish("idle.3", b"taken")
        await plain.publish("idle.3", b"decline")
        await nats_flushed(plain)
        with anyio.fail_after(10):
            await arrived.wait()
    finally:
        await plain.close()
    assert got == [b"taken", b"decline"]
    started = [d for d in link.client._jet_direct.values() if d.task is not None]
    assert [d.sid for d in started] == [nats_subs[3]._id]
    assert len(asyncio.all_tasks()) == tasks_before + 1
    for sub in subs:
        await sub.unsubscribe()
    assert not link.client._jet_direct
    assert not link.client._subs


@pytest.mark.anyio
async def test_malformed_header_blocks_reach_the_client_without_headers() -> None:
    """Issue 31: nats-py's ``_process_headers`` raised IndexError on these and stopped the
    read loop; now each message goes on without its block, counted."""
    blocks = [b"NATS/1.0", b"N", b"", b"X: 1\r\n\r\n", b"NATS/1.0\r\n"]
    stream = (
        b"".join(b"HMSG s 3 %d %d\r\n%bp\r\n" % (len(b), len(b) + 1, b) for b in blocks)
        + b"HMSG s 3 12 13\r\nNATS/1.0\r\n\r\np\r\nPING\r\n"
    )
    nc = _Recorder()
    parser = JetParser(nc)
    for i in range(len(stream)):
        await parser.parse(stream[i : i + 1])
    assert nc.calls == [("msg", 3, b"s", b"", b"p", None)] * len(blocks) + [
        ("msg", 3, b"s", b"", b"p", b"NATS/1.0\r\n\r\n"),
        ("ping",),
    ]
    assert parser.malformed_headers == len(blocks)


class _Failing(_Recorder):
    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        if data == b"boom":
            raise IndexError("a handler bug")
        await super()._process_msg(sid, subject, reply, data, headers)


@pytest.mark.anyio
async def test_a_failing_handler_does_not_stop_the_messages_after_it() -> None:
    nc = _Failing()
    parser = JetParser(nc)
    await parser.parse(b"MSG a 1 4\r\nboom\r\nMSG a 1 2\r\nok\r\nPING\r\n")
    assert nc.calls == [("msg", 1, b"a", b"", b"ok", None), ("ping",)]
    assert parser.handler_errors == 1


@pytest.mark.anyio
async def test_a_broken_stream_is_a_protocol_error_after_what_came_before() -> None:
    nc = _Recorder()
    parser = JetParser(nc)
    with pytest.raises(nats.errors.ProtocolError):
        await parser.parse(b"MSG a 1 2\r\nok\r\nBOGUS\r\nPING\r\n")
    assert nc.calls == [("msg", 1, b"a", b"", b"ok", None)]
    parser.reset()  # nats-py on reconnect
    await parser.parse(b"PING\r\n")
    assert nc.calls[-1] == ("ping",)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_the_client_reads_any_header_block_without_raising(block: bytes) -> None:
    async def read() -> None:
        headers = await JetNatsClient()._process_headers(block)
        assert headers is None or isinstance(headers, dict)

    asyncio.run(read())


@pytest.mark.anyio
@pytest.mark.parametrize("reader", ["jet", "nats-py"])
async def test_malformed_header_blocks_reach_a_direct_subscription_without_headers(
    nats_server: NatsServer, link: NatsLink, reader: str
) -> None:
    """Whichever parser reads (nats-py's where the fast path is unsupported), a malformed
    block is dropped and its message delivered plain; the others keep their lines."""
    if reader == "nats-py":
        link.client._ps = Parser(link.client)
    got: list[Msg] = []
    done = anyio.Event()

    async def handler(msg: Msg) -> None:
        got.append(msg)
        if msg.data == b"end":
            done.set()

    await link.subscribe("mal", handler)
    await link.flush(5)
    blocks = [
        b"NATS/1.0\r\nX: 1\r\n",
        b"N",
        b"NATS/1.0 \xff\r\n\r\n",
        b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n",
    ]
    host, port = nats_server.url.removeprefix("nats://").rsplit(":", 1)
    async with await anyio.connect_tcp(host, int(port)) as sock:
        await sock.receive()
        out = [b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n']
        for i, block in enumerate(blocks):
            out.append(b"HPUB mal %d %d\r\n%bp%d\r\n" % (len(block), len(block) + 2, block, i))
        out.append(b"PUB mal 3\r\nend\r\n")
        await sock.send(b"".join(out))
        with anyio.fail_after(10):
            await done.wait()
    assert [m.data for m in got] == [b"p0", b"p1", b"p2", b"p3", b"end"]
    assert [header_lines(m) for m in got] == [(), (), (), (("A", b"1"), ("A", b"2")), ()]
    assert got[3].headers == {"A": "2"}
    if reader == "jet":
        assert link.malformed_headers == 2


@pytest.mark.anyio
async def test_publish_many_writes_in_a_loop_callback_without_waking_the_flusher(
    nats_server: NatsServer,
    link: NatsLink,
) -> None:
    """What one loop turn publishes goes out in one write from a loop callback: nats-py's
    flusher task is not woken (a task step per Produce request at light load), and the
    order holds across turns and with nats-py's own publishes."""
    nc = link.client
    async with _watching(nats_server.url, "w", 31, nc) as watch:
        kicks = [0]
        real_put = nc._flush_queue.put_nowait

        def counted(item: Any) -> None:
            kicks[0] += 1
            real_put(item)

        nc._flush_queue.put_nowait = counted  # asyncio.Queue.put goes through put_nowait
        for turn in range(10):
            for i in range(3):
                assert await link.publish_many([(f"w.{turn}", b"%d" % (turn * 3 + i))]) == 1
            assert nc._pending_data_size > 0  # queued, written at the end of the turn
            await asyncio.sleep(0)
            assert nc._pending_data_size == 0
        assert kicks == [0]
        await nc.publish("w.end", b"30")  # nats-py's own path still works after ours
        await nats_flushed(nc)
        with anyio.fail_after(10):
            await watch.all_in.wait()
    assert watch.payloads == [b"%d" % i for i in range(31)]


@pytest.mark.anyio
async def test_one_copy_a_turn_goes_at_once_and_the_rest_at_its_end_in_order(
    nats_server: NatsServer, link: NatsLink
) -> None:
    """A stored copy written to the socket at once (NatsLink.send_stored_copy) keeps the
    order of publishes and one write per loop turn under load: after it, the turn's other
    publishes on that connection wait for the turn's end, together."""
    # Watched through the copies' connection.
    async with _watching(nats_server.url, "c", 5, link._ingest_nc) as watch:
        header = stored_header_block("c", 0)
        owner = object()
        # The subject's bytes are cached by a first publish (the general path).
        await link.publish_stored_copies([("c.x", b"p0")], header, owner)
        await link.flush(5.0, ingest=True)
        ingest = link._ingest_nc
        assert ingest is not None
        assert not ingest._pending_data_size
        # One loop turn (no await that yields between): the first goes to the socket
        # now; the next ones join what the turn's end writes (pending, in order: no
        # task of their callers' to publish them), as does a publish after them.
        sent = [link.send_stored_copy("c.x", b"p1", header, owner)]
        assert not ingest._pending_data_size
        sent.append(link.send_stored_copy("c.x", b"p2", header, owner))
        assert ingest._pending_data_size > 0  # p2 waits for the turn's end
        sent.append(link.send_stored_copy("c.x", b"p3", header, owner))
        assert sent == [True, True, True]
        await link.publish_stored_copies([("c.x", b"p4")], header, owner)
        with anyio.fail_after(10):
            await watch.all_in.wait()
    assert watch.payloads == [b"p0", b"p1", b"p2", b"p3", b"p4"]
