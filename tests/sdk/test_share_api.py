"""ShareConsumer's outcome API against a real `jet dev`: nack with a delay and with backoff,
in_progress past the ack deadline, reject to the dead-letter stream, and the sync API."""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import pytest

from jetsdk import Client, Consumer, Producer, ShareConsumer, sync
from jetsdk.codec.record import iter_records
from jetsdk.consumer.share_consumer import LostOutcome, ShareSettings, read_share_group
from jetsdk.consumer.share_fetch import poll_fetch
from jetsdk.consumer.share_message import AcknowledgeType, ShareMessage
from jetsdk.errors import InvalidArgument, JetError, OffsetOutOfRange
from jetsdk.message import DONE
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


async def fill(client: Client, stream: str, count: int) -> None:
    await client.create_stream(stream, stream)
    async with Producer(client, stream) as producer:
        for i in range(count):
            await producer.send_soon(b"v%d" % i, headers={"i": str(i)})


async def test_nack_delay_and_backoff(jet_dev: JetDev) -> None:
    stream, group = unique("nk"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 1)
        async with ShareConsumer(client, stream, group=group, ack_deadline=5, batch=1) as consumer:
            seen: list[tuple[int, float]] = []
            with anyio.fail_after(30):
                async for msg in consumer:
                    seen.append((msg.delivery_count, time.monotonic()))
                    if msg.delivery_count == 1:
                        await msg.nack(delay=0.3)
                    elif msg.delivery_count == 2:
                        await msg.nack(delay=0.2, backoff=True)  # 0.2 * 2 ** 1
                    else:
                        await msg.ack()
                        break
            await consumer.flush()
    assert [c for c, _ in seen] == [1, 2, 3]
    assert seen[1][1] - seen[0][1] >= 0.3 - 0.05
    assert seen[2][1] - seen[1][1] >= 0.4 - 0.05


async def test_in_progress_keeps_the_message_past_the_deadline(jet_dev: JetDev) -> None:
    stream, group = unique("ip"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 1)
        async with ShareConsumer(client, stream, group=group, ack_deadline=1.0, batch=1) as first:
            msg = await first.next(timeout=30)
            assert msg is not None
            async with ShareConsumer(client, stream, group=group, ack_deadline=1.0) as second:
                for _ in range(5):  # 2 s of work, twice the deadline, extended every 0.4 s
                    await msg.in_progress()
                    assert await second.next(timeout=0.4) is None
                await msg.ack()
                await first.flush()
                assert await second.next(timeout=1.5) is None  # acked: never delivered again
        assert msg.delivery_count == 1


async def test_reject_goes_to_the_dead_letter_stream(jet_dev: JetDev) -> None:
    stream, group, dlq = unique("rj"), unique("g"), unique("dlq")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 3)
        async with ShareConsumer(client, stream, group=group, dead_letter_stream=dlq) as consumer:
            for _ in range(3):
                msg = await consumer.next(timeout=30)
                assert msg is not None
                await (msg.reject() if msg.offset == 1 else msg.ack())
            with anyio.fail_after(30):
                while consumer.state.partition(stream, 0).dead_total < 1:
                    await consumer.flush()
                    await anyio.sleep(0.05)
        _, raw = await client.fetch(dlq, 0, 0, max_bytes=1 << 20, max_wait=0.0)
    (letter,) = list(iter_records(raw))
    headers = dict(letter.headers)
    assert letter.value == b"v1"
    assert headers["i"] == b"1"
    assert headers["Jet-Share-Offset"] == b"1"
    assert headers["Jet-Share-Reason"] == b"rejected"
    assert headers["Jet-Share-Delivery-Count"] == b"1"


def test_sync_share_consumer(jet_dev: JetDev) -> None:
    stream, group = unique("sy"), unique("g")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(stream, stream)
        with sync.Producer(client, stream) as producer:
            for i in range(20):
                producer.send_soon(b"%d" % i)
            producer.flush()
        got = []
        with sync.ShareConsumer(client, stream, group=group) as consumer:
            for msg in consumer:
                got.append(msg.offset)
                msg.ack()
                if len(got) == 15:
                    break
            for _ in range(20):  # bounded: each fetch waits at most 5 s
                if len(got) >= 20:
                    break
                for msg in consumer.fetch(10, timeout=5):
                    got.append(msg.offset)
                    consumer.ack(msg, "accept")
            consumer.flush()
            assert consumer.state.partition(stream, 0).acked_total == 20
    assert sorted(got) == list(range(20))


async def test_several_streams_fetch_and_ack_kinds(jet_dev: JetDev) -> None:
    """One group over two streams; fetch(n) batches; ack(AcknowledgeType...) as Kafka names
    the outcomes; Message.ack() and ShareMessage.ack() return the same (awaitable) DONE."""
    a, b, group = unique("sa"), unique("sb"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, a, 5)
        await fill(client, b, 5)
        async with ShareConsumer(client, streams=[a, b], group=group, ack_deadline=5) as consumer:
            got: list[ShareMessage] = []
            with anyio.fail_after(30):
                while len(got) < 10:
                    batch = await consumer.fetch(4, timeout=5)
                    assert len(batch) <= 4
                    got.extend(batch)
            assert sorted((m.stream, m.offset) for m in got) == sorted(
                [(a, i) for i in range(5)] + [(b, i) for i in range(5)]
            )
            released = got[0]
            assert released.ack(AcknowledgeType.RELEASE) is DONE
            assert consumer.ack(got[1], "reject") is DONE
            for msg in got[2:]:
                await msg.ack()  # awaiting DONE costs nothing
            again = await consumer.next(timeout=10)
            assert again is not None
            assert (again.stream, again.offset, again.delivery_count) == (
                released.stream,
                released.offset,
                2,
            )
            again.ack()
            with pytest.raises(ValueError):
                got[3].ack("maybe")
            await consumer.flush()
        async with Consumer(client, a) as plain:
            first = (await plain.fetch(1, timeout=10))[0]
            assert first.ack() is DONE


async def test_a_late_ack_is_reported_not_dropped(jet_dev: JetDev) -> None:
    stream, group = unique("late"), unique("g")
    lost: list[LostOutcome] = []
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 1)
        async with ShareConsumer(
            client, stream, group=group, ack_deadline=1.0, batch=1, on_lost=lost.extend
        ) as first:
            held = await first.next(timeout=30)
            assert held is not None
            async with ShareConsumer(client, stream, group=group) as second:
                again = await second.next(timeout=30)  # after first's lease ran out
                assert again is not None
                assert again.delivery_count == 2
                held.ack()  # too late: the lease is second's
                await first.flush()
                assert lost == [LostOutcome(stream, 0, 0, "ack")]
                again.ack()
                await second.flush()
                assert second.state.partition(stream, 0).acked_total == 1


async def test_group_settings_are_stored_and_a_disagreeing_member_is_told(
    jet_dev: JetDev, caplog: pytest.LogCaptureFixture
) -> None:
    stream, group = unique("set"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 1)
        async with ShareConsumer(
            client, stream, group=group, ack_deadline=4, max_deliveries=2
        ) as first:
            assert first.settings == ShareSettings(4.0, 2)  # stored when the group began
        with caplog.at_level(logging.WARNING, logger="jetsdk.share"):
            async with ShareConsumer(client, stream, group=group, ack_deadline=9) as second:
                assert second.settings == ShareSettings(4.0, 2)  # known once entered
                msg = await second.next(timeout=30)
                assert msg is not None
                assert second.settings == ShareSettings(4.0, 2)
                msg.ack()
        assert "ack_deadline 9 s (the group's: 4.0 s)" in caplog.text
        state = await read_share_group(client, group)
        assert state is not None
        assert state.settings is not None
        assert (state.settings.lease_ms, state.settings.max_deliveries) == (4000, 2)


def test_group_is_required_and_keyword_only() -> None:
    with pytest.raises(TypeError):
        ShareConsumer(None, "s", "g")  # type: ignore[arg-type, call-arg]
    with pytest.raises(TypeError):
        ShareConsumer(None, "s")  # type: ignore[arg-type, call-arg]
    with pytest.raises(ValueError):
        ShareConsumer(None, group="g")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"group": "bad name"}, "group"),
        ({"group": "g", "streams": ["s"]}, "streams"),  # s named twice
        ({"group": "g", "streams": ["t"], "partitions": [0]}, "partitions"),
        ({"group": "g", "batch": 0}, None),
        ({"group": "g", "acks": "sometimes"}, None),
    ],
)
def test_bad_arguments_are_invalid_argument_like_the_consumers(
    kwargs: dict[str, Any], field: str | None
) -> None:
    """A JetError (InvalidArgument, still a ValueError), as Consumer raises for the same
    stream arguments, not a bare ValueError."""
    with pytest.raises(InvalidArgument) as refused:
        ShareConsumer(None, "s", **kwargs)  # type: ignore[arg-type]
    assert isinstance(refused.value, ValueError)
    if field is not None:
        assert refused.value.details["field"] == field


async def test_implicit_acks(jet_dev: JetDev) -> None:
    """acks="implicit": asking for more acks what the last call handed out and the
    application did not settle; close acks the last batch."""
    stream, group = unique("imp"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 10)
        async with ShareConsumer(client, stream, group=group, acks="implicit") as consumer:
            first: list[ShareMessage] = []
            with anyio.fail_after(30):
                while len(first) < 5:
                    first.extend(await consumer.fetch(5 - len(first), timeout=5))
            first[0].nack()  # settled explicitly: not acked implicitly
            rest: list[ShareMessage] = []
            with anyio.fail_after(30):
                while len(rest) < 6:  # the nacked one comes back among them
                    rest.extend(await consumer.fetch(6 - len(rest), timeout=5))
            await consumer.flush()
            assert consumer.state.partition(stream, 0).acked_total >= 4
        state = await read_share_group(client, group)
        assert state is not None
        ps = state.partition(stream, 0)
        assert (ps.acked_total, ps.spso) == (10, 10)
        assert sorted(m.offset for m in rest) == [first[0].offset, *range(5, 10)]


async def test_in_progress_is_per_message(jet_dev: JetDev) -> None:
    """Two messages of one lease: the one kept in progress stays with the first member past
    the deadline; the other, and what the first never handed out, go to the second member
    (with the lease per range, the whole range stayed with the first)."""
    stream, group = unique("pm"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 10)
        async with ShareConsumer(client, stream, group=group, ack_deadline=1.0, batch=10) as first:
            kept = await first.next(timeout=30)
            dropped = await first.next(timeout=30)
            assert kept is not None
            assert dropped is not None
            async with ShareConsumer(client, stream, group=group) as second:
                seen: dict[int, int] = {}
                with anyio.fail_after(20):
                    while len(seen) < 9:  # about a deadline, renewing every 0.3 s
                        kept.in_progress()
                        for msg in await second.fetch(10, timeout=0.3):
                            seen[msg.offset] = msg.delivery_count
                            msg.ack()
                assert kept.offset not in seen
                assert seen[dropped.offset] == 2  # its lease ran out while first held it
                kept.in_progress()
                assert await second.next(timeout=0.5) is None  # still first's
                kept.ack()
                await first.flush()
                await second.flush()
        state = await read_share_group(client, group)
        assert state is not None
        assert state.partition(stream, 0).acked_total == 10


async def test_a_new_group_starts_where_asked(jet_dev: JetDev) -> None:
    """start="new-only" for a new group: the 5 messages already there are skipped; a later
    member asking for "earliest" does not move it."""
    stream, group = unique("st"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 5)
        async with ShareConsumer(client, stream, group=group, start="new-only") as first:
            assert await first.next(timeout=1.0) is None
            async with Producer(client, stream) as producer:
                for i in range(3):
                    await producer.send_soon(b"new %d" % i)
            got = []
            with anyio.fail_after(30):
                while len(got) < 3:
                    got.extend(await first.fetch(3 - len(got), timeout=5))
            assert [m.offset for m in got] == [5, 6, 7]
            for m in got:
                m.ack()
        async with ShareConsumer(client, stream, group=group, start="earliest") as second:
            assert await second.next(timeout=1.0) is None
            assert second.state.partition(stream, 0).spso == 8


async def test_poll_fetch_answers_and_raises_what_a_retry_cannot_mend(jet_dev: JetDev) -> None:
    """The share member's long polls (share log reader, partition watchers) share one retry
    helper: it returns the records, and raises at once for an offset out of range (the
    caller moves) and for an error that is not retriable (here: an unknown stream)."""
    stream = unique("pf")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 2)
        with anyio.fail_after(10):
            got: list[bytes] = []
            while len(got) < 2:  # the high watermark follows the leader's end shortly
                pos = len(got)
                _, raw = await poll_fetch(client, (stream, 0), pos, max_bytes=65536, max_wait=1)
                got.extend(bytes(r.value) for r in iter_records(raw))
            assert got == [b"v0", b"v1"]
            with pytest.raises(OffsetOutOfRange):
                await poll_fetch(client, (stream, 0), 5, max_bytes=1, max_wait=0)
            with pytest.raises(JetError) as info:
                await poll_fetch(client, (unique("none"), 0), 0, max_bytes=1, max_wait=0)
            assert not info.value.retriable
