"""ProduceMany (api 17): many Produce requests to one server in one frame.

Each section is a Produce request body and gets its own answer: the sections this server
can take are stored even when others fail (unknown stream or partition, a body that does
not decode, a partition it does not lead, a stream the identity may not write).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from jetsdk.codec.envelope import decode_message
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api, encode_frame
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_error,
    decode_produce_response,
    encode_produce_request,
)
from jetsdk.codec.produce_many import (
    MAX_PRODUCE_SECTIONS,
    ProduceSection,
    decode_produce_many_response,
    encode_produce_many_request,
)
from jetsdk.codec.record import Record
from jetserver.broker.sequencer import DEFER_MAX_RECORDS
from jetserver.server import Server
from jetserver.storage import Log
from jetserver.storage.fsync_runner import FsyncRunner
from jetserver.testing import nats_flushed
from security.auth_kit import auth_settings, tokens_for
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio

_MSG_ID = (("Nats-Msg-Id", b"1"),)


def _section(
    stream: str,
    partition: int,
    values: list[bytes],
    *,
    policy: AckPolicy = AckPolicy.LEADER,
    producer_id: int | None = None,
    base_seq: int = 0,
) -> bytes:
    return encode_produce_request(
        ProduceRequest(
            stream,
            partition,
            policy,
            5000,
            tuple(ProduceMessage(v) for v in values),
            producer_id=producer_id,
            base_seq=base_seq,
        )
    )


async def _many(c: RawClient, sections: list[bytes]) -> list[ProduceSection]:
    frame = await c.request(Api.PRODUCE_MANY, encode_produce_many_request(sections))
    answer = decode_produce_many_response(frame.body)
    assert len(answer) == len(sections)
    return answer


def _offsets(section: ProduceSection) -> list[int]:
    assert section.error_code == 0, decode_error(section.body)
    results = decode_produce_response(section.body)
    assert all(r.error_code == 0 for r in results), results
    return [r.offset for r in results]


def _code(section: ProduceSection) -> int:
    assert section.error_code != 0
    error = decode_error(section.body)
    assert error.code == section.error_code
    return error.code


@pytest.mark.parametrize("policy", [AckPolicy.NONE, AckPolicy.LEADER, AckPolicy.ALL])
async def test_sections_are_stored_and_answered_in_order(jet: Server, policy: AckPolicy) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        assert Api.PRODUCE_MANY in (await c.hello())["apis"]
        await c.create_stream(name="a", subject="a", partitions=4)
        await c.create_stream(name="b", subject="b")
        sections = [
            _section("a", 2, [b"a2-0", b"a2-1"], policy=policy),
            _section("b", 0, [b"b0-0"], policy=policy),
            _section("a", 0, [b"a0-0", b"a0-1", b"a0-2"], policy=policy),
            _section("a", 2, [b"a2-2"], policy=policy),  # the same partition again: in order
        ]
        answer = await _many(c, sections)
        if policy != AckPolicy.NONE:
            assert [_offsets(s) for s in answer] == [[0, 1], [0], [0, 1, 2], [2]]
        for stream, partition, values in [
            ("a", 2, [b"a2-0", b"a2-1", b"a2-2"]),
            ("b", 0, [b"b0-0"]),
            ("a", 0, [b"a0-0", b"a0-1", b"a0-2"]),
        ]:
            records = await _fetch_until(c, stream, partition, len(values))
            assert [r.value for r in records] == values


async def test_a_produce_pipelined_after_a_produce_many_is_appended_after_it(
    jet: Server,
) -> None:
    """One producer pipelines its batches; with ALL acks the SDK sends the batches of one
    loop turn as a ProduceMany and the first batch of the next turn alone as a Produce
    request. Found with one ``Producer`` of 1 MiB values (ack ALL, 32 requests in
    flight): its messages were stored out of the order sent (offsets 15, 14, 17, 16...):
    the ProduceMany's sections ran in tasks that started after the Produce request's."""
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="o", subject="o")
        many = (
            _section("o", 0, [b"A1"], policy=AckPolicy.ALL),
            _section("o", 0, [b"A2"], policy=AckPolicy.ALL),
        )
        await c.stream.send(
            encode_frame(Api.PRODUCE_MANY, 1, encode_produce_many_request(list(many)))
            + encode_frame(Api.PRODUCE, 2, _section("o", 0, [b"B"], policy=AckPolicy.ALL))
        )
        offsets: dict[int, list[int]] = {}
        for _ in range(2):
            frame = await c.recv_frame(10.0)
            if frame.correlation_id == 1:
                answer = decode_produce_many_response(frame.body)
                offsets[1] = [o for s in answer for o in _offsets(s)]
            else:
                offsets[2] = [r.offset for r in decode_produce_response(frame.body)]
        assert offsets == {1: [0, 1], 2: [2]}


async def _fetch_until(c: RawClient, stream: str, partition: int, n: int) -> list[Record]:
    """The first ``n`` committed records (each fetch a bounded long poll)."""
    records: list[Record] = []
    for _ in range(n):
        if len(records) >= n:
            break
        _header, more = await c.fetch(stream, partition, len(records), max_wait_ms=5000)
        assert more, f"no record at {len(records)} of {stream}/{partition} within 5 s"
        records.extend(more)
    return records[:n]


async def test_a_failed_section_fails_alone(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="a", subject="a", partitions=2)
        good = _section("a", 1, [b"x", b"y"])
        answer = await _many(
            c,
            [
                _section("nope", 0, [b"1"]),
                good,
                _section("a", 7, [b"2"]),
                good[:-1],  # truncated: the section's body does not decode
                b"",
                _section("a", 0, [b"z"]),
            ],
        )
        assert _code(answer[0]) == ErrorCode.STREAM_NOT_FOUND
        assert _offsets(answer[1]) == [0, 1]
        assert _code(answer[2]) == ErrorCode.PARTITION_NOT_FOUND
        assert _code(answer[3]) == ErrorCode.MALFORMED_FRAME
        assert _code(answer[4]) == ErrorCode.MALFORMED_FRAME
        assert _offsets(answer[5]) == [0]
        # The connection stays open and the good sections were stored.
        assert [r.value for r in await _fetch_until(c, "a", 1, 2)] == [b"x", b"y"]
        assert [r.value for r in await _fetch_until(c, "a", 0, 1)] == [b"z"]


async def test_idempotent_sections_deduplicate_per_partition(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="a", subject="a", partitions=2)
        sections = [
            _section("a", 0, [b"p0"], producer_id=7, base_seq=0),
            _section("a", 1, [b"p1"], producer_id=7, base_seq=0),
        ]
        first = await _many(c, sections)
        again = await _many(c, sections)  # a retry of both: duplicates, same offsets
        for one, two in zip(first, again, strict=True):
            (r,) = decode_produce_response(two.body)
            assert r.error_code == ErrorCode.DUPLICATE_SEQUENCE
            assert [r.offset] == _offsets(one)
        assert len(await _fetch_until(c, "a", 0, 1)) == 1
        assert jet.streams.replica("a", 0).log.log_end_offset == 1


async def test_too_many_sections_is_refused_and_the_connection_stays(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="a", subject="a")
        body = encode_produce_many_request([_section("a", 0, [b"x"])] * MAX_PRODUCE_SECTIONS)
        count_over = (MAX_PRODUCE_SECTIONS + 1).to_bytes(4, "big") + body[4:]
        with pytest.raises(ServerError) as caught:
            await c.request(Api.PRODUCE_MANY, count_over)
        assert caught.value.code == ErrorCode.INVALID_ARGUMENT
        assert caught.value.error.details == {"field": "count"}
        assert len(await _many(c, [_section("a", 0, [b"x"])] * 3)) == 3
        assert jet.streams.replica("a", 0).log.log_end_offset == 3  # none of the refused


async def test_sections_that_do_not_add_up_close_the_connection(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="a", subject="a")
        body = encode_produce_many_request([_section("a", 0, [b"x"])])
        await c.send_raw(encode_frame(Api.PRODUCE_MANY, 9, body + b"\x00"))
        frames = await c.wait_closed()
        assert [decode_error(f.body).code for f in frames] == [ErrorCode.MALFORMED_FRAME]


async def test_empty_request_gets_an_empty_answer(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        assert await _many(c, []) == []


TOKENS = tokens_for("ops", "alice")


async def test_acl_denial_fails_only_its_section(nats_server: NatsServer, tmp_path: Path) -> None:
    settings = auth_settings(TOKENS, ("ops:admin:*", "alice:publish:orders.*"))
    async with running_server(nats_server.url, tmp_path / "data", **settings) as jet:
        assert jet.address is not None
        async with await RawClient.connect(jet.address) as c:
            await c.call_json(Api.AUTHENTICATE, {"mechanism": "token", "token": TOKENS["ops"]})
            await _wait_grants(c)
            await c.create_stream(name="orders.eu", subject="orders.eu")
            await c.create_stream(name="payments", subject="payments")
        async with await RawClient.connect(jet.address) as c:
            await c.call_json(Api.AUTHENTICATE, {"mechanism": "token", "token": TOKENS["alice"]})
            answer = await _many(
                c, [_section("payments", 0, [b"no"]), _section("orders.eu", 0, [b"yes"])]
            )
            assert _code(answer[0]) == ErrorCode.PERMISSION_DENIED
            assert decode_error(answer[0].body).details == {"identity": "alice"}
            assert _offsets(answer[1]) == [0]
        assert jet.streams.replica("payments", 0).log.log_end_offset == 0


async def _wait_grants(c: RawClient) -> None:
    """The configured grants are proposed in the background right after start."""
    import anyio

    with anyio.fail_after(20):
        while True:
            try:
                acls = (await c.call_json(Api.LIST_ACLS, {}))["acls"]
            except ServerError:
                acls = {}
            if "alice" in acls:
                return
            await anyio.sleep(0.05)


async def test_large_sections_read_in_place_are_stored_as_sent(jet: Server) -> None:
    # Issue 39: a ProduceMany body of 64 KiB or more is read in place into a bytearray;
    # its sections are now served as views of it (they were copied out one by one), also
    # with subjects, keys and headers, and what is stored is what was sent.
    import os

    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="big", subject="big.*", partitions=2)
        sent = {
            0: [
                ProduceMessage(os.urandom(200_000), subject="big.a", key=b"k1"),
                ProduceMessage(os.urandom(70_000), subject="big.b", headers=(("h", b"v"),)),
            ],
            1: [ProduceMessage(os.urandom(300_000), subject="big.c.1", key=b"k2")],
        }
        sections = [
            encode_produce_request(ProduceRequest("big", p, AckPolicy.ALL, 5000, tuple(ms)))
            for p, ms in sent.items()
        ]
        answer = await _many(c, sections)
        assert [_offsets(s) for s in answer] == [[0, 1], [0]]
        for partition, messages in sent.items():
            records = await _fetch_until(c, "big", partition, len(messages))
            assert [(r.value, r.key, r.subject) for r in records] == [
                (m.value, m.key, m.subject) for m in messages
            ]
            assert records[-1].headers == messages[-1].headers


@pytest.mark.parametrize("policy", [AckPolicy.LEADER, AckPolicy.ALL])
async def test_the_fsyncs_of_a_requests_sections_go_as_one_job_that_commits(
    jet: Server, monkeypatch: pytest.MonkeyPatch, policy: AckPolicy
) -> None:
    """Sections to 4 idle partitions (one over DEFER_MAX_RECORDS) leave their fsyncs to
    the request, which runs them as ONE thread job whose callback commits each
    (broker/commit_group.py): LEADER-acked ones appended at once in the request's task
    (on 020f2b6 each partition's flusher was woken, and started, to take its fsync),
    ALL-acked ones in a task each, answered once that commit moved their HW (on fb72720f
    each ran its own fsync and commit, ``Committer.commit_here``, and no group job ran).
    No partition's flusher task starts, and every record is committed."""
    groups: list[int] = []
    flush_group = FsyncRunner.flush_group

    def spy(self: FsyncRunner, logs: list[Log], *args: Any) -> None:
        groups.append(len(logs))
        flush_group(self, logs, *args)

    monkeypatch.setattr(FsyncRunner, "flush_group", spy)
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="g", subject="g", partitions=4)
        replicas = [jet.streams.replica("g", p) for p in range(4)]
        sizes = [1, 2, DEFER_MAX_RECORDS + 1, 3]
        sections = [
            _section("g", p, [b"g%d-%d" % (p, i) for i in range(n)], policy=policy)
            for p, n in enumerate(sizes)
        ]
        for round_ in range(2):
            answer = await _many(c, sections)
            assert [_offsets(s) for s in answer] == [
                list(range(round_ * n, (round_ + 1) * n)) for n in sizes
            ]
            if policy == AckPolicy.ALL:  # committed before the answer
                assert [r.log.high_watermark for r in replicas] == [(round_ + 1) * n for n in sizes]
            for p, n in enumerate(sizes):
                records = await c.collect("g", p, n, offset=round_ * n)
                assert [r.value for r in records] == [b"g%d-%d" % (p, i) for i in range(n)]
        assert groups == [4, 4]
        assert not any(r.committer.flushing for r in replicas)
        assert [r.log.flushed_offset for r in replicas] == [2 * n for n in sizes]


async def test_common_sections_are_served_in_one_step_the_rest_as_before(
    jet: Server, nc: Any
) -> None:
    """Issue 34 item 4: a section of a one-replica partition led here (ack LEADER or
    NONE, no header controls, an idempotent producer's next sequences or none) is
    appended in the request's step (broker/produce_section.py); a section that is not
    (a ``Nats-Msg-Id``, a message over the limit, a producer's retry or a sequence that
    skips one) goes through the general path in the same request. Each gets its own
    answer, offsets run on in each partition, and the NATS copies of the common sections
    reach a subscriber in append order."""
    assert jet.address is not None
    copies: list[tuple[str, bytes]] = []
    got_all = anyio.Event()

    async def on_copy(msg: Any) -> None:
        copies.append((msg.subject, decode_message(msg.data).value))
        if len(copies) == 10:
            got_all.set()

    await nc.subscribe("w", cb=on_copy)
    await nc.subscribe("w.*", cb=on_copy)
    await nats_flushed(nc)
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="w", subject="w", partitions=3, max_message_bytes=1000)
        controlled = encode_produce_request(
            ProduceRequest("w", 1, AckPolicy.LEADER, 5000, (ProduceMessage(b"m", headers=_MSG_ID),))
        )
        served = jet.running.produce.section.served
        answer = await _many(
            c,
            [
                _section("w", 0, [b"a", b"b", b"c"]),
                controlled,
                _section("w", 1, [b"d", b"e"]),
                _section("w", 2, [b"f"], policy=AckPolicy.NONE),
                _section("w", 2, [b"g", b"x" * 2000]),  # its second message is too large
                _section("w", 0, [b"h"], producer_id=5),
                _section("w", 2, [b"i"]),
                _section("w", 0, [b"h"], producer_id=5),  # its retry: a duplicate
                _section("w", 0, [b"j"], producer_id=5, base_seq=2),  # skips sequence 1
            ],
        )
        assert jet.running.produce.section.served - served == 5  # a, d-e, f, h, i
        assert _offsets(answer[0]) == [0, 1, 2]
        assert _offsets(answer[1]) == [0]
        assert _offsets(answer[2]) == [1, 2]
        assert [r.error_code for r in decode_produce_response(answer[3].body)] == [0]
        too_large = decode_produce_response(answer[4].body)
        assert [r.error_code for r in too_large] == [0, ErrorCode.MESSAGE_TOO_LARGE]
        assert too_large[0].offset == 1
        assert _offsets(answer[5]) == [3]
        assert _offsets(answer[6]) == [2]
        retried = decode_produce_response(answer[7].body)
        assert [(r.error_code, r.offset) for r in retried] == [(ErrorCode.DUPLICATE_SEQUENCE, 3)]
        skipped = decode_produce_response(answer[8].body)
        assert [(r.error_code, r.offset) for r in skipped] == [(ErrorCode.OUT_OF_ORDER_SEQUENCE, 1)]
        expected = {0: [b"a", b"b", b"c", b"h"], 1: [b"m", b"d", b"e"], 2: [b"f", b"g", b"i"]}
        for partition, values in expected.items():
            records = await _fetch_until(c, "w", partition, len(values))
            assert [r.value for r in records] == values
    with anyio.fail_after(10):
        await got_all.wait()
    by_subject: dict[str, list[bytes]] = {}
    for subject, data in copies:
        by_subject.setdefault(subject, []).append(data)
    # The copies of both paths' sections, each partition's in append order.
    assert by_subject == {
        "w": [b"a", b"b", b"c", b"h"],
        "w.1": [b"m", b"d", b"e"],
        "w.2": [b"f", b"g", b"i"],
    }


async def test_all_sections_of_an_idempotent_producer_are_served_in_one_step(
    jet: Server,
) -> None:
    """Issue 38: a table's puts (ack ALL, an idempotent producer, a section per
    partition) are appended in the request's step too, their fsyncs left to the
    request's group; each section is answered only once its partition committed it (its
    HW is past the section when the answer comes). A retry of the same sequences goes
    through the general path and is answered DUPLICATE_SEQUENCE with the stored offsets;
    the producer's next sequences are served in one step again."""
    assert jet.address is not None
    produce = jet.running.produce
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="t", subject="t", partitions=4)

        def round_(base: int) -> list[bytes]:
            return [
                _section(
                    "t",
                    p,
                    [b"p%d-%d" % (p, base + i) for i in range(3)],
                    policy=AckPolicy.ALL,
                    producer_id=9,
                    base_seq=base,
                )
                for p in range(4)
            ]

        served = produce.section.served
        answer = await _many(c, round_(0))
        for p in range(4):
            assert _offsets(answer[p]) == [0, 1, 2]
            replica = produce.streams.local_replica("t", p)
            assert replica is not None
            assert replica.log.high_watermark >= 3
        assert produce.section.served - served == 4
        retried = await _many(c, round_(0))
        for p in range(4):
            results = decode_produce_response(retried[p].body)
            assert [(r.error_code, r.offset) for r in results] == [
                (ErrorCode.DUPLICATE_SEQUENCE, i) for i in range(3)
            ]
        assert produce.section.served - served == 4
        answer = await _many(c, round_(3))
        for p in range(4):
            assert _offsets(answer[p]) == [3, 4, 5]
        assert produce.section.served - served == 8
        for p in range(4):
            records = await _fetch_until(c, "t", p, 6)
            assert [r.value for r in records] == [b"p%d-%d" % (p, i) for i in range(6)]
            assert [(r.producer_id, r.producer_seq) for r in records] == [(9, i) for i in range(6)]


async def test_a_lone_all_section_is_served_in_one_step_and_answered_once_committed(
    jet: Server,
) -> None:
    """Issue 38: a ProduceMany of ONE section of a table's puts (ack ALL, an idempotent
    producer: its round to a one-partition table) is appended in the request's step as
    a round of several is, its fsync in a group of one, and answered once committed (the
    HW is past it when the answer comes); the next round too."""
    assert jet.address is not None
    produce = jet.running.produce
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="one", subject="one", partitions=1)
        served = produce.section.served
        for base in (0, 3):
            section = _section(
                "one",
                0,
                [b"v-%d" % (base + i) for i in range(3)],
                policy=AckPolicy.ALL,
                producer_id=5,
                base_seq=base,
            )
            answer = await _many(c, [section])
            assert _offsets(answer[0]) == [base, base + 1, base + 2]
            replica = produce.streams.local_replica("one", 0)
            assert replica is not None
            assert replica.log.high_watermark >= base + 3
        assert produce.section.served - served == 2
        records = await _fetch_until(c, "one", 0, 6)
        assert [r.value for r in records] == [b"v-%d" % i for i in range(6)]
