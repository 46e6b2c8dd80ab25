"""NATS ingest: plain publishers (cross-talk), wildcards, copies, acks, limits, LB groups."""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from jetsdk.codec.envelope import EnvelopeAck, EnvelopeMessage, decode_acks, encode_message
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.envelope import parse_ack
from jetserver.server import Server
from jetserver.testing import nats_flushed
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio


class AckInbox:
    """Collects acks published to one inbox."""

    def __init__(self) -> None:
        self.acks: list[EnvelopeAck] = []
        self.payloads = 0
        self._changed = anyio.Event()

    @classmethod
    async def listen(cls, nc: NatsClient, inbox: str) -> AckInbox:
        """An AckInbox subscribed to ``inbox`` on ``nc`` (flushed: it sees every ack
        published after this returns)."""
        collected = cls()
        await nc.subscribe(inbox, cb=collected.on_msg)
        await nats_flushed(nc)
        return collected

    async def on_msg(self, msg: Msg) -> None:
        self.acks.extend(decode_acks(msg.data))
        self.payloads += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, count: int, timeout_s: float = 10.0) -> list[EnvelopeAck]:
        with anyio.fail_after(timeout_s):
            while len(self.acks) < count:
                await self._changed.wait()
        return self.acks


async def test_cross_talk_plain_messages_are_stored_with_subject_reply_headers(
    jet: Server, nc: NatsClient
) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="events", subject="events")
        await nc.publish("events", b"plain-1")
        await nc.publish("events", b"plain-2", headers={"h1": "v1", "h2": "v2"})
        await nc.publish("events", b"plain-3", reply="some.reply")
        await nats_flushed(nc)
        records = await c.collect("events", 0, 3)
    assert [r.value for r in records] == [b"plain-1", b"plain-2", b"plain-3"]
    assert [r.offset for r in records] == [0, 1, 2]
    assert all(r.subject == "events" for r in records)
    assert records[0].key is None
    assert records[1].headers == (("h1", b"v1"), ("h2", b"v2"))
    assert records[2].reply == "some.reply"
    assert records[0].timestamp <= records[1].timestamp <= records[2].timestamp


async def test_plain_request_gets_a_json_ack_on_its_reply_subject(
    jet: Server, nc: NatsClient
) -> None:
    """Readable by any NATS client, like JetStream's PubAck (spec/acks.md)."""
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="req", subject="req")
    reply = await nc.request("req", b"hello", timeout=10)
    assert orjson.loads(reply.data) == {"stream": "req", "partition": 0, "offset": 0}
    reply = await nc.request("req", b"again", timeout=10)
    assert reply.data == b'{"stream":"req","partition":0,"offset":1}'
    (ack,) = parse_ack(reply.data)  # the SDK reads it too
    assert (ack.stream, ack.offset, ack.ack_policy, ack.error_code) == (
        "req",
        1,
        AckPolicy.LEADER,
        0,
    )


async def test_wildcard_subjects(jet: Server, nc: NatsClient) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="star", subject="shop.*")
        await c.create_stream(name="tail", subject="shop.>")
        for subject in ("shop.a", "shop.b", "shop.a.deep", "other"):
            await nc.publish(subject, subject.encode())
        await nats_flushed(nc)
        star = await c.collect("star", 0, 2)
        tail = await c.collect("tail", 0, 3)
    assert [r.subject for r in star] == ["shop.a", "shop.b"]
    assert [r.subject for r in tail] == ["shop.a", "shop.b", "shop.a.deep"]


async def test_two_streams_on_one_subject_each_get_a_copy(jet: Server, nc: NatsClient) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="copy1", subject="dup")
        await c.create_stream(name="copy2", subject="dup")
        for i in range(10):
            await nc.publish("dup", str(i).encode())
        await nats_flushed(nc)
        one = await c.collect("copy1", 0, 10)
        two = await c.collect("copy2", 0, 10)
    assert [r.value for r in one] == [r.value for r in two] == [str(i).encode() for i in range(10)]


async def test_partition_subjects(jet: Server, nc: NatsClient) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="parts", subject="p", partitions=3)
        for p in range(3):
            await nc.publish("p" if p == 0 else f"p.{p}", f"to-{p}".encode())
        await nats_flushed(nc)
        for p in range(3):
            (record,) = await c.collect("parts", p, 1)
            assert record.value == f"to-{p}".encode()


async def test_ack_policies(jet: Server, nc: NatsClient) -> None:
    inbox = await AckInbox.listen(nc, "_INBOX.test.acks")
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="acks", subject="acks")

    def env(value: bytes, policy: AckPolicy, corr: str) -> bytes:
        return encode_message(
            EnvelopeMessage(
                value=value,
                key=b"k",
                ack_inbox="_INBOX.test.acks",
                correlation_id=corr,
                ack_policy=policy,
            )
        )

    # NONE first, then LEADER: acks leave in sequencer order, so when the LEADER ack is in,
    # an ack for the NONE message would already have arrived.
    await nc.publish("acks", env(b"none", AckPolicy.NONE, "c-none"))
    await nc.publish("acks", env(b"leader", AckPolicy.LEADER, "c-leader"))
    acks = await inbox.wait_for(1)
    assert [a.correlation_id for a in acks] == ["c-leader"]
    assert acks[0].offset == 1
    assert acks[0].ack_policy == AckPolicy.LEADER
    await nc.publish("acks", env(b"all", AckPolicy.ALL, "c-all"))
    acks = await inbox.wait_for(2)
    all_ack = acks[1]
    assert all_ack.correlation_id == "c-all"
    assert all_ack.offset == 2
    assert all_ack.error_code == 0
    log = jet.streams.replica("acks", 0).log
    assert log.flushed_offset > all_ack.offset  # ALL means on disk
    assert log.high_watermark > all_ack.offset


async def test_acks_of_one_batch_share_a_message(jet: Server, nc: NatsClient) -> None:
    inbox = await AckInbox.listen(nc, "_INBOX.test.batch")
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="batch", subject="batch")
    n = 500
    for i in range(n):
        payload = encode_message(
            EnvelopeMessage(
                value=b"v",
                ack_inbox="_INBOX.test.batch",
                correlation_id=str(i),
                ack_policy=AckPolicy.LEADER,
            )
        )
        await nc.publish("batch", payload)
    acks = await inbox.wait_for(n)
    assert sorted(int(a.correlation_id) for a in acks) == list(range(n))
    assert sorted(a.offset for a in acks) == list(range(n))
    # Sequenced in batches, so fewer ack messages than acks (one per batch and inbox).
    assert inbox.payloads < n


async def test_oversized_message_gets_an_error_ack_and_is_not_stored(
    nats_server: NatsServer, tmp_path: Path, nc: NatsClient
) -> None:
    async with running_server(
        nats_server.url, tmp_path / "data", limits__max_message_bytes=1000
    ) as server:
        inbox = await AckInbox.listen(nc, "_INBOX.test.big")
        async with await RawClient.connect(server.address) as c:
            await c.create_stream(name="big", subject="big")
            for value, corr in ((b"x" * 1001, "too-big"), (b"x" * 1000, "fits")):
                await nc.publish(
                    "big",
                    encode_message(
                        EnvelopeMessage(
                            value=value,
                            ack_inbox="_INBOX.test.big",
                            correlation_id=corr,
                            ack_policy=AckPolicy.LEADER,
                        )
                    ),
                )
            acks = await inbox.wait_for(2)
            by_corr = {a.correlation_id: a for a in acks}
            assert by_corr["too-big"].error_code == ErrorCode.MESSAGE_TOO_LARGE
            assert "1000" in by_corr["too-big"].error_message
            assert by_corr["fits"].error_code == 0
            assert by_corr["fits"].offset == 0
            records = await c.collect("big", 0, 1)
            assert [len(r.value) for r in records] == [1000]
            # A plain request that is too large is refused on its reply subject too.
            reply = await nc.request("big", b"y" * 2000, timeout=10)
            error = orjson.loads(reply.data)["error"]
            assert error["code"] == ErrorCode.MESSAGE_TOO_LARGE
            assert error["name"] == "MESSAGE_TOO_LARGE"
            assert "1000" in error["description"]


async def test_load_balance_group_splits_a_subject(jet: Server, nc: NatsClient) -> None:
    n = 200
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="lb1", subject="work", group="workers")
        await c.create_stream(name="lb2", subject="work", group="workers")
        await c.create_stream(name="all", subject="work")  # not in the group: gets everything
        for i in range(n):
            await nc.publish("work", str(i).encode())
        await nats_flushed(nc)
        everything = await c.collect("all", 0, n)
        assert len(everything) == n
        # "all" committed everything; the group members got theirs in the same NATS delivery
        # order, so wait until their two counts add up to n.
        got: dict[str, list[bytes]] = {"lb1": [], "lb2": []}
        with anyio.fail_after(10):
            while sum(len(v) for v in got.values()) < n:
                for name in got:
                    _h, records = await c.fetch(name, 0, len(got[name]), max_wait_ms=100)
                    got[name].extend(r.value for r in records)
    one, two = set(got["lb1"]), set(got["lb2"])
    assert not one & two  # each message in exactly one stream of the group
    assert one | two == {str(i).encode() for i in range(n)}
    assert one
    assert two
