"""A one-replica stream with ``no_nats_copies`` (issue 39): records stored directly from a
Produce request are not republished to NATS (spec/protocol.md §2 "Stream settings", §6).

Live NATS subscribers and other jet streams on the subject see copies with the default and
none with the setting on; the records are stored either way. Each test turns the setting
off again (UpdateStream) and produces one more record: a partition's copies go in append
order, so had the earlier records been copied, the subscriber would see them before this
one (and the wait for it bounds the wait for them).
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from jetsdk import AckPolicy, Client, Producer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceMessage
from jetsdk.errors import InvalidArgument
from jetserver.broker.produce_one import OneProduce
from jetserver.broker.stored_copy import STORED_HEADER
from jetserver.server import Server
from jetserver.testing import nats_flushed
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio

N = 40
WAIT_S = 10.0


class _Seen:
    """What a plain NATS subscriber received, with an event per expected payload."""

    def __init__(self, last: bytes) -> None:
        self.msgs: list[Msg] = []
        self.last = last
        self.got_last = anyio.Event()

    async def on_msg(self, msg: Msg) -> None:
        self.msgs.append(msg)
        if self.last in msg.data:
            self.got_last.set()


async def _update(c: RawClient, name: str, settings: dict[str, Any]) -> dict[str, Any]:
    return await c.call_json(Api.UPDATE_STREAM, {"name": name, "settings": settings})


@pytest.mark.parametrize("policy", [AckPolicy.NONE, AckPolicy.LEADER, AckPolicy.ALL])
async def test_no_copies_with_the_setting_then_copies_again_once_turned_off(
    jet: Server, nc: NatsClient, policy: AckPolicy
) -> None:
    seen = _Seen(b"the-last")
    await nc.subscribe("q.x", cb=seen.on_msg)
    await nats_flushed(nc)
    async with await RawClient.connect(jet.address) as c:
        created = await c.create_stream(name="q", subject="q.x", no_nats_copies=True)
        assert created["stream"]["config"]["no_nats_copies"] is True
        await c.create_stream(name="wide", subject="q.*")  # default: copies
        for start in range(0, N, 10):
            batch = [ProduceMessage(b"m%d" % i) for i in range(start, start + 10)]
            results = await c.produce("q", 0, batch, ack_policy=policy)
            assert all(r.error_code == ErrorCode.NONE for r in results)
        stored = await c.collect("q", 0, N)
        assert [r.value for r in stored] == [b"m%d" % i for i in range(N)]
        updated = await _update(c, "q", {"no_nats_copies": False})
        assert updated["stream"]["config"]["no_nats_copies"] is False
        results = await c.produce("q", 0, [ProduceMessage(b"the-last")])
        assert [r.offset for r in results] == [N]
        with anyio.fail_after(WAIT_S):
            await seen.got_last.wait()
        wide = await c.collect("wide", 0, 1)
        header, extra = await c.fetch("wide", 0, 1, max_wait_ms=200)
    assert len(seen.msgs) == 1  # only the copy made after the setting went off
    assert seen.msgs[0].headers == {STORED_HEADER: "q 0"}
    assert [r.value for r in wide] == [b"the-last"]
    assert (extra, header.hw) == ([], 1)


async def test_plain_nats_messages_still_reach_subscribers(jet: Server, nc: NatsClient) -> None:
    """The setting stops only the server's copies: a plain NATS client's message goes
    through NATS as always (stored by the stream, seen by subscribers)."""
    seen = _Seen(b"plain")
    await nc.subscribe("p.x", cb=seen.on_msg)
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="p", subject="p.x", no_nats_copies=True)
        await nc.publish("p.x", b"plain")
        await nats_flushed(nc)
        with anyio.fail_after(WAIT_S):
            await seen.got_last.wait()
        stored = await c.collect("p", 0, 1)
    assert [r.value for r in stored] == [b"plain"]


async def test_sdk_create_and_update_with_produce_many(jet: Server, nc: NatsClient) -> None:
    """The SDK's keyword and update; a producer to two partitions (ProduceMany)."""
    name = f"s{uuid.uuid4().hex[:8]}"
    seen = [_Seen(b"the-last-0"), _Seen(b"the-last-1")]
    await nc.subscribe(name, cb=seen[0].on_msg)
    await nc.subscribe(f"{name}.1", cb=seen[1].on_msg)
    await nats_flushed(nc)
    async with Client(jet.address) as client:
        info = await client.create_stream(name, partitions=2, no_nats_copies=True)
        assert info.config["no_nats_copies"] is True
        async with Producer(client, name, ack=AckPolicy.LEADER) as producer:
            for i in range(N):
                await producer.send(b"m%d" % i, partition=i % 2)
            await producer.flush()
        info = await client.update_stream(name, no_nats_copies=False)
        assert info.config["no_nats_copies"] is False
        async with Producer(client, name, ack=AckPolicy.LEADER) as producer:
            for p in range(2):
                await producer.send(b"the-last-%d" % p, partition=p)
            await producer.flush()
        with anyio.fail_after(WAIT_S):
            for s in seen:
                await s.got_last.wait()
        for p in range(2):
            header, _ = await client.fetch(name, p, 0, max_bytes=1 << 20, max_wait=0)
            assert header.hw == N // 2 + 1
    assert [len(s.msgs) for s in seen] == [1, 1]


async def test_the_setting_needs_one_replica_and_no_group(jet: Server) -> None:
    """RF > 1 (its unmarked copies carry failover) and a group (NATS picks the member that
    stores each message) are refused, naming the setting."""
    async with await RawClient.connect(jet.address) as c:
        for extra in ({"replication_factor": 3}, {"group": "g"}):
            with pytest.raises(ServerError) as err:
                await c.create_stream(name="r", subject="r", no_nats_copies=True, **extra)
            assert err.value.code == ErrorCode.INVALID_ARGUMENT
            assert err.value.error.details["field"] == "no_nats_copies"
        await c.create_stream(name="r", subject="r")
        with pytest.raises(ServerError) as err:
            await _update(c, "r", {"no_nats_copies": None})
        assert err.value.error.details["field"] == "no_nats_copies"
    async with Client(jet.address) as client:
        with pytest.raises(InvalidArgument) as sdk_err:
            await client.create_stream("r3", replication_factor=3, no_nats_copies=True)
        assert sdk_err.value.field == "no_nats_copies"


async def test_the_one_step_path_sees_each_update_of_the_stream(
    jet: Server, nc: NatsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-step path (broker/produce_one.py) keeps what it checked of a partition for
    the stream's metadata (broker/one_target.py, on the replica): the next message after
    each update must follow it. One message at a time, ack LEADER: each takes that path."""
    taken: list[bool] = []
    real = OneProduce.serve_now

    def counting(obj: OneProduce, *args: Any) -> Any:
        out = real(obj, *args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(OneProduce, "serve_now", counting)
    seen = _Seen(b"back-on")
    await nc.subscribe("u.x", cb=seen.on_msg)
    await nc.flush()
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="u", subject="u.x", max_message_bytes=200)
        answers = [await c.produce("u", 0, [ProduceMessage(b"on" * 60)])]
        await _update(c, "u", {"no_nats_copies": True})
        answers.append(await c.produce("u", 0, [ProduceMessage(b"off")]))
        await _update(c, "u", {"max_message_bytes": 100})
        answers.append(await c.produce("u", 0, [ProduceMessage(b"over" * 30)]))
        await _update(c, "u", {"no_nats_copies": False})
        answers.append(await c.produce("u", 0, [ProduceMessage(b"back-on")]))
        with anyio.fail_after(WAIT_S):
            await seen.got_last.wait()
        stored = await c.collect("u", 0, 3)
    assert [[(r.error_code, r.offset) for r in a] for a in answers] == [
        [(ErrorCode.NONE, 0)],
        [(ErrorCode.NONE, 1)],
        [(ErrorCode.MESSAGE_TOO_LARGE, -1)],
        [(ErrorCode.NONE, 2)],
    ]
    assert [r.value for r in stored] == [b"on" * 60, b"off", b"back-on"]
    assert len(seen.msgs) == 2  # the first and the last: none of "off"
    assert b"on" * 60 in seen.msgs[0].data
    assert taken[:2] == [True, True]  # the one-step path, each time
    assert taken[3] is True
